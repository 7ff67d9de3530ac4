package dispatch

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

// stepRequest is the reference for appendStepBody: the body as encoding/json writes
// webhook.StepRequest.
func stepRequest(st engine.Step) webhook.StepRequest {
	r := webhook.StepRequest{
		Job: webhook.Job{ID: st.ID, Queue: st.Queue, Handler: st.Handler, Key: st.Key, Step: st.Step,
			Attempt: st.Attempt, MaxAttempts: st.MaxAttempts, Input: st.Input, State: st.State, CreatedAt: st.CreatedAt},
		Signals:      make([]webhook.Signal, len(st.Signals)),
		SignalsMore:  st.SignalsMore,
		ChildrenMore: st.ChildrenMore,
		Lease:        webhook.Lease{Token: st.LeaseToken, ExpiresAt: st.LeaseExpiresAt},
	}
	if len(r.Job.State) == 0 {
		r.Job.State = json.RawMessage("null")
	}
	if st.Wake != nil {
		r.Wake = *st.Wake
	}
	for i, s := range st.Signals {
		r.Signals[i] = webhook.Signal{ID: s.ID, Name: s.Name, Payload: nullIfEmpty(s.Payload), CreatedAt: s.CreatedAt}
	}
	for _, c := range st.Children {
		r.Children = append(r.Children, webhook.Child{ID: c.ID, Handler: c.Handler, Key: c.Key, Status: c.Status,
			Result: nullIfEmpty(c.Result), Error: nullIfEmpty(c.Error)})
	}
	return r
}

func nullIfEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// sameJSON decodes both documents and compares the values.
func sameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("appendStepBody wrote invalid JSON (%v): %s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("appendStepBody and encoding/json differ:\n got %s\nwant %s", got, want)
	}
}

func TestStepBodyMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 7, 4, 5, 123456789, time.UTC)
	key, wake := "user-7 <&> \"quoted\"\n\u2028", "signal"
	cases := map[string]engine.Step{
		"fresh": {ClaimedJob: pg.ClaimedJob{ID: 42, Queue: "default", Handler: "onboard", Step: 0, Attempt: 1,
			MaxAttempts: 5, Input: json.RawMessage(`{"a": 1, "b": [true, null]}`), CreatedAt: at,
			LeaseToken: "5f0c5a1e-0d3a-4b8e-9c1b-1e2f3a4b5c6d", LeaseExpiresAt: at.Add(30 * time.Second)}},
		"everything": {ClaimedJob: pg.ClaimedJob{ID: 7, Queue: "q", Handler: "h", Key: &key, Step: 3, Attempt: 2,
			MaxAttempts: 9, Input: json.RawMessage(`"x"`), State: json.RawMessage(`{"n": 3}`), CreatedAt: at.In(time.FixedZone("x", 3600)),
			LeaseToken: "t", LeaseExpiresAt: at, Wake: &wake},
			Signals: []pg.Signal{{ID: 1, Name: "go\x00\x1f\t\xff", Payload: json.RawMessage(`{"by": "ana"}`), CreatedAt: at},
				{ID: 2, Name: "noise", CreatedAt: at}},
			SignalsMore: 3,
			Children: []pg.Child{{ID: 9, Handler: "email", Key: &key, Status: "done", Result: json.RawMessage(`1`)},
				{ID: 10, Handler: "email", Status: "failed", Error: json.RawMessage(`{"message": "no"}`)}},
			ChildrenMore: 998},
	}
	for name, st := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(stepRequest(st))
			if err != nil {
				t.Fatal(err)
			}
			got := appendStepBody(nil, &st)
			sameJSON(t, got, want)
			if len(got) > stepBodySize(&st) {
				t.Errorf("the body is %d bytes, over its %d-byte estimate", len(got), stepBodySize(&st))
			}
		})
	}
}

// Any string (keys, names, handlers) is escaped into the same value encoding/json writes.
func FuzzStepBodyString(f *testing.F) {
	for _, s := range []string{"", "plain", "<script>&</script>", "\u2028\u2029", "\xff\xfe", "tab\there", "\"\\", "é日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st := engine.Step{ClaimedJob: pg.ClaimedJob{ID: 1, Queue: s, Handler: s, Key: &s, LeaseToken: s},
			Signals: []pg.Signal{{ID: 1, Name: s}}}
		want, err := json.Marshal(stepRequest(st))
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, appendStepBody(nil, &st), want)
	})
}

// The webhook-id and the signature are what a Standard Webhooks verifier accepts.
func TestStepSignatureVerifies(t *testing.T) {
	t.Parallel()
	d := &Dispatcher{}
	secret := webhook.NewSecret()
	st := engine.Step{ClaimedJob: pg.ClaimedJob{ID: 42, Step: 3, Attempt: 1, LeaseToken: "5f0c5a1e-0d3a"}}
	if id := webhookID(&st); id != "job_42_step_3_attempt_1_5f0c5a1e" {
		t.Fatalf("webhook-id %q", id)
	}
	body := []byte(`{"job":{}}`)
	now := time.Now()
	for range 3 { // the cached signer signs the same way every time
		sig, err := d.sign(nil, secret, "msg", now.Unix(), body)
		if err != nil {
			t.Fatal(err)
		}
		h := map[string][]string{"Webhook-Id": {"msg"}, "Webhook-Timestamp": {itoa(now.Unix())}, "Webhook-Signature": {string(sig)}}
		if err := webhook.Verify(secret, h, body, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.sign(nil, "not-a-secret", "msg", now.Unix(), body); err == nil {
		t.Fatal("a malformed secret signed")
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
