package server

import (
	"errors"
	"net/http"
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/http/httpguts"

	"openxet/limits"
)

// pauseRefused is the outermost middleware. After a request refused by a
// request-rate limit (429 rate_limited for the credential, the tenant or
// the failed authentications of an address), it flushes the answer and
// waits RefusalPause (at most the answer's Retry-After) before it returns,
// so net/http reads nothing more from that connection until then.
//
// The refusal itself is answered at once, with its exact Retry-After: a
// client that waits that long before it retries never meets the pause. A
// client that ignores Retry-After and sends again at once on the same
// connection gets one request read per pause instead of thousands of
// refusals a second, each of which costs this node about as much CPU as an
// answered request (net/http, the kernel's TCP, the scheduler: commit
// d41abae; BENCHMARKS.md, "Load scenarios"), time the other tenants'
// requests wait behind. While paused, the connection holds what an idle
// keep-alive connection holds.
//
// Not paused: in-flight refusals (a slot frees when any request of the
// credential ends, not on a clock), connections that close after the
// answer, HTTP/2, where a handler's wait holds back no other request, and
// requests that came through a proxy (from a trusted proxy, or carrying
// forwarding headers): a proxy's keep-alive connection carries other
// clients' requests too, and pausing it would make them wait for one
// client's refusal. A client that adds such a header to escape the pause
// only gets what every client got before pauses existed.
func (s *Server) pauseRefused(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		d := s.refusalPause(c)
		if d <= 0 {
			return err
		}
		if http.NewResponseController(c.Response().Writer).Flush() != nil {
			return err
		}
		s.paused.Add(1)
		defer s.paused.Add(-1)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.Request().Context().Done(): // the client went away
		case <-s.shuttingDown:
		}
		return err
	}
}

// refusalPause is how long pauseRefused waits after this request's
// answer: 0 unless a request-rate limit refused the request on an HTTP/1
// connection that stays open. The pause is RefusalPause, at most the
// answer's Retry-After, and at most the time the limit's bucket takes to
// refill from empty (its RateLimit-Policy window): no allowance can go to
// waste while the connection waits, so a client that then sends on it
// still gets the whole of its rate.
func (s *Server) refusalPause(c echo.Context) time.Duration {
	if s.cfg.RefusalPause <= 0 {
		return 0
	}
	ae, ok := c.Get(refusalKey).(*apiError)
	if !ok || ae.Status != http.StatusTooManyRequests || ae.RetryAfter <= 0 {
		return 0
	}
	var rl *limits.RateError
	if !errors.As(ae.Cause, &rl) || inFlightLimit(rl.Limit) {
		return 0
	}
	req := c.Request()
	if req.ProtoMajor != 1 || req.Close || httpguts.HeaderValuesContainsToken(c.Response().Header().Values("Connection"), "close") || s.proxied(req) {
		return 0
	}
	_, window := rl.Decision.Limit.Policy()
	return min(s.cfg.RefusalPause, time.Duration(ae.RetryAfter)*time.Second, window)
}

// proxied reports whether req came through a proxy: from an address in
// server.trusted_proxies, or with a header a proxy adds.
func (s *Server) proxied(req *http.Request) bool {
	for _, h := range []string{"X-Forwarded-For", "Forwarded", "X-Real-Ip"} {
		if req.Header.Get(h) != "" {
			return true
		}
	}
	if len(s.cfg.TrustedProxies) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
