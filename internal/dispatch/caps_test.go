package dispatch_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// A step is shown at most SignalCap signals and ChildrenCap children and told how many
// more there are; the signals not shown wait for the next step.
func TestLargeInboxesAndFanOutsAreCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	eng, err := engine.New(db, engine.Config{LeaseTTL: 30 * time.Second, SignalCap: 3, ChildrenCap: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{db: db, eng: eng}
	var mu sync.Mutex
	var seen []webhook.StepRequest
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		if req.Job.Handler == "leaf" {
			answer(w, webhook.Response{Done: &webhook.Done{}})
			return
		}
		mu.Lock()
		seen = append(seen, *req)
		mu.Unlock()
		switch req.Job.Step {
		case 0, 1:
			answer(w, webhook.Response{Next: &webhook.Next{}})
		case 2:
			children := make([]webhook.ChildSpec, 25)
			for i := range children {
				children[i] = webhook.ChildSpec{Handler: "leaf"}
			}
			answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: children}})
		default:
			answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	h.handler(t, "leaf", rcv.URL, 3)
	h.handler(t, "root", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "root"})[0]
	for i := range 5 {
		if _, err := eng.Signal(ctx, engine.SignalTarget{JobID: &job.ID}, "s", []byte(`{"i":`+string(rune('0'+i))+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	startDispatcher(t, eng, dispatch.Config{})
	waitJob(t, db, job.ID, 20*time.Second, hasStatus("done"))
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 4 {
		t.Fatalf("root ran %d steps", len(seen))
	}
	if len(seen[0].Signals) != 3 || seen[0].SignalsMore != 2 || seen[0].Signals[0].Name != "s" {
		t.Fatalf("step 0 saw %d signals, %d more", len(seen[0].Signals), seen[0].SignalsMore)
	}
	if len(seen[1].Signals) != 2 || seen[1].SignalsMore != 0 || seen[1].Signals[0].ID <= seen[0].Signals[2].ID {
		t.Fatalf("step 1 saw %d signals, %d more (the rest of the inbox, in order)", len(seen[1].Signals), seen[1].SignalsMore)
	}
	if len(seen[2].Signals) != 0 {
		t.Fatalf("consumed signals shown again: %d", len(seen[2].Signals))
	}
	if len(seen[3].Children) != 10 || seen[3].ChildrenMore != 15 || seen[3].Wake != "children" {
		t.Fatalf("join step saw %d children, %d more, wake %q", len(seen[3].Children), seen[3].ChildrenMore, seen[3].Wake)
	}
}
