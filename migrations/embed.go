// Package migrations holds the numbered SQL files that build gendurable's schema.
// They are embedded into the binary and applied in order by pg.Migrate.
package migrations

import "embed"

// FS holds every NNNN_name.sql file of this folder, and in citus/ the steps that
// distribute the schema on a Citus coordinator (citus/NNNN_name.sql runs right after
// migration NNNN, only where the citus extension exists: docs/citus.md).
//
//go:embed *.sql citus/*.sql
var FS embed.FS
