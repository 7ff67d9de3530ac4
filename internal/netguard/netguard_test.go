package netguard

import (
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
		"198.18.5.5:80", "192.0.2.9:80", "[2001:db8::5]:80", "240.1.1.1:80"} {
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
