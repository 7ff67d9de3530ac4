// Package jsonscan moves over the values of a JSON document already known to be valid
// (json.Valid, or a check like it), for the one-pass readers of request bodies and step
// answers.
package jsonscan

// Skip is the index just past the value that starts at b[i]; ok is false when there is
// none. In valid JSON brackets are counted outside strings, and a scalar runs to the
// next delimiter.
func Skip(b []byte, i int) (end int, ok bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				j, ok := StringEnd(b, i)
				if !ok {
					return i, false
				}
				i = j
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return i, false
	}
	start := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i, i > start
		}
		i++
	}
	return i, i > start
}

// StringEnd is the index just past the string token that starts at b[i].
func StringEnd(b []byte, i int) (end int, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return i, false
}

// Cursor is a position in a JSON document known to be valid: the one-pass readers embed
// it.
type Cursor struct {
	B []byte
	I int
}

// Space moves past white space.
func (c *Cursor) Space() {
	for c.I < len(c.B) && (c.B[c.I] == ' ' || c.B[c.I] == '\t' || c.B[c.I] == '\n' || c.B[c.I] == '\r') {
		c.I++
	}
}

// Byte moves past b, after white space, when b is next.
func (c *Cursor) Byte(b byte) bool {
	c.Space()
	if c.I < len(c.B) && c.B[c.I] == b {
		c.I++
		return true
	}
	return false
}
