package netguard

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// The dial-time check refuses every non-public address, including the IPv6 forms that
// carry a blocked IPv4 address, and lets public ones through.
func TestControlRefusesNonPublicAddresses(t *testing.T) {
	t.Parallel()
	g := &Guard{}
	for _, addr := range []string{"127.0.0.1:80", "127.8.9.10:443", "[::1]:80", "[::ffff:127.0.0.1]:80",
		"[::ffff:10.0.0.1]:80", "[64:ff9b::7f00:1]:80", "[64:ff9b::a9fe:a9fe]:80", "[2002:7f00:1::1]:80",
		"169.254.169.254:80", "[fe80::1%eth0]:80", "10.2.3.4:80", "172.31.0.1:80", "192.168.0.10:80",
		"100.64.1.1:80", "0.0.0.0:80", "[::]:80", "224.0.0.251:5353", "255.255.255.255:80", "[fd12::1]:80",
		"198.18.5.5:80", "192.0.2.9:80", "[2001:db8::5]:80", "240.1.1.1:80",
		"[::127.0.0.1]:80", "[::7f00:1]:80", "[::169.254.169.254]:80", "[::8.8.8.8]:80",
		"[::ffff:0:127.0.0.1]:80", "[::ffff:0:7f00:1]:80", "[::ffff:0:a00:1]:80"} {
		if err := g.Control("tcp", addr, nil); err == nil {
			t.Errorf("dialling %s was allowed", addr)
		}
	}
	for _, addr := range []string{"93.184.215.14:443", "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443", "8.8.8.8:53",
		"[64:ff9b::808:808]:80"} {
		if err := g.Control("tcp", addr, nil); err != nil {
			t.Errorf("dialling public %s was refused: %v", addr, err)
		}
	}
	open := &Guard{AllowPrivate: true}
	if err := open.Control("tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("AllowPrivate still refused loopback: %v", err)
	}
	allow := &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}
	if allow.Control("tcp", "10.9.1.1:80", nil) != nil || allow.Control("tcp", "10.8.1.1:80", nil) == nil {
		t.Error("the allowlist is not applied exactly")
	}
}

// Registration refuses IPv4-compatible and SIIT forms of loopback, and local names
// written with a trailing dot, without asking DNS.
func TestCheckURLRefusesEmbeddedLoopbackAndLocalFQDNs(t *testing.T) {
	t.Parallel()
	asked := []string{}
	g := &Guard{Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		asked = append(asked, host)
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	}}
	for _, raw := range []string{"http://[::127.0.0.1]/", "http://[::ffff:0:127.0.0.1]/", "http://[::7f00:1]:8080/x",
		"http://[::ffff:0:a9fe:a9fe]/latest", "http://localhost./", "http://LOCALHOST../", "http://api.localhost./",
		"http://metadata.google.internal./", "http://printer.local./", "http://127.1./", "http://0x7f.1./"} {
		if err := g.CheckURL(context.Background(), raw); err == nil {
			t.Errorf("%s was accepted", raw)
		} else if !errors.Is(err, ErrBlocked) {
			t.Errorf("%s: refused for the wrong reason: %v", raw, err)
		}
	}
	if len(asked) > 0 {
		t.Errorf("local names reached DNS: %v", asked)
	}
	if err := g.CheckURL(context.Background(), "https://hooks.example.com./steps"); err != nil {
		t.Errorf("a public FQDN with a trailing dot was refused: %v", err)
	}
}
