package pg

import "context"

// replanGrowth is how many times larger jobs must be than when the pool's plans were made
// before ReplanIfGrown reopens its connections (and replanGrowthFloor the least size, in
// pages, that counts).
const (
	replanGrowth      = 4
	replanGrowthFloor = 64
)

// ReplanIfGrown reopens the pool's connections when jobs has grown replanGrowth-fold
// since they were opened (or last reopened), so that every statement is planned again for
// the table's size: each connection plans a statement once (force_generic_plan), and a
// plan made while jobs was nearly empty reads the whole table (the pick: a sequential
// scan of every row instead of a jobs_pick range; TestPlansFollowTheJobsTableGrowth).
// Connections in use are closed when they are returned. Cheap: one catalog read.
func (db *DB) ReplanIfGrown(ctx context.Context) (grown bool, pages int64, err error) {
	pages, err = db.q.JobTablePages(ctx)
	if err != nil {
		return false, 0, translate(err)
	}
	planned := db.plannedPages.Load()
	if pages < replanGrowthFloor || pages < replanGrowth*max(planned, 1) {
		return false, pages, nil
	}
	if !db.plannedPages.CompareAndSwap(planned, pages) {
		return false, pages, nil // another caller reset the pool meanwhile
	}
	db.pool.Reset()
	return true, pages, nil
}
