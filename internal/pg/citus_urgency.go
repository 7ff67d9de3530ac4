package pg

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
)

// Priorities across shards on Citus (docs/citus.md, "Dispatch per shard"). A claim takes
// the best priorities of each shard it visits first, and visits its queue's warm shards in
// turn from the one that last gave it rows; that order alone left an urgent job behind
// another shard's backlog: claims kept taking default-priority work where they were until
// that shard ran dry, while a job at priority 0 waited on the next one.
//
// So each process remembers, per queue, the shards where it knows of work better than the
// default priority, and the best such priority, and a claim visits those shards first,
// the best first (in turn among equals). It learns it from:
//   - wake-ups: an insert's NOTIFY names, after its shards, the best priority of the jobs
//     it announces when that is better than the default (" !0": citusNotify);
//   - claims: a claim that filled its rows on a shard leaves there the worst priority it
//     took (what is left is no better), and one that came back short forgets the shard
//     (nothing more is due there now), unless a wake-up came while it ran.
// Work no wake-up announces with its priority (a delayed job once due, a retry after its
// backoff, an insert through gendurable_enqueue) waits for its shard's turn, as before.

// defaultPriority is a job's priority when its insert names none (0 runs first, 9 last).
const defaultPriority = 5

// citusUrgency is each queue's shards with work better than the default priority, by
// shard id, with the best priority known there.
type citusUrgency struct {
	mu   sync.Mutex
	best map[string]map[int64]int
}

// note records that shards have work of queue at priority.
func (u *citusUrgency) note(queue string, shards []int64, priority int) {
	if priority >= defaultPriority || len(shards) == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.best == nil {
		u.best = map[string]map[int64]int{}
	}
	m := u.best[queue]
	if m == nil {
		m = map[int64]int{}
		u.best[queue] = m
	}
	for _, s := range shards {
		if p, ok := m[s]; !ok || priority < p {
			m[s] = priority
		}
	}
}

// claimed records what a claim of queue on shard learnt: it filled its rows (full) and
// the worst priority it took was worst, or it came back short. raced: a wake-up of the
// shard came while the claim ran, so what it announced may be left there: the claim only
// lowers the shard's mark then, never forgets it.
func (u *citusUrgency) claimed(queue string, shard int64, full bool, worst int, raced bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := u.best[queue]
	urgentLeft := full && worst < defaultPriority // what is left there may be that urgent
	if m == nil && !urgentLeft {
		return
	}
	known, ok := m[shard]
	switch {
	case urgentLeft && (!raced || !ok || worst < known):
		if m == nil {
			m = map[int64]int{}
			u.best[queue] = m
		}
		m[shard] = worst
	case raced:
	default:
		delete(m, shard)
		if len(m) == 0 {
			delete(u.best, queue)
		}
	}
}

// order puts first, in visit (shard indexes of l, with their warmth versions), the
// shards with work of queue better than the default priority, the best first; the others
// keep their order after them.
func (u *citusUrgency) order(queue string, l *citusLayout, visit []int, versions []uint64) {
	u.mu.Lock()
	m := u.best[queue]
	if len(m) == 0 {
		u.mu.Unlock()
		return
	}
	type visitAt struct {
		shard, priority int
		version         uint64
	}
	all := make([]visitAt, len(visit))
	for k, s := range visit {
		p, ok := m[l.shardIDAt(s)]
		if !ok {
			p = defaultPriority
		}
		all[k] = visitAt{s, p, versions[k]}
	}
	u.mu.Unlock()
	slices.SortStableFunc(all, func(a, b visitAt) int { return cmp.Compare(a.priority, b.priority) })
	for k, a := range all {
		visit[k], versions[k] = a.shard, a.version
	}
}

// urgentSuffix is what a wake-up payload adds after its shards for work at priority: " !"
// and the priority when it is better than the default, else nothing.
func urgentSuffix(priority int) string {
	if priority >= defaultPriority {
		return ""
	}
	return " !" + strconv.Itoa(priority)
}
