package dispatch

import (
	"sync"
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
		waitUntil(t, time.Minute, "the runner to wait for its next step", func() bool { return r.idle.Load() == 1 })
		if i == 0 && r.started.Load() != 1 {
			t.Fatalf("%d runners started for one step", r.started.Load())
		}
	}
	// A step handed over in the instant between a runner counting itself idle and its
	// wait starts a runner of its own; nearly every step must find the one runner.
	if n := r.started.Load(); n > steps/10 {
		t.Fatalf("%d runners started for %d steps one after another, want a few", n, steps)
	}
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
	// Without stop: only retiring ends them, half of those idle every 10 ms.
	waitUntil(t, time.Minute, "the idle runners to retire", func() bool { return r.ended.Load() == 8 })
	started := r.started.Load()
	r.run(aStep) // a step after they ended starts a runner again
	<-done
	if r.started.Load() != started+1 {
		t.Fatalf("a step after the runners retired: %d runners started, want 1", r.started.Load()-started)
	}
	r.stop()
}
