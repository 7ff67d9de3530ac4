package dispatch_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
)

// New refuses a configuration it cannot run, at once, with a message that names the
// setting and the environment variable that sets it. (A negative OutcomeBatch panicked
// inside the completer's make, naming nothing; a negative OutcomeWorkers or ParkFor was
// taken as is.)
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	for _, c := range []struct {
		cfg   dispatch.Config
		names []string
	}{
		{dispatch.Config{OutcomeBatch: -1}, []string{"OutcomeBatch", "GENDURABLE_OUTCOME_BATCH"}},
		{dispatch.Config{OutcomeBatch: 1_000_000}, []string{"OutcomeBatch", "GENDURABLE_OUTCOME_BATCH"}},
		{dispatch.Config{OutcomeWorkers: -2}, []string{"OutcomeWorkers", "GENDURABLE_OUTCOME_WORKERS"}},
		{dispatch.Config{OutcomeLinger: -time.Millisecond}, []string{"OutcomeLinger", "GENDURABLE_OUTCOME_LINGER"}},
		{dispatch.Config{ShutdownGrace: -time.Second}, []string{"ShutdownGrace", "GENDURABLE_SHUTDOWN_GRACE"}},
		{dispatch.Config{Queues: []string{"a", ""}}, []string{"Queues", "GENDURABLE_QUEUES"}},
		{dispatch.Config{PollMin: 2 * time.Second, PollMax: time.Second}, []string{"PollMin", "PollMax"}},
		{dispatch.Config{ParkFor: -time.Minute}, []string{"ParkFor"}},
		{dispatch.Config{MaxBodyBytes: -1}, []string{"MaxBodyBytes"}},
	} {
		got := panicOf(func() { dispatch.New(h.eng, c.cfg, nil, nil) })
		for _, name := range c.names {
			if !strings.Contains(got, name) {
				t.Errorf("New with %s set wrong: %q does not name %s", c.names[0], got, name)
			}
		}
	}
	if got := panicOf(func() { dispatch.New(h.eng, dispatch.Config{OutcomeBusyLinger: -1}, nil, nil) }); got != "" {
		t.Errorf("a negative OutcomeBusyLinger (off) was refused: %s", got)
	}
}

// panicOf runs fn and answers what it panicked with ("" when it did not).
func panicOf(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	fn()
	return ""
}
