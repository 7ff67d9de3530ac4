// Package migrations holds the numbered SQL files that build gendurable's schema.
// They are embedded into the binary and applied in order by pg.Migrate.
package migrations

import "embed"

// FS holds every NNNN_name.sql file of this folder.
//
//go:embed *.sql
var FS embed.FS
