package pg

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// JobsChannel is the NOTIFY channel that carries a queue name when new work is ready
// (WorkNotice).
const JobsChannel = "gendurable_jobs"

// WorkNotice reads a JobsChannel payload: the queue that has new work, and the process
// that will claim it at once, if the statement that made it named one (the process
// whose dispatcher had room for it). Every other dispatcher may let that notice pass:
// waking them all made every process claim the same rows at once, each claim but one
// coming back empty or skipping the rows the first held. Their polls still find any
// work the claimer did not take. Queue names cannot hold a space.
func WorkNotice(payload string) (queue, claimer string) {
	queue, claimer, _ = strings.Cut(payload, " ")
	return queue, claimer
}

// notifyTag is what a statement appends to the queue in its NOTIFY: a space and the
// claimer, or nothing.
func notifyTag(claimer string) string {
	if claimer == "" {
		return ""
	}
	return " " + claimer
}

// Listen holds one connection LISTENing on channel and calls fn with each payload until
// ctx ends. It reconnects with backoff after a lost connection (the backoff starts over
// once a connection has been listening), reports each failure to onError (nil: ignored),
// and calls fn("") after each (re)connect so that callers re-check for work they may
// have missed meanwhile. The connection comes from Options.DirectURL when set: LISTEN is
// session state, which a transaction-mode pooler would hand to other clients (and its
// notifications with it). NOTIFY needs no such care: it is sent inside statements and
// transactions, which a pooler keeps whole.
func (db *DB) Listen(ctx context.Context, channel string, fn func(payload string), onError func(error)) {
	const first = 100 * time.Millisecond
	backoff := first
	for ctx.Err() == nil {
		listened, err := db.listenOnce(ctx, channel, fn)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = first
		}
		if onError != nil && err != nil {
			onError(translate(err))
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenOnce listens until the connection fails; listened reports whether LISTEN took.
func (db *DB) listenOnce(ctx context.Context, channel string, fn func(string)) (listened bool, err error) {
	pc, err := db.listenConn(ctx)
	if err != nil {
		return false, err
	}
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "LISTEN "+QuoteIdent(channel)); err != nil {
		return false, err
	}
	if db.citus != nil && channel == JobsChannel {
		fn = func(next func(string)) func(string) {
			// The shards a notice names are warmed for this process's claims, and the
			// list is cut from what the caller reads (citusWarmth).
			return func(payload string) { next(db.warmFromNotice(payload)) }
		}(fn)
	}
	fn("")
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		fn(n.Payload)
	}
}

// listenConn opens a connection of its own for LISTEN: it carries session state, so it
// never goes back to a pool. Where the pool's connections cancel a statement in the
// database when its context ends (cancelInTheDatabase), this one only closes its socket:
// WaitForNotification runs no statement, the cancel request would find nothing to stop,
// and the wait would last until cancelGrace, holding up every shutdown.
func (db *DB) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := db.session.Config().ConnConfig.Copy()
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	return pgx.ConnectConfig(ctx, cfg)
}
