package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

type stepStats struct {
	Queue   *string `json:"queue"`
	Handler *string `json:"handler"`
	Window  string  `json:"window"`
	Bucket  string  `json:"bucket"`
	From    time.Time
	To      time.Time
	Points  []struct {
		At                             time.Time
		OK, Retry, Failed, Done, Total int64
		Latency                        *struct{ P50, P95, P99 float64 } `json:"latency_ms"`
	}
}

// sums adds up a series' classes and finds its slowest p99.
func (s stepStats) sums() (ok, retry, failed, done, total int64, p99 float64) {
	for _, p := range s.Points {
		ok, retry, failed, done, total = ok+p.OK, retry+p.Retry, failed+p.Failed, done+p.Done, total+p.Total
		if p.Latency != nil {
			p99 = max(p99, p.Latency.P99)
		}
	}
	return
}

// The series of a handler and of a queue count what a real webhook answered, by class,
// with the latency the webhook took: pay answers done after 40 ms, a 500 then done, or
// fail; report (another handler on the same queue) answers done at once.
func TestStepStatsCountWhatTheWebhookAnswered(t *testing.T) {
	t.Parallel()
	s := newStack(t, 30*time.Second)
	s.handler("pay", func(w http.ResponseWriter, req *webhook.StepRequest) {
		var in struct{ Mode string }
		_ = json.Unmarshal(req.Job.Input, &in)
		switch {
		case in.Mode == "slow":
			time.Sleep(40 * time.Millisecond) // the latency the chart must show
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		case in.Mode == "flaky" && req.Job.Attempt == 1:
			w.WriteHeader(http.StatusInternalServerError)
		case in.Mode == "fail":
			webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"message":"no"}`)}})
		default:
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	s.handler("report", func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	var ids []int64
	for _, body := range []string{`{"mode": "slow"}`, `{"mode": "slow"}`, `{"mode": "flaky"}`, `{"mode": "fail"}`} {
		ids = append(ids, s.insert(`{"handler": "pay", "queue": "money", "input": `+body+`}`))
	}
	ids = append(ids, s.insert(`{"handler": "report", "queue": "money"}`))
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range ids {
		for st := s.job(id)["status"]; st != "done" && st != "failed"; st = s.job(id)["status"] {
			if time.Now().After(deadline) {
				t.Fatalf("job %d is still %v", id, st)
			}
			time.Sleep(10 * time.Millisecond) // polling pace
		}
	}
	get := func(query string) stepStats {
		t.Helper()
		r := s.do("GET", "/v1/stats/steps?"+query, "")
		if r.status != 200 {
			t.Fatalf("%s: %d %s", query, r.status, r.body)
		}
		var out stepStats
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The charts lag the history by a flush of the rollups: wait for the five attempts.
	pay := get("handler=pay")
	for _, _, _, _, total, _ := pay.sums(); total < 5; _, _, _, _, total, _ = pay.sums() {
		if time.Now().After(deadline) {
			t.Fatalf("the handler's series holds %d attempts of 5", total)
		}
		time.Sleep(10 * time.Millisecond) // polling pace
		pay = get("handler=pay")
	}
	if len(pay.Points) != 60 || pay.Window != "1h0m0s" || pay.Bucket != "1m0s" || *pay.Handler != "pay" || pay.Queue != nil ||
		!pay.To.Equal(pay.From.Add(time.Hour)) || !pay.Points[59].At.Equal(pay.To.Add(-time.Minute)) {
		t.Fatalf("the default series: %d points, window %s, bucket %s, from %s to %s", len(pay.Points), pay.Window, pay.Bucket, pay.From, pay.To)
	}
	// 5 attempts: slow, slow, flaky's 500 and its done, fail.
	if ok, retry, failed, done, total, p99 := pay.sums(); ok != 3 || retry != 1 || failed != 1 || done != 3 || total != 5 || p99 < 40*0.956 {
		t.Fatalf("pay's hour: ok %d retry %d failed %d done %d total %d, p99 %.1f ms (want 3 1 1 3 5, ≥ 38 ms: 40 ms to the histogram's 4.4 %%)", ok, retry, failed, done, total, p99)
	}
	if ok, _, _, _, total, _ := get("queue=money&window=10m&bucket=30s").sums(); ok != 4 || total != 6 {
		t.Fatalf("the queue's 10 minutes: ok %d of %d, want 4 of 6", ok, total)
	}
	if n := len(get("queue=money&window=10m&bucket=7m").Points); n != 2 {
		t.Fatalf("10 minutes in buckets of 7: %d points, want 2 (rounded up)", n)
	}
	// Every history row names its handler.
	if n, err := s.db.QueryInt(context.Background(), `SELECT count(*) FROM steps WHERE handler IS NULL`); err != nil || n != 0 {
		t.Fatalf("%d history rows without a handler (%v)", n, err)
	}
	// The older per-queue endpoint reads the same statement.
	r := s.do("GET", "/v1/queues/money/throughput?minutes=5", "")
	var old struct {
		Points []struct{ Done, Failed, Total int64 }
	}
	_ = json.Unmarshal(r.body, &old)
	var done, failed, total int64
	for _, p := range old.Points {
		done, failed, total = done+p.Done, failed+p.Failed, total+p.Total
	}
	if r.status != 200 || done != 4 || failed != 2 || total != 6 {
		t.Fatalf("the queue throughput: %d %s", r.status, r.body)
	}
}

// A series beyond its bounds, or that names no queue and no handler or both, is a 422
// naming the parameter.
func TestStepStatsRefusesUnboundedReads(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	for query, field := range map[string]string{
		"":                                "query/queue",
		"queue=q&handler=h":               "query/queue",
		"queue=q&window=25h":              "query/window",
		"queue=q&window=24h&bucket=1m":    "query/bucket", // 1 440 buckets
		"queue=q&window=1h&bucket=500ms":  "query/bucket",
		"queue=q&window=1h&bucket=1500us": "query/bucket",
		"queue=q&window=9999999999h":      "query/window",
		"queue=q&window=soon":             "query/window",
	} {
		r := a.do("GET", "/v1/stats/steps?"+query, "")
		if r.status != 422 || !strings.Contains(string(r.body), fmt.Sprintf("%q", field)) ||
			!strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%q: %d %s, want a 422 naming %s", query, r.status, r.body, field)
		}
	}
	if r := a.do("GET", "/v1/stats/steps?handler=h&window=24h&bucket=3m", ""); r.status != 200 || strings.Count(string(r.body), `"at"`) != 480 {
		t.Fatalf("24 h in 3 min buckets: %d, %d points", r.status, strings.Count(string(r.body), `"at"`))
	}
}

// GET /v1/jobs?schedule=… lists the jobs one schedule made.
func TestJobListFiltersBySchedule(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("report")
	if r := a.do("PUT", "/v1/queues/held", `{"paused": true}`); r.status != 200 {
		t.Fatal(r.status)
	}
	var ids []int64
	for range 3 {
		r := a.do("POST", "/v1/jobs", `{"handler": "report", "queue": "held"}`)
		ids = append(ids, int64(r.json(t)["id"].(float64)))
	}
	// Fixture: the first two as the scheduler makes them (its tests fire real ticks).
	for i, id := range ids[:2] { // the ticks computed here: Citus refuses now() - id * interval in an UPDATE
		if _, err := a.db.Exec(context.Background(), `UPDATE jobs SET schedule_name = 'nightly', schedule_tick = $2 WHERE id = $1`,
			id, time.Now().Add(-time.Duration(i+1)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	r := a.do("GET", "/v1/jobs?schedule=nightly", "")
	if got := fmt.Sprint(jobIDs(t, r)); r.status != 200 || got != fmt.Sprint([]int64{ids[1], ids[0]}) {
		t.Fatalf("the nightly jobs: %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/jobs?schedule=weekly", ""); r.status != 200 || len(jobIDs(t, r)) != 0 {
		t.Fatalf("a schedule without jobs: %d %s", r.status, r.body)
	}
}

func jobIDs(t *testing.T, r reply) []int64 {
	t.Helper()
	var page struct{ Jobs []struct{ ID int64 } }
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	ids := []int64{}
	for _, j := range page.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}
