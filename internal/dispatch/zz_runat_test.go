package dispatch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/pg"
)

func TestZZRunAtInsert(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	h.handler(t, "healthy", doneReceiver(t).URL, 3)
	if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "shared", MaxInFlight: ptr(200), Batch: ptr(100)}); err != nil {
		t.Fatal(err)
	}
	d := startDispatcher(t, h.eng, dispatch.Config{})
	defer d.Stop(ctx)
	h.handler(t, "later", doneReceiver(t).URL, 3)
	if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "held", Paused: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	h.db.Exec(ctx, `VACUUM ANALYZE jobs`)
	for round := range 3 {
		jobs := jobsOf("later", 10000)
		at := time.Now().Add(time.Hour)
		for i := range jobs {
			jobs[i].RunAt = &at
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		waits := map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				rows, _ := h.db.QueryStrings(ctx, `-- probe
					SELECT coalesce(wait_event_type, '') || ':' || coalesce(wait_event, '') || ' ' || replace(left(query, 40), E'\n', ' ') FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query NOT LIKE '-- probe%'`)
				for _, r := range rows {
					waits[r[0]]++
				}
			}
		}()
		h.counter.Reset()
		began := time.Now()
		h.insert(t, jobs...)
		close(stop)
		wg.Wait()
		t.Logf("round %d: %s (statement %s) waits %v", round, time.Since(began), h.counter.Time("JobInsertMany"), waits)
	}
}
