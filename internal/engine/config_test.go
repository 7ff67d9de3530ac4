package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Every service refuses a configuration it cannot run when it is made, with a message
// naming the setting and the environment variable of the server that sets it (if any).
// (A negative interval panicked in time.NewTicker once the service started; a negative
// retention or batch was taken as is.)
func TestServicesRefuseAnInvalidConfig(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	eng, err := engine.New(db, engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		make  func() error
		names []string
	}{
		{func() error {
			_, err := engine.New(db, engine.Config{LeaseTTL: 50 * time.Millisecond}, nil)
			return err
		},
			[]string{"LeaseTTL", "GENDURABLE_LEASE_TTL"}},
		{func() error { _, err := engine.New(db, engine.Config{StepBodyCap: -1}, nil); return err },
			[]string{"StepBodyCap", "GENDURABLE_STEP_BODY_CAP"}},
		{func() error {
			_, err := engine.New(db, engine.Config{IdempotencyWindow: time.Millisecond}, nil)
			return err
		},
			[]string{"IdempotencyWindow", "GENDURABLE_IDEMPOTENCY_WINDOW"}},
		{func() error { _, err := engine.New(db, engine.Config{SignalCap: -1}, nil); return err }, []string{"SignalCap"}},
		{func() error { _, err := engine.New(db, engine.Config{ChildrenCap: -1}, nil); return err }, []string{"ChildrenCap"}},
		{func() error { return panicOf(func() { eng.NewReaper(engine.ReaperConfig{Interval: -time.Second}) }) },
			[]string{"reaper", "Interval"}},
		{func() error { return panicOf(func() { eng.NewReaper(engine.ReaperConfig{Batch: -1}) }) }, []string{"reaper", "Batch"}},
		{func() error { return panicOf(func() { eng.NewGC(engine.GCConfig{Retention: -time.Hour}) }) },
			[]string{"gc", "Retention", "GENDURABLE_RETENTION"}},
		{func() error { return panicOf(func() { eng.NewGC(engine.GCConfig{Batch: -5}) }) }, []string{"gc", "Batch"}},
		{func() error { return panicOf(func() { eng.NewReconciler(engine.ReconcilerConfig{Interval: -1}) }) },
			[]string{"reconciler", "Interval"}},
		{func() error {
			return panicOf(func() { eng.NewScheduler(engine.SchedulerConfig{MaxSleep: -time.Minute}) })
		},
			[]string{"scheduler", "MaxSleep"}},
		{func() error { return panicOf(func() { eng.NewScheduler(engine.SchedulerConfig{Batch: -1}) }) },
			[]string{"scheduler", "Batch"}},
		{func() error {
			return panicOf(func() { eng.NewStepRollups(engine.StepRollupConfig{Interval: -time.Second}) })
		},
			[]string{"step rollups", "Interval"}},
		{func() error {
			_, err := eng.NewHistoryPartitions(engine.HistoryConfig{Partition: 30 * time.Minute})
			return err
		}, []string{"Partition", "GENDURABLE_HISTORY_PARTITION"}},
		{func() error {
			_, err := eng.NewHistoryPartitions(engine.HistoryConfig{Retention: -time.Hour})
			return err
		}, []string{"Retention", "GENDURABLE_RETENTION"}},
		{func() error {
			_, err := eng.NewHistoryPartitions(engine.HistoryConfig{LockTimeout: -time.Second})
			return err
		}, []string{"LockTimeout"}},
	} {
		err := c.make()
		for _, name := range c.names {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s set wrong: %v, which does not name %s", c.names[len(c.names)-1], err, name)
			}
		}
	}
}

// panicOf runs fn and answers what it panicked with as an error (nil when it did not).
func panicOf(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	fn()
	return nil
}
