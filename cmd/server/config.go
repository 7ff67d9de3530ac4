package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg"
)

// config is everything the server reads from its environment and flags (flags win).
type config struct {
	DatabaseURL          string
	DirectDatabaseURL    string
	DBPooler             pg.Pooler
	DevPostgres          string
	Addr                 string
	APIToken             string
	AllowPrivateWebhooks bool
	WebhookAllowCIDRs    []netip.Prefix
	LeaseTTL             time.Duration
	Migrate              bool
	Dispatch             bool
	Queues               []string
	ShutdownGrace        time.Duration
	Retention            time.Duration
	HistoryPartition     time.Duration
	IdempotencyWindow    time.Duration
	OutcomeBatch         int
	PprofAddr            string
	OutcomeLinger        time.Duration
	OutcomeWorkers       int
	OutcomeBusyLinger    time.Duration
	MaxBodyBytes         int64
	RequestTimeout       time.Duration
	StepBodyCap          int
	DBMaxConns           int
	CitusShardTimeout    time.Duration
	CitusRoute           pg.CitusRoute
	LogLevel             slog.Level
	Tracing              tracingConfig
	// TraceURL is the dashboard's link to a trace: a URL with {trace_id} in it
	// (GENDURABLE_TRACE_URL; empty: the trace id is shown unlinked).
	TraceURL string
}

// usageHeader opens the usage that -h and --help print, before the flags.
const usageHeader = `gendurable: durable jobs on PostgreSQL (the REST API, the dashboard and the dispatcher).

Usage:
  gendurable [flags]              run the server
  gendurable healthcheck [flags]  exit 0 when the server on GENDURABLE_ADDR is ready (a container's
                                  health check; gendurable healthcheck -h lists its flags)

The server reads its configuration from the environment: docs/configuration.md lists every
variable. These flags set the main ones and win over the environment:

`

// helpRequested is loadConfig's answer to -h or --help: not a failure, the usage to print.
type helpRequested struct{ usage string }

func (helpRequested) Error() string { return "help requested" }

func (helpRequested) Unwrap() error { return flag.ErrHelp }

// loadConfig reads the environment (getenv) and then the flags in args.
func loadConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	var errs []error
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	boolean := func(name string, def bool) bool {
		v := getenv(name)
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a boolean", name, v))
		}
		return b
	}
	// A value refused here counts as unset (0), so that the services' checks at the end
	// do not report it a second time.
	duration := func(name, def string) time.Duration {
		v := env(name, def)
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q is not a positive duration such as 30s", name, v))
			return 0
		}
		return d
	}
	integer := func(name string, def int) int {
		v := env(name, strconv.Itoa(def))
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q is not a positive integer", name, v))
			return 0
		}
		return n
	}
	fs := flag.NewFlagSet("gendurable", flag.ContinueOnError)
	// The flag package writes its usage (and the error of a bad flag) here; loadConfig
	// hands the usage to the caller for -h and --help, and the error alone otherwise.
	var usage strings.Builder
	fs.SetOutput(&usage)
	fs.Usage = func() {
		usage.WriteString(usageHeader)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.DatabaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL URL (env DATABASE_URL)")
	fs.StringVar(&c.DirectDatabaseURL, "direct-database-url", getenv("GENDURABLE_DIRECT_DATABASE_URL"),
		"PostgreSQL URL past any transaction-mode pooler, for LISTEN and migrations (default: the database URL; env GENDURABLE_DIRECT_DATABASE_URL)")
	pooler := env("GENDURABLE_DB_POOLER", "none")
	fs.StringVar(&pooler, "db-pooler", pooler,
		"what the database URL reaches: none (PostgreSQL) or transaction (PgBouncer pool_mode=transaction; env GENDURABLE_DB_POOLER)")
	fs.StringVar(&c.DevPostgres, "dev-postgres", getenv("GENDURABLE_DEV_POSTGRES"),
		"when no database URL is given, start a private PostgreSQL cluster in this directory (make run uses ./.data)")
	fs.StringVar(&c.Addr, "addr", env("GENDURABLE_ADDR", ":8080"), "listen address (env GENDURABLE_ADDR)")
	c.APIToken = getenv("GENDURABLE_API_TOKEN")
	fs.BoolVar(&c.AllowPrivateWebhooks, "allow-private-webhooks", boolean("GENDURABLE_ALLOW_PRIVATE_WEBHOOKS", false),
		"allow handler URLs on loopback and private networks (env GENDURABLE_ALLOW_PRIVATE_WEBHOOKS)")
	c.LeaseTTL = duration("GENDURABLE_LEASE_TTL", "30s")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "step lease TTL; heartbeats every third (env GENDURABLE_LEASE_TTL)")
	fs.BoolVar(&c.Migrate, "migrate", boolean("GENDURABLE_MIGRATE", true), "apply migrations at start-up (env GENDURABLE_MIGRATE)")
	fs.BoolVar(&c.Dispatch, "dispatch", boolean("GENDURABLE_DISPATCH", true),
		"run steps in this process; false serves the API only (env GENDURABLE_DISPATCH)")
	c.ShutdownGrace = duration("GENDURABLE_SHUTDOWN_GRACE", "15s")
	c.Retention = duration("GENDURABLE_RETENTION", "168h")
	c.HistoryPartition = duration("GENDURABLE_HISTORY_PARTITION", "24h")
	c.OutcomeBatch = integer("GENDURABLE_OUTCOME_BATCH", 256)
	c.IdempotencyWindow = duration("GENDURABLE_IDEMPOTENCY_WINDOW", "24h")
	fs.DurationVar(&c.IdempotencyWindow, "idempotency-window", c.IdempotencyWindow, "how long an Idempotency-Key answers the job it made (env GENDURABLE_IDEMPOTENCY_WINDOW)")
	c.PprofAddr = getenv("GENDURABLE_PPROF_ADDR")
	if v := getenv("GENDURABLE_OUTCOME_LINGER"); v != "" {
		c.OutcomeLinger = duration("GENDURABLE_OUTCOME_LINGER", v)
	}
	c.OutcomeWorkers = integer("GENDURABLE_OUTCOME_WORKERS", 2)
	if v := env("GENDURABLE_OUTCOME_BUSY_LINGER", "1ms"); v == "0" {
		c.OutcomeBusyLinger = -1 // off
	} else {
		c.OutcomeBusyLinger = duration("GENDURABLE_OUTCOME_BUSY_LINGER", v)
	}
	c.MaxBodyBytes = int64(integer("GENDURABLE_MAX_BODY_BYTES", 1<<20))
	c.RequestTimeout = duration("GENDURABLE_REQUEST_TIMEOUT", httpapi.DefaultRequestTimeout.String())
	c.DBMaxConns = integer("GENDURABLE_DB_MAX_CONNS", 20)
	c.CitusShardTimeout = duration("GENDURABLE_CITUS_SHARD_TIMEOUT", pg.DefaultShardTimeout.String())
	c.StepBodyCap = integer("GENDURABLE_STEP_BODY_CAP", 8<<10)
	citusRoute := env("GENDURABLE_CITUS_ROUTE", "auto")
	queues := env("GENDURABLE_QUEUES", "")
	cidrs := env("GENDURABLE_WEBHOOK_ALLOW_CIDRS", "")
	level := env("GENDURABLE_LOG_LEVEL", "info")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, helpRequested{usage: usage.String()}
		}
		return c, fmt.Errorf("%w (gendurable --help lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: the server takes flags only, and one subcommand, healthcheck (gendurable --help)", fs.Arg(0))
	}
	for _, q := range strings.Split(queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			c.Queues = append(c.Queues, q)
		}
	}
	for _, s := range strings.Split(cidrs, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("GENDURABLE_WEBHOOK_ALLOW_CIDRS: %q is not a CIDR prefix", s))
			continue
		}
		c.WebhookAllowCIDRs = append(c.WebhookAllowCIDRs, p)
	}
	var terr error
	if c.Tracing, terr = loadTracingConfig(getenv); terr != nil {
		errs = append(errs, terr)
	}
	c.TraceURL = getenv("GENDURABLE_TRACE_URL")
	if c.TraceURL != "" && !strings.Contains(c.TraceURL, "{trace_id}") {
		errs = append(errs, fmt.Errorf("GENDURABLE_TRACE_URL=%q holds no {trace_id}, where the trace id goes", c.TraceURL))
	}
	if err := c.LogLevel.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("GENDURABLE_LOG_LEVEL=%q is not debug, info, warn or error", level))
	}
	var err error
	if c.DBPooler, err = pg.ParsePooler(pooler); err != nil {
		errs = append(errs, fmt.Errorf("GENDURABLE_DB_POOLER=%q is not none or transaction", pooler))
	}
	if c.CitusRoute, err = pg.ParseCitusRoute(citusRoute); err != nil {
		errs = append(errs, fmt.Errorf("GENDURABLE_CITUS_ROUTE=%q is not auto, workers or coordinator", citusRoute))
	}
	if c.DBPooler == pg.PoolerTransaction && c.DirectDatabaseURL == "" && (c.Migrate || c.Dispatch) {
		errs = append(errs, errors.New("GENDURABLE_DB_POOLER=transaction needs GENDURABLE_DIRECT_DATABASE_URL, "+
			"a URL past the pooler: the dispatcher's LISTEN and the migrations' lock hold session state "+
			"(or set GENDURABLE_DISPATCH=false and GENDURABLE_MIGRATE=false for an API-only process)"))
	}
	if c.DatabaseURL == "" && c.DevPostgres == "" {
		errs = append(errs, errors.New("set DATABASE_URL to your PostgreSQL (or run `make run`, which starts a private cluster)"))
	}
	// What the services refuse, named with its variable, before anything connects.
	errs = append(errs, c.engineConfig().Validate(), c.apiConfig().Validate(), c.dispatchConfig().Validate(),
		c.gcConfig().Validate(), c.historyConfig().Validate())
	return c, errors.Join(errs...)
}

// The configurations of the services, from the server's (serve adds what is not read from
// the environment: the SSRF guard, the metrics and the dashboard). loadConfig validates
// them, so that a setting a service refuses is reported with its variable at start-up.

func (c config) engineConfig() engine.Config {
	return engine.Config{LeaseTTL: c.LeaseTTL, IdempotencyWindow: c.IdempotencyWindow, StepBodyCap: c.StepBodyCap}
}

func (c config) apiConfig() httpapi.Config {
	return httpapi.Config{MaxBodyBytes: c.MaxBodyBytes, APIToken: c.APIToken, RequestTimeout: c.RequestTimeout}
}

func (c config) dispatchConfig() dispatch.Config {
	return dispatch.Config{ShutdownGrace: c.ShutdownGrace, Queues: c.Queues, OutcomeBatch: c.OutcomeBatch,
		OutcomeLinger: c.OutcomeLinger, OutcomeWorkers: c.OutcomeWorkers, OutcomeBusyLinger: c.OutcomeBusyLinger}
}

func (c config) gcConfig() engine.GCConfig { return engine.GCConfig{Retention: c.Retention} }

func (c config) historyConfig() engine.HistoryConfig {
	return engine.HistoryConfig{Partition: c.HistoryPartition, Retention: c.Retention}
}
