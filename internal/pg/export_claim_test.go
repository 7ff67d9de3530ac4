package pg

import (
	"context"
	"errors"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// ClaimAnswer is one answer of a claim statement read two ways: by the hand reader the
// claim uses (readClaimed: a scan list cut by position) and by sqlc's generated method
// (its Row struct, scanned by the code sqlc writes from the statement's columns).
type ClaimAnswer struct {
	Hand       []ClaimedJob
	HandOthers int
	Batch      []dbsqlc.JobClaimBatchRow // JobClaimBatch's answer (plain false)
	Plain      []dbsqlc.JobClaimPlainRow // JobClaimPlain's answer (plain true)
}

// ClaimReadTwice runs JobClaimBatch (or JobClaimPlain) once, in a transaction it rolls
// back, keeps the answer's bytes, and hands the same bytes to both readers.
func (db *DB) ClaimReadTwice(ctx context.Context, p JobClaimParams, plain bool) (ClaimAnswer, error) {
	var a ClaimAnswer
	sql := map[bool]string{false: dbsqlc.JobClaimBatch, true: dbsqlc.JobClaimPlain}[plain]
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return a, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	rows, err := tx.Query(ctx, sql, claimArgs(p)...)
	if err != nil {
		return a, err
	}
	kept := &recordedRows{fields: append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...),
		typeMap: tx.Conn().TypeMap()}
	for rows.Next() {
		raw := rows.RawValues() // reused by the next row: copied
		values := make([][]byte, len(raw))
		for i, v := range raw {
			if v != nil { // nil is NULL
				values[i] = append(make([]byte, 0, len(v)), v...)
			}
		}
		kept.rows = append(kept.rows, values)
	}
	if rows.Err() != nil {
		return a, rows.Err()
	}
	columns := claimBatchColumns
	if plain {
		columns = claimPlainColumns
	}
	if a.Hand, a.HandOthers, err = readClaimed(kept.replay(), p, columns); err != nil {
		return a, err
	}
	q := dbsqlc.New(kept)
	if plain {
		a.Plain, err = q.JobClaimPlain(ctx, dbsqlc.JobClaimPlainParams{})
	} else {
		a.Batch, err = q.JobClaimBatch(ctx, dbsqlc.JobClaimBatchParams{})
	}
	return a, err
}

// recordedRows is an answer kept as the server sent it; as a dbsqlc.DBTX it answers
// every query with a replay of it.
type recordedRows struct {
	fields  []pgconn.FieldDescription
	rows    [][][]byte
	typeMap *pgtype.Map
}

func (r *recordedRows) replay() *replayedRows { return &replayedRows{kept: r} }

func (r *recordedRows) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return r.replay(), nil
}

func (r *recordedRows) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.ErrUnsupported
}

func (r *recordedRows) QueryRow(context.Context, string, ...any) pgx.Row { return noRow{} }

type noRow struct{}

func (noRow) Scan(...any) error { return errors.ErrUnsupported }

// replayedRows is a pgx.Rows over a recorded answer: each row decoded by pgx.ScanRow,
// with the field descriptions (types and formats) the server sent.
type replayedRows struct {
	kept *recordedRows
	next int
}

func (r *replayedRows) Close()                                       {}
func (r *replayedRows) Err() error                                   { return nil }
func (r *replayedRows) CommandTag() pgconn.CommandTag                { return pgconn.NewCommandTag("SELECT") }
func (r *replayedRows) FieldDescriptions() []pgconn.FieldDescription { return r.kept.fields }
func (r *replayedRows) Conn() *pgx.Conn                              { return nil }
func (r *replayedRows) RawValues() [][]byte                          { return r.kept.rows[r.next-1] }
func (r *replayedRows) Values() ([]any, error)                       { return nil, errors.ErrUnsupported }
func (r *replayedRows) TypeMap() *pgtype.Map                         { return r.kept.typeMap }

func (r *replayedRows) Next() bool {
	if r.next >= len(r.kept.rows) {
		return false
	}
	r.next++
	return true
}

func (r *replayedRows) Scan(dest ...any) error {
	return pgx.ScanRow(r.kept.typeMap, r.kept.fields, r.kept.rows[r.next-1], dest...)
}
