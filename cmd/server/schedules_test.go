package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// Three server processes share one database and one schedule firing every second: each
// tick makes exactly one job (none twice, none skipped while the processes run), and no
// process logs an error for the ticks it lost to another.
func TestAScheduleFiresOncePerTickAcrossThreeServers(t *testing.T) {
	t.Parallel()
	const servers, wantTicks = 3, 6
	bin := build(t, t.TempDir(), "./cmd/server")
	dbURL := pgtest.NewDatabase(t)
	const secret = "whsec_c2NoZWR1bGVzLWFjcm9zcy10aHJlZS1zZXJ2ZXJz"
	hook := httptest.NewServer(webhook.Handler(secret, func(context.Context, *webhook.StepRequest) webhook.Response {
		return webhook.Response{Done: &webhook.Done{}}
	}))
	t.Cleanup(hook.Close)

	var bases []string
	var logs []output
	for range servers {
		addr, out := freeAddr(t), newOutput(t)
		srv := startProcess(t, bin, out, "DATABASE_URL="+dbURL, "GENDURABLE_ADDR="+addr,
			"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true")
		waitReady(t, "http://"+addr+"/readyz", srv, out)
		bases = append(bases, "http://"+addr)
		logs = append(logs, out)
	}
	call(t, "PUT", bases[0]+"/v1/handlers/tick", fmt.Sprintf(`{"url": %q, "secret": %q}`, hook.URL+"/steps", secret))
	call(t, "PUT", bases[1]+"/v1/schedules/every-second", `{"cron": "@every 1s", "handler": "tick", "queue": "ticks"}`)

	db := pgtest.Open(t, dbURL, pg.Options{MaxConns: 1})
	ctx := context.Background()
	var jobs, ticks int64
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rows, err := db.QueryStrings(ctx, `SELECT count(*)::text, count(DISTINCT schedule_tick)::text
			FROM jobs WHERE schedule_name = 'every-second' AND status = 'done'`)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Sscan(rows[0][0], &jobs)
		_, _ = fmt.Sscan(rows[0][1], &ticks)
		if ticks >= wantTicks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ticks ran in 90 s (want %d)", ticks, wantTicks)
		}
	}
	call(t, "PUT", bases[2]+"/v1/schedules/every-second", `{"cron": "@every 1s", "handler": "tick", "queue": "ticks", "paused": true}`)

	// Every job of the schedule, live or done: one per tick, and the ticks a second apart
	// with none missing between the first and the last.
	rows, err := db.QueryStrings(ctx, `SELECT count(*)::text, count(DISTINCT schedule_tick)::text,
			(extract(epoch FROM max(schedule_tick) - min(schedule_tick))::bigint + 1)::text
		FROM jobs WHERE schedule_name = 'every-second'`)
	if err != nil {
		t.Fatal(err)
	}
	var all, distinct, span int64
	_, _ = fmt.Sscan(rows[0][0], &all)
	_, _ = fmt.Sscan(rows[0][1], &distinct)
	_, _ = fmt.Sscan(rows[0][2], &span)
	t.Logf("%d servers: %d jobs for %d ticks over %d seconds", servers, all, distinct, span)
	if all != distinct {
		t.Errorf("%d jobs for %d ticks: a tick made more than one job", all, distinct)
	}
	if distinct != span {
		t.Errorf("%d ticks over a %d-second span: a tick was skipped while the servers ran", distinct, span)
	}
	for i, l := range logs {
		if s := l.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, `"level":"ERROR"`) {
			t.Errorf("server %d logged an error:\n%s", i, s)
		}
	}
}
