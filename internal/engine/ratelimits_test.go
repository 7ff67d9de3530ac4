package engine_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// tokens reads the tokens of bucket (name, key), "none" when it does not exist yet.
func tokens(t *testing.T, te testEngine, name, key string) string {
	t.Helper()
	rows, err := te.db.QueryStrings(context.Background(),
		`SELECT coalesce((SELECT tokens::text FROM rate_buckets WHERE name = $1 AND key = $2), 'none')`, name, key)
	if err != nil {
		t.Fatal(err)
	}
	return rows[0][0]
}

func claimAll(t *testing.T, te testEngine) []engine.Step {
	t.Helper()
	steps, _, err := te.Claim(context.Background(), "default", 50)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

// A job naming two buckets runs only when both hold its weight, and takes from both or
// from neither; a bucket the job was denied in keeps its tokens for other jobs.
func TestJobWithTwoRateLimitsRunsOnlyWhenBothHaveTokens(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it claims again at once a step its buckets denied, which Citus gives back to wait for its tokens (a minute at rate 0, or until a PUT of its limit: docs/citus.md, \"Remote buckets\"); TestMultiBucketConservationAcrossEngines holds the rule there")
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	// Rate 0: nothing refills while the test runs, so every token count is exact.
	for name, burst := range map[string]float64{"api": 3, "email": 1} {
		if _, err := te.SetRateLimit(ctx, name, 0, burst); err != nil {
			t.Fatal(err)
		}
	}
	both := []engine.RateLimitRef{{Name: "api", Key: "c7"}, {Name: "email", Key: "c7"}}
	first := te.insert(t, engine.NewJob{RateLimits: both})
	second := te.insert(t, engine.NewJob{RateLimits: both})

	steps := claimAll(t, te)
	if len(steps) != 1 || steps[0].ID != first {
		t.Fatalf("claimed %v, want only job %d (email holds one token)", steps, first)
	}
	if a, e := tokens(t, te, "api", "c7"), tokens(t, te, "email", "c7"); a != "2" || e != "0" {
		t.Fatalf("after the first grant: api %s, email %s tokens, want 2 and 0", a, e)
	}
	// The second job fits api but not email: denied, and api is not debited.
	if steps := claimAll(t, te); len(steps) != 0 {
		t.Fatalf("claimed %d steps with email empty", len(steps))
	}
	if a := tokens(t, te, "api", "c7"); a != "2" {
		t.Fatalf("a denied job debited api: %s tokens, want 2", a)
	}
	// The tokens it was denied stay usable by a job naming api alone.
	apiOnly := te.insert(t, engine.NewJob{RateLimit: &engine.RateLimitRef{Name: "api", Key: "c7", Weight: 2}})
	if steps := claimAll(t, te); len(steps) != 1 || steps[0].ID != apiOnly {
		t.Fatalf("claimed %v, want only the api-only job %d", steps, apiOnly)
	}
	// Refill email only: the second job still waits for api.
	if _, err := te.db.Exec(ctx, `UPDATE rate_buckets SET tokens = 1 WHERE name = 'email'`); err != nil {
		t.Fatal(err)
	}
	if steps := claimAll(t, te); len(steps) != 0 {
		t.Fatalf("claimed %d steps with api empty", len(steps))
	}
	if e := tokens(t, te, "email", "c7"); e != "1" {
		t.Fatalf("a denied job debited email: %s tokens, want 1", e)
	}
	if _, err := te.db.Exec(ctx, `UPDATE rate_buckets SET tokens = 1 WHERE name = 'api'`); err != nil {
		t.Fatal(err)
	}
	if steps := claimAll(t, te); len(steps) != 1 || steps[0].ID != second {
		t.Fatalf("claimed %v, want job %d once both buckets hold a token", steps, second)
	}
	if a, e := tokens(t, te, "api", "c7"), tokens(t, te, "email", "c7"); a != "0" || e != "0" {
		t.Fatalf("after the second grant: api %s, email %s tokens, want 0 and 0", a, e)
	}

	// The job shows every limit it names, the first also as rate_limit.
	got, err := te.GetJob(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.RateLimitRef{{Name: "api", Key: "c7", Weight: 1}, {Name: "email", Key: "c7", Weight: 1}}
	if !slices.Equal(got.RateLimits, want) || got.RateLimit == nil || *got.RateLimit != "api" {
		t.Fatalf("job shows rate limits %+v (rate_limit %v), want %+v", got.RateLimits, got.RateLimit, want)
	}
}

// The admission rule with several buckets per job: a job that one empty bucket denies
// takes nothing from its other buckets, even within the pick that denies it; a job denied
// by contention in one bucket may hold back another bucket for one pick (under-admission),
// never make it over-debit, and the next pick admits what fits.
func TestMultiBucketAdmissionRule(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it claims again at once a step its buckets denied, which Citus gives back to wait for its tokens (a minute at rate 0, or until a PUT of its limit: docs/citus.md, \"Remote buckets\"); TestMultiBucketConservationAcrossEngines holds the rule there")
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	for _, name := range []string{"x", "y", "z", "closed"} {
		if _, err := te.SetRateLimit(ctx, name, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	te.insert(t, engine.NewJob{RateLimit: &engine.RateLimitRef{Name: "closed"}})
	if steps := claimAll(t, te); len(steps) != 1 {
		t.Fatalf("claimed %d, want the job that empties closed", len(steps))
	}
	blocked := te.insert(t, engine.NewJob{RateLimits: []engine.RateLimitRef{{Name: "x"}, {Name: "closed"}}})
	xOnly := te.insert(t, engine.NewJob{RateLimit: &engine.RateLimitRef{Name: "x"}})
	if steps := claimAll(t, te); len(steps) != 1 || steps[0].ID != xOnly {
		t.Fatalf("claimed %v, want job %d: the job blocked by closed must not hold x back", steps, xOnly)
	}
	if _, err := te.db.Exec(ctx, `UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE id = $1`, blocked); err != nil {
		t.Fatal(err)
	}
	// x is empty now; refill it, then: a names x and y, b names x and z, c names z.
	if _, err := te.db.Exec(ctx, `UPDATE rate_buckets SET tokens = 1 WHERE name = 'x'`); err != nil {
		t.Fatal(err)
	}
	a := te.insert(t, engine.NewJob{RateLimits: []engine.RateLimitRef{{Name: "x"}, {Name: "y"}}})
	b := te.insert(t, engine.NewJob{RateLimits: []engine.RateLimitRef{{Name: "x"}, {Name: "z"}}})
	c := te.insert(t, engine.NewJob{RateLimit: &engine.RateLimitRef{Name: "z"}})
	// One pick: a wins x; b loses x to a but still counts in z, so c waits this pick.
	if steps := claimAll(t, te); len(steps) != 1 || steps[0].ID != a {
		t.Fatalf("first pick claimed %v, want only job %d", steps, a)
	}
	if z := tokens(t, te, "z", ""); z != "none" {
		t.Fatalf("z was debited (%s tokens) though no job of it won", z)
	}
	// Next pick: x is empty, so b is out of the sums and c takes z.
	if steps := claimAll(t, te); len(steps) != 1 || steps[0].ID != c {
		t.Fatalf("second pick claimed %v, want only job %d (b %d waits for x)", steps, c, b)
	}
	for _, name := range []string{"x", "y", "z"} {
		if n := tokens(t, te, name, ""); n != "0" {
			t.Errorf("bucket %s holds %s tokens, want 0", name, n)
		}
	}
}

// Many pickers on two engines over jobs naming two buckets each: with rate 0, every
// bucket ends at exactly burst minus the weights granted from it, never below zero, and
// no bucket grants more than its burst.
func TestMultiBucketConservationAcrossEngines(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	other, err := engine.New(te.db, engine.Config{LeaseTTL: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.SetRateLimit(ctx, "api", 0, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := te.SetRateLimit(ctx, "email", 0, 60); err != nil {
		t.Fatal(err)
	}
	var jobs []engine.NewJob
	for i := range 600 {
		jobs = append(jobs, engine.NewJob{Handler: "h", RateLimits: []engine.RateLimitRef{
			{Name: "api", Key: "k" + strconv.Itoa(i%5), Weight: 1 + i%2},
			{Name: "email", Key: "k" + strconv.Itoa(i%3), Weight: 1 + i%3},
		}})
	}
	if _, err := te.InsertJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var granted, contended atomic.Int64
	for g := range 8 {
		eng := te.Engine
		if g%2 == 1 {
			eng = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for empty := 0; empty < 3; {
				steps, c, err := eng.Claim(ctx, "default", 20)
				contended.Add(int64(c))
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(int64(len(steps)))
				if len(steps) == 0 {
					empty++
				}
			}
		}()
	}
	wg.Wait()
	if granted.Load() == 0 {
		t.Fatal("nothing was granted")
	}
	// Per bucket: the weights of the claimed jobs naming it, against its tokens.
	rows, err := te.db.QueryStrings(ctx, `
		WITH uses AS (
		    SELECT j.rate_limit AS name, coalesce(j.rate_key, '') AS key, j.rate_weight AS weight, j.status FROM jobs j
		    UNION ALL
		    SELECT x.name, x.key, x.weight, j.status FROM jobs j, jsonb_to_recordset(j.extra_rate_limits) x(name text, key text, weight int)
		)
		SELECT u.name, u.key, l.burst, coalesce(sum(u.weight) FILTER (WHERE u.status = 'executing'), 0), b.tokens
		FROM uses u JOIN rate_limits l ON l.name = u.name LEFT JOIN rate_buckets b ON b.name = u.name AND b.key = u.key
		GROUP BY 1, 2, 3, 5 ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 8 {
		t.Fatalf("want 8 buckets (5 api, 3 email), got %v", rows)
	}
	for _, r := range rows {
		burst, _ := strconv.ParseFloat(r[2], 64)
		used, _ := strconv.ParseFloat(r[3], 64)
		left, err := strconv.ParseFloat(r[4], 64)
		if err != nil {
			t.Fatalf("bucket %s/%s was never minted: %v", r[0], r[1], r)
		}
		if used > burst || left < 0 || left != burst-used {
			t.Errorf("bucket %s/%s: burst %g, granted %g, tokens left %g (want burst - granted, ≥ 0)", r[0], r[1], burst, used, left)
		}
	}
	t.Logf("%d jobs granted over 8 buckets by 8 pickers on 2 engines; %d claims retried after a mint race",
		granted.Load(), contended.Load())
}

// Every named rate limit must exist and hold its weight in its burst; the field of each
// refusal names the limit's position, and nothing is written.
func TestRateLimitsRefusedOnInsert(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	if _, err := te.SetRateLimit(ctx, "api", 1, 2); err != nil {
		t.Fatal(err)
	}
	held := "held"
	te.insert(t, engine.NewJob{Key: &held})
	eight := make([]engine.RateLimitRef, 9)
	for i := range eight {
		eight[i] = engine.RateLimitRef{Name: "api", Key: strconv.Itoa(i)}
	}
	cases := []struct {
		name  string
		jobs  []engine.NewJob
		field []string
	}{
		{"unknown second limit", []engine.NewJob{{Handler: "h", RateLimits: []engine.RateLimitRef{{Name: "api"}, {Name: "nope"}}}},
			[]string{"rate_limits/1/name"}},
		{"unknown first limit", []engine.NewJob{{Handler: "h", RateLimits: []engine.RateLimitRef{{Name: "nope"}, {Name: "api", Key: "x"}}}},
			[]string{"rate_limits/0/name"}},
		{"second weight above its burst", []engine.NewJob{{Handler: "h", RateLimits: []engine.RateLimitRef{{Name: "api"}, {Name: "api", Key: "x", Weight: 3}}}},
			[]string{"rate_limits/1/weight"}},
		{"batch: item 1", []engine.NewJob{{Handler: "h"}, {Handler: "h", RateLimits: []engine.RateLimitRef{{Name: "api"}, {Name: "nope"}}}},
			[]string{"jobs/1/rate_limits/1/name"}},
		// A live key in the batch makes the statement answer a row: the engine's own lookup explains the refusal.
		{"batch with a held key", []engine.NewJob{{Handler: "h", Key: &held}, {Handler: "h", RateLimits: []engine.RateLimitRef{{Name: "api"}, {Name: "api", Key: "x", Weight: 5}}}},
			[]string{"jobs/1/rate_limits/1/weight"}},
		{"both forms", []engine.NewJob{{Handler: "h", RateLimit: &engine.RateLimitRef{Name: "api"}, RateLimits: []engine.RateLimitRef{{Name: "api", Key: "x"}}}},
			[]string{"rate_limits"}},
		{"one bucket twice", []engine.NewJob{{Handler: "h", RateLimits: []engine.RateLimitRef{{Name: "api", Key: "x"}, {Name: "api", Key: "x", Weight: 2}}}},
			[]string{"rate_limits/1"}},
		{"too many", []engine.NewJob{{Handler: "h", RateLimits: eight}}, []string{"rate_limits"}},
		{"bad weight", []engine.NewJob{{Handler: "h", RateLimits: []engine.RateLimitRef{{Name: "api"}, {Name: "api", Key: "y", Weight: -1}}}},
			[]string{"rate_limits/1/weight"}},
	}
	for _, c := range cases {
		var err error
		if len(c.jobs) == 1 {
			_, err = te.InsertJob(ctx, c.jobs[0])
		} else {
			_, err = te.InsertJobs(ctx, c.jobs)
		}
		if got := fieldsOf(t, err); !slices.Equal(got, c.field) {
			t.Errorf("%s: refused fields %v, want %v (%v)", c.name, got, c.field, err)
		}
	}
	rows, err := te.db.QueryStrings(ctx, `SELECT count(*) FROM jobs`)
	if err != nil || rows[0][0] != "1" {
		t.Fatalf("jobs after the refusals: %v %v, want only the key holder", rows, err)
	}
}
