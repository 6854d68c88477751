package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// newTransport returns an HTTP/1.1 transport (as hf_xet uses) that keeps up
// to idle connections to the server open. A non-nil local address makes
// every connection come from it.
func newTransport(idle int, local net.IP) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if local != nil {
		d.LocalAddr = &net.TCPAddr{IP: local}
	}
	return &http.Transport{
		DialContext:           d.DialContext,
		MaxIdleConns:          idle,
		MaxIdleConnsPerHost:   idle,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: 5 * time.Second,
		ForceAttemptHTTP2:     false,
		DisableCompression:    true,
	}
}

// who tags a request for the recorder; requests with no class (setup) are
// not recorded.
type who struct {
	class  string
	route  string
	tenant int32
	node   int // index in Config.Servers; -1: none of them
}

// answer is what a request got back.
type answer struct {
	status int // 0 when err != nil
	header http.Header
	body   []byte
	code   string // the refusal's error code ("rate_limited/credential"), "" on success
	err    error
	dur    time.Duration
}

// client sends requests and records each one.
type client struct {
	hc      *http.Client
	rec     *recorder
	timeout time.Duration
}

// do sends one request and reads the whole answer (at most 256MiB).
// headers are name, value pairs.
func (c *client) do(parent context.Context, w who, method, url, token string, body []byte, headers ...string) answer {
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{err: err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	start := time.Now()
	// The server answers with the wait before it read the request
	// (Server-Timing's queue), measured from this.
	req.Header.Set(headerRequestStart, "t="+strconv.FormatInt(start.UnixMicro(), 10))
	a := answer{}
	res, err := c.hc.Do(req)
	if err == nil {
		a.status, a.header = res.StatusCode, res.Header
		a.body, err = readBody(res)
		res.Body.Close()
		if err != nil {
			a.status = 0
		}
	}
	a.err = err
	a.dur = time.Since(start)
	if a.status >= 400 {
		a.code = refusalCode(a.status, a.body)
	}
	n := int64(len(body)) + int64(len(a.body))
	if a.status >= 300 {
		n = 0
	}
	if w.class == "" || (a.err != nil && parent.Err() != nil) {
		// Setup requests are not load; a request the run itself cut off
		// has no answer to count.
		return a
	}
	c.rec.request(reqRecord{start: c.rec.since(start), dur: a.dur, bytes: n, tenant: w.tenant, node: int16(w.node), status: int16(a.status), class: w.class, route: w.route, code: a.code,
		timing: a.header.Get("Server-Timing")})
	return a
}

// readBody reads a whole answer, at most 256MiB: into a slice of its
// Content-Length when it has one, so that a large fetch is not copied again
// and again as the slice grows.
func readBody(res *http.Response) ([]byte, error) {
	const most = 256 << 20
	if n := res.ContentLength; n > 0 && n <= most {
		b := make([]byte, n)
		if _, err := io.ReadFull(res.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(io.LimitReader(res.Body, most))
}

// refusalCode reads the error code of a refusal body (docs/design.md §7), with the
// limit that refused it for rate_limited; a body that is not a refusal
// gives "http_<status>".
func refusalCode(status int, body []byte) string {
	var e struct {
		Error string `json:"error"`
		Limit string `json:"limit"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		return "http_" + strconv.Itoa(status)
	}
	if e.Limit != "" {
		return e.Error + "/" + e.Limit
	}
	return e.Error
}

// describe is a short account of an answer for failure messages.
func (a answer) describe() string {
	if a.err != nil {
		return a.err.Error()
	}
	b := a.body
	if len(b) > 300 {
		b = b[:300]
	}
	return fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(b))
}

// retryAfter is the answer's Retry-After, at least one second.
func (a answer) retryAfter() time.Duration {
	if a.header != nil {
		if n, err := strconv.Atoi(a.header.Get("Retry-After")); err == nil && n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return time.Second
}

// isRefusal reports whether a status is one of the refusals an honest
// tenant must never see: 403 (quota, scope), 429 (rate limits) and 503
// (memory busy, quota pending).
func isRefusal(status int) bool {
	return status == http.StatusForbidden || status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// sleepCtx waits d or until ctx is done, and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// serverTotal is the Server-Timing metric with the server's whole time for
// a request, from its arrival to its answer's header.
const serverTotal = "total"

// serverQueue is the Server-Timing metric with a request's wait before the
// server read it, from the time its X-Request-Start header gives
// (headerRequestStart).
const serverQueue = "queue"

// headerRequestStart says when the load sent a request.
const headerRequestStart = "X-Request-Start"

// parseServerTiming reads a Server-Timing header value ("total;dur=3.2,
// index;dur=1.1"): each metric's dur, in milliseconds. Metrics without a
// dur, or with one that is not a number, are left out; ok is false when no
// metric is left.
func parseServerTiming(v string) (durs map[string]time.Duration, ok bool) {
	for metric := range strings.SplitSeq(v, ",") {
		name, params, _ := strings.Cut(metric, ";")
		name = strings.TrimSpace(name)
		for param := range strings.SplitSeq(params, ";") {
			k, val, _ := strings.Cut(strings.TrimSpace(param), "=")
			if !strings.EqualFold(k, "dur") {
				continue
			}
			f, err := strconv.ParseFloat(strings.Trim(val, `"`), 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || name == "" {
				break
			}
			if durs == nil {
				durs = map[string]time.Duration{}
			}
			durs[name] = time.Duration(f * float64(time.Millisecond))
			break
		}
	}
	return durs, len(durs) > 0
}
