package pg

import (
	"context"
	"time"
)

// JobsChannel is the NOTIFY channel that carries a queue name when new work is ready.
const JobsChannel = "gendurable_jobs"

// Listen holds one connection LISTENing on channel and calls fn with each payload until
// ctx ends. It reconnects with backoff after a lost connection, and calls fn("") after
// each (re)connect so that callers re-check for work they may have missed meanwhile.
func (db *DB) Listen(ctx context.Context, channel string, fn func(payload string)) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := db.listenOnce(ctx, channel, fn)
		if ctx.Err() != nil {
			return
		}
		_ = err
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (db *DB) listenOnce(ctx context.Context, channel string, fn func(string)) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection carries session state (LISTEN): never hand it back to the pool.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "LISTEN "+QuoteIdent(channel)); err != nil {
		return err
	}
	fn("")
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Payload)
	}
}
