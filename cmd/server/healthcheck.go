package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// healthcheck is the `gendurable healthcheck` subcommand: it asks the server's /readyz
// and exits 0 when it answers 200 (the database answers and no migration is pending),
// 1 otherwise, saying why. It is the container's health check: the distroless image has
// no shell, curl or wget, so the binary checks itself. Every failure, a bad flag included,
// exits 1, the one status Docker reads as unhealthy (it reserves 2).
func healthcheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gendurable healthcheck", flag.ContinueOnError)
	var usage strings.Builder // to stdout for -h, to stderr with a bad flag's error
	fs.SetOutput(&usage)
	url := fs.String("url", "", "the URL to ask (default: /readyz on GENDURABLE_ADDR, :8080 unless set, "+
		"through 127.0.0.1 when it names no host)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	fs.Usage = func() {
		usage.WriteString("Usage: gendurable healthcheck [flags]\n\n" +
			"Exits 0 when the server answers /readyz with 200, 1 otherwise (with the reason).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = io.WriteString(stdout, usage.String())
			return 0
		}
		_, _ = io.WriteString(stderr, usage.String())
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q (gendurable healthcheck -h lists the flags)\n", fs.Arg(0))
		return 1
	}
	target := *url
	if target == "" {
		addr := getenv("GENDURABLE_ADDR")
		if addr == "" {
			addr = ":8080"
		}
		var err error
		if target, err = readyURL(addr); err != nil {
			fmt.Fprintf(stderr, "unhealthy: GENDURABLE_ADDR=%q: %v\n", addr, err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "unhealthy: %v\n", err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "unhealthy: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "unhealthy: %s answered %s: %s\n", target, resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintf(stdout, "healthy: %s\n", strings.TrimSpace(string(body)))
	return 0
}

// readyURL is the /readyz URL of a server listening on addr (GENDURABLE_ADDR's syntax): a
// listener on every interface (":8080", "0.0.0.0:8080", "[::]:8080") is asked through
// the loopback address of its family.
func readyURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}
