package pg

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/gendurable/gendurable/migrations"
)

// migrationLockKey is the advisory lock that serialises migrations across processes.
const migrationLockKey = 0x67656e647572 // "gendur"

// Migration is one numbered file of migrations/.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, f := range files {
		num, _, ok := strings.Cut(f, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("pg: migration file %q is not NNNN_name.sql", f)
		}
		b, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(f, ".sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// CitusMigrations lists the embedded Citus steps (migrations/citus), by the version of
// the plain migration each one follows.
func CitusMigrations() (map[int]Migration, error) {
	files, err := fs.Glob(migrations.FS, "citus/*.sql")
	if err != nil {
		return nil, err
	}
	out := map[int]Migration{}
	for _, f := range files {
		base := strings.TrimPrefix(f, "citus/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("pg: citus migration file %q is not NNNN_name.sql", f)
		}
		b, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			return nil, err
		}
		out[v] = Migration{Version: v, Name: "citus/" + strings.TrimSuffix(base, ".sql"), SQL: string(b)}
	}
	return out, nil
}

// Migrate applies the embedded migrations that are not applied yet, each in its own
// transaction, under a session advisory lock so concurrent server start-ups apply each
// migration exactly once (on Options.DirectURL when set: the lock spans statements). It
// returns the versions it applied.
//
// On a Citus coordinator it also applies each Citus step (migrations/citus) right after
// the plain migration it follows, recorded in citus_migrations: a database that was
// migrated on plain PostgreSQL and then moved onto Citus gets them at its next start.
func (db *DB) Migrate(ctx context.Context) ([]int, error) {
	all, err := Migrations()
	if err != nil {
		return nil, err
	}
	var steps map[int]Migration
	if db.citus != nil {
		if steps, err = CitusMigrations(); err != nil {
			return nil, err
		}
	}
	conn, err := db.session.Acquire(ctx)
	if err != nil {
		return nil, translate(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		return nil, translate(err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockKey)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, translate(err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, translate(err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, translate(err)
		}
		applied[v] = true
	}
	rows.Close()
	citusApplied := map[int]bool{}
	if steps != nil {
		if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS citus_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return nil, translate(err)
		}
		rows, err := conn.Query(ctx, `SELECT version FROM citus_migrations`)
		if err != nil {
			return nil, translate(err)
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return nil, translate(err)
			}
			citusApplied[v] = true
		}
		rows.Close()
	}
	apply := func(m Migration, record string) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return translate(err)
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("pg: migration %s: %w", m.Name, translate(err))
		}
		if _, err := tx.Exec(ctx, record, m.Version, m.Name); err != nil {
			_ = tx.Rollback(ctx)
			return translate(err)
		}
		return translate(tx.Commit(ctx))
	}
	var done []int
	for _, m := range all {
		if !applied[m.Version] {
			if err := apply(m, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`); err != nil {
				return done, err
			}
			done = append(done, m.Version)
		}
		if step, ok := steps[m.Version]; ok && !citusApplied[m.Version] {
			if err := apply(step, `INSERT INTO citus_migrations (version, name) VALUES ($1, $2)`); err != nil {
				return done, err
			}
		}
	}
	return done, nil
}

// MigrationsPending reports how many embedded migrations the database lacks (readiness).
func (db *DB) MigrationsPending(ctx context.Context) (int, error) {
	all, err := Migrations()
	if err != nil {
		return 0, err
	}
	var latest int
	err = db.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&latest)
	if err != nil {
		return len(all), translate(err)
	}
	n := 0
	for _, m := range all {
		if m.Version > latest {
			n++
		}
	}
	return n, nil
}
