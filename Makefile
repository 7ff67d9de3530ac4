# gendurable — `make help` lists the targets.

SHELL := /bin/bash
GO    ?= go
BIN   := bin

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
# Built, then exec'd (not go run, which exits 1 when interrupted): Ctrl-C ends make quietly.
run: ## Run the server on :8080 (a private PostgreSQL under ./.data unless DATABASE_URL is set)
	@$(GO) build -o $(BIN)/gendurable ./cmd/server
	@GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=$${GENDURABLE_ALLOW_PRIVATE_WEBHOOKS:-true} \
	GENDURABLE_DEV_POSTGRES=$${GENDURABLE_DEV_POSTGRES:-./.data} \
	exec $(BIN)/gendurable

.PHONY: test
test: ## Run every test with the race detector (starts a throwaway PostgreSQL unless TEST_DATABASE_URL is set), then the Citus suite
	$(GO) test -race -count=1 -timeout 20m ./...
	@$(MAKE) --no-print-directory test-citus

# The tests that run on a Citus cluster (a coordinator and two workers the test binaries
# start: docs/citus.md): the Citus-only tests, every test of the engine, of the REST API
# and of the dispatcher with real webhooks (those that cannot run on Citus skip
# themselves, saying why), the README quickstart, the core flow through PgBouncer and the SDKs' flows against the
# server binary, and every dashboard test in headless Chromium; then the faults and growth of a cluster (a worker down, the coordinator
# restarted, a worker added and the shards rebalanced), each on a cluster of its own, one
# at a time. Skipped with a message where Citus is not installed
# (../shared/citus/install.sh on the development machines; .ci/run installs it).
CITUS_SDK_TESTS      := TestQuickstart|TestApprovalFlow|TestAsynchronousStep|TestTypeScriptSDK|TestPythonSDK
CITUS_FAULT_TESTS    := TestCitusWorkerDownDuringADrain|TestCitusWorkerHungDuringADrain|TestCitusCoordinatorRestartDuringADrain|TestCitusWorkerAddedAndShardsRebalancedDuringADrain
CITUS_SERVER_TESTS   := TestQuickstartAgainstTheBinaries|TestCoreFlowThroughPgBouncer|TestAScheduleFiresOncePerTickAcrossThreeServers|TestDebounceThroughTheServer|TestBreakerProbesOncePerIntervalAcrossThreeServers|TestFairShareAcrossThreeServers

.PHONY: test-citus
test-citus: ## Run the Citus suite (TEST_CITUS=1: a coordinator and two workers per test binary)
	@if ! compgen -G "/usr/lib/postgresql/*/lib/citus.so" >/dev/null; then \
		if [ -n "$$CI" ] && [ -z "$$GENDURABLE_CITUS_OPTIONAL" ]; then echo "test-citus: Citus is not installed"; exit 1; fi; \
		echo "test-citus: skipped, Citus is not installed (docs/citus.md)"; exit 0; fi; \
	set -e; \
	TEST_CITUS=1 $(GO) test -count=1 -timeout 15m -run 'TestCitus|TestBreaker|TestInsertParksTheJobsOfAnOpenBreaker|TestSQLEnqueue|TestOutcomeWrittenAgainChangesNothing|TestFairClaimHoldsCapsAndShares|TestFairClaimTakesTheJobsOfBefore|TestASpreadFairnessKey' ./internal/pg/; \
	TEST_CITUS=1 $(GO) test -count=1 -timeout 20m -parallel 4 ./internal/engine/; \
	TEST_CITUS=1 $(GO) test -count=1 -timeout 15m ./internal/httpapi/; \
	TEST_CITUS=1 $(GO) test -count=1 -timeout 20m -parallel 3 -skip '$(CITUS_FAULT_TESTS)' ./internal/dispatch/; \
	TEST_CITUS=1 $(GO) test -count=1 -timeout 10m -parallel 1 -run '$(CITUS_FAULT_TESTS)' ./internal/dispatch/; \
	TEST_CITUS=1 $(GO) test -count=1 -timeout 15m -parallel 2 -run '$(CITUS_SERVER_TESTS)' ./cmd/server/; \
	TEST_CITUS=1 $(GO) test -count=1 -timeout 15m -run '$(CITUS_SDK_TESTS)' ./sdk/go/gendurable/ ./sdk/typescript/ ./sdk/python/; \
	TEST_CITUS=1 $(GO) test -count=1 -timeout 20m ./web/

# The examples in the runtimes their READMEs name, with the READMEs' commands
# (examples/examples_test.go): a copy of what a clone holds, npm install there (wrangler
# with workerd, Next.js: a few hundred MB from npm), wrangler dev, next build and start;
# gunicorn and uvicorn (Debian's) run in `make test` too.
.PHONY: test-examples
test-examples: ## Run each example in its runtime with its README's commands (wrangler dev, next start, gunicorn, uvicorn; installs from npm)
	GENDURABLE_EXAMPLE_RUNTIMES=1 $(GO) test -count=1 -timeout 25m ./examples/

# The dashboard screenshots in docs/ (docs/dashboard-*.png, which README.md and docs/ show):
# the browser tests that draw them (headless Debian Chromium, real server and PostgreSQL)
# save each one there as well as under test-artifacts/.
.PHONY: screenshots
screenshots: ## Refresh the dashboard screenshots in docs/ (browser tests with GENDURABLE_DOCS_SCREENSHOTS=1)
	GENDURABLE_DOCS_SCREENSHOTS=1 $(GO) test -count=1 -timeout 10m -run 'TestDashboard' ./web/

.PHONY: test-short
test-short: ## Run the tests without the race detector
	$(GO) test -count=1 ./...

.PHONY: build
build: ## Build the server and the example webhook into bin/
	$(GO) build -o $(BIN)/gendurable ./cmd/server
	$(GO) build -o $(BIN)/example-webhook ./examples/webhook

SQLC ?= $(GO) run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1

.PHONY: generate
generate: ## Regenerate the API server and the Go client from openapi.yaml, and internal/pg/dbsqlc and dbcitus from internal/pg/sql (sqlc, pinned)
	$(GO) generate ./internal/httpapi/...
	$(GO) generate ./sdk/go/gendurable/...
	cd internal/pg && $(SQLC) generate

.PHONY: check-generated
check-generated: generate ## Fail when generated code is stale
	@git diff --exit-code -- internal/httpapi/api.gen.go sdk/go/gendurable/client.gen.go || \
		(echo "generated code from openapi.yaml is stale: run 'make generate' and commit it" && exit 1)
	@git diff --exit-code -- internal/pg/dbsqlc internal/pg/dbcitus && \
		test -z "$$(git status --porcelain -- internal/pg/dbsqlc internal/pg/dbcitus)" || \
		(echo "internal/pg/dbsqlc or internal/pg/dbcitus is stale: run 'make generate' and commit it" && exit 1)

.PHONY: lint
lint: check-seam ## gofmt, go vet, the seam check and golangci-lint (installed on first use)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@command -v golangci-lint >/dev/null || $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.6.2
	PATH=$$PATH:$$($(GO) env GOPATH)/bin golangci-lint run ./...

# SEAM_PACKAGES may not import internal/pg or pgx outside their tests: the engine is the one
# way into state. The test TestSeamImports in internal/httpapi checks the same.
SEAM_PACKAGES := ./internal/httpapi/ ./internal/dispatch/

.PHONY: check-seam
check-seam: ## Fail when a package above the engine imports internal/pg or pgx
	@bad=$$($(GO) list -f '{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}' $(SEAM_PACKAGES) | \
		grep -E ' (github.com/gendurable/gendurable/internal/pg(/[^ ]*)?|github.com/jackc/pgx[^ ]*)( |$$)'); \
	if [ -n "$$bad" ]; then echo "these import internal/pg or pgx (reach state through internal/engine):"; echo "$$bad"; exit 1; fi

# Budgets in executions, not seconds: with a -fuzztime in seconds Go 1.26's fuzz coordinator
# can report "context deadline exceeded" and fail when the time is up while a worker is
# still answering (golang/go#75804, fixed in Go 1.27; CI failed so on FuzzSignalRequest
# with no failing input). A count has no deadline to race. The API targets run ~1 000
# inputs a second here, the pure ones 5 to 15 times more.
FUZZ_API_EXECS ?= 10000x
FUZZ_EXECS     ?= 200000x
FUZZFLAGS      ?= -parallel 2

.PHONY: fuzz-short
fuzz-short: ## Run each Go fuzz target for a fixed number of inputs (FUZZ_API_EXECS, FUZZ_EXECS; the API targets start their own PostgreSQL)
	$(GO) test -run '^$$' -fuzz '^FuzzInsertJobRequest$$' -fuzztime $(FUZZ_API_EXECS) $(FUZZFLAGS) ./internal/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzSignalRequest$$' -fuzztime $(FUZZ_API_EXECS) $(FUZZFLAGS) ./internal/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeResponse$$' -fuzztime $(FUZZ_EXECS) $(FUZZFLAGS) ./webhook/
	$(GO) test -run '^$$' -fuzz '^FuzzStepBodyString$$' -fuzztime $(FUZZ_EXECS) $(FUZZFLAGS) ./internal/dispatch/
	$(GO) test -run '^$$' -fuzz '^FuzzBodyAcceptor$$' -fuzztime $(FUZZ_API_EXECS) $(FUZZFLAGS) ./internal/httpapi/

REDOCLY_CLI ?= @redocly/cli@2.77.0

.PHONY: lint-openapi
lint-openapi: ## Lint openapi.yaml with redocly (pinned; needs Node.js and the npm registry)
	npx --yes $(REDOCLY_CLI) lint openapi.yaml

.PHONY: clean
clean: ## Remove build output (not the ./.data cluster)
	rm -rf $(BIN)

# make bench adds -citus where Citus is installed: after the plain pairs, the drains on a
# Citus coordinator and two workers the bench starts, beside plain PostgreSQL (docs/citus.md,
# "Measured"; about 3 of the run's ~7 minutes). BENCH_FLAGS=-citus=false leaves it out.
BENCH_CITUS ?= $(if $(wildcard /usr/lib/postgresql/*/lib/citus.so),-citus)

.PHONY: bench
bench: ## End-to-end bench: server binary + PostgreSQL + webhook receiver process, River side by side, then Citus where installed (BENCH_FLAGS=-peer=false skips River, -citus=false Citus; docs/performance.md)
	$(GO) run ./cmd/bench $(BENCH_CITUS) $(BENCH_FLAGS)

.PHONY: chaos
chaos: ## Chaos drain (≤ 10 min): 3 servers, kill -9, immediate PostgreSQL restarts, … (see docs/reliability.md)
	$(GO) run ./cmd/chaos -mode full $(CHAOS_FLAGS)

.PHONY: chaos-short
chaos-short: ## The short chaos drain CI runs (≤ 3 min)
	$(GO) run ./cmd/chaos -mode short $(CHAOS_FLAGS)

.PHONY: bench-go
bench-go: ## The in-process drain benchmark (go test -bench)
	$(GO) test -run '^$$' -bench . -benchtime 3x ./internal/dispatch/

.PHONY: web
web: ## Rebuild the dashboard into web/dist (needs Node.js; the result is committed)
	cd web && npm ci --no-audit --no-fund && npm run build

.PHONY: check-web
check-web: web ## Fail when the committed dashboard build is stale
	@git diff --exit-code -- web/dist web/src/api-types.ts || \
		(echo "web/dist is stale: run 'make web' and commit it" && exit 1)
	@test -z "$$(git status --porcelain -- web/dist)" || (echo "web/dist has uncommitted files: run 'make web' and commit" && exit 1)
