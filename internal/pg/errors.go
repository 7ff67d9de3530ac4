package pg

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors every layer above pg matches with errors.Is. The engine re-exports them.
var (
	// ErrNotFound: the row addressed does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the change collides with the current state (a live key held by
	// another job, a job in a status that does not allow the change).
	ErrConflict = errors.New("conflict")
	// ErrLeaseLost: an outcome or heartbeat carried a lease token that is no longer the
	// job's current one; nothing was changed.
	ErrLeaseLost = errors.New("lease lost")
	// ErrInvalid: the database refused a value (a CHECK or a foreign key).
	ErrInvalid = errors.New("invalid")
	// ErrRetryable: a transient conflict (deadlock, serialization, a unique race between
	// two claims); the same call may succeed if repeated.
	ErrRetryable = errors.New("transient conflict")
)

// translate turns a driver error into a sentinel-wrapped error, keeping the detail.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			constraint := citusShardIndex.ReplaceAllString(pgErr.ConstraintName, "")
			if constraint == "jobs_concurrency_exclusive" || constraint == "rate_buckets_pkey" ||
				constraint == "gate_slots_pkey" || constraint == "jobs_gate_slot" {
				return fmt.Errorf("%w: %w", ErrRetryable, pgErr)
			}
			if key, ok := uniqueValue(pgErr); ok && constraint == "jobs_live_key" {
				return fmt.Errorf("%w: a live job holds the key %q: %w", ErrConflict, key, pgErr)
			}
			return fmt.Errorf("%w: %w", ErrConflict, pgErr)
		case "23503", "23514", "22P02", "22003", "23502", "22P05", "22021":
			// fk, check, bad text representation, out of range, not null, untranslatable
			// character (\u0000 in jsonb), character not in repertoire
			if pgErr.ConstraintName == "gate_slots_check" || pgErr.ConstraintName == "rate_buckets_tokens_check" {
				return fmt.Errorf("%w: %w", ErrRetryable, pgErr)
			}
			// A history row routed to steps_default while the history keeper attached the
			// partition for its time (a server's first minutes on a new database): the
			// same statement again routes it to that partition.
			// On Citus the relation is a shard's (steps_default_102040).
			if pgErr.Code == "23514" && (citusShardIndex.ReplaceAllString(pgErr.TableName, "") == "steps_default" ||
				stepsDefaultViolated.MatchString(pgErr.Message)) {
				return fmt.Errorf("%w: %w", ErrRetryable, pgErr)
			}
			return fmt.Errorf("%w: %w", ErrInvalid, pgErr)
		case "40P01", "40001", "55P03": // deadlock_detected, serialization_failure, lock_not_available
			return fmt.Errorf("%w: %w", ErrRetryable, pgErr)
		}
	}
	return fmt.Errorf("pg: %w", err)
}

// uniqueValue is the value a unique violation found taken, read from its detail
// ("Key (key)=(user-7) already exists."); false when the detail does not show it.
func uniqueValue(e *pgconn.PgError) (string, bool) {
	start, end := strings.Index(e.Detail, ")=("), strings.LastIndex(e.Detail, ")")
	if start < 0 || end < start+3 {
		return "", false
	}
	value := e.Detail[start+3 : end]
	if strings.HasSuffix(e.Detail[:start], ", placement") { // on Citus: the key, then its placement
		if i := strings.LastIndex(value, ", "); i >= 0 {
			value = value[:i]
		}
	}
	return value, true
}

// stepsDefaultViolated is the message of a history row refused by steps_default (or a
// shard of it) when a partition for its time was attached meanwhile.
var stepsDefaultViolated = regexp.MustCompile(`relation "steps_default(_[0-9]{6,})?" violates partition constraint`)

// citusShardIndex is the shard id that Citus appends to an index's name on a worker
// (jobs_live_key_102008): a constraint reported from a shard is named without it.
var citusShardIndex = regexp.MustCompile(`_[0-9]{6,}$`)
