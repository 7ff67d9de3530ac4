// Package gendurable holds what the whole module shares at its root: the OpenAPI
// contract served at /openapi.yaml. The service lives in cmd/server and internal/; the
// handler SDK in webhook/.
package gendurable

import _ "embed"

// OpenAPI is openapi.yaml, the source of truth of the REST API.
//
//go:embed openapi.yaml
var OpenAPI []byte
