package load

import (
	"net/url"
	"strings"
)

// nodes are the base URLs of the nodes a run loads, in Config.Servers
// order; a node is known by its index in it.
type nodes []string

// of returns the index of the node rawURL is on (same scheme and host, the
// node's base path a prefix of its path), or -1 when it is on none of them:
// a fetch URL made from a server.public_url that names a balancer or
// another host.
func (ns nodes) of(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		return -1
	}
	best, bestLen := -1, -1
	for i, n := range ns {
		b, err := url.Parse(n)
		if err != nil || !strings.EqualFold(b.Scheme, u.Scheme) || !strings.EqualFold(b.Host, u.Host) {
			continue
		}
		p := strings.TrimRight(b.Path, "/")
		if (u.Path == p || strings.HasPrefix(u.Path, p+"/")) && len(p) > bestLen {
			best, bestLen = i, len(p)
		}
	}
	return best
}

// name is node i as the report names it; -1 is "another host".
func (ns nodes) name(i int) string {
	if i < 0 || i >= len(ns) {
		return "another host"
	}
	return ns[i]
}

// cursor spreads one worker's requests over n nodes: each next gives the
// node after the last one, starting at the worker's own offset, so that
// workers numbered 0, 1, 2, … begin on different nodes and each worker
// visits every node in turn. It is not safe for concurrent use: each
// worker has its own.
type cursor struct{ at, n int }

func newCursor(offset, n int) *cursor { return &cursor{at: offset % max(n, 1), n: max(n, 1)} }

func (c *cursor) next() int {
	i := c.at
	c.at = (c.at + 1) % c.n
	return i
}
