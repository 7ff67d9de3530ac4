package engine

import (
	"context"
	"sync"
	"time"
)

// loop runs a maintenance service's pass now and then every interval until Stop; a pass
// that reports more work (a full batch) runs again at once.
type loop struct {
	stop chan struct{}
	done sync.WaitGroup
}

func (l *loop) start(ctx context.Context, interval time.Duration, pass func(context.Context) (more bool)) {
	l.stop = make(chan struct{})
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if pass(ctx) {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-l.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the loop and waits for the pass in progress.
func (l *loop) Stop() {
	if l.stop != nil {
		close(l.stop)
		l.done.Wait()
	}
}
