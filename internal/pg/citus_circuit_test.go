package pg

import (
	"testing"
	"time"
)

// A worker's circuit: closed until a failure, then open for 1 s, doubling while it keeps
// failing (at most 30 s); once open time is up one statement probes (the others keep
// passing it over), and an answer closes it; a probe ended by its caller lets another go.
func TestWorkerCircuitOpensDoublesAndProbesOneAtATime(t *testing.T) {
	var c workerCircuits
	t0 := time.Unix(1_000_000, 0)
	for range 2 {
		if !c.allow(1, t0) {
			t.Fatal("a closed circuit held a statement back")
		}
	}
	c.failed(1, t0)
	if c.allow(1, t0.Add(999*time.Millisecond)) {
		t.Fatal("a statement went out within the first second of an open circuit")
	}
	if !c.allow(2, t0) {
		t.Fatal("another worker's circuit opened with it")
	}
	probe := t0.Add(time.Second)
	if !c.allow(1, probe) {
		t.Fatal("no probe once the open time was up")
	}
	if c.allow(1, probe) {
		t.Fatal("a second statement went out while the probe ran")
	}
	c.failed(1, probe) // the probe failed: open for 2 s
	if c.allow(1, probe.Add(1999*time.Millisecond)) || !c.allow(1, probe.Add(2*time.Second)) {
		t.Fatal("after a second failure the circuit is not open for exactly 2 s")
	}
	c.probeEnded(1) // the probe's caller went away: another may probe
	if !c.allow(1, probe.Add(2*time.Second)) {
		t.Fatal("no probe after the last one ended by its caller")
	}
	at := probe.Add(2 * time.Second)
	for range 10 {
		c.failed(1, at)
	}
	if c.allow(1, at.Add(30*time.Second-time.Millisecond)) || !c.allow(1, at.Add(30*time.Second)) {
		t.Fatal("the open time is not capped at 30 s")
	}
	c.answered(1)
	for range 2 {
		if !c.allow(1, at) {
			t.Fatal("an answer did not close the circuit")
		}
	}
}
