package engine_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
)

// Bodies are cut to the cap on a character boundary, and made storable: invalid UTF-8
// and NUL (which a jsonb string refuses, failing the whole batch) become U+FFFD.
func TestStepBodiesAreCutAndStorable(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{StepBodyCap: 8})
	for _, c := range []struct {
		name, body, text string
		truncated        bool
	}{
		{"short", `{"a":1}`, `{"a":1}`, false},
		{"exact", "12345678", "12345678", false},
		{"cut", "123456789", "12345678", true},
		{"cut before a character", "1234567é", "1234567", true}, // é is two bytes: 8 and 9
		{"NUL", "a\x00b", "a\uFFFDb", false},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb", false},
	} {
		b := te.StepBodies([]byte(c.body), nil, false)
		if b.Response != nil {
			t.Fatalf("%s: a response with no answer: %+v", c.name, b.Response)
		}
		got := b.Request
		if got.Text != c.text || got.Truncated != c.truncated || got.Size != len(c.body) || !utf8.ValidString(got.Text) {
			t.Errorf("%s: kept %+v, want %q truncated=%v size=%d", c.name, got, c.text, c.truncated, len(c.body))
		}
	}
	if b := te.StepBodies(nil, []byte{}, true); b.Request != nil || b.Response == nil || b.Response.Text != "" {
		t.Fatalf("an empty answer: %+v", b)
	}
}

// An outcome reported through the API (BodiesByQueue) keeps its bodies as its queue's
// setting says, read with one statement, and stored so that NUL cannot fail the batch.
func TestAsynchronousOutcomeBodiesFollowTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	run := func(setting string, kind string) *engine.StepBodies {
		t.Helper()
		if _, err := te.SetQueue(ctx, "default", engine.QueueSettings{StepBodies: &setting}); err != nil {
			t.Fatal(err)
		}
		id := te.insert(t, engine.NewJob{})
		st := te.claim(t)
		o := engine.Outcome{Kind: pg.KindDone, Label: "done"}
		if kind == pg.KindFail {
			o = engine.FailOutcome("fail", "no", nil)
		}
		o.Bodies = te.StepBodies(nil, []byte("answer \x00"), true)
		if _, err := te.ApplyOutcome(ctx, engine.StepOutcome{JobID: st.ID, Token: st.LeaseToken, BodiesByQueue: true, Outcome: o}); err != nil {
			t.Fatal(err)
		}
		steps, err := te.ListSteps(ctx, id, 10)
		if err != nil || len(steps) != 1 {
			t.Fatalf("%d steps (%v)", len(steps), err)
		}
		return steps[0].Bodies
	}
	if b := run(engine.StepBodiesFailures, pg.KindFail); b == nil || b.Request != nil || !strings.HasPrefix(b.Response.Text, "answer ") {
		t.Fatalf("failures, fail: %+v", b)
	}
	if b := run(engine.StepBodiesFailures, pg.KindDone); b != nil {
		t.Fatalf("failures, done: %+v", b)
	}
	if b := run(engine.StepBodiesAll, pg.KindDone); b == nil || b.Response == nil {
		t.Fatalf("all, done: %+v", b)
	}
	if b := run(engine.StepBodiesOff, pg.KindFail); b != nil {
		t.Fatalf("off, fail: %+v", b)
	}
}

// An unknown step_bodies value is refused and names the field.
func TestQueueStepBodiesValidation(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	bad := "everything"
	_, err := te.SetQueue(context.Background(), "q", engine.QueueSettings{StepBodies: &bad})
	verr, ok := err.(*engine.ValidationError)
	if !ok || len(verr.Errors) != 1 || verr.Errors[0].Field != "step_bodies" {
		t.Fatalf("got %v", err)
	}
	if _, err := te.GetQueue(context.Background(), "q"); err != engine.ErrNotFound {
		t.Fatalf("the refused queue was written: %v", err)
	}
}
