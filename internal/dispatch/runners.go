package dispatch

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// stepRunners runs steps on goroutines that outlive one step.
//
// A goroutine made for each step started on the runtime's starting stack, whose size
// follows the average stack in use at the last collection: 2 KiB, since a step parked on
// its call uses little. Building and signing the request took it past that within the
// first few calls, and the runtime copied the stack to one of 4 KiB: runtime.copystack
// was 8 % of the server's CPU in a drain's profile, about 2.5 µs a step. A runner keeps
// its grown stack from one step to the next (the runtime halves a stack only while it
// uses under a quarter of it, and a runner's parked stack uses more), and a step is
// handed to an idle runner in a channel send instead of a goroutine start and exit.
//
// An idle runner waits in a bare channel receive: a select with a timer in it put the
// timer into the runtime's heap at every wait (1.2 µs a step in the profile). Runners
// end instead by retiring: every idleFor, half of the runners idle at that moment end,
// so after a burst the runners shrink back to what the load needs within seconds.
type stepRunners struct {
	runStep func(stepTask)
	idleFor time.Duration
	work    chan stepTask  // unbuffered: a send succeeds only when a runner waits
	quit    chan struct{}  // ends the retiring loop
	retired chan struct{}  // closed when the retiring loop has ended
	wg      sync.WaitGroup // the runners
	idle    atomic.Int64   // the runners waiting for a step now: what retiring reads
	// Test hooks: the runners started and ended so far.
	started, ended atomic.Int64
}

// runnerIdle is how often half of the idle runners end.
const runnerIdle = 2 * time.Second

// stepTask is a step to run; the one without a step (retire) ends the runner that takes it.
type stepTask struct {
	ctl *callControl
	f   *feeder
	st  *engine.Step
}

var retire = stepTask{}

func newStepRunners(runStep func(stepTask), idleFor time.Duration) *stepRunners {
	r := &stepRunners{runStep: runStep, idleFor: idleFor, work: make(chan stepTask), quit: make(chan struct{}),
		retired: make(chan struct{})}
	go r.retireIdle()
	return r
}

// run runs the step on an idle runner, or on a new one when none waits.
func (r *stepRunners) run(t stepTask) {
	select {
	case r.work <- t:
		return
	default:
	}
	r.wg.Add(1)
	r.started.Add(1)
	go r.runner(t)
}

func (r *stepRunners) runner(t stepTask) {
	defer r.wg.Done()
	defer r.ended.Add(1)
	for ok := true; ok && t.st != nil; {
		r.runStep(t)
		r.idle.Add(1)
		t, ok = <-r.work // closed by stop
		r.idle.Add(-1)
	}
}

// retireIdle ends, every idleFor, half of the runners idle at that moment.
func (r *stepRunners) retireIdle() {
	defer close(r.retired)
	tick := time.NewTicker(r.idleFor)
	defer tick.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-tick.C:
		}
		for n := (r.idle.Load() + 1) / 2; n > 0; n-- {
			select {
			case r.work <- retire:
			default: // none waits any more
				n = 0
			}
		}
	}
}

// stop ends the idle runners and waits for them (call once no step is left to run).
func (r *stepRunners) stop() {
	close(r.quit)
	<-r.retired // nothing sends on work any more
	close(r.work)
	r.wg.Wait()
}
