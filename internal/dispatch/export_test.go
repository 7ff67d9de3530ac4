package dispatch

import (
	"testing"
	"time"
)

// WaitUntil is waitUntil for the package's external tests.
var WaitUntil = waitUntil

// waitUntil polls cond every few milliseconds until it holds or timeout passes.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
	}
}
