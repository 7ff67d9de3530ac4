package httpapi

import (
	"bytes"
	"encoding/json"
	"reflect"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gendurable/gendurable/internal/jsonscan"
)

// bodyAcceptor decides in one pass over the bytes, without building the body as a tree
// of maps, whether kin-openapi would accept a JSON request body. It only ever says yes
// when kin-openapi would: on any doubt (a null, a number that is not a plain integer,
// an escaped key, a schema keyword it does not walk itself) it says no, and the request
// is validated by kin-openapi in full, which then writes the errors. A valid body is the
// common case and the one it makes cheap: kin-openapi spent 15 ms of a 5 000-job batch
// insert decoding the body into maps and visiting them.
//
// The objects and arrays of the schema (properties, required, additionalProperties,
// items, minItems, maxItems) are walked here; every other schema, and so every scalar,
// is judged by kin-openapi's own visitor with the options its request validation uses,
// so patterns, formats, bounds, enums and combinators keep kin-openapi's meaning.
type bodyAcceptor struct {
	root *acceptNode
	opts []openapi3.SchemaValidationOption
}

type acceptKind int

const (
	acceptAny    acceptKind = iota // kin-openapi's empty schema: any value but null
	acceptObject                   // walked here
	acceptArray                    // walked here
	acceptByKin                    // judged by kin-openapi (scalars as themselves, containers decoded)
)

type acceptNode struct {
	kind   acceptKind
	schema *openapi3.Schema
	// objects
	props      map[string]*acceptProp
	required   []string
	additional bool        // properties not in props are allowed
	extra      *acceptNode // and checked against this schema (nil: not checked)
	// arrays
	items              *acceptNode // nil: not checked
	minItems, maxItems uint64      // maxItems 0 with hasMax false: unbounded
	hasMax             bool
}

type acceptProp struct {
	node     *acceptNode
	readOnly bool // refused in a request
	required int  // its bit in the seen-set of required properties, or -1
}

// newBodyAcceptor compiles schema (an OpenAPI 3.0 document's; 3.1 schemas are not
// walked) for request bodies validated with kin-openapi's MultiError option.
func newBodyAcceptor(schema *openapi3.Schema) *bodyAcceptor {
	c := map[*openapi3.Schema]*acceptNode{}
	return &bodyAcceptor{root: compileAccept(schema, c),
		opts: []openapi3.SchemaValidationOption{openapi3.VisitAsRequest(), openapi3.MultiErrors()}}
}

func compileAccept(s *openapi3.Schema, compiled map[*openapi3.Schema]*acceptNode) *acceptNode {
	if n, ok := compiled[s]; ok {
		return n
	}
	n := &acceptNode{kind: acceptByKin, schema: s}
	compiled[s] = n
	switch {
	case s.IsEmpty():
		n.kind = acceptAny
	case onlyObjectKeywords(s):
		n.kind = acceptObject
		n.props = map[string]*acceptProp{}
		for name, ref := range s.Properties {
			if ref == nil || ref.Value == nil {
				n.kind = acceptByKin // an unresolved reference: kin-openapi says what it is
				return n
			}
			n.props[name] = &acceptProp{node: compileAccept(ref.Value, compiled), readOnly: ref.Value.ReadOnly, required: -1}
		}
		for i, name := range s.Required {
			p := n.props[name]
			if p == nil || p.readOnly || p.required >= 0 || i >= 64 {
				n.kind = acceptByKin // undeclared, read-only or repeated required names stay kin-openapi's
				return n
			}
			p.required = i
		}
		n.required = s.Required
		n.additional = s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has
		if ref := s.AdditionalProperties.Schema; ref != nil {
			if ref.Value == nil {
				n.kind = acceptByKin
				return n
			}
			n.extra = compileAccept(ref.Value, compiled)
		}
	case onlyArrayKeywords(s):
		n.kind = acceptArray
		if s.Items != nil {
			if s.Items.Value == nil {
				n.kind = acceptByKin
				return n
			}
			n.items = compileAccept(s.Items.Value, compiled)
		}
		n.minItems = s.MinItems
		if s.MaxItems != nil {
			n.maxItems, n.hasMax = *s.MaxItems, true
		}
	}
	return n
}

// onlyObjectKeywords: s is a plain object schema, with nothing but the keywords walked
// here (and annotations).
func onlyObjectKeywords(s *openapi3.Schema) bool {
	if s.Type == nil || !reflect.DeepEqual([]string(*s.Type), []string{openapi3.TypeObject}) {
		return false
	}
	rest := *s
	rest.Type, rest.Properties, rest.Required, rest.AdditionalProperties = nil, nil, nil, openapi3.AdditionalProperties{}
	return onlyAnnotations(rest)
}

// onlyArrayKeywords: s is a plain array schema (no uniqueItems, no 3.1 keywords).
func onlyArrayKeywords(s *openapi3.Schema) bool {
	if s.Type == nil || !reflect.DeepEqual([]string(*s.Type), []string{openapi3.TypeArray}) {
		return false
	}
	rest := *s
	rest.Type, rest.Items, rest.MinItems, rest.MaxItems = nil, nil, 0, nil
	return onlyAnnotations(rest)
}

// onlyAnnotations: what is left of s constrains nothing (descriptions, examples,
// defaults, which request validation does not set here, and extensions).
func onlyAnnotations(s openapi3.Schema) bool {
	s.Extensions, s.Origin, s.Title, s.Description, s.Example, s.Examples = nil, nil, "", "", nil, nil
	s.Default, s.ExternalDocs, s.Deprecated, s.Comment = nil, nil, false, ""
	return reflect.DeepEqual(s, openapi3.Schema{})
}

// accepts reports whether kin-openapi would find body valid against the schema. body
// must be one valid JSON value in UTF-8 (checkJSON).
func (a *bodyAcceptor) accepts(body []byte) bool {
	s := acceptScanner{b: body, opts: a.opts}
	s.space()
	if !s.value(a.root) {
		return false
	}
	s.space()
	return s.i == len(s.b)
}

type acceptScanner struct {
	b    []byte
	i    int
	opts []openapi3.SchemaValidationOption
	// taken holds the scalar tokens kin-openapi took, by schema: a batch repeats its
	// handler and queue names in every item (and the two share one schema, so the last
	// token alone missed every time), and the verdict is a function of the schema and the
	// token. At most maxTaken entries, so that a body of distinct values does not grow it.
	taken      map[*acceptNode]map[string]struct{}
	takenCount int
}

// maxTaken bounds the tokens an acceptScanner remembers.
const maxTaken = 256

func (s *acceptScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value checks the value at s.i against n and moves past it.
func (s *acceptScanner) value(n *acceptNode) bool {
	if s.i >= len(s.b) {
		return false
	}
	c := s.b[s.i]
	if c == 'n' {
		return false // null: kin-openapi decides (nullable, combinators)
	}
	switch n.kind {
	case acceptAny:
		return s.skip()
	case acceptObject:
		return c == '{' && s.object(n)
	case acceptArray:
		return c == '[' && s.array(n)
	}
	// acceptByKin: hand kin-openapi the value as its body decoder would have made it.
	start := s.i
	if c != '{' && c != '[' && s.skip() {
		if _, ok := s.taken[n][string(s.b[start:s.i])]; ok {
			return true
		}
		if !s.judge(n, start) {
			return false
		}
		if s.takenCount < maxTaken {
			if s.taken == nil {
				s.taken = map[*acceptNode]map[string]struct{}{}
			}
			if s.taken[n] == nil {
				s.taken[n] = map[string]struct{}{}
			}
			s.taken[n][string(s.b[start:s.i])] = struct{}{}
			s.takenCount++
		}
		return true
	}
	s.i = start
	return s.judge(n, start)
}

// judge hands the value at start to kin-openapi as its body decoder would have made it,
// and leaves s.i past it.
func (s *acceptScanner) judge(n *acceptNode, start int) bool {
	s.i = start
	c := s.b[start]
	var v any
	switch c {
	case '"':
		str, ok := s.string()
		if !ok {
			return false
		}
		v = str
	case 't', 'f':
		if !s.skip() {
			return false
		}
		v = c == 't'
	case '{', '[':
		if !s.skip() {
			return false
		}
		dec := json.NewDecoder(bytes.NewReader(s.b[start:s.i]))
		dec.UseNumber()
		if dec.Decode(&v) != nil {
			return false
		}
	default:
		if !s.skip() {
			return false
		}
		v = json.Number(s.b[start:s.i])
	}
	return n.schema.VisitJSON(v, s.opts...) == nil
}

func (s *acceptScanner) object(n *acceptNode) bool {
	s.i++ // {
	var seen uint64
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return len(n.required) == 0
	}
	for {
		s.space()
		key, ok := s.rawKey()
		if !ok {
			return false
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.space()
		if p := n.props[string(key)]; p != nil {
			if p.readOnly || !s.value(p.node) {
				return false
			}
			if p.required >= 0 {
				seen |= 1 << uint(p.required)
			}
		} else {
			switch {
			case !n.additional:
				return false
			case n.extra != nil:
				if !s.value(n.extra) {
					return false
				}
			default:
				if !s.skip() {
					return false
				}
			}
		}
		if more, ok := s.next('}'); !ok || !more {
			return ok && seen == 1<<uint(len(n.required))-1
		}
	}
}

func (s *acceptScanner) array(n *acceptNode) bool {
	s.i++ // [
	count := uint64(0)
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return count >= n.minItems
	}
	for {
		s.space()
		var ok bool
		if n.items != nil {
			ok = s.value(n.items)
		} else {
			ok = s.skip()
		}
		if !ok {
			return false
		}
		count++
		if n.hasMax && count > n.maxItems {
			return false
		}
		if more, ok := s.next(']'); !ok || !more {
			return ok && count >= n.minItems
		}
	}
}

// next moves past what follows a member: a comma (more to come) or the closing bracket.
func (s *acceptScanner) next(closing byte) (more, ok bool) {
	s.space()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true, true
	case closing:
		s.i++
		return false, true
	}
	return false, false
}

// rawKey reads an object key without escapes (a key with an escape is left to kin-openapi).
func (s *acceptScanner) rawKey() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			return nil, false
		case '"':
			s.i = j + 1
			return s.b[start:j], true
		}
	}
	return nil, false
}

// string reads a string token as encoding/json decodes it.
func (s *acceptScanner) string() (string, bool) {
	start := s.i
	escaped := false
	for j := start + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			s.i = j + 1
			if !escaped {
				return string(s.b[start+1 : j]), true
			}
			var str string
			if json.Unmarshal(s.b[start:s.i], &str) != nil {
				return "", false
			}
			return str, true
		}
	}
	return "", false
}

// skip moves past one JSON value (known valid).
func (s *acceptScanner) skip() bool {
	end, ok := jsonscan.Skip(s.b, s.i)
	if ok {
		s.i = end
	}
	return ok
}
