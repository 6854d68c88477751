package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"openxet/mirror"
	"openxet/xet"
)

// Defaults of Options.
const (
	// DefaultMaxConns caps concurrent requests to the upstream.
	DefaultMaxConns = 8
	// DefaultRetries is how many times a request is tried again after a
	// connection error, a timeout, a 5xx or a 429.
	DefaultRetries = 3
	// DefaultBackoff is the wait before the first retry; it doubles for
	// each further one, up to MaxBackoff.
	DefaultBackoff = 500 * time.Millisecond
	// MaxBackoff caps one wait between tries, Retry-After included: an
	// upstream that asks for longer is treated as unreachable now.
	MaxBackoff = 30 * time.Second
	// DefaultStallTimeout is how long a request may wait for its answer's
	// headers, or a Read for the answer's next bytes, before it fails as
	// unreachable.
	DefaultStallTimeout = 60 * time.Second
	// DefaultMaxJSONBytes caps one JSON answer (a revision, a tree page, a
	// reconstruction window, a token).
	DefaultMaxJSONBytes = 64 << 20
	// DefaultMaxFiles caps the files of one revision.
	DefaultMaxFiles = 1_000_000
	// DefaultUserAgent is sent when Options.UserAgent is "".
	DefaultUserAgent = "openxet-mirror"
)

// Options configure a Client. Only BaseURL is required.
type Options struct {
	// BaseURL is the upstream Hub, e.g. "https://huggingface.co" (a path
	// prefix is kept; a trailing slash is not needed).
	BaseURL string
	// Token, when set, is sent as "Authorization: Bearer" to BaseURL's
	// host only: never to the CAS, a fetch URL or a redirect target on
	// another host.
	Token string
	// HTTPClient sends every request. Its CheckRedirect is replaced (on a
	// copy) by the Client's own, which keeps Token to the upstream's host.
	// Nil: a client of its own with dial, TLS and header timeouts and no
	// overall timeout (streams are long; StallTimeout bounds silence).
	HTTPClient *http.Client
	// AllowedHosts are host names (no port) the mirror may reach even on a
	// loopback, private or link-local address (hosts.go): an upstream's CAS
	// or file host inside the operator's network. The upstream's own host
	// needs no entry; public addresses need none.
	AllowedHosts []string
	// UserAgent is sent on every request (DefaultUserAgent when "").
	UserAgent string
	// MaxConns caps the HTTP requests in flight to the upstream, to all
	// its hosts together (Hub, CAS, CDN). A request holds its slot until
	// its answer has been read, or for a stream of Open, until the stream
	// moves to its next request or is closed. 0 means DefaultMaxConns.
	MaxConns int
	// Retries is how many times a failed request is tried again (0 means
	// DefaultRetries; negative means never).
	Retries int
	// Backoff is the wait before the first retry (0 means DefaultBackoff).
	Backoff time.Duration
	// StallTimeout bounds the wait for an answer's headers and, in each
	// Read, for its next bytes; time the caller spends between Reads does
	// not count (0 means DefaultStallTimeout).
	StallTimeout time.Duration
	// MaxJSONBytes caps one JSON answer (0 means DefaultMaxJSONBytes).
	MaxJSONBytes int64
	// MaxFiles caps the files of a revision (0 means DefaultMaxFiles).
	MaxFiles int
	// ReconstructionWindow is the span of file bytes asked for in one
	// reconstruction request (0 means DefaultReconstructionWindow).
	ReconstructionWindow int64
	// SpoolDir holds the spools of relays (Plan), as unlinked temporary
	// files ("" means os.TempDir()).
	SpoolDir string
	// RelayTTL is how long a relay lasts after its last plan (0 means
	// DefaultRelayTTL).
	RelayTTL time.Duration
	// Now is the clock CAS token expiry is checked against (time.Now when
	// nil).
	Now func() time.Time
	// Wait waits d or until ctx is done, between retries (a timer when
	// nil). Tests record the waits instead of taking them.
	Wait func(ctx context.Context, d time.Duration) error
}

// Client implements mirror.Upstream and mirror.Relayer over HTTP. It is
// safe for concurrent use; it keeps no state but a small cache of CAS
// tokens (one per repo and commit, at most maxTokens), the connection
// slots of MaxConns and the spools of the relays under way (relay.go).
type Client struct {
	base      *url.URL
	baseStr   string // base without a trailing slash
	token     string
	hc        *http.Client // the hub client: follows redirects, keeps Token to base's host
	nofollow  *http.Client // CAS and fetch URLs: follows nothing
	ua        string
	slots     chan struct{}
	retries   int
	backoff   time.Duration
	stall     time.Duration
	maxJSON   int64
	maxFiles  int
	window    int64
	now       func() time.Time
	wait      func(context.Context, time.Duration) error
	tokensMu  sync.Mutex
	tokens    map[tokenKey]casToken
	maxTokens int
	spoolDir  string
	relayTTL  time.Duration
	spoolsMu  sync.Mutex
	spools    map[xet.Hash]*spool
	hosts     *hostPolicy
}

var (
	_ mirror.Upstream = (*Client)(nil)
	_ mirror.Relayer  = (*Client)(nil)
)

// New checks opts and returns a Client; it does no I/O.
func New(opts Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(opts.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream base URL %q: want http(s)://host[/prefix]", opts.BaseURL)
	}
	if opts.MaxConns < 0 {
		return nil, fmt.Errorf("upstream max connections %d: want 0 (default) or more", opts.MaxConns)
	}
	c := &Client{
		base:      u,
		baseStr:   u.String(),
		token:     opts.Token,
		ua:        cmpOr(opts.UserAgent, DefaultUserAgent),
		slots:     make(chan struct{}, cmpOr(opts.MaxConns, DefaultMaxConns)),
		retries:   cmpOr(opts.Retries, DefaultRetries),
		backoff:   cmpOr(opts.Backoff, DefaultBackoff),
		stall:     cmpOr(opts.StallTimeout, DefaultStallTimeout),
		maxJSON:   cmpOr(opts.MaxJSONBytes, DefaultMaxJSONBytes),
		maxFiles:  cmpOr(opts.MaxFiles, DefaultMaxFiles),
		window:    cmpOr(opts.ReconstructionWindow, DefaultReconstructionWindow),
		now:       opts.Now,
		wait:      opts.Wait,
		tokens:    map[tokenKey]casToken{},
		maxTokens: maxTokens,
		spoolDir:  opts.SpoolDir,
		relayTTL:  cmpOr(opts.RelayTTL, DefaultRelayTTL),
		spools:    map[xet.Hash]*spool{},
		hosts:     newHostPolicy(u, opts.AllowedHosts),
	}
	if c.retries < 0 {
		c.retries = 0
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.wait == nil {
		c.wait = timerWait
	}
	base := opts.HTTPClient
	if base == nil {
		base = &http.Client{Transport: c.newTransport(cap(c.slots))}
	}
	hc := *base
	hc.CheckRedirect = c.checkRedirect
	c.hc = &hc
	nf := *base
	nf.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.nofollow = &nf
	return c, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// newTransport is the transport of a Client built without HTTPClient: it
// connects only to addresses the host policy permits.
func (c *Client) newTransport(conns int) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return c.hosts.dial(ctx, d, network, addr)
		},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          4 * conns,
		MaxIdleConnsPerHost:   conns,
		ForceAttemptHTTP2:     true,
	}
}

func timerWait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkRedirect follows at most 10 redirects, never from https to http
// nor to a host the host policy refuses, and drops the Authorization
// header on a hop to a host that is not the upstream's (net/http would
// keep it for a subdomain).
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return redirectError("more than 10 redirects")
	}
	if req.URL.Scheme != "https" && (req.URL.Scheme != "http" || via[0].URL.Scheme == "https") {
		return redirectError("redirect from " + via[0].URL.Scheme + " to a " + req.URL.Scheme + " URL refused")
	}
	if err := c.hosts.checkURL(req.Context(), req.URL); err != nil {
		return redirectError("redirect refused: " + err.Error())
	}
	if !c.ownHost(req.URL) {
		req.Header.Del("Authorization")
	}
	return nil
}

// ownHost reports whether u is on the upstream's own scheme and host.
func (c *Client) ownHost(u *url.URL) bool {
	return strings.EqualFold(u.Host, c.base.Host) && u.Scheme == c.base.Scheme
}

// Error is a failure of one request to the upstream. It matches (errors.Is)
// its Kind, one of mirror.ErrNotFound, mirror.ErrUnreachable and
// mirror.ErrBadAnswer, and the cause it wraps, if any.
type Error struct {
	Kind error
	// Op names the request: "revision", "tree", "xet-read-token",
	// "reconstruction", "fetch" or "resolve".
	Op string
	// URL is the request's URL without its query (fetch URLs are signed).
	URL string
	// Status is the HTTP status, 0 when no answer arrived.
	Status int
	// Code is the answer's X-Error-Code ("RepoNotFound", "GatedRepo", …).
	Code string
	// Message says what went wrong: the answer's X-Error-Message, or what
	// about the answer did not check out.
	Message string
	// Err is the cause (a connection error, a parse error), or nil.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(" ")
	b.WriteString(e.URL)
	b.WriteString(": ")
	b.WriteString(e.Kind.Error())
	if e.Status != 0 {
		b.WriteString(": HTTP ")
		b.WriteString(strconv.Itoa(e.Status))
	}
	if e.Code != "" {
		b.WriteString(" ")
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func strip(u *url.URL) string {
	v := *u
	v.RawQuery, v.Fragment, v.User = "", "", nil
	return v.String()
}

func badAnswer(op string, u *url.URL, status int, format string, args ...any) *Error {
	return &Error{Kind: mirror.ErrBadAnswer, Op: op, URL: strip(u), Status: status, Message: fmt.Sprintf(format, args...)}
}

// acquire takes a connection slot, or fails when ctx is done first.
func (c *Client) acquire(ctx context.Context) error {
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) release() { <-c.slots }

// request is one GET the client sends.
type request struct {
	op      string
	url     *url.URL
	header  http.Header // besides User-Agent and Authorization
	bearer  string      // Authorization: Bearer value ("" for none)
	follow  bool        // follow redirects (the hub client); else none are
	accept  func(status int) bool
	onRetry func() // before each retry (refresh a token)
}

// answer is a response whose body holds a connection slot until Close.
type answer struct {
	*http.Response
	body *stallBody
}

// Close closes the body and gives back the slot.
func (a *answer) Close() error { return a.body.Close() }

// get sends r, trying again after connection errors, timeouts, 5xx and
// 429 (honouring Retry-After), and returns the answer whose status accept
// takes, holding a connection slot until it is closed. Any other status
// is turned into an *Error: 404, 401 and 403 mean mirror.ErrNotFound,
// other statuses mirror.ErrBadAnswer, and failures left after the retries
// mirror.ErrUnreachable. A ctx that is done ends the tries with ctx's
// error.
func (c *Client) get(ctx context.Context, r request) (*answer, error) {
	var last *Error
	for try := 0; ; try++ {
		if try > 0 {
			d := min(c.backoff<<(try-1), MaxBackoff)
			if last.Status == http.StatusTooManyRequests || last.Status == http.StatusServiceUnavailable {
				if ra, ok := retryAfter(last.Err, c.now()); ok {
					if ra > MaxBackoff {
						last.Message = fmt.Sprintf("the upstream asks to retry after %s", ra)
						return nil, last
					}
					d = ra
				}
			}
			if err := c.wait(ctx, d); err != nil {
				return nil, err
			}
			if r.onRetry != nil {
				r.onRetry()
			}
		}
		a, err := c.try(ctx, r)
		if err == nil {
			return a, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var e *Error
		if !errors.As(err, &e) || e.Kind != mirror.ErrUnreachable || try >= c.retries {
			if e != nil && e.Kind == mirror.ErrUnreachable {
				e.Err = stripRetry(e.Err)
			}
			return nil, err
		}
		last = e
	}
}

// retryAfterErr carries a Retry-After header from try to get.
type retryAfterErr struct{ header string }

func (e retryAfterErr) Error() string { return "Retry-After: " + e.header }

func stripRetry(err error) error {
	if _, ok := err.(retryAfterErr); ok {
		return nil
	}
	return err
}

// retryAfter reads a Retry-After header value (seconds or an HTTP date).
func retryAfter(err error, now time.Time) (time.Duration, bool) {
	ra, ok := err.(retryAfterErr)
	if !ok {
		return 0, false
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(ra.header), 10, 64); err == nil && n >= 0 {
		if n > int64(MaxBackoff/time.Second) {
			return MaxBackoff + time.Second, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(ra.header); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// try sends r once.
func (c *Client) try(ctx context.Context, r request) (*answer, error) {
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	body := &stallBody{cancel: cancel, release: c.release, d: c.stall}
	body.timer = time.AfterFunc(c.stall, body.stalled)
	fail := func(err error) (*answer, error) {
		body.Close()
		return nil, err
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, r.url.String(), nil)
	if err != nil {
		return fail(badAnswer(r.op, r.url, 0, "%v", err))
	}
	if err := c.hosts.checkURL(ctx, r.url); err != nil {
		return fail(badAnswer(r.op, r.url, 0, "%v", err))
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", c.ua)
	if r.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	hc := c.nofollow
	if r.follow {
		hc = c.hc
	}
	res, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		var re redirectError
		if errors.As(err, &re) {
			return fail(&Error{Kind: mirror.ErrBadAnswer, Op: r.op, URL: strip(r.url), Message: string(re)})
		}
		return fail(&Error{Kind: mirror.ErrUnreachable, Op: r.op, URL: strip(r.url), Err: stallCause(body, err)})
	}
	body.rc = res.Body
	// From here the clock runs only while a Read waits for the upstream:
	// a caller that is slow to read is not the upstream stalling.
	body.timer.Stop()
	a := &answer{Response: res, body: body}
	res.Body = body
	if r.accept(res.StatusCode) {
		return a, nil
	}
	msg := res.Header.Get("X-Error-Message")
	e := &Error{Op: r.op, URL: strip(res.Request.URL), Status: res.StatusCode, Code: res.Header.Get("X-Error-Code"), Message: msg}
	if msg == "" {
		e.Message = errorBody(res.Body)
	}
	a.Close()
	switch s := res.StatusCode; {
	case s == http.StatusNotFound || s == http.StatusUnauthorized || s == http.StatusForbidden:
		e.Kind = mirror.ErrNotFound
	case s == http.StatusTooManyRequests || s >= 500:
		e.Kind = mirror.ErrUnreachable
		if h := res.Header.Get("Retry-After"); h != "" {
			e.Err = retryAfterErr{h}
		}
	default:
		e.Kind = mirror.ErrBadAnswer
		if e.Message == "" {
			e.Message = "unexpected status"
		}
	}
	return nil, e
}

// redirectError is a redirect checkRedirect refuses to follow.
type redirectError string

func (e redirectError) Error() string { return string(e) }

// errorBody reads a short sentence from an error answer: the "error" of
// a JSON body, or the start of a text one.
func errorBody(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 1024))
	s := strings.TrimSpace(string(b))
	if i := strings.Index(s, `"error":"`); i >= 0 {
		rest := s[i+len(`"error":"`):]
		if j := strings.IndexByte(rest, '"'); j >= 0 {
			return rest[:j]
		}
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, s)
}

func stallCause(b *stallBody, err error) error {
	if b.didStall() {
		return fmt.Errorf("no answer within %s: %w", b.d, context.DeadlineExceeded)
	}
	return err
}

// stallBody is an answer's body: it cancels the request when the answer's
// headers, or the bytes a Read waits for, do not arrive within the stall
// timeout, and gives back the connection slot once, on Close.
type stallBody struct {
	rc      io.ReadCloser
	cancel  context.CancelFunc
	release func()
	timer   *time.Timer
	d       time.Duration // the stall timeout
	mu      sync.Mutex
	stall   bool
	closed  bool
}

func (b *stallBody) stalled() {
	b.mu.Lock()
	b.stall = true
	b.mu.Unlock()
	b.cancel()
}

func (b *stallBody) didStall() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stall
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.d)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF && b.didStall() {
		err = fmt.Errorf("no byte for %s: %w", b.d, context.DeadlineExceeded)
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.timer.Stop()
	var err error
	if b.rc != nil {
		err = b.rc.Close()
	}
	b.cancel()
	b.release()
	return err
}
