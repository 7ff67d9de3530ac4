package engine

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/gendurable/gendurable/internal/pg"
)

// The values of a queue's step_bodies setting: which attempts keep their request and
// response bodies in the step history.
const (
	// StepBodiesFailures keeps the bodies of every attempt that did not end in next,
	// await, spawn or done (errors, timeouts, bad answers, retries, fails): the default.
	StepBodiesFailures = "failures"
	// StepBodiesAll keeps every attempt's bodies.
	StepBodiesAll = "all"
	// StepBodiesOff keeps none.
	StepBodiesOff = "off"
)

// DefaultStepBodyCap is the default of Config.StepBodyCap: 8 KiB a body.
const DefaultStepBodyCap = 8 << 10

// StepBodies is what the history keeps of an attempt's request body and answer body;
// StepBody is one of them (its text, its size as sent or received, truncated or not).
// Headers are never kept: the Webhook-Signature is derived from the handler's secret.
type (
	StepBodies = pg.StepBodies
	StepBody   = pg.StepBody
)

// KeepsBodies reports whether a queue whose step_bodies setting is mode keeps the bodies
// of an attempt whose outcome is of kind (pg.KindNext…); an unknown mode is the default.
func KeepsBodies(mode, kind string) bool {
	switch mode {
	case StepBodiesAll:
		return true
	case StepBodiesOff:
		return false
	}
	return kind == pg.KindRetry || kind == pg.KindFail
}

// StepBodies returns the bodies of one attempt as the history keeps them: request and
// response (nil: there was none, e.g. no answer to a timeout), each cut to the server's
// Config.StepBodyCap and copied, so the caller's buffers are not held until the write.
func (e *Engine) StepBodies(request, response []byte, answered bool) *StepBodies {
	b := &StepBodies{}
	if request != nil {
		b.Request = capBody(request, e.cfg.StepBodyCap)
	}
	if answered {
		b.Response = capBody(response, e.cfg.StepBodyCap)
	}
	return b
}

// capBody keeps at most limit bytes of body as text Postgres can store in a jsonb string:
// cut on a character boundary, invalid UTF-8 and NUL (which jsonb refuses, and which
// would fail the whole outcome batch) replaced by U+FFFD.
func capBody(body []byte, limit int) *StepBody {
	kept := body
	if len(kept) > limit {
		cut := limit
		for cut > 0 && cut > limit-utf8.UTFMax && !utf8.RuneStart(kept[cut]) {
			cut--
		}
		kept = kept[:cut]
	}
	text := string(kept)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	if bytes.IndexByte(kept, 0) >= 0 {
		text = strings.ReplaceAll(text, "\x00", "\uFFFD")
	}
	return &StepBody{Text: text, Size: len(body), Truncated: len(kept) < len(body)}
}
