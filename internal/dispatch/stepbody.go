package dispatch

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gendurable/gendurable/internal/engine"
)

// appendStepBody appends the JSON body of a step's POST (the shape of webhook.StepRequest,
// as encoding/json writes it) to dst. It is written by hand because it runs once per step:
// encoding/json spends its time in reflection and in re-compacting the JSON values the
// database already produced, and allocates for both. Values taken from Postgres (input,
// state, payloads, results, errors) are valid JSON already and are copied as they are;
// strings are escaped as encoding/json escapes them. TestStepBodyMatchesEncodingJSON holds
// the two to the same JSON value.
func appendStepBody(dst []byte, st *engine.Step) []byte {
	dst = append(dst, `{"job":{"id":`...)
	dst = strconv.AppendInt(dst, st.ID, 10)
	dst = append(dst, `,"queue":`...)
	dst = appendJSONString(dst, st.Queue)
	dst = append(dst, `,"handler":`...)
	dst = appendJSONString(dst, st.Handler)
	dst = append(dst, `,"key":`...)
	if st.Key == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, *st.Key)
	}
	dst = append(dst, `,"step":`...)
	dst = strconv.AppendInt(dst, int64(st.Step), 10)
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(st.Attempt), 10)
	dst = append(dst, `,"max_attempts":`...)
	dst = strconv.AppendInt(dst, int64(st.MaxAttempts), 10)
	dst = append(dst, `,"input":`...)
	dst = appendRawJSON(dst, st.Input)
	dst = append(dst, `,"state":`...)
	dst = appendRawJSON(dst, st.State)
	dst = append(dst, `,"created_at":`...)
	dst = appendJSONTime(dst, st.CreatedAt)
	dst = append(dst, `},"signals":[`...)
	for i, s := range st.Signals {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = strconv.AppendInt(dst, s.ID, 10)
		dst = append(dst, `,"name":`...)
		dst = appendJSONString(dst, s.Name)
		dst = append(dst, `,"payload":`...)
		dst = appendRawJSON(dst, s.Payload)
		dst = append(dst, `,"created_at":`...)
		dst = appendJSONTime(dst, s.CreatedAt)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if st.SignalsMore != 0 {
		dst = append(dst, `,"signals_more":`...)
		dst = strconv.AppendInt(dst, int64(st.SignalsMore), 10)
	}
	if len(st.Children) > 0 {
		dst = append(dst, `,"children":[`...)
		for i, c := range st.Children {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = strconv.AppendInt(dst, c.ID, 10)
			dst = append(dst, `,"handler":`...)
			dst = appendJSONString(dst, c.Handler)
			dst = append(dst, `,"key":`...)
			if c.Key == nil {
				dst = append(dst, "null"...)
			} else {
				dst = appendJSONString(dst, *c.Key)
			}
			dst = append(dst, `,"status":`...)
			dst = appendJSONString(dst, c.Status)
			dst = append(dst, `,"result":`...)
			dst = appendRawJSON(dst, c.Result)
			dst = append(dst, `,"error":`...)
			dst = appendRawJSON(dst, c.Error)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if st.ChildrenMore != 0 {
		dst = append(dst, `,"children_more":`...)
		dst = strconv.AppendInt(dst, int64(st.ChildrenMore), 10)
	}
	dst = append(dst, `,"lease":{"token":`...)
	dst = appendJSONString(dst, st.LeaseToken)
	dst = append(dst, `,"expires_at":`...)
	dst = appendJSONTime(dst, st.LeaseExpiresAt)
	dst = append(dst, '}')
	if st.Wake != nil && *st.Wake != "" {
		dst = append(dst, `,"wake":`...)
		dst = appendJSONString(dst, *st.Wake)
	}
	return append(dst, '}')
}

// appendRawJSON appends a JSON value from the database, or null for none.
func appendRawJSON(dst, v []byte) []byte {
	if len(v) == 0 {
		return append(dst, "null"...)
	}
	return append(dst, v...)
}

// appendJSONTime appends t as encoding/json does (RFC 3339 with nanoseconds, quoted).
func appendJSONTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaped as encoding/json escapes it:
// quotes, backslashes and control characters; <, > and & as \u00XX; U+2028 and U+2029;
// invalid UTF-8 as U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
