package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/oapi-codegen/runtime"
)

// UnmarshalJSON decodes a batch as encoding/json decodes the generated struct, without
// its reflection in the common case: encoding/json spent 6-8 ms of a 5 000-job request
// on it, with a pointer allocated for each optional member and the job slice grown a
// dozen times. A body the one pass does not know how to read exactly (an escaped or
// unknown key, a member it leaves to encoding/json that fails, anything but the shape
// the schema gives) is decoded by encoding/json, whose answer stands, errors included;
// TestBatchDecodeMatchesEncodingJSON holds the two together.
func (b *JobBatch) UnmarshalJSON(data []byte) error {
	if jobs, ok := decodeJobBatch(data); ok {
		b.Jobs = jobs
		return nil
	}
	type plain JobBatch // the same fields, without this method
	return json.Unmarshal(data, (*plain)(b))
}

// batchDecoder reads one batch body. data is its own copy of the body (encoding/json
// may reuse the buffer it hands UnmarshalJSON), so inputs are slices of it; names and
// keys repeated across jobs are one string, and the optional members of the batch's
// jobs point into arrays made once.
type batchDecoder struct {
	s      acceptScanner
	names  map[string]*string
	inputs []AnyJSON
	ints   []int
	texts  []string
}

func decodeJobBatch(body []byte) ([]JobInsert, bool) {
	d := &batchDecoder{s: acceptScanner{b: bytes.Clone(body)}, names: map[string]*string{}}
	s := &d.s
	var jobs []JobInsert
	seen := false
	if s.space(); s.i >= len(s.b) || s.b[s.i] != '{' {
		return nil, false
	}
	s.i++
	for more := true; more; {
		key, ok := d.key()
		if !ok || string(key) != "jobs" || seen {
			return nil, false
		}
		seen = true
		s.space()
		if jobs, ok = d.jobs(); !ok {
			return nil, false
		}
		if more, ok = s.next('}'); !ok {
			return nil, false
		}
	}
	if s.space(); s.i != len(s.b) || !seen {
		return nil, false
	}
	return jobs, true
}

// key reads an object key without escapes and the colon after it.
func (d *batchDecoder) key() ([]byte, bool) {
	s := &d.s
	s.space()
	key, ok := s.rawKey()
	if !ok {
		return nil, false
	}
	if s.space(); s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false
	}
	s.i++
	s.space()
	return key, true
}

func (d *batchDecoder) jobs() ([]JobInsert, bool) {
	s := &d.s
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return nil, false
	}
	s.i++
	// Every job names its handler: its count is the batch's size, or near it.
	n := bytes.Count(s.b[s.i:], []byte(`"handler"`))
	jobs := make([]JobInsert, 0, n)
	d.inputs, d.ints, d.texts = make([]AnyJSON, 0, n), make([]int, 0, n), make([]string, 0, n)
	if s.space(); s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return jobs, true
	}
	for {
		s.space()
		jobs = append(jobs, JobInsert{})
		if !d.job(&jobs[len(jobs)-1]) {
			return nil, false
		}
		more, ok := s.next(']')
		if !ok {
			return nil, false
		}
		if !more {
			return jobs, true
		}
	}
}

// job reads one job object into j.
func (d *batchDecoder) job(j *JobInsert) bool {
	s := &d.s
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return false
	}
	s.i++
	if s.space(); s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		start := s.i
		if !s.skip() {
			return false
		}
		value := s.b[start:s.i]
		switch string(key) {
		case "handler":
			p, ok := d.name(value)
			if !ok {
				return false
			}
			j.Handler = *p
		case "queue":
			if j.Queue, ok = d.name(value); !ok {
				return false
			}
		case "input":
			if value[0] == 'n' {
				return false // null: encoding/json's to decide
			}
			d.inputs = append(d.inputs, AnyJSON(value))
			j.Input = &d.inputs[len(d.inputs)-1]
		case "key":
			ok = d.text(value, &j.Key)
		case "concurrency_key":
			ok = d.text(value, &j.ConcurrencyKey)
		case "idempotency_key":
			ok = d.text(value, &j.IdempotencyKey)
		case "fairness_key":
			ok = d.text(value, &j.FairnessKey)
		case "delay":
			ok = d.text(value, &j.Delay)
		case "priority":
			ok = d.integer(value, &j.Priority)
		case "max_attempts":
			ok = d.integer(value, &j.MaxAttempts)
		case "run_at":
			ok = value[0] == '"' && json.Unmarshal(value, &j.RunAt) == nil
		case "rate_limit":
			ok = json.Unmarshal(value, &j.RateLimit) == nil
		case "rate_limits":
			ok = json.Unmarshal(value, &j.RateLimits) == nil
		case "debounce":
			ok = json.Unmarshal(value, &j.Debounce) == nil
		default:
			return false
		}
		if !ok {
			return false
		}
		more, ok := s.next('}')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// plainString is a string token's text when it has no escapes and is valid UTF-8 (then
// it is the string encoding/json decodes).
func plainString(value []byte) ([]byte, bool) {
	if len(value) < 2 || value[0] != '"' {
		return nil, false
	}
	text := value[1 : len(value)-1]
	if bytes.IndexByte(text, '\\') >= 0 || !utf8.Valid(text) {
		return nil, false
	}
	return text, true
}

// name reads a handler or queue name, the same string for every job that repeats it.
func (d *batchDecoder) name(value []byte) (*string, bool) {
	text, ok := plainString(value)
	if !ok {
		return nil, false
	}
	if p, ok := d.names[string(text)]; ok {
		return p, true
	}
	p := new(string)
	*p = string(text)
	d.names[*p] = p
	return p, true
}

// text reads an optional string member.
func (d *batchDecoder) text(value []byte, dst **string) bool {
	text, ok := plainString(value)
	if !ok {
		return false
	}
	d.texts = append(d.texts, string(text))
	*dst = &d.texts[len(d.texts)-1]
	return true
}

// integer reads an optional integer member written as digits (with a minus sign).
func (d *batchDecoder) integer(value []byte, dst **int) bool {
	for i, c := range value {
		if (c < '0' || c > '9') && (c != '-' || i > 0) {
			return false // 1.0, 1e3: encoding/json's to decide
		}
	}
	n, err := strconv.Atoi(string(value))
	if err != nil {
		return false
	}
	d.ints = append(d.ints, n)
	*dst = &d.ints[len(d.ints)-1]
	return true
}

// bodyCodec is the generated handlers' JSON (encoding/json), except that a batch body
// goes straight to JobBatch.UnmarshalJSON. encoding/json's Decoder scans a body to find
// its end and Unmarshal scans it again to check it before calling UnmarshalJSON: two
// passes over up to 32 MB that the batch's own parser does not need, since it checks
// everything it reads and hands whatever it does not take to json.Unmarshal. The two
// passes were 9 % of the server's CPU in a 5 000-job insert. Any other body, whose
// UnmarshalJSON may rely on encoding/json's check, still goes through the Decoder.
type bodyCodec struct{ runtime.StdJSONCodec }

func (bodyCodec) MarshalWrite(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

func (bodyCodec) UnmarshalRead(r io.Reader, v any) error {
	if b, ok := v.(*JobBatch); ok {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		return b.UnmarshalJSON(data)
	}
	return json.NewDecoder(r).Decode(v)
}

// The codec is process-wide (runtime.SetJSONCodec is not synchronised), so it is set
// before any goroutine can decode a body.
func init() { runtime.SetJSONCodec(bodyCodec{}) }
