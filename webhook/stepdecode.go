package webhook

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gendurable/gendurable/internal/jsonscan"
)

// decodeStep reads a step request as json.Unmarshal reads it into a StepRequest, in one
// pass without reflection, for the shape the service writes: every member once, under
// its exact name, strings without escapes, integers as integers; other members are
// skipped, as encoding/json skips them. encoding/json's decode was 18 % of the CPU of a
// receiver running Handler (6 µs a step). Anything else (a repeated member, a key that
// is escaped, not ASCII or a member's name in another case, a null where a number,
// string, time or object goes, invalid JSON) is left to json.Unmarshal: ok false.
// TestStepDecodeMatchesEncodingJSON and its fuzz target hold the two to the same result.
// isStep says whether the body has both job and lease (as objects, when ok).
func decodeStep(body []byte) (req StepRequest, isStep, ok bool) {
	if !json.Valid(body) {
		return StepRequest{}, false, false
	}
	s := stepScanner{jsonscan.Cursor{B: body}}
	var job, lease bool
	ok = s.object([]string{"job", "signals", "signals_more", "children", "children_more", "lease", "wake"}, func(k int) bool {
		switch k {
		case 0:
			job = true
			return s.job(&req.Job)
		case 1:
			req.Signals = []Signal{}
			return s.array(func() bool {
				req.Signals = append(req.Signals, Signal{})
				return s.signal(&req.Signals[len(req.Signals)-1])
			})
		case 2:
			return s.int(&req.SignalsMore)
		case 3:
			req.Children = []Child{}
			return s.array(func() bool {
				req.Children = append(req.Children, Child{})
				return s.child(&req.Children[len(req.Children)-1])
			})
		case 4:
			return s.int(&req.ChildrenMore)
		case 5:
			lease = true
			return s.object([]string{"token", "expires_at"}, func(k int) bool {
				if k == 0 {
					return s.str(&req.Lease.Token)
				}
				return s.time(&req.Lease.ExpiresAt)
			})
		default:
			return s.str(&req.Wake)
		}
	})
	if s.Space(); !ok || s.I != len(s.B) {
		return StepRequest{}, false, false
	}
	return req, job && lease, true
}

func (s *stepScanner) job(j *Job) bool {
	return s.object([]string{"id", "queue", "handler", "key", "step", "attempt", "max_attempts", "input", "state", "created_at"}, func(k int) bool {
		switch k {
		case 0:
			return s.int64(&j.ID)
		case 1:
			return s.str(&j.Queue)
		case 2:
			return s.str(&j.Handler)
		case 3:
			return s.optStr(&j.Key)
		case 4:
			return s.int(&j.Step)
		case 5:
			return s.int(&j.Attempt)
		case 6:
			return s.int(&j.MaxAttempts)
		case 7:
			return s.raw(&j.Input)
		case 8:
			return s.raw(&j.State)
		default:
			return s.time(&j.CreatedAt)
		}
	})
}

func (s *stepScanner) signal(g *Signal) bool {
	return s.object([]string{"id", "name", "payload", "created_at"}, func(k int) bool {
		switch k {
		case 0:
			return s.int64(&g.ID)
		case 1:
			return s.str(&g.Name)
		case 2:
			return s.raw(&g.Payload)
		default:
			return s.time(&g.CreatedAt)
		}
	})
}

func (s *stepScanner) child(c *Child) bool {
	return s.object([]string{"id", "handler", "key", "status", "result", "error"}, func(k int) bool {
		switch k {
		case 0:
			return s.int64(&c.ID)
		case 1:
			return s.str(&c.Handler)
		case 2:
			return s.optStr(&c.Key)
		case 3:
			return s.str(&c.Status)
		case 4:
			return s.raw(&c.Result)
		default:
			return s.raw(&c.Error)
		}
	})
}

// stepScanner reads valid JSON.
type stepScanner struct{ jsonscan.Cursor }

// object reads an object whose keys are among keys, each at most once, calling member
// with the key's index to read its value.
func (s *stepScanner) object(keys []string, member func(k int) bool) bool {
	if !s.Byte('{') {
		return false
	}
	if s.Byte('}') {
		return true
	}
	var seen uint32
	for {
		k, ok := s.key(keys)
		switch {
		case !ok:
			return false
		case k == unknownKey: // encoding/json ignores it too
			s.Space()
			end, ok := jsonscan.Skip(s.B, s.I)
			if !ok {
				return false
			}
			s.I = end
		case seen&(1<<k) != 0:
			return false
		default:
			seen |= 1 << k
			if s.Space(); !member(k) {
				return false
			}
		}
		if s.Byte('}') {
			return true
		}
		if !s.Byte(',') {
			return false
		}
	}
}

// unknownKey is key's answer for a key that names no member.
const unknownKey = -1

// key reads an object key and the colon after it, answering its index in keys, or
// unknownKey for a key encoding/json would match to no member either (ASCII, no escape,
// no member's name in another case).
func (s *stepScanner) key(keys []string) (int, bool) {
	s.Space()
	if s.I >= len(s.B) || s.B[s.I] != '"' {
		return 0, false
	}
	end := bytes.IndexByte(s.B[s.I+1:], '"')
	if end < 0 {
		return 0, false
	}
	k := s.B[s.I+1 : s.I+1+end]
	s.I += end + 2
	if !s.Byte(':') {
		return 0, false
	}
	for n, known := range keys {
		if string(k) == known {
			return n, true
		}
	}
	for _, c := range k {
		if c == '\\' || c >= utf8.RuneSelf {
			return 0, false // it may spell a member's name: encoding/json's to match
		}
	}
	for _, known := range keys {
		if strings.EqualFold(string(k), known) {
			return 0, false // encoding/json matches names in any case
		}
	}
	return unknownKey, true
}

// array reads an array, calling elem for each element.
func (s *stepScanner) array(elem func() bool) bool {
	if !s.Byte('[') {
		return false
	}
	if s.Byte(']') {
		return true
	}
	for {
		if s.Space(); !elem() {
			return false
		}
		if s.Byte(']') {
			return true
		}
		if !s.Byte(',') {
			return false
		}
	}
}

// token is the string token at s.I (quotes included) when it has no escape and is
// valid UTF-8 (encoding/json would replace what is not).
func (s *stepScanner) token() ([]byte, bool) {
	if s.I >= len(s.B) || s.B[s.I] != '"' {
		return nil, false
	}
	end, ok := jsonscan.StringEnd(s.B, s.I)
	if !ok {
		return nil, false
	}
	t := s.B[s.I:end]
	if bytes.IndexByte(t, '\\') >= 0 || !utf8.Valid(t) {
		return nil, false
	}
	s.I = end
	return t, true
}

func (s *stepScanner) str(dst *string) bool {
	t, ok := s.token()
	if ok {
		*dst = string(t[1 : len(t)-1])
	}
	return ok
}

// optStr reads a string or null (nil).
func (s *stepScanner) optStr(dst **string) bool {
	if s.null() {
		*dst = nil
		return true
	}
	var v string
	if !s.str(&v) {
		return false
	}
	*dst = &v
	return true
}

func (s *stepScanner) null() bool {
	if bytes.HasPrefix(s.B[s.I:], []byte("null")) {
		s.I += 4
		return true
	}
	return false
}

// time reads an RFC 3339 string as time.Time.UnmarshalJSON does.
func (s *stepScanner) time(dst *time.Time) bool {
	t, ok := s.token()
	return ok && dst.UnmarshalJSON(t) == nil
}

func (s *stepScanner) int64(dst *int64) bool {
	end, ok := jsonscan.Skip(s.B, s.I)
	if !ok {
		return false
	}
	v, err := strconv.ParseInt(string(s.B[s.I:end]), 10, 64)
	if err != nil {
		return false // null, a fraction, an exponent, a string: encoding/json's to judge
	}
	*dst, s.I = v, end
	return true
}

func (s *stepScanner) int(dst *int) bool {
	var v int64
	if !s.int64(&v) || int64(int(v)) != v {
		return false
	}
	*dst = int(v)
	return true
}

// raw reads any value (null included, as json.RawMessage keeps it) as a copy.
func (s *stepScanner) raw(dst *json.RawMessage) bool {
	end, ok := jsonscan.Skip(s.B, s.I)
	if ok {
		*dst, s.I = bytes.Clone(s.B[s.I:end]), end
	}
	return ok
}
