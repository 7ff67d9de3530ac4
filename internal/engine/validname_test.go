package engine_test

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
)

// ValidName is the pattern of names, checked by hand: it must agree with the pattern
// (kept here as the reference) on the edges and on random strings of the bytes that
// matter.
func TestValidNameAgreesWithThePattern(t *testing.T) {
	t.Parallel()
	pattern := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
	cases := []string{"", "a", "Z", "0", "_a", ".a", ":a", "-a", "a_b.c:d-e", "queue 1", "é", "a\x00", "a\n",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "a" + strings.Repeat("-", 127), "a/b", "a+b"}
	alphabet := []byte("aZ09_.:- /\x00\xc3\xa9\n")
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(6))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := engine.ValidName(s), pattern.MatchString(s); got != want {
			t.Fatalf("ValidName(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}
