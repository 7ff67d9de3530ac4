package engine

import (
	"fmt"
	"regexp"
	"strings"
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

type validator struct{ errs []FieldError }

func (v *validator) add(field, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	return &ValidationError{Errors: v.errs}
}

// namePattern is what queue, handler, gate and rate-limit names may look like.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// ValidName reports whether s may name a queue, handler, gate or rate limit.
func ValidName(s string) bool { return namePattern.MatchString(s) }

func (v *validator) name(field, s string) {
	if !ValidName(s) {
		v.add(field, "must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit")
	}
}

func (v *validator) keyText(field string, s *string) {
	if s != nil && (len(*s) == 0 || len(*s) > 512) {
		v.add(field, "must be 1-512 bytes")
	}
}
