package pg

import (
	"context"
	"encoding/json"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// JobReplay makes finished job id runnable again from step fromStep with state (nil: a
// null state), as sql/job_replay.sql says; on Citus, at the job's placement. ErrNotFound
// when nothing changed: the job is missing or live, fromStep is past its step, or a
// child of it is live (the caller tells these apart); ErrConflict when a live job holds
// its key.
func (db *DB) JobReplay(ctx context.Context, id int64, fromStep int, state json.RawMessage) error {
	if db.citus != nil {
		placement, err := db.citusPlacementOf(ctx, id)
		if err != nil {
			return err
		}
		var r dbcitus.JobReplayRow
		err = db.citusRevive(ctx, id, placement, func(q *dbcitus.Queries) (int64, error) {
			r, err = q.JobReplay(ctx, dbcitus.JobReplayParams{Placement: placement, ID: id, FromStep: fromStep, State: state})
			return id, err
		})
		if err != nil {
			return translate(err)
		}
		if r.Relive {
			db.carryRemoteChildrenNow(ctx, placement, false)
		}
		return db.citusNotify(ctx, []citusWake{{queue: r.Queue, placement: placement}})
	}
	_, err := db.q.JobReplay(ctx, dbsqlc.JobReplayParams{ID: id, FromStep: fromStep, State: state})
	return translate(err)
}

// JobRerun inserts a new job that runs finished job id again from its first step, with
// input (nil: the old job's), linked to it by rerun_of (sql/job_replay.sql), and returns
// its id; on Citus at the old job's placement. ErrNotFound when the job is missing or
// live (the caller tells these apart); ErrConflict when a live job holds its key.
func (db *DB) JobRerun(ctx context.Context, id int64, input json.RawMessage) (int64, error) {
	if db.citus != nil {
		placement, err := db.citusPlacementOf(ctx, id)
		if err != nil {
			return 0, err
		}
		q := dbcitus.New(db.pool)
		ids, err := db.citusDrawIDs(ctx, q, []int{placement})
		if err != nil {
			return 0, translate(err)
		}
		var r dbcitus.JobRerunRow
		err = db.citusRevive(ctx, id, placement, func(q *dbcitus.Queries) (int64, error) {
			r, err = q.JobRerun(ctx, dbcitus.JobRerunParams{NewID: ids[0], Input: input, Placement: placement, ID: id})
			return ids[0], err
		})
		if err != nil {
			return 0, translate(err)
		}
		return r.ID, db.citusNotify(ctx, []citusWake{{queue: r.Queue, placement: placement}})
	}
	newID, err := db.q.JobRerun(ctx, dbsqlc.JobRerunParams{ID: id, Input: input})
	return newID, translate(err)
}
