package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FieldError says what is wrong with one field of a request.
type FieldError struct {
	// Field is a JSON pointer-like path ("jobs/3/priority").
	Field   string
	Message string
}

// ValidationError lists every problem found in a request; nothing was written.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, f := range e.Errors {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

type validator struct {
	errs []FieldError
	// within and index name the item of a list being checked: its fields are reported
	// as within + index + "/" + field ("jobs/3/key"), and bare when within is "". The
	// item's name is built only for an error (a batch of 5 000 built 25 000 names).
	within string
	index  int
}

func (v *validator) add(field, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Field: v.field(field), Message: fmt.Sprintf(format, args...)})
}

// field is the name the answer gives a field of the item being checked.
func (v *validator) field(f string) string {
	if v.within == "" {
		return f
	}
	return v.within + strconv.Itoa(v.index) + "/" + f
}

func (v *validator) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	return &ValidationError{Errors: v.errs}
}

// ValidName reports whether s may name a queue, handler, gate or rate limit: 1-128
// characters of letters, digits, '_', '.', ':' or '-' (ASCII), starting with a letter or
// digit (the pattern ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$, checked byte by byte: a batch
// checks two names an item, and the regexp took 4 % of a 5 000-job insert's server CPU).
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func (v *validator) name(field, s string) {
	if !ValidName(s) {
		v.add(field, "must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit")
	}
}

func (v *validator) keyText(field string, s *string) {
	if s == nil {
		return
	}
	if len(*s) == 0 || len(*s) > 512 {
		v.add(field, "must be 1-512 bytes")
	} else if msg := UnstorableText(*s); msg != "" {
		v.add(field, "%s", msg)
	}
}

// jsonValue checks a JSON value that will be stored as jsonb; prefix is its field's
// name and a slash ("input/").
func (v *validator) jsonValue(prefix string, b json.RawMessage) {
	if len(b) == 0 {
		return
	}
	if !json.Valid(b) {
		v.add(strings.TrimSuffix(prefix, "/"), "is not valid JSON")
		return
	}
	for _, e := range UnstorableJSON(b, prefix) {
		e.Field = v.field(e.Field)
		v.errs = append(v.errs, e)
	}
}

// UnstorableText says why PostgreSQL cannot store s as text ("" when it can): text
// refuses the NUL character and bytes that are not UTF-8.
func UnstorableText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return `must not contain the NUL character (\u0000)`
	}
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	return ""
}

// maxUnstorable bounds the fields one answer lists.
const maxUnstorable = 20

// UnstorableJSON finds what PostgreSQL cannot store in a valid JSON document: jsonb and
// text refuse \u0000 (in a string or a member name), and jsonb refuses an unpaired
// UTF-16 surrogate escape and bytes that are not UTF-8. Each is named by its path under prefix ("input/a/0",
// "jobs/3/key"; prefix itself, or "body", for the document). It costs one scan of the
// bytes, and a token walk only when a \u0000 escape is there.
func UnstorableJSON(doc []byte, prefix string) []FieldError {
	root := strings.TrimSuffix(prefix, "/")
	if root == "" {
		root = "body"
	}
	if !utf8.Valid(doc) {
		return []FieldError{{Field: root, Message: "must be valid UTF-8"}}
	}
	hasNUL := bytes.Contains(doc, []byte(`\u0000`))
	lone := loneSurrogate(doc)
	if !hasNUL && !lone {
		return nil
	}
	var fields []FieldError
	if lone {
		fields = append(fields, FieldError{Field: root,
			Message: `holds an unpaired UTF-16 surrogate escape (\uD800-\uDFFF), which cannot be stored`})
	}
	if hasNUL {
		walkNUL(json.NewDecoder(bytes.NewReader(doc)), prefix, root, &fields)
	}
	return fields
}

func walkNUL(dec *json.Decoder, path, root string, fields *[]FieldError) {
	tok, err := dec.Token()
	if err != nil {
		return
	}
	field := strings.TrimSuffix(path, "/")
	if field == "" {
		field = root
	}
	switch t := tok.(type) {
	case string:
		if strings.IndexByte(t, 0) >= 0 && len(*fields) < maxUnstorable {
			*fields = append(*fields, FieldError{Field: field, Message: `must not contain the NUL character (\u0000)`})
		}
	case json.Delim:
		switch t {
		case '{':
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return
				}
				name, _ := k.(string)
				if strings.IndexByte(name, 0) >= 0 && len(*fields) < maxUnstorable {
					*fields = append(*fields, FieldError{Field: field,
						Message: `holds a member name with the NUL character (\u0000)`})
				}
				walkNUL(dec, path+strings.ReplaceAll(name, "\x00", `\u0000`)+"/", root, fields)
			}
			_, _ = dec.Token()
		case '[':
			for i := 0; dec.More(); i++ {
				walkNUL(dec, path+strconv.Itoa(i)+"/", root, fields)
			}
			_, _ = dec.Token()
		}
	}
}

// loneSurrogate reports whether valid JSON holds a \uD800-\uDFFF escape that is not
// half of a high-low pair. In valid JSON a backslash only ever starts an escape.
func loneSurrogate(b []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // a two-character escape: skip what it escapes
			continue
		}
		r, ok := hex4(i)
		if !ok {
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if low, ok := hex4(i + 6); ok && low >= 0xDC00 && low <= 0xDFFF {
				i += 11
				continue
			}
			return true
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		}
		i += 5
	}
	return false
}
