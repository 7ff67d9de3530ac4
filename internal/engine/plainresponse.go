package engine

import (
	"bytes"
	"encoding/json"

	"github.com/gendurable/gendurable/internal/jsonscan"
	"github.com/gendurable/gendurable/webhook"
)

// decodePlainResponse reads the answers most steps give, {"done": {...}} with at most a
// result and {"next": {...}} with at most a state, as decodeResponseJSON reads them, in
// one pass without reflection: encoding/json's decode was 5 % of the server's CPU in a
// drain, and its deep frames grew every step's stack past 4 KiB (a stack copy a step,
// 7 % more). Anything else (another answer, a delay, an escaped or repeated key, null,
// invalid JSON) is left to decodeResponseJSON: ok false. TestPlainResponseDecodesAsEncodingJSON
// and its fuzz target hold the two to the same result.
func decodePlainResponse(body []byte) (webhook.Response, bool) {
	if !json.Valid(body) {
		return webhook.Response{}, false
	}
	p := plainScanner{jsonscan.Cursor{B: body}}
	if !p.Byte('{') {
		return webhook.Response{}, false
	}
	kind, ok := p.key()
	if !ok || (kind != "done" && kind != "next") || !p.Byte('{') {
		return webhook.Response{}, false
	}
	member := "result"
	if kind == "next" {
		member = "state"
	}
	var value json.RawMessage
	if !p.Byte('}') {
		k, ok := p.key()
		if !ok || k != member {
			return webhook.Response{}, false
		}
		p.Space()
		start := p.I
		if !p.skip() {
			return webhook.Response{}, false
		}
		value = bytes.Clone(p.B[start:p.I])
		if !p.Byte('}') {
			return webhook.Response{}, false // a second member
		}
	}
	if !p.Byte('}') { // another answer beside it
		return webhook.Response{}, false
	}
	if p.Space(); p.I != len(p.B) {
		return webhook.Response{}, false
	}
	if kind == "done" {
		return webhook.Response{Done: &webhook.Done{Result: value}}, true
	}
	return webhook.Response{Next: &webhook.Next{State: value}}, true
}

// plainScanner reads valid JSON.
type plainScanner struct{ jsonscan.Cursor }

// key reads an object key without escapes and the colon after it.
func (p *plainScanner) key() (string, bool) {
	p.Space()
	if p.I >= len(p.B) || p.B[p.I] != '"' {
		return "", false
	}
	end := bytes.IndexByte(p.B[p.I+1:], '"')
	if end < 0 {
		return "", false
	}
	k := p.B[p.I+1 : p.I+1+end]
	if bytes.IndexByte(k, '\\') >= 0 {
		return "", false
	}
	p.I += end + 2
	if !p.Byte(':') {
		return "", false
	}
	for _, known := range [...]string{"done", "next", "result", "state"} { // without allocating
		if string(k) == known {
			return known, true
		}
	}
	return "", false
}

// skip moves past one value (the body is valid JSON); null is not skipped, it is
// encoding/json's to read.
func (p *plainScanner) skip() bool {
	if p.I >= len(p.B) || p.B[p.I] == 'n' {
		return false
	}
	end, ok := jsonscan.Skip(p.B, p.I)
	if ok {
		p.I = end
	}
	return ok
}
