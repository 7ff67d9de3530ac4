package pg

import (
	"slices"
	"testing"
	"time"
)

// fourShards is a layout of 4 shards (ids 100..103), placement p in shard p mod 4.
func fourShards() *citusLayout {
	l := &citusLayout{loadedAt: time.Now()}
	for i := range 4 {
		l.shards = append(l.shards, citusShard{ID: int64(100 + i)})
	}
	for p := range Placements {
		l.shardOf[p] = p % 4
		l.shards[p%4].Placements = append(l.shards[p%4].Placements, p)
	}
	return l
}

// The shards a claim visits: the warm ones and those whose cold marks expired; a wake-up
// naming a shard, or naming none, warms it; a chill raced by a warming does not stick.
func TestCitusClaimVisitsWarmShards(t *testing.T) {
	db := &DB{citus: fourShards()}
	l := db.citus
	visit, _, onlyExpired := db.citusShardsToVisit(l, "q", 0, 4)
	if len(visit) != 4 || onlyExpired {
		t.Fatalf("fresh: visit %v (only expired %v), want every shard", visit, onlyExpired)
	}
	now := time.Now()
	for s := range 4 {
		db.warmth.chill("q", l.shardIDAt(s), now, db.warmth.version(l.shardIDAt(s)))
	}
	if visit, _, _ := db.citusShardsToVisit(l, "q", 0, 4); len(visit) != 0 {
		t.Fatalf("every shard chilled: visit %v, want none", visit)
	}
	if visit, _, _ := db.citusShardsToVisit(l, "other", 0, 4); len(visit) != 4 {
		t.Fatalf("another queue: visit %v, want every shard", visit)
	}

	// A notice naming placements 6 and 10 (both shard 2) warms shard 2 only, and the
	// caller reads the payload without the shard list.
	payload := l.workPayload("q", notifyTag("host:1"), []int{6, 10})
	if payload != "q host:1 @6" {
		t.Fatalf("payload %q, want one placement per shard", payload)
	}
	if rest := db.warmFromNotice(payload); rest != "q host:1" {
		t.Fatalf("the notice as read: %q", rest)
	}
	if visit, _, onlyExpired := db.citusShardsToVisit(l, "q", 0, 4); len(visit) != 1 || visit[0] != 2 || onlyExpired {
		t.Fatalf("after the notice: visit %v (only expired %v), want shard 2", visit, onlyExpired)
	}
	// A notice naming no shard (gendurable_enqueue's, a parked handler's wake-up) warms them all.
	if rest := db.warmFromNotice("q"); rest != "q" {
		t.Fatalf("the plain notice as read: %q", rest)
	}
	if visit, _, _ := db.citusShardsToVisit(l, "q", 0, 4); len(visit) != 4 {
		t.Fatalf("after a notice naming no shard: visit %v, want every shard", visit)
	}

	// A chill whose claim ran while the shard was warmed does not stick.
	id := l.shardIDAt(1)
	before := db.warmth.version(id)
	db.warmPlacements("", defaultPriority, []int{1})
	db.warmth.chill("q", id, time.Now(), before)
	if !db.warmth.coldSince("q", id).IsZero() {
		t.Fatal("a chill raced by a warming stuck")
	}

	// Expired marks are visited, flagged so that the claim probes first.
	db.warmth.chill("q", id, time.Now().Add(-2*citusColdFor), db.warmth.version(id))
	for _, s := range []int{0, 2, 3} {
		db.warmth.chill("q", l.shardIDAt(s), time.Now(), db.warmth.version(l.shardIDAt(s)))
	}
	if visit, _, onlyExpired := db.citusShardsToVisit(l, "q", 0, 4); len(visit) != 1 || visit[0] != 1 || !onlyExpired {
		t.Fatalf("one expired mark: visit %v (only expired %v), want shard 1, only expired", visit, onlyExpired)
	}

	// A shard where a rate-limited step was claimed a moment ago is not chilled.
	db.warmth.rated("q", l.shardIDAt(3), time.Now())
	db.warmPlacements("q", defaultPriority, []int{3})
	db.warmth.chill("q", l.shardIDAt(3), time.Now(), db.warmth.version(l.shardIDAt(3)))
	if !db.warmth.coldSince("q", l.shardIDAt(3)).IsZero() {
		t.Fatal("a shard whose bucket refills was chilled")
	}

	// A reconnected LISTEN warms everything.
	db.warmFromNotice("")
	if visit, _, _ := db.citusShardsToVisit(l, "q", 0, 4); len(visit) != 4 {
		t.Fatalf("after a reconnect: visit %v, want every shard", visit)
	}
}

// The shards a claim visits first: those a wake-up said hold work better than the default
// priority, the best first, in turn among the rest; a claim that filled its rows leaves
// the worst priority it took there, one that came back short forgets the shard, and a
// wake-up while it ran keeps the better mark. A notice says the priority after its shards.
func TestCitusClaimVisitsUrgentShardsFirst(t *testing.T) {
	db := &DB{citus: fourShards()}
	l := db.citus
	visitOf := func() []int {
		t.Helper()
		visit, versions, _ := db.citusShardsToVisit(l, "q", 1, 4)
		db.urgency.order("q", l, visit, versions)
		return visit
	}
	if v := visitOf(); !slices.Equal(v, []int{1, 2, 3, 0}) {
		t.Fatalf("no urgent work: visit %v, want the ring from 1", v)
	}

	payload := l.workPayload("q", "", []int{3}) + urgentSuffix(2)
	if payload != "q @3 !2" {
		t.Fatalf("the payload of an insert at priority 2 on placement 3: %q", payload)
	}
	if rest := db.warmFromNotice(payload); rest != "q" {
		t.Fatalf("the notice as read: %q", rest)
	}
	db.warmFromNotice(l.workPayload("q", "", []int{0}) + urgentSuffix(0))
	db.warmFromNotice(l.workPayload("q", "", []int{2}) + urgentSuffix(defaultPriority))
	if v := visitOf(); !slices.Equal(v, []int{0, 3, 1, 2}) {
		t.Fatalf("priority 0 on shard 0, 2 on shard 3: visit %v, want 0, 3, then the ring", v)
	}
	if got := db.warmFromNotice("q @1 !x"); got != "q" {
		t.Fatalf("a notice whose priority is not ours to read: %q", got)
	}

	// Shard 0's claim filled its rows down to priority 3: it keeps a mark, behind shard 3's 2.
	db.urgency.claimed("q", l.shardIDAt(0), true, 3, false)
	if v := visitOf(); !slices.Equal(v, []int{3, 0, 1, 2}) {
		t.Fatalf("shard 0 down to 3, shard 3 at 2: visit %v, want 3, 0, then the ring", v)
	}
	// Shard 3's came back short, but a wake-up came while it ran: its mark holds.
	db.urgency.claimed("q", l.shardIDAt(3), false, 2, true)
	if v := visitOf(); v[0] != 3 {
		t.Fatalf("a short claim raced by a wake-up: visit %v, want shard 3 first still", v)
	}
	// Without the race it forgets shard 3, and shard 0's claim down to the default
	// priority forgets shard 0: the ring again.
	db.urgency.claimed("q", l.shardIDAt(3), false, 2, false)
	db.urgency.claimed("q", l.shardIDAt(0), true, defaultPriority, false)
	if v := visitOf(); !slices.Equal(v, []int{1, 2, 3, 0}) {
		t.Fatalf("every urgent mark taken: visit %v, want the ring from 1", v)
	}
}
