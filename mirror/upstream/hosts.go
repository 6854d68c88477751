package upstream

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
)

// Which hosts the mirror reaches (docs/mirror.md, "Hosts"). The upstream
// names hosts of its own choosing: redirects of its resolve route, the
// casUrl of its xet tokens, the fetch URLs of its reconstructions. The
// Hub's are on other hosts than huggingface.co, so any public address is
// taken; an address that is not public (loopback, private, link-local,
// unspecified or multicast) is reached only when the upstream itself is
// on one of the same kind, or when the operator names the host in
// Options.AllowedHosts. Otherwise an upstream that lies could make the
// mirror's host send requests to itself or its private network (SSRF).
// The check runs on the URL before each request and redirect, and again
// on the address a connection is made to (so that a name that resolves
// to another address by the time of the dial changes nothing).

// addrKind is the kind of an IP address, as the host policy sees it.
type addrKind int

const (
	kindPublic addrKind = iota
	kindLoopback
	kindPrivate // RFC 1918, RFC 4193 unique local, RFC 6598 shared (CGNAT)
	kindLinkLocal
	kindSpecial // unspecified, multicast, broadcast, IPv4-mapped of those
)

func (k addrKind) String() string {
	return [...]string{"public", "loopback", "private", "link-local", "special-purpose"}[k]
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// kindOf classifies a.
func kindOf(a netip.Addr) addrKind {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return kindLoopback
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return kindLinkLocal
	case a.IsPrivate() || cgnat.Contains(a):
		return kindPrivate
	case a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return kindSpecial
	}
	return kindPublic
}

// hostPolicy decides which hosts a Client reaches.
type hostPolicy struct {
	base    string          // the upstream's host name, lower case, no port
	allowed map[string]bool // Options.AllowedHosts, lower case, no port
	lookup  func(ctx context.Context, host string) ([]netip.Addr, error)

	mu    sync.Mutex
	kinds map[addrKind]bool // the kinds of the upstream's own addresses, once known
}

func newHostPolicy(base *url.URL, allowed []string) *hostPolicy {
	p := &hostPolicy{base: strings.ToLower(base.Hostname()), allowed: map[string]bool{}}
	for _, h := range allowed {
		p.allowed[strings.ToLower(strings.TrimSpace(h))] = true
	}
	p.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	return p
}

// addrsOf is host's addresses: itself when it is an IP literal.
func (p *hostPolicy) addrsOf(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a}, nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return []netip.Addr{netip.IPv6Loopback()}, nil // RFC 6761: never asks DNS
	}
	return p.lookup(ctx, host)
}

// upstreamKinds is the kinds of the upstream's own addresses; nil while
// its name does not resolve (its own requests fail then anyway).
func (p *hostPolicy) upstreamKinds(ctx context.Context) map[addrKind]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kinds != nil {
		return p.kinds
	}
	addrs, err := p.addrsOf(ctx, p.base)
	if err != nil || len(addrs) == 0 {
		return nil
	}
	p.kinds = map[addrKind]bool{}
	for _, a := range addrs {
		p.kinds[kindOf(a)] = true
	}
	return p.kinds
}

// trusted reports whether host is reached without a look at its
// addresses: the upstream's own, or one the operator allowed.
func (p *hostPolicy) trusted(host string) bool {
	host = strings.ToLower(strings.Trim(host, "[]"))
	return host == strings.Trim(p.base, "[]") || p.allowed[host]
}

// permit returns nil when a may be reached, else why not.
func (p *hostPolicy) permit(ctx context.Context, host string, a netip.Addr) error {
	k := kindOf(a)
	if k == kindPublic || p.upstreamKinds(ctx)[k] {
		return nil
	}
	return fmt.Errorf("host %s is at the %s address %s, which the mirror reaches only when the upstream is on such an address too or mirror.allowed_hosts names the host", host, k, a.Unmap())
}

// checkURL returns nil when u's host may be reached. A name that does
// not resolve passes here: the request then fails as unreachable.
func (p *hostPolicy) checkURL(ctx context.Context, u *url.URL) error {
	host := u.Hostname()
	if p.trusted(host) {
		return nil
	}
	addrs, err := p.addrsOf(ctx, host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := p.permit(ctx, host, a); err != nil {
			return err
		}
	}
	return nil
}

// dial connects to addr ("host:port") as d would, to an address the
// policy permits: for a host it does not trust, the name is resolved
// here and the connection made to the first address permitted, so the
// check and the dial see the same address.
func (p *hostPolicy) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || strings.EqualFold(strings.Trim(host, "[]"), strings.Trim(p.base, "[]")) {
		return d.DialContext(ctx, network, addr)
	}
	addrs, err := p.addrsOf(ctx, host)
	if err != nil {
		return nil, err
	}
	trusted := p.trusted(host)
	var refused error
	for _, a := range addrs {
		if !trusted {
			if err := p.permit(ctx, host, a); err != nil {
				refused = err
				continue
			}
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		refused = err
	}
	if refused == nil {
		refused = fmt.Errorf("host %s has no address", host)
	}
	return nil, refused
}
