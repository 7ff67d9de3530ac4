package pg

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Which shards a Citus claim visits (docs/citus.md, "Dispatch per shard"). A claim that
// visited every shard of its queue in turn paid one router statement per shard even when
// one shard had the work: an empty claim was 32 statements, each planned on the
// coordinator (72 ms of its CPU a second for an idle served queue), and a K=1 key, whose
// shard gives one row a claim, made every claim visit the other 31.
//
// So each process remembers, per queue, the shards where a claim came back short (it
// found fewer rows than it asked for: nothing more is claimable there now). Such a shard
// is cold: claims pass over it until something says it may have work again:
//   - a wake-up that names it: the server's NOTIFYs on Citus name the shards of the work
//     they announce (citusWorkPayload), an insert's, a woken parent's, a released or
//     reaped step's, a signal's; a NOTIFY that names none warms every shard of its queue;
//   - an outcome this process wrote on it (a next step runnable now, a K=1 key or a gate
//     slot given back): every queue's mark on that shard is cleared;
//   - time: a cold mark lasts citusColdFor (a second, the dispatcher's longest idle poll),
//     so work that becomes due without a wake-up (a delayed job, a retry's backoff,
//     another process's outcome that freed a key) waits at most that long, as it waits
//     for the next poll on plain PostgreSQL;
//   - a reconnected LISTEN (anything may have been missed): every mark is cleared.
// A shard where a claim took a rate-limited step is not chilled for citusRatedFor after:
// its bucket refills with time, which no wake-up announces, and a claim that came back
// short there a moment ago may find tokens at the next poll (a bucket of 20 a second with
// a burst of 1 gives one step a claim).
// When every shard of a queue is cold, a claim sends no statement at all. When the only
// shards left to visit are those whose marks expired, one fan-out probe (JobReadyExists)
// first asks whether the queue has due work anywhere: an idle queue costs that one
// statement a second instead of a claim on every shard.

// citusColdFor is how long a shard where a claim came back short is passed over.
const citusColdFor = time.Second

// citusRatedFor is how long after a claim took a rate-limited step on a shard the shard
// is never chilled.
const citusRatedFor = 10 * time.Second

// citusWarmth is each queue's cold shards, by shard id (a move keeps a shard's id; a split
// makes new ones, which start warm).
type citusWarmth struct {
	mu   sync.Mutex
	cold map[string]map[int64]time.Time // queue → shard id → when a claim came back short
	// warmed counts the warmings of each shard, and all those of every shard at once: a
	// claim chills a shard only when nothing warmed it while its statement ran.
	warmed    map[int64]uint64
	warmedAll uint64
	// skipped holds the queues whose last claim visited no shard.
	skipped map[string]bool
	// ratedAt is when a claim of each queue last took a rate-limited step on a shard.
	ratedAt map[string]map[int64]time.Time
}

// ratedWithin reports whether a claim of queue took a rate-limited step on some shard
// less than citusRatedFor before now.
func (w *citusWarmth) ratedWithin(queue string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, at := range w.ratedAt[queue] {
		if now.Sub(at) < citusRatedFor {
			return true
		}
	}
	return false
}

// rated records that queue's claim took a rate-limited step on shard at t.
func (w *citusWarmth) rated(queue string, shard int64, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ratedAt == nil {
		w.ratedAt = map[string]map[int64]time.Time{}
	}
	m := w.ratedAt[queue]
	if m == nil {
		m = map[int64]time.Time{}
		w.ratedAt[queue] = m
	}
	m[shard] = t
}

// setVisitedNone records whether queue's last claim visited no shard.
func (w *citusWarmth) setVisitedNone(queue string, none bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.skipped == nil {
		w.skipped = map[string]bool{}
	}
	w.skipped[queue] = none
}

// visitedNone reports whether queue's last claim visited no shard.
func (w *citusWarmth) visitedNone(queue string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.skipped[queue]
}

// version answers a number that changes whenever shard is warmed.
func (w *citusWarmth) version(shard int64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.warmedAll + w.warmed[shard]
}

// coldSince answers when queue's claim last came back short on shard (zero: warm).
func (w *citusWarmth) coldSince(queue string, shard int64) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cold[queue][shard]
}

// chill marks shard cold for queue at t, unless it was warmed since version.
func (w *citusWarmth) chill(queue string, shard int64, t time.Time, version uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.warmedAll+w.warmed[shard] != version {
		return
	}
	if at, ok := w.ratedAt[queue][shard]; ok && t.Sub(at) < citusRatedFor {
		return // its bucket refills: claimed again at the next poll
	}
	if w.cold == nil {
		w.cold = map[string]map[int64]time.Time{}
	}
	m := w.cold[queue]
	if m == nil {
		m = map[int64]time.Time{}
		w.cold[queue] = m
	}
	m[shard] = t
}

// warm clears queue's marks on shards ("" queue: every queue's; no shards: every shard).
func (w *citusWarmth) warm(queue string, shards ...int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(shards) == 0 {
		w.warmedAll++
	}
	for _, s := range shards {
		if w.warmed == nil {
			w.warmed = map[int64]uint64{}
		}
		w.warmed[s]++
	}
	for q, m := range w.cold {
		if queue != "" && q != queue {
			continue
		}
		if len(shards) == 0 {
			delete(w.cold, q)
			continue
		}
		for _, s := range shards {
			delete(m, s)
		}
	}
}

// citusWorkPayload is a JobsChannel payload on Citus: the queue, the claimer's tag
// (notifyTag), and the shards that got the work, each named by one of its placements
// (" @0,32,64"): placements, not shard indexes, so that a process whose layout is a
// minute older still finds the shard. With no placements the payload names no shard.
func (l *citusLayout) workPayload(queue, tag string, placements []int) string {
	if len(placements) == 0 {
		return queue + tag
	}
	var shards []int
	var b strings.Builder
	b.WriteString(queue + tag + " @")
	for _, p := range placements {
		s := l.shardIndex(p)
		if slices.Contains(shards, s) {
			continue
		}
		if len(shards) > 0 {
			b.WriteByte(',')
		}
		shards = append(shards, s)
		b.WriteString(strconv.Itoa(p))
	}
	return b.String()
}

// warmFromNotice warms what a JobsChannel payload names and answers the payload without
// its shard list (what WorkNotice reads). "" (a reconnect) warms everything. A priority
// after the list (" !0") marks the shards named for the claims to visit first
// (citusUrgency).
func (db *DB) warmFromNotice(payload string) string {
	if payload == "" {
		db.warmth.warm("")
		return ""
	}
	rest, list, named := strings.Cut(payload, " @")
	queue, _ := WorkNotice(rest)
	if !named {
		db.warmth.warm(queue)
		return payload
	}
	priority := defaultPriority
	if l, said, urgent := strings.Cut(list, " !"); urgent {
		p, err := strconv.Atoi(said)
		if err != nil || p < 0 {
			db.warmth.warm(queue) // not ours to read: every shard
			return rest
		}
		list, priority = l, p
	}
	var placements []int
	for f := range strings.SplitSeq(list, ",") {
		p, err := strconv.Atoi(f)
		if err != nil || p < 0 || p >= Placements {
			db.warmth.warm(queue) // not ours to read: every shard
			return rest
		}
		placements = append(placements, p)
	}
	db.warmPlacements(queue, priority, placements)
	return rest
}

// warmPlacements warms, for queue ("": every queue), the shards that hold placements, and
// marks them for the claims to visit first when priority is better than the default.
func (db *DB) warmPlacements(queue string, priority int, placements []int) {
	shards := make([]int64, 0, len(placements))
	for _, p := range placements {
		id, ok := db.citus.shardID(p)
		if !ok { // no layout read yet: no shard can be cold
			return
		}
		shards = append(shards, id)
	}
	db.warmth.warm(queue, shards...)
	db.urgency.note(queue, shards, priority)
}
