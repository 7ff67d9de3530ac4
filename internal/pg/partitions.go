package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The partitions of the step history (migration 0011). Their DDL names tables, so it
// cannot be a prepared statement: it is built here, every name through pgx.Identifier
// and every bound from a time.Time this package formats.

// stepsDefaultPartition catches the rows no range partition covers.
const stepsDefaultPartition = "steps_default"

// partitionLockKey serialises the partition changes of every process (a transaction-level
// advisory lock, so it holds through a transaction-mode pooler too).
const partitionLockKey = 0x67647374657073 // "gdsteps"

// ErrPartitionBusy reports a partition change that did not happen this time: another
// session was changing the partitions, or a lock was not granted within the lock timeout
// (a long reader of steps). The next pass tries again.
var ErrPartitionBusy = errors.New("pg: the step partitions are busy")

// StepPartition is one partition of the step history: rows with From <= finished_at < To.
// From is zero for the partition without a lower bound (steps_legacy); Default marks the
// DEFAULT partition, which has no range.
type StepPartition struct {
	Name     string
	From, To time.Time
	Default  bool
}

// StepPartitionList lists the partitions of steps, the DEFAULT first, then by range.
func (db *DB) StepPartitionList(ctx context.Context) ([]StepPartition, error) {
	rows, err := db.q.StepPartitionList(ctx)
	return convertAll(rows, func(r dbsqlc.StepPartitionListRow) StepPartition {
		p := StepPartition{Name: r.Name, Default: r.IsDefault}
		if !r.IsDefault {
			if r.FromUs != 0 {
				p.From = time.UnixMicro(r.FromUs).UTC()
			}
			p.To = time.UnixMicro(r.ToUs).UTC()
		}
		return p
	}), translate(err)
}

// DatabaseNow is the database's clock.
func (db *DB) DatabaseNow(ctx context.Context) (time.Time, error) {
	now, err := db.q.DatabaseNow(ctx)
	return now, translate(err)
}

// StepPartitionName is the name of the partition starting at from: steps_pYYYYMMDD_hhmmss (UTC).
func StepPartitionName(from time.Time) string {
	return "steps_p" + from.UTC().Format("20060102_150405")
}

// StepPartitionCreate makes the partition of steps for [from, to) and returns how many
// rows it took over from the DEFAULT partition (rows written while no partition covered
// their time). The table is created on its own and then attached, which locks steps in
// SHARE UPDATE EXCLUSIVE mode only (CREATE TABLE … PARTITION OF would take ACCESS
// EXCLUSIVE, stopping every outcome statement); the DEFAULT partition is locked for the
// time of the move and the attach's check of it, which is a scan of an empty table in the
// steady state. lockTimeout bounds every lock wait (ErrPartitionBusy past it).
func (db *DB) StepPartitionCreate(ctx context.Context, from, to time.Time, lockTimeout time.Duration) (moved int64, err error) {
	name := pgx.Identifier{StepPartitionName(from)}.Sanitize()
	deflt := pgx.Identifier{stepsDefaultPartition}.Sanitize()
	err = db.partitionTx(ctx, lockTimeout, func(tx pgx.Tx) error {
		// Another process may have made it between our list and our lock: then it is done.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+deflt+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE `+name+` (LIKE steps INCLUDING STORAGE)`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `WITH moved AS (DELETE FROM `+deflt+` WHERE finished_at >= $1 AND finished_at < $2 RETURNING *)
			INSERT INTO `+name+` SELECT * FROM moved`, from, to)
		if err != nil {
			return err
		}
		moved = tag.RowsAffected()
		_, err = tx.Exec(ctx, `ALTER TABLE steps ATTACH PARTITION `+name+
			` FOR VALUES FROM (`+timestampLiteral(from)+`) TO (`+timestampLiteral(to)+`)`)
		return err
	})
	return moved, err
}

// StepPartitionDrop drops the range partition name unless a job it holds steps of still
// exists; it reports whether it dropped it. The check is exact and costs what is left of
// the jobs whose ids span the partition's rows (a jobs_pkey range between the partition's
// least and greatest job_id, each job one probe of the partition's key): once GC has
// deleted the finished jobs of that time, only the jobs still kept are probed. A kept
// job's rows keep their partition, so a job is never without its history; and no row of
// an existing job can arrive in the partition afterwards (new rows carry the now() of
// their statement, past the partition's range, and job ids are never reused).
//
// DROP TABLE of a partition locks steps in ACCESS EXCLUSIVE mode for a catalog change
// (DETACH … CONCURRENTLY, which would not, is refused on a table with a DEFAULT
// partition): lockTimeout bounds how long outcome statements can queue behind it.
func (db *DB) StepPartitionDrop(ctx context.Context, name string, lockTimeout time.Duration) (dropped bool, err error) {
	if name == stepsDefaultPartition {
		return false, fmt.Errorf("%w: the DEFAULT partition of steps is never dropped", ErrInvalid)
	}
	ident := pgx.Identifier{name}.Sanitize()
	err = db.partitionTx(ctx, lockTimeout, func(tx pgx.Tx) error {
		var kept bool
		// The probe of the partition is a scalar subquery so it runs once per job, by key
		// (a semi-join is planned as a hash of the whole partition).
		check := `SELECT EXISTS (
				SELECT 1 FROM jobs j
				WHERE j.id BETWEEN (SELECT min(s.job_id) FROM ` + ident + ` s) AND (SELECT max(s.job_id) FROM ` + ident + ` s)
				  AND (SELECT true FROM ` + ident + ` s WHERE s.job_id = j.id LIMIT 1))`
		if db.citus != nil {
			// On Citus the partition and jobs are colocated: a join on the placement runs
			// on every shard at once (a fan-out, each shard its part of the partition).
			check = `SELECT EXISTS (SELECT 1 FROM ` + ident + ` s JOIN jobs j ON j.placement = s.placement AND j.id = s.job_id)`
		}
		if err := tx.QueryRow(ctx, check).Scan(&kept); err != nil {
			return err
		}
		if kept {
			return nil
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+ident); err != nil {
			return err
		}
		dropped = true
		return nil
	})
	return dropped, err
}

// partitionTx runs fn in a transaction holding the partition lock, with lock_timeout set;
// a lock not had is ErrPartitionBusy.
func (db *DB) partitionTx(ctx context.Context, lockTimeout time.Duration, fn func(pgx.Tx) error) error {
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, int64(partitionLockKey)).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			return ErrPartitionBusy
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`,
			fmt.Sprintf("%dms", max(lockTimeout.Milliseconds(), 1))); err != nil {
			return err
		}
		return fn(tx)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return fmt.Errorf("%w: %s", ErrPartitionBusy, pgErr.Message)
	}
	return err
}

// timestampLiteral writes t as a timestamptz literal (UTC, microseconds) for a partition
// bound, which DDL takes as a constant, not a parameter.
func timestampLiteral(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'::timestamptz"
}
