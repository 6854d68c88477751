package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// Scenario names a load scenario.
type Scenario string

// The scenarios Run knows.
const (
	// ManyTenants runs honest tenants only, at moderate rates within the
	// default limits, for one phase of Config.Duration.
	ManyTenants Scenario = "many_tenants"
	// Abuse runs the same honest tenants for one phase alone (the baseline)
	// and one phase beside an abusive tenant and a bad-token sprayer, each
	// Config.Duration long.
	Abuse Scenario = "abuse"
	// Public runs the same honest tenants alone (baseline), then beside
	// Config.Public.Readers readers without a token, each from its own
	// loopback address, downloading one public model file over and over
	// (public), then beside the same readers downloading it with one
	// tenant's token (token), each phase Config.Duration long. The server
	// must serve anonymous reads (hub.anonymous_reads).
	Public Scenario = "public"
)

// Scenarios lists the scenarios in the order the help text shows them.
var Scenarios = []Scenario{ManyTenants, Abuse, Public}

// Defaults for Config fields left zero.
const (
	DefaultDuration             = 60 * time.Second
	DefaultTenants              = 200
	DefaultCredentialsPerTenant = 2
	DefaultThinkMin             = 400 * time.Millisecond
	DefaultThinkMax             = time.Second
	DefaultXorbMinBytes         = 64 << 10
	DefaultXorbMaxBytes         = 1 << 20
	DefaultScrapeInterval       = time.Second
	// DefaultRSSOverheadBytes is what the server's resident memory may use
	// beyond its memory budget before a run fails: the Go runtime and its
	// garbage not yet collected (GOGC=100 lets the heap grow to twice what
	// is live), the SQLite page cache, goroutine stacks and per-connection
	// buffers, none of which the budget counts.
	DefaultRSSOverheadBytes = 256 << 20
	DefaultDrainTimeout     = 60 * time.Second
	DefaultRequestTimeout   = 2 * time.Minute

	DefaultFloodRate             = 5000
	DefaultFloodWorkers          = 32
	DefaultReaders               = 320
	DefaultBigXorbBytes          = 32 << 20
	DefaultReadBytesPerSecond    = 64 << 10
	DefaultQuotaHeadroomBytes    = 4 << 20
	DefaultQuotaXorbBytes        = 1 << 20
	DefaultQuotaWorkers          = 2
	DefaultQuotaRate             = 20
	DefaultSprayRate             = 200
	DefaultSprayWorkers          = 1
	DefaultSprayAddr             = "127.0.0.2"
	DefaultAuthFailuresPerMinute = 60
)

// chunkBytes is the size of the chunks the generated xorbs are cut into
// (the stock client's average; the last chunk of a xorb is shorter).
const chunkBytes = 64 << 10

// Config says what to run against which server. Zero fields take the
// Default… values (see WithDefaults).
type Config struct {
	Scenario Scenario
	// Servers are the base URLs of the deployment's nodes, without a
	// trailing slash: one for a single server, several for nodes that share
	// one index and bucket (ParseServers reads the command line's list).
	// Admin calls go to the first; the shared index carries what they do to
	// the others. Honest tenants and the abuser spread their requests over
	// all of them (see the package doc).
	Servers []string
	// MetricsURLs are where each node's Prometheus metrics are scraped with
	// the admin token, one per server in the same order; nil means each
	// server's base URL + "/metrics".
	MetricsURLs []string
	// AdminToken is a credential with the admin scope; the run creates its
	// tenants' credentials with it and revokes them at the end.
	AdminToken string
	// AllowRemote lets a server be an address that is not loopback.
	AllowRemote bool
	// KeepTenants leaves what the run made of its tenants on the server
	// (their limits records) for inspection. By default the run removes it
	// at the end. Its credentials are revoked either way.
	KeepTenants bool
	// ServerCPUs, when set, is the CPU set the server must report it runs
	// on (metric openxet_process_cpus; with several nodes, the union of what
	// they report); Run refuses to start otherwise (ErrLayout). LoadCPUs is where the caller runs the load generator
	// (the cli pins itself there), for the report; nil means unknown.
	ServerCPUs, LoadCPUs CPUSet

	// Duration is the length of each measured phase (Abuse has two).
	Duration             time.Duration
	Tenants              int
	CredentialsPerTenant int
	// Each credential of an honest tenant waits a uniform random time in
	// [ThinkMin, ThinkMax] between the end of one operation and the next.
	ThinkMin, ThinkMax time.Duration
	// Honest xorbs are uniform random sizes in [XorbMinBytes, XorbMaxBytes].
	XorbMinBytes, XorbMaxBytes int64

	ScrapeInterval time.Duration
	// RSSOverheadBytes: the run fails when the server's peak resident memory
	// is over its memory budget plus this; < 0 disables the check.
	RSSOverheadBytes int64
	// DrainTimeout bounds the wait for operations still running when the
	// last phase ends; one still running after it is a failure.
	DrainTimeout   time.Duration
	RequestTimeout time.Duration
	// Seed makes the generated data reproducible; 0 picks one from the clock.
	Seed uint64

	Abuser AbuserConfig
	// Public sizes the public scenario's readers.
	Public PublicConfig

	// AbuserCommand, when set, runs the abuse scenario's attacks in a
	// process of their own: it returns the command of a process that calls
	// ServeAbuser with its stdin and stdout (Run sets both; the caller sets
	// whatever else, e.g. Stderr). The caller makes that process yield the
	// CPU to this one (the lowest CPU priority), so that the abuser's own
	// client does not take the honest clients' CPU. Nil: the attacks run in
	// this process.
	AbuserCommand func(ctx context.Context) *exec.Cmd

	// Progress receives one line per stage; nil discards them.
	Progress io.Writer

	// holdPhase, when set (tests only), keeps a phase open past Duration
	// until it returns true; it is asked again each time the run records
	// something. ab is nil but in the abuse scenario. A test uses it to
	// wait for what it means to assert about (every attack past its limit,
	// every route exercised) however slow the machine is.
	holdPhase func(p phaseSpan, rec *recorder, ab *abuser) bool

	// abuserEnd, when set (tests only), is called once the abuser's
	// attacks have returned, before the abuser counts as stopped, with the
	// channel closed when the honest tenants are told to stop. A test
	// makes it wait for that channel, as an abuser process that needs the
	// honest tenants' CPU to finish would.
	abuserEnd func(honestStop <-chan struct{})
}

// AbuserConfig shapes the abusive tenant of the Abuse scenario. It has one
// credential per attack so that each can be told apart in the report.
type AbuserConfig struct {
	// FloodRate is the requests per second the flooding credential sends
	// (far over its rate limit), from FloodWorkers goroutines.
	FloodRate    float64
	FloodWorkers int
	// Readers concurrent fetch-URL reads of one BigXorbBytes xorb, each
	// consumed at ReadBytesPerSecond so that it stays open.
	Readers            int
	BigXorbBytes       int64
	ReadBytesPerSecond int64
	// The abuser's quota is set to its usage after setup plus
	// QuotaHeadroomBytes; QuotaWorkers then upload new QuotaXorbBytes xorbs
	// at QuotaRate per second in all, with Expect: 100-continue.
	QuotaHeadroomBytes int64
	QuotaXorbBytes     int64
	QuotaWorkers       int
	QuotaRate          float64
	// SprayWorkers send SprayRate requests per second in all with made-up
	// tokens and forged fetch URLs, from the local address SprayAddr (the
	// server keys auth failures by peer IP, so it must differ from the
	// honest tenants' address; "none" turns the sprayer off). The server
	// checks an IP's allowance before it verifies a token and spends it
	// after a failure, so concurrent sprayers can each pass one check
	// when the allowance refills; one sprayer (the default) makes the
	// auth-failure envelope exact.
	SprayRate    float64
	SprayWorkers int
	SprayAddr    string
	// AuthFailuresPerMinute is the server's auth_failures_per_minute, used
	// to check that the sprayer was held to it.
	AuthFailuresPerMinute int
	// CredentialRequestsPerSecond, when > 0, is set with CredentialBurst
	// (at least 1) as the abuser tenant's credential limit override, beside
	// its quota; 0 leaves the server's limit. A limit far below what the
	// flood sends makes even a short run on a slow machine pass it.
	CredentialRequestsPerSecond float64
	CredentialBurst             int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	def := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defI64 := func(p *int64, v int64) {
		if *p == 0 {
			*p = v
		}
	}
	defF := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	c.Servers = slices.Clone(c.Servers)
	for i, s := range c.Servers {
		c.Servers[i] = strings.TrimRight(s, "/")
	}
	if len(c.MetricsURLs) == 0 {
		c.MetricsURLs = make([]string, len(c.Servers))
		for i, s := range c.Servers {
			c.MetricsURLs[i] = s + "/metrics"
		}
	}
	def(&c.Duration, DefaultDuration)
	defInt(&c.Tenants, DefaultTenants)
	defInt(&c.CredentialsPerTenant, DefaultCredentialsPerTenant)
	def(&c.ThinkMin, DefaultThinkMin)
	def(&c.ThinkMax, DefaultThinkMax)
	defI64(&c.XorbMinBytes, DefaultXorbMinBytes)
	defI64(&c.XorbMaxBytes, DefaultXorbMaxBytes)
	def(&c.ScrapeInterval, DefaultScrapeInterval)
	defI64(&c.RSSOverheadBytes, DefaultRSSOverheadBytes)
	def(&c.DrainTimeout, DefaultDrainTimeout)
	def(&c.RequestTimeout, DefaultRequestTimeout)
	a := &c.Abuser
	defF(&a.FloodRate, DefaultFloodRate)
	defInt(&a.FloodWorkers, DefaultFloodWorkers)
	defInt(&a.Readers, DefaultReaders)
	defI64(&a.BigXorbBytes, DefaultBigXorbBytes)
	defI64(&a.ReadBytesPerSecond, DefaultReadBytesPerSecond)
	defI64(&a.QuotaHeadroomBytes, DefaultQuotaHeadroomBytes)
	defI64(&a.QuotaXorbBytes, DefaultQuotaXorbBytes)
	defInt(&a.QuotaWorkers, DefaultQuotaWorkers)
	defF(&a.QuotaRate, DefaultQuotaRate)
	defF(&a.SprayRate, DefaultSprayRate)
	defInt(&a.SprayWorkers, DefaultSprayWorkers)
	if a.SprayAddr == "" {
		a.SprayAddr = DefaultSprayAddr
	}
	defInt(&a.AuthFailuresPerMinute, DefaultAuthFailuresPerMinute)
	defInt(&c.Public.Readers, DefaultPublicReaders)
	if c.Public.FileBytes == 0 {
		c.Public.FileBytes = DefaultPublicFileBytes
	}
	return c
}

// Validate reports every problem with c (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Scenario {
	case ManyTenants, Abuse:
	case Public:
		if c.Public.Readers < 1 || c.Public.Readers > maxPublicReaders {
			bad("public readers: %d, want 1 to %d", c.Public.Readers, maxPublicReaders)
		}
		if c.Public.FileBytes < 1 || c.Public.FileBytes > maxPublicFileBytes {
			bad("public file: %d bytes, want 1 to %d", c.Public.FileBytes, maxPublicFileBytes)
		}
	default:
		bad("scenario %q: want many_tenants, abuse or public", c.Scenario)
	}
	if err := checkURLList(c.Servers); err != nil {
		bad("server: %w", err)
	}
	if len(c.MetricsURLs) != len(c.Servers) {
		bad("metrics: %d URLs for %d servers; give one per server, in the same order, or none", len(c.MetricsURLs), len(c.Servers))
	} else if err := checkURLList(c.MetricsURLs); err != nil {
		bad("metrics: %w", err)
	}
	if c.AdminToken == "" {
		bad("an admin token is needed (OPENXET_TOKEN)")
	}
	if c.Duration < 100*time.Millisecond {
		bad("duration %v: want at least 100ms", c.Duration)
	}
	if c.Tenants < 1 || c.Tenants > 10_000 {
		bad("tenants %d: want 1 to 10000", c.Tenants)
	}
	if c.CredentialsPerTenant < 1 || c.CredentialsPerTenant > 16 {
		bad("credentials per tenant %d: want 1 to 16", c.CredentialsPerTenant)
	}
	if c.ThinkMin < 0 || c.ThinkMax < c.ThinkMin {
		bad("think time %v–%v: want 0 <= min <= max", c.ThinkMin, c.ThinkMax)
	}
	if c.XorbMinBytes < 1 || c.XorbMaxBytes < c.XorbMinBytes || c.XorbMaxBytes > 64<<20 {
		bad("xorb sizes %d–%d: want 1 <= min <= max <= 64MiB", c.XorbMinBytes, c.XorbMaxBytes)
	}
	a := c.Abuser
	if a.FloodRate < 0 || a.FloodWorkers < 1 || a.Readers < 0 || a.QuotaWorkers < 0 || a.SprayWorkers < 1 || a.SprayRate < 0 || a.QuotaRate < 0 {
		bad("abuser: rates and counts must not be negative")
	}
	if a.BigXorbBytes < 1 || a.BigXorbBytes > 64<<20 || a.QuotaXorbBytes < 1 || a.QuotaXorbBytes > 64<<20 {
		bad("abuser xorb sizes: want 1 byte to 64MiB")
	}
	if a.ReadBytesPerSecond < 1 {
		bad("abuser read rate: want at least 1 byte per second")
	}
	if a.CredentialRequestsPerSecond < 0 || math.IsNaN(a.CredentialRequestsPerSecond) || math.IsInf(a.CredentialRequestsPerSecond, 0) ||
		(a.CredentialRequestsPerSecond > 0 && a.CredentialBurst < 1) {
		bad("abuser credential limit %g/s, burst %d: want a finite rate >= 0 (0: the server's) and, with a rate, a burst of at least 1",
			a.CredentialRequestsPerSecond, a.CredentialBurst)
	}
	if a.SprayAddr != "none" && net.ParseIP(a.SprayAddr) == nil {
		bad("spray address %q: want an IP address or none", a.SprayAddr)
	}
	return errors.Join(errs...)
}

// MaxServers bounds how many nodes one run loads.
const MaxServers = 64

// ParseServers reads a comma-separated list of base URLs (the --server
// flag and OPENXET_SERVER; --metrics too): each an http:// or https:// URL
// with a host and no query or fragment, none empty, none listed twice
// (after dropping a trailing slash and the case of scheme and host). It
// returns them without trailing slashes, in the order given.
func ParseServers(list string) ([]string, error) {
	parts := strings.Split(list, ",")
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = strings.TrimRight(strings.TrimSpace(p), "/")
	}
	if err := checkURLList(out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkURLList is ParseServers' check of a list already split.
func checkURLList(urls []string) error {
	if len(urls) == 0 {
		return errors.New("no URL given")
	}
	if len(urls) > MaxServers {
		return fmt.Errorf("%d URLs; at most %d", len(urls), MaxServers)
	}
	seen := map[string]int{}
	for i, raw := range urls {
		n := i + 1
		if raw == "" {
			if len(urls) == 1 {
				return errors.New("empty URL")
			}
			return fmt.Errorf("element %d of %d is empty (a stray comma?)", n, len(urls))
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
			return fmt.Errorf("%q (element %d): want an http:// or https:// URL with a host", raw, n)
		}
		if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return fmt.Errorf("%q (element %d): want a base URL, without user, query or fragment", raw, n)
		}
		key := strings.ToLower(u.Scheme+"://"+u.Host) + strings.TrimRight(u.Path, "/")
		if first, dup := seen[key]; dup {
			return fmt.Errorf("%q is listed twice (elements %d and %d)", raw, first, n)
		}
		seen[key] = n
	}
	return nil
}

// ErrRemote is returned by CheckTarget for a server that is not on loopback.
var ErrRemote = errors.New("not a loopback address")

// targets remembers which hosts CheckTarget accepted, for the fetch URLs
// of every download (they carry the server's public URL, which may name
// another host than the one the run was pointed at).
type targets struct {
	allowRemote bool
	mu          sync.Mutex
	checked     map[string]error
}

// check is CheckTarget for rawURL, remembered by host; with allowRemote
// every URL passes.
func (t *targets) check(ctx context.Context, rawURL string) error {
	if t.allowRemote {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	t.mu.Lock()
	err, ok := t.checked[u.Host]
	t.mu.Unlock()
	if ok {
		return err
	}
	err = CheckTarget(ctx, rawURL)
	t.mu.Lock()
	if t.checked == nil {
		t.checked = map[string]error{}
	}
	t.checked[u.Host] = err
	t.mu.Unlock()
	return err
}

// CheckTarget refuses a server URL whose host is not a loopback address
// (every address a name resolves to must be), so that a load run is never
// pointed at someone else's server by accident.
func CheckTarget(ctx context.Context, server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("%s: %w", host, ErrRemote)
		}
		return nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", host, err)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return fmt.Errorf("%s resolves to %s: %w", host, a.IP, ErrRemote)
		}
	}
	if len(addrs) == 0 {
		return fmt.Errorf("%s resolves to nothing: %w", host, ErrRemote)
	}
	return nil
}
