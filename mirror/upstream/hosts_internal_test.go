package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"openxet/mirror"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want addrKind
	}{
		{"8.8.8.8", kindPublic}, {"2606:4700::1111", kindPublic}, {"13.35.0.1", kindPublic},
		{"127.0.0.1", kindLoopback}, {"127.9.9.9", kindLoopback}, {"::1", kindLoopback}, {"::ffff:127.0.0.1", kindLoopback},
		{"10.1.2.3", kindPrivate}, {"172.16.0.1", kindPrivate}, {"192.168.1.1", kindPrivate}, {"fd00::1", kindPrivate}, {"100.64.0.1", kindPrivate},
		{"169.254.169.254", kindLinkLocal}, {"fe80::1", kindLinkLocal},
		{"0.0.0.0", kindSpecial}, {"::", kindSpecial}, {"224.0.0.1", kindLinkLocal}, {"239.1.1.1", kindSpecial}, {"255.255.255.255", kindSpecial},
	} {
		if got := kindOf(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// listenOn serves h on ip (a loopback address other than 127.0.0.1 stands
// for a host inside the mirror's network).
func listenOn(t *testing.T, ip string, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestHostPolicy: an upstream on a public address (127.0.0.1 counts as
// one here) that redirects, or names a CAS host, on a loopback, private
// or link-local address is refused before any request reaches that host,
// with ErrBadAnswer; a name that resolves there is refused alike, at the
// URL and at the dial; mirror.allowed_hosts lets the operator's own host
// through; the upstream's own host always passes.
func TestHostPolicy(t *testing.T) {
	var inside int
	internal := listenOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside++
		w.Write([]byte("secret"))
	}))
	hub := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-ip":
			http.Redirect(w, r, internal.URL+"/x", http.StatusFound)
		case "/to-name":
			http.Redirect(w, r, "http://cas.example:"+strconv.Itoa(internal.Listener.Addr().(*net.TCPAddr).Port)+"/x", http.StatusFound)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		default:
			w.Write([]byte("ok"))
		}
	}))
	newC := func(allowed ...string) *Client {
		c, err := New(Options{BaseURL: hub.URL, Retries: -1, AllowedHosts: allowed})
		if err != nil {
			t.Fatal(err)
		}
		c.hosts.kinds = map[addrKind]bool{kindPublic: true} // the upstream is on a public address
		c.hosts.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			if host == "cas.example" {
				return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
			}
			return nil, errors.New("no such host")
		}
		return c
	}
	get := func(c *Client, raw string, follow bool) error {
		u, _ := url.Parse(raw)
		a, err := c.get(context.Background(), request{op: "resolve", url: u, follow: follow, accept: func(s int) bool { return s == 200 }})
		if err == nil {
			a.Close()
		}
		return err
	}
	c := newC()
	port := internal.Listener.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		name, url string
		follow    bool
	}{
		{"a redirect to a loopback address", hub.URL + "/to-ip", true},
		{"a redirect to a name at a loopback address", hub.URL + "/to-name", true},
		{"a redirect to the link-local metadata address", hub.URL + "/to-metadata", true},
		{"a CAS URL on a loopback address", internal.URL + "/v1/reconstructions/x", false},
		{"a CAS URL on a name at a loopback address", "http://cas.example:" + strconv.Itoa(port) + "/v1/reconstructions/x", false},
	} {
		err := get(c, tc.url, tc.follow)
		if !errors.Is(err, mirror.ErrBadAnswer) || !strings.Contains(err.Error(), "mirror.allowed_hosts") {
			t.Errorf("%s: %v, want ErrBadAnswer naming mirror.allowed_hosts", tc.name, err)
		}
	}
	if inside != 0 {
		t.Fatalf("%d requests reached the internal host", inside)
	}
	// The dial checks the address it connects to, whatever the URL check said.
	if _, err := c.hosts.dial(context.Background(), &net.Dialer{}, "tcp", "cas.example:"+strconv.Itoa(port)); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("dial of a name at a loopback address: %v", err)
	}
	if err := get(c, hub.URL+"/plain", false); err != nil {
		t.Fatalf("the upstream's own host: %v", err)
	}
	allowed := newC("127.0.0.2", "CAS.example")
	for _, u := range []string{hub.URL + "/to-ip", hub.URL + "/to-name", internal.URL + "/x"} {
		if err := get(allowed, u, true); err != nil {
			t.Errorf("%s with mirror.allowed_hosts: %v", u, err)
		}
	}
	// An upstream on loopback itself reaches loopback hosts (a test or a
	// local upstream), never link-local ones.
	local, err := New(Options{BaseURL: hub.URL, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := get(local, hub.URL+"/to-ip", true); err != nil {
		t.Errorf("loopback upstream, loopback CAS host: %v", err)
	}
	if err := get(local, hub.URL+"/to-metadata", true); !errors.Is(err, mirror.ErrBadAnswer) {
		t.Errorf("loopback upstream, link-local host: %v, want ErrBadAnswer", err)
	}
}
