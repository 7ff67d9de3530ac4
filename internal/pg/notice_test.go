package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// Both insert statements name the claimer in their NOTIFY when the caller gives one, and
// only the queue otherwise; WorkNotice reads both forms back.
func TestInsertNoticeNamesTheClaimer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := enqueueDB(t)
	listener := jobsListener(t, conn.Config().ConnString())
	key, other := "k", "k2"
	cases := []struct {
		name, claimer, want string
		item                pg.JobInsert
	}{
		{"plain, claimed", "host-a:41", "q host-a:41", pg.JobInsert{Queue: "q", Handler: "h"}},
		{"plain, nobody", "", "q", pg.JobInsert{Queue: "q", Handler: "h"}},
		{"keyed (the general statement), claimed", "host-b:7", "q2 host-b:7", pg.JobInsert{Queue: "q2", Handler: "h", Key: &key}},
		{"keyed, nobody", "", "q2", pg.JobInsert{Queue: "q2", Handler: "h", Key: &other}},
	}
	for _, c := range cases {
		if _, err := db.JobInsertManyWith(ctx, []pg.JobInsert{c.item}, pg.JobInsertOptions{Claimer: c.claimer}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listener.WaitForNotification(wctx)
		cancel()
		if err != nil || n.Payload != c.want {
			t.Fatalf("%s: notification %v, %v; want %q", c.name, n, err, c.want)
		}
		if queue, claimer := pg.WorkNotice(n.Payload); queue != c.item.Queue || claimer != c.claimer {
			t.Errorf("%s: WorkNotice(%q) = %q, %q", c.name, n.Payload, queue, claimer)
		}
	}
}
