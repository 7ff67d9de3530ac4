// Command server runs gendurable: the REST API, the dashboard, and (unless
// GENDURABLE_DISPATCH=false) the dispatcher that runs steps, with the reaper.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/netguard"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/web"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(args[1:], os.Getenv, os.Stdout, os.Stderr)
	}
	cfg, err := loadConfig(args, os.Getenv)
	var help helpRequested
	if errors.As(err, &help) {
		fmt.Print(help.usage)
		return 0
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("server stopped", "err", err)
		return 1
	}
	return 0
}

// serve runs the service until ctx ends, then shuts down gracefully: the dispatcher
// stops claiming and lets running steps finish (up to the grace period; the rest are
// left to lease expiry, never lost), then the HTTP server drains its requests.
func serve(ctx context.Context, cfg config, log *slog.Logger) error {
	dbURL := cfg.DatabaseURL
	var dev *devPostgres
	if dbURL == "" {
		var err error
		if dev, err = startDevPostgres(ctx, cfg.DevPostgres, log); err != nil {
			return err
		}
		defer dev.cluster.Stop()
		dbURL = dev.cluster.URL("gendurable")
	}
	db, err := pg.Open(ctx, dbURL, pg.Options{MaxConns: int32(cfg.DBMaxConns), Pooler: cfg.DBPooler,
		DirectURL: cfg.DirectDatabaseURL, ShardTimeout: cfg.CitusShardTimeout, CitusRoute: cfg.CitusRoute})
	if err != nil {
		return err
	}
	defer db.Close()
	if cfg.DBPooler == pg.PoolerTransaction {
		warnJIT(ctx, db, log)
	}
	if cfg.Migrate {
		applied, err := db.Migrate(ctx)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			log.Info("migrations applied", migrationsApplied(applied)...)
		}
	}
	if err := db.CheckStatements(ctx); err != nil {
		return fmt.Errorf("the database schema does not match this build (run migrations): %w", err)
	}
	if db.Citus() {
		reached, workers, err := db.CitusWorkersReached(ctx)
		if err != nil {
			return err
		}
		log.Info("citus: the tables are distributed; a shard's statements go to its worker directly where reached",
			"workers", workers, "reached", reached, "route", cmp.Or(string(cfg.CitusRoute), "auto"))
	}

	tp, err := newTracerProvider(ctx, cfg.Tracing)
	if err != nil {
		return err
	}
	if tp != nil {
		defer func() {
			flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(flushCtx); err != nil {
				log.Warn("flushing the last spans", "err", err)
			}
		}()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	eng, err := engine.New(db, cfg.engineConfig(), log)
	if err != nil {
		return err
	}
	eng.SetMetrics(engine.NewMetrics(reg, db))
	guard := &netguard.Guard{AllowPrivate: cfg.AllowPrivateWebhooks, Allow: cfg.WebhookAllowCIDRs}
	apiCfg := cfg.apiConfig()
	apiCfg.Guard, apiCfg.Metrics = guard, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	apiCfg.Dashboard = web.HandlerWith(web.Config{TraceURL: cfg.TraceURL})
	if tp != nil {
		apiCfg.TracerProvider = tp
	}
	api, err := httpapi.New(eng, apiCfg, log)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: cfg.Addr, Handler: api, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 60 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	if cfg.PprofAddr != "" {
		// Profiling on its own listener (never on the public address).
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		go func() { _ = http.ListenAndServe(cfg.PprofAddr, mux) }() //nolint:gosec // operator-chosen, loopback in practice
		log.Info("pprof is serving", "addr", cfg.PprofAddr)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("gendurable is serving", "addr", ln.Addr().String(), "dispatch", cfg.Dispatch,
		"allow_private_webhooks", cfg.AllowPrivateWebhooks, "auth", cfg.APIToken != "", "tracing", tp != nil)

	// The charts' counts of what this process writes to the history (also the outcomes
	// reported through the API when dispatch is off).
	rollups := eng.NewStepRollups(engine.StepRollupConfig{})
	rollups.Start(ctx)
	var disp *dispatch.Dispatcher
	var reaper *engine.Reaper
	var reconciler *engine.Reconciler
	var gc *engine.GC
	var history *engine.HistoryPartitions
	var scheduler *engine.Scheduler
	if cfg.Dispatch {
		dispCfg := cfg.dispatchConfig()
		dispCfg.DialControl = guard.Control
		if tp != nil {
			dispCfg.TracerProvider = tp
		}
		disp = dispatch.New(eng, dispCfg, log, dispatch.NewMetrics(reg))
		disp.Start(ctx)
		reaper = eng.NewReaper(engine.ReaperConfig{})
		reaper.Start(ctx)
		reconciler = eng.NewReconciler(engine.ReconcilerConfig{})
		reconciler.Start(ctx)
		gc = eng.NewGC(cfg.gcConfig())
		gc.Start(ctx)
		if history, err = eng.NewHistoryPartitions(cfg.historyConfig()); err != nil {
			return err
		}
		history.Start(ctx)
		schedCfg := engine.SchedulerConfig{}
		if tp != nil {
			schedCfg.TracerProvider = tp
		}
		scheduler = eng.NewScheduler(schedCfg)
		scheduler.Start(ctx)
	}
	if dev != nil {
		fmt.Fprint(os.Stderr, dev.banner(ln.Addr()))
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down", "grace", cfg.ShutdownGrace.String())
	case err := <-serveErr:
		return err
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace+10*time.Second)
	defer cancel()
	if disp != nil {
		disp.Stop(shutdownCtx)
		reaper.Stop()
		reconciler.Stop()
		gc.Stop()
		history.Stop()
		scheduler.Stop()
	}
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("HTTP shutdown", "err", err)
	}
	rollups.Stop() // after the last outcome this process can write
	log.Info("stopped")
	return nil
}

// migrationsApplied is what the start-up log says of the migrations it applied: their
// versions, and the numbers between them that have no migration (4 is one: no migration
// 0004 was ever released), so that a reader does not look for a missing one. Versions are
// never renumbered, because each database records the ones it applied.
func migrationsApplied(applied []int) []any {
	attrs := []any{"versions", applied}
	var unused []int
	for i := 1; i < len(applied); i++ {
		for v := applied[i-1] + 1; v < applied[i]; v++ {
			unused = append(unused, v)
		}
	}
	if len(unused) > 0 {
		attrs = append(attrs, "unused_numbers", unused,
			"why", "no migration was ever released under these numbers; versions are never renumbered")
	}
	return attrs
}

// warnJIT warns when the database's connections compile statements with JIT, which the
// server turns off itself unless a transaction-mode pooler stands between them.
func warnJIT(ctx context.Context, db *pg.DB, log *slog.Logger) {
	rows, err := db.QueryStrings(ctx, "SELECT current_setting('jit'), current_user")
	if err == nil && len(rows) == 1 && rows[0][0] == "on" {
		log.Warn("jit is on for the pooled connections: on large tables the pick then pays ~100 ms compiling; "+
			"turn it off for gendurable's role or database (docs/configuration.md)",
			"fix", "ALTER ROLE "+pg.QuoteIdent(rows[0][1])+" SET jit = off")
	}
}

// devPort is the port of the private cluster of `make run` when it is free.
const devPort = 54329

// devPostgres is the private cluster of `make run` (GENDURABLE_DEV_POSTGRES).
type devPostgres struct {
	dir     string
	cluster *pg.Cluster
}

// startDevPostgres starts (creating on first use) the private cluster of `make run` on
// 127.0.0.1:54329, or on a free port when another server holds that one.
func startDevPostgres(ctx context.Context, dir string, log *slog.Logger) (*devPostgres, error) {
	port := devPort
	if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", devPort)); err != nil {
		port = 0 // StartCluster picks a free one
		log.Info("port 54329 is taken (another make run?): the private PostgreSQL takes a free port")
	} else {
		l.Close()
	}
	log.Info("starting the private PostgreSQL cluster", "dir", dir)
	c, err := pg.StartCluster(ctx, pg.ClusterOptions{Dir: dir, Port: port, ListenTCP: true})
	if err != nil {
		return nil, err
	}
	if abs, _ := filepath.Abs(dir); c.DataDir() != filepath.Join(abs, "data") {
		log.Info("the postgres user cannot reach the folder, so the cluster lives where it can (the folder's data links to it)",
			"dir", dir, "cluster", c.DataDir())
	}
	if err := pg.EnsureDatabase(ctx, c.URL("postgres"), "gendurable"); err != nil {
		c.Stop()
		return nil, err
	}
	log.Info("private PostgreSQL is up", "psql", "psql "+c.TCPURL("gendurable"))
	return &devPostgres{dir: dir, cluster: c}, nil
}

// banner is what `make run` shows once the server serves at addr: where the dashboard
// is and what to try next.
func (d *devPostgres) banner(addr net.Addr) string {
	return fmt.Sprintf(`
gendurable is ready.
  Dashboard:  %s
  Try next:   go run ./examples/webhook & go run ./examples/approval   (in a second terminal),
              then the curl commands of README.md's Quickstart in a third
  PostgreSQL: psql %s   (kept in %s; delete the folder to start afresh)
  Ctrl-C stops the server and its PostgreSQL.

`, baseURL(addr), d.cluster.TCPURL("gendurable"), d.dir)
}

// baseURL is the URL a browser on this machine opens for the listener at addr
// (localhost when it listens on every address).
func baseURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}
