package pg

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A history row that met the DEFAULT partition's constraint while the partition for its
// time was being attached is a transient conflict (the outcome statement is retried, the
// step does not wait for its lease to expire); any other check violation refuses the input.
func TestPartitionRaceIsRetryable(t *testing.T) {
	t.Parallel()
	race := &pgconn.PgError{Code: "23514", TableName: "steps_default",
		Message: `new row for relation "steps_default" violates partition constraint`}
	if err := translate(race); !errors.Is(err, ErrRetryable) {
		t.Fatalf("the partition race: %v", err)
	}
	check := &pgconn.PgError{Code: "23514", TableName: "jobs", ConstraintName: "jobs_max_attempts_check"}
	if err := translate(check); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a check violation: %v", err)
	}
}

// A live key taken is a conflict that names the key (the spawn it refuses reports it).
func TestHeldKeyConflictNamesTheKey(t *testing.T) {
	t.Parallel()
	taken := &pgconn.PgError{Code: "23505", ConstraintName: "jobs_live_key", Detail: "Key (key)=(user (7)) already exists."}
	if err := translate(taken); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"user (7)"`) {
		t.Fatalf("a live key taken: %v", err)
	}
	bare := &pgconn.PgError{Code: "23505", ConstraintName: "jobs_live_key"}
	if err := translate(bare); !errors.Is(err, ErrConflict) {
		t.Fatalf("a live key taken, no detail: %v", err)
	}
}
