package dispatch

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

var aStep = stepTask{st: &engine.Step{}}

func TestStepRunnersReuseAnIdleRunner(t *testing.T) {
	ran := make(chan struct{}, 1)
	r := newStepRunners(func(stepTask) { ran <- struct{}{} }, time.Hour)
	defer r.stop()
	const steps = 100
	for i := range steps {
		r.run(aStep)
		<-ran
		waitAllIdle(t, r)
		if i == 0 && r.started.Load() != 1 {
			t.Fatalf("%d runners started for one step", r.started.Load())
		}
	}
	// A step handed over in the instant between a runner counting itself idle and its
	// wait starts a runner of its own (the test then waits for both: see
	// TestStepRunnersReuseIdleRunnersAfterASecondStarted); nearly every step must find
	// the one runner.
	if n := r.started.Load(); n > steps/10 {
		t.Fatalf("%d runners started for %d steps one after another, want a few", n, steps)
	}
}

// A step handed over while the runner that ran the last one has not gone back to wait
// yet starts a second runner (the machine was busy: the runner was descheduled between
// finishing a step and waiting). Both then wait for steps, and the following steps go to
// them: no runner more is started.
func TestStepRunnersReuseIdleRunnersAfterASecondStarted(t *testing.T) {
	ran, proceed := make(chan struct{}, 1), make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	r := newStepRunners(func(stepTask) {
		ran <- struct{}{}
		if first.CompareAndSwap(true, false) { // the first runner, descheduled after its step
			<-proceed
		}
	}, time.Hour)
	defer r.stop()
	r.run(aStep)
	<-ran
	r.run(aStep) // the first runner is not waiting: a second one starts
	<-ran
	close(proceed)
	if n := r.started.Load(); n != 2 {
		t.Fatalf("%d runners started, want 2", n)
	}
	const steps = 100
	for range steps {
		waitAllIdle(t, r)
		r.run(aStep)
		<-ran
	}
	if n := r.started.Load(); n > 2+steps/10 {
		t.Fatalf("%d runners started for %d steps one after another, want the 2 already there", n, steps)
	}
}

// waitAllIdle waits until every runner alive counts itself idle: however many the
// interleaving of steps and waits started (a wait for exactly one hung when a step
// handed over at the wrong instant had started a second, which idles for an hour).
func waitAllIdle(t *testing.T, r *stepRunners) {
	t.Helper()
	waitUntil(t, time.Minute, "the runners to wait for their next step", func() bool {
		return r.idle.Load() == r.started.Load()-r.ended.Load()
	})
}

func TestStepRunnersRunConcurrentStepsEachOnItsOwnRunner(t *testing.T) {
	release := make(chan struct{})
	var running sync.WaitGroup
	r := newStepRunners(func(stepTask) { running.Done(); <-release }, time.Hour)
	const steps = 50
	running.Add(steps)
	for range steps {
		r.run(aStep)
	}
	running.Wait() // every step runs at once: none waits for another's runner
	if n := r.started.Load(); n != steps {
		t.Fatalf("%d runners for %d steps in flight", n, steps)
	}
	close(release)
	waitUntil(t, time.Minute, "every runner to be idle", func() bool { return r.idle.Load() == steps })
	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("stop did not end the idle runners")
	}
	if n := r.ended.Load(); n != steps {
		t.Fatalf("%d of %d runners ended by stop", n, steps)
	}
}

func TestStepRunnersEndWhenIdle(t *testing.T) {
	done := make(chan struct{}, 8)
	r := newStepRunners(func(stepTask) { done <- struct{}{} }, 10*time.Millisecond)
	for range 8 {
		r.run(aStep)
	}
	for range 8 {
		<-done
	}
	// Without stop: only retiring ends them, half of those idle every 10 ms. A step
	// handed to a runner that had already finished its own starts none, so fewer than
	// 8 may have started: every one started must end.
	waitUntil(t, time.Minute, "the idle runners to retire", func() bool {
		return r.started.Load() > 0 && r.ended.Load() == r.started.Load()
	})
	started := r.started.Load()
	r.run(aStep) // a step after they ended starts a runner again
	<-done
	if r.started.Load() != started+1 {
		t.Fatalf("a step after the runners retired: %d runners started, want 1", r.started.Load()-started)
	}
	r.stop()
}
