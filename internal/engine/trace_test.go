package engine_test

import (
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
)

// Only version-00 traceparents are kept; a tracestate is kept with one, unless it is too
// long or holds control characters (dropped, as the W3C recommendation says).
func TestTraceContextOf(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		parent, state string
		want          string // "" for nil
	}{
		{tp, "", tp},
		{" " + tp + " ", "vendor=abc ", tp + " vendor=abc"},
		{tp, strings.Repeat("a", 513), tp},
		{tp, "a=b\nc=d", tp},
		{"", "a=b", ""},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", ""},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "", ""},
	} {
		got := engine.TraceContextOf(c.parent, c.state)
		if (got == nil) != (c.want == "") || (got != nil && *got != c.want) {
			t.Errorf("TraceContextOf(%q, %q) = %v, want %q", c.parent, c.state, got, c.want)
		}
	}
	parent, state := engine.SplitTraceContext(tp + " vendor=abc")
	if parent != tp || state != "vendor=abc" || engine.TraceID(&parent) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("split: %q %q", parent, state)
	}
}
