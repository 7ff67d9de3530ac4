package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/jsonappend"
)

// The batch insert answers up to 10 000 full jobs; encoding/json's reflection was 22 % of
// the server's CPU on a 5 000-job request (docs/performance.md). appendJob writes a Job as
// encoding/json writes the generated struct (the same keys, omitempty where its tags say
// so); TestAppendJobMatchesEncodingJSON holds the two together field by field, so a
// field added to the spec fails the test until it is written here.

// batchInsertedResponse is the answer of POST /v1/jobs/batch, already encoded into a
// buffer of answerBuffers, which it gives back once written.
type batchInsertedResponse struct{ body *[]byte }

func (r batchInsertedResponse) VisitInsertJobsResponse(w http.ResponseWriter) error {
	defer answerBuffers.Put(r.body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(*r.body))) // sent whole, not chunked
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(*r.body)
	return err
}

// answerBuffers holds the batch answers' buffers for the next request: a 5 000-job
// answer is 2.2 MB, and a fresh buffer of that size is zeroed before use (9 % of the
// server's CPU on such a request, beside the collections it brought on).
var answerBuffers = sync.Pool{New: func() any { return new([]byte) }}

// insertedEncoder encodes {"jobs": [...]} with each job's deduplicated and debounced
// flags, one job at a time as the engine answers it (a slice of 5 000 bodies, with each
// engine job copied to the heap for the pointers into it, was 5 MB a request).
type insertedEncoder struct {
	b     *[]byte
	times timeMemo
	n     int
}

// newInsertedEncoder starts an answer of about jobs jobs in a buffer of answerBuffers.
func newInsertedEncoder(jobs int) *insertedEncoder {
	b := answerBuffers.Get().(*[]byte)
	if want := 64 + jobs*480; cap(*b) < want {
		*b = make([]byte, 0, want)
	}
	*b = append((*b)[:0], `{"jobs":[`...)
	return &insertedEncoder{b: b}
}

// add appends one job.
func (e *insertedEncoder) add(j *engine.JobInserted) {
	b := *e.b
	if e.n > 0 {
		b = append(b, ',')
	}
	e.n++
	body := jobBody(&j.Job)
	*e.b = appendJob(b, &e.times, &body, &j.Deduplicated, j.Debounced)
}

// finish closes the answer.
func (e *insertedEncoder) finish() batchInsertedResponse {
	*e.b = append(*e.b, "]}\n"...)
	return batchInsertedResponse{body: e.b}
}

// timeMemo is the last time appendJob wrote and its text: a batch's jobs share their
// created_at, updated_at and eligible_at, and formatting them was 2 ms of a 5 000-job
// answer.
type timeMemo struct {
	t    time.Time
	text []byte
}

// append appends t as jsonappend.Time does.
func (m *timeMemo) append(b []byte, t time.Time) []byte {
	if m.text == nil || m.t != t { // ==: the same instant in the same location formats alike
		m.t, m.text = t, jsonappend.Time(m.text[:0], t)
	}
	return append(b, m.text...)
}

// appendJob appends j as a JSON object; deduplicated, when given, is added as a key, and
// debounced when true (omitempty).
func appendJob(b []byte, times *timeMemo, j *Job, deduplicated *bool, debounced bool) []byte {
	b = append(b, `{"attempt":`...)
	b = strconv.AppendInt(b, int64(j.Attempt), 10)
	b = optTime(b, times, `,"attempted_at":`, j.AttemptedAt)
	if j.Awaiting != nil {
		b = append(b, `,"awaiting":`...)
		if *j.Awaiting == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for i, s := range *j.Awaiting {
				if i > 0 {
					b = append(b, ',')
				}
				b = jsonappend.String(b, s)
			}
			b = append(b, ']')
		}
	}
	if j.CancelRequested != nil {
		b = append(b, `,"cancel_requested":`...)
		b = strconv.AppendBool(b, *j.CancelRequested)
	}
	b = nullString(b, `,"concurrency_key":`, j.ConcurrencyKey)
	b = append(b, `,"created_at":`...)
	b = times.append(b, j.CreatedAt)
	if j.DebounceKey != nil {
		b = append(b, `,"debounce_key":`...)
		b = jsonappend.String(b, *j.DebounceKey)
	}
	b = nullTime(b, times, `,"eligible_at":`, j.EligibleAt)
	b = append(b, `,"error":`...)
	b = jsonappend.Raw(b, j.Error)
	if j.FairnessKey != nil {
		b = append(b, `,"fairness_key":`...)
		b = jsonappend.String(b, *j.FairnessKey)
	}
	b = nullTime(b, times, `,"finished_at":`, j.FinishedAt)
	b = append(b, `,"handler":`...)
	b = jsonappend.String(b, j.Handler)
	b = append(b, `,"id":`...)
	b = strconv.AppendInt(b, j.Id, 10)
	b = append(b, `,"input":`...)
	b = jsonappend.Raw(b, j.Input)
	b = nullString(b, `,"key":`, j.Key)
	b = optTime(b, times, `,"lease_expires_at":`, j.LeaseExpiresAt)
	if j.LeaseOwner != nil {
		b = append(b, `,"lease_owner":`...)
		b = jsonappend.String(b, *j.LeaseOwner)
	}
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, int64(j.MaxAttempts), 10)
	b = append(b, `,"parent_id":`...)
	if j.ParentId == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *j.ParentId, 10)
	}
	b = append(b, `,"pending_children":`...)
	b = strconv.AppendInt(b, int64(j.PendingChildren), 10)
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, int64(j.Priority), 10)
	b = append(b, `,"queue":`...)
	b = jsonappend.String(b, j.Queue)
	if j.RateLimit != nil {
		b = append(b, `,"rate_limit":`...)
		b = appendRateLimitRef(b, *j.RateLimit)
	}
	if j.RateLimits != nil {
		b = append(b, `,"rate_limits":[`...)
		for i, r := range *j.RateLimits {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendRateLimitRef(b, r)
		}
		b = append(b, ']')
	}
	if j.RerunOf != nil {
		b = append(b, `,"rerun_of":`...)
		b = strconv.AppendInt(b, *j.RerunOf, 10)
	}
	b = append(b, `,"result":`...)
	b = jsonappend.Raw(b, j.Result)
	if j.ScheduleName != nil {
		b = append(b, `,"schedule_name":`...)
		b = jsonappend.String(b, *j.ScheduleName)
	}
	b = optTime(b, times, `,"schedule_tick":`, j.ScheduleTick)
	b = append(b, `,"state":`...)
	b = jsonappend.Raw(b, j.State)
	b = append(b, `,"status":`...)
	b = jsonappend.String(b, string(j.Status))
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(j.Step), 10)
	if j.Traceparent != nil {
		b = append(b, `,"traceparent":`...)
		b = jsonappend.String(b, *j.Traceparent)
	}
	if j.Tracestate != nil {
		b = append(b, `,"tracestate":`...)
		b = jsonappend.String(b, *j.Tracestate)
	}
	b = append(b, `,"updated_at":`...)
	b = times.append(b, j.UpdatedAt)
	if j.Wake != nil {
		b = append(b, `,"wake":`...)
		b = jsonappend.String(b, *j.Wake)
	}
	if deduplicated != nil {
		b = append(b, `,"deduplicated":`...)
		b = strconv.AppendBool(b, *deduplicated)
	}
	if debounced {
		b = append(b, `,"debounced":true`...)
	}
	return append(b, '}')
}

// appendRateLimitRef appends r as encoding/json writes it (members in name order).
func appendRateLimitRef(b []byte, r RateLimitRef) []byte {
	b = append(b, '{')
	if r.Key != nil {
		b = append(b, `"key":`...)
		b = jsonappend.String(b, *r.Key)
		b = append(b, ',')
	}
	b = append(b, `"name":`...)
	b = jsonappend.String(b, r.Name)
	if r.Weight != nil {
		b = append(b, `,"weight":`...)
		b = strconv.AppendInt(b, int64(*r.Weight), 10)
	}
	return append(b, '}')
}

// optTime appends key and t when t is set (an omitempty time).
func optTime(b []byte, times *timeMemo, key string, t *time.Time) []byte {
	if t == nil {
		return b
	}
	return times.append(append(b, key...), *t)
}

// nullTime appends key and t, or null.
func nullTime(b []byte, times *timeMemo, key string, t *time.Time) []byte {
	b = append(b, key...)
	if t == nil {
		return append(b, "null"...)
	}
	return times.append(b, *t)
}

// nullString appends key and s, or null.
func nullString(b []byte, key string, s *string) []byte {
	b = append(b, key...)
	if s == nil {
		return append(b, "null"...)
	}
	return jsonappend.String(b, *s)
}
