// Package netguard keeps webhook calls away from the service's own network: it refuses
// handler URLs whose host is, or resolves to, a loopback, private, link-local, metadata
// or otherwise non-public address, and (the real boundary) vets the address every
// webhook connection actually dials, so DNS that changes after registration cannot
// point a handler at an internal service.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"syscall"
)

// ErrBlocked marks a refused URL or address.
var ErrBlocked = errors.New("address not allowed for webhooks")

// Guard decides which webhook addresses may be dialled.
type Guard struct {
	// AllowPrivate turns the address checks off (local development, tests).
	AllowPrivate bool
	// Allow lists prefixes that are allowed even though they are not public
	// (an internal network the operator trusts).
	Allow []netip.Prefix
	// Lookup resolves a host at registration (default net.DefaultResolver.LookupNetIP).
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

type blockedRange struct {
	prefix netip.Prefix
	what   string
}

var blockedRanges = func() []blockedRange {
	var out []blockedRange
	for _, r := range []struct{ cidr, what string }{
		{"0.0.0.0/8", "unspecified/this-network"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "carrier-grade NAT"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local (cloud metadata)"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.0.2.0/24", "documentation"},
		{"192.88.99.0/24", "6to4 relay"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"198.51.100.0/24", "documentation"},
		{"203.0.113.0/24", "documentation"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		// IPv4-compatible (::a.b.c.d, deprecated by RFC 4291) and SIIT IPv4-translated
		// (::ffff:0:a.b.c.d, RFC 2765) addresses: some stacks route them to the IPv4
		// address they carry, so ::127.0.0.1 would reach loopback.
		{"::/96", "IPv4-compatible (deprecated)"},
		{"::ffff:0:0:0/96", "IPv4-translated (SIIT)"},
		{"100::/64", "discard-only"},
		{"2001::/32", "Teredo"},
		{"2001:2::/48", "benchmarking"},
		{"2001:db8::/32", "documentation"},
		{"2001:10::/28", "ORCHID"},
		{"fc00::/7", "unique local (private)"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local"},
		{"ff00::/8", "multicast"},
	} {
		out = append(out, blockedRange{netip.MustParsePrefix(r.cidr), r.what})
	}
	return out
}()

var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	nat64v2 = netip.MustParsePrefix("64:ff9b:1::/48")
	sixTo4  = netip.MustParsePrefix("2002::/16")
)

// Check returns nil when ip may be dialled, or an error saying why not.
func (g *Guard) Check(ip netip.Addr) error {
	if g.AllowPrivate {
		return nil
	}
	ip = ip.WithZone("")
	for _, p := range g.Allow {
		if p.Contains(ip) {
			return nil
		}
	}
	if why := classify(ip); why != "" {
		return fmt.Errorf("%w: %s is %s", ErrBlocked, ip, why)
	}
	return nil
}

// classify names the non-public range ip falls in ("" for a public address), looking
// through IPv4-mapped, NAT64 and 6to4 forms at the IPv4 address they carry.
func classify(ip netip.Addr) string {
	if ip.Is4In6() {
		return classify(ip.Unmap())
	}
	if ip.Is6() && (nat64.Contains(ip) || nat64v2.Contains(ip)) {
		b := ip.As16()
		if why := classify(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); why != "" {
			return why + " (through NAT64)"
		}
		return ""
	}
	if ip.Is6() && sixTo4.Contains(ip) {
		b := ip.As16()
		if why := classify(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})); why != "" {
			return why + " (through 6to4)"
		}
		return ""
	}
	if ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return "broadcast"
	}
	for _, r := range blockedRanges {
		if r.prefix.Contains(ip) {
			return r.what
		}
	}
	if !ip.IsGlobalUnicast() {
		return "not a global unicast address"
	}
	return ""
}

// numericHost matches hosts that some resolvers read as IPv4 in decimal, octal or hex
// ("2130706433", "0177.1", "0x7f.0.0.1"): ambiguous, so refused outright.
var numericHost = regexp.MustCompile(`^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*\.?$`)

// CheckURL vets a handler URL at registration: http or https, a host, no credentials,
// and (unless private addresses are allowed) a host that is and resolves only to public
// addresses.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("the scheme must be http or https, not %q", u.Scheme)
	}
	if u.User != nil {
		return fmt.Errorf("credentials in the URL (user:password@) are not allowed")
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("the URL has no host")
	}
	if u.Fragment != "" {
		return fmt.Errorf("the URL must not have a fragment")
	}
	if g.AllowPrivate {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return g.Check(ip)
	}
	// A fully qualified name may end in dots ("localhost."): it names the same host.
	lower := strings.TrimRight(strings.ToLower(host), ".")
	if lower == "" {
		return fmt.Errorf("the URL has no host")
	}
	if numericHost.MatchString(lower) {
		return fmt.Errorf("%w: %q is a numeric host that resolvers read as an IP address", ErrBlocked, host)
	}
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") || strings.HasSuffix(lower, ".local") ||
		strings.HasSuffix(lower, ".internal") {
		return fmt.Errorf("%w: %q names a local host", ErrBlocked, host)
	}
	lookup := g.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	addrs, err := lookup(ctx, host)
	if err != nil {
		return fmt.Errorf("cannot resolve %q: %v", host, err)
	}
	for _, a := range addrs {
		if err := g.Check(a); err != nil {
			return fmt.Errorf("%q resolves to a blocked address: %w", host, err)
		}
	}
	return nil
}

// Control is a net.Dialer Control function: it refuses to connect to a blocked address.
// This is the boundary that holds even when DNS answers differently at dial time.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	if g.AllowPrivate && len(g.Allow) == 0 {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialled address %q", ErrBlocked, address)
	}
	return g.Check(ap.Addr())
}
