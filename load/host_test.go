package load

import (
	"context"
	"net"
	"testing"
)

// TestSharesHost: a server on loopback or on one of this host's own
// addresses shares the generator's CPUs; one elsewhere does not; an
// address that cannot be read is unknown.
func TestSharesHost(t *testing.T) {
	ctx := context.Background()
	cases := map[string]string{
		"http://127.0.0.1:8080":   sharedYes,
		"http://localhost:8080":   sharedYes,
		"http://[::1]:9000":       sharedYes,
		"http://203.0.113.9:8080": sharedNo, // TEST-NET-3: nobody's interface
		"http://[::1":             sharedUnknown,
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				cases["http://"+n.IP.String()+":8080"] = sharedYes
				break
			}
		}
	}
	for server, want := range cases {
		if got := sharesHost(ctx, server); got != want {
			t.Errorf("sharesHost(%s) = %q, want %q", server, got, want)
		}
	}
}
