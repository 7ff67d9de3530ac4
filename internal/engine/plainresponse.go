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
	p := plainScanner{b: body}
	if !p.byte('{') {
		return webhook.Response{}, false
	}
	kind, ok := p.key()
	if !ok || (kind != "done" && kind != "next") || !p.byte('{') {
		return webhook.Response{}, false
	}
	member := "result"
	if kind == "next" {
		member = "state"
	}
	var value json.RawMessage
	if !p.byte('}') {
		k, ok := p.key()
		if !ok || k != member {
			return webhook.Response{}, false
		}
		p.space()
		start := p.i
		if !p.skip() {
			return webhook.Response{}, false
		}
		value = bytes.Clone(p.b[start:p.i])
		if !p.byte('}') {
			return webhook.Response{}, false // a second member
		}
	}
	if !p.byte('}') { // another answer beside it
		return webhook.Response{}, false
	}
	if p.space(); p.i != len(p.b) {
		return webhook.Response{}, false
	}
	if kind == "done" {
		return webhook.Response{Done: &webhook.Done{Result: value}}, true
	}
	return webhook.Response{Next: &webhook.Next{State: value}}, true
}

// plainScanner reads valid JSON.
type plainScanner struct {
	b []byte
	i int
}

func (p *plainScanner) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// byte moves past c, after space, when c is next.
func (p *plainScanner) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// key reads an object key without escapes and the colon after it.
func (p *plainScanner) key() (string, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	end := bytes.IndexByte(p.b[p.i+1:], '"')
	if end < 0 {
		return "", false
	}
	k := p.b[p.i+1 : p.i+1+end]
	if bytes.IndexByte(k, '\\') >= 0 {
		return "", false
	}
	p.i += end + 2
	if !p.byte(':') {
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
	if p.i >= len(p.b) || p.b[p.i] == 'n' {
		return false
	}
	end, ok := jsonscan.Skip(p.b, p.i)
	if ok {
		p.i = end
	}
	return ok
}
