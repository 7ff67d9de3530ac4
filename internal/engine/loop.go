package engine

import (
	"context"
	"sync"
	"time"
)

// loop runs a maintenance service's pass now and then every interval until Stop; a pass
// that reports more work (a full batch) runs again at once, unless Stop was called.
type loop struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (l *loop) start(ctx context.Context, interval time.Duration, pass func(context.Context) (more bool)) {
	ctx, l.cancel = context.WithCancel(ctx)
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for ctx.Err() == nil {
			if pass(ctx) && ctx.Err() == nil {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the loop: the pass in progress sees its context cancelled (its statement is
// cancelled, a backlog is left for the next start), and Stop waits for it to return.
func (l *loop) Stop() {
	if l.cancel != nil {
		l.cancel()
		l.done.Wait()
	}
}
