package cli

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"openxet/budget"
	"openxet/limits"
	"openxet/store"
	"openxet/work"
	"openxet/xet"

	"openxet/store/accounts"
)

// Config is every setting of `openxet serve`, read from defaults, a TOML
// file, OPENXET_* environment variables and flags (later ones win).
type Config struct {
	// [server]
	Listen                string
	PublicURL             string
	DataDir               string
	Bucket                string
	Index                 string
	IndexBusyTimeout      time.Duration
	IndexLockCheck        time.Duration
	IndexCheckpoint       time.Duration // 0: commits checkpoint (store.Config.CheckpointEvery < 0)
	TrustedProxies        []netip.Prefix
	DedupScope            string
	MemoryBudget          int64
	CredentialMemoryShare float64
	TenantMemoryShare     float64
	MemoryWait            time.Duration
	WorkSlots             int
	TenantWorkShare       float64
	WorkWait              time.Duration
	TurnsAboveInFlight    int
	MetricsListen         string
	DebugListen           string
	LogFormat             string
	LogLevel              string
	TokenTTL              time.Duration
	AnonymousReads        bool
	DefaultVisibility     string
	FetchURLTTL           time.Duration
	ReadHeaderTimeout     time.Duration
	IdleTimeout           time.Duration
	BodyReadTimeout       time.Duration
	ShutdownTimeout       time.Duration
	MaxHeaderBytes        int64

	// [limits]
	TenantRequestsPerSecond     float64
	TenantBurst                 int
	CredentialRequestsPerSecond float64
	CredentialBurst             int
	MaxInFlightPerCredential    int
	AuthFailuresPerMinute       int
	DefaultTenantQuota          int64 // < 0: unlimited
	LimitsCacheTTL              time.Duration
	RefusalPause                time.Duration
	// limits.anonymous_*: readers without a token (docs/sharing.md).
	AnonymousRequestsPerSecond     float64
	AnonymousBurst                 int
	AnonymousMaxInFlight           int
	AnonymousPoolRequestsPerSecond float64
	AnonymousPoolBurst             int
	AnonymousPoolMaxInFlight       int
	AnonymousMemoryShare           float64
	AnonymousPoolBytesPerSecond    int64

	// GoMemoryLimit is the soft memory limit serve gives the Go runtime
	// (runtime/debug.SetMemoryLimit): MemoryBudget + GoMemoryLimitOverhead,
	// or 0 to leave the runtime's own, which is the case when the
	// environment sets GOMEMLIMIT. Not a configuration key; see
	// goMemoryLimit.
	GoMemoryLimit int64
	// [server], appended: built-in TLS and per-tenant metrics.
	TLSCert        string // PEM certificate chain file; "" with TLSKey "": plain HTTP
	TLSKey         string // PEM private key file of TLSCert
	MetricsTenants int    // tenants whose stored bytes /metrics shows; 0: none
	// [gc]
	GCInterval time.Duration // 0: serve runs no passes on its own
	GCGrace    time.Duration
	// [mirror] (docs/mirror.md)
	MirrorUpstream               string // "": no mirror
	MirrorUpstreamToken          string
	MirrorTenant                 string
	MirrorVisibility             string
	MirrorRefresh                time.Duration
	MirrorQuota                  int64 // < 0: unlimited
	MirrorMaxUpstreamConnections int
	MirrorAllowedHosts           []string
}

// setting is one configuration key: where it is read from and how.
type setting struct {
	key   string // section.name in the TOML file
	def   string // default, in the same text form a user would write
	usage string
	set   func(c *Config, v string) error
}

// flagName is the flag of a setting: the key's name with '-' for '_'.
func (s setting) flagName() string {
	return strings.ReplaceAll(s.name(), "_", "-")
}

// envName is the environment variable of a setting: OPENXET_ and the name.
func (s setting) envName() string {
	return "OPENXET_" + strings.ToUpper(s.name())
}

// name is the key without its section, except that keys of sections other
// than [server] and [limits] keep the section as a prefix (gc.grace is
// --gc-grace and OPENXET_GC_GRACE).
func (s setting) name() string {
	section, name, _ := strings.Cut(s.key, ".")
	if section != "server" && section != "limits" {
		return section + "_" + name
	}
	return name
}

// Default values that are not plain literals.
const (
	DefaultListen     = "127.0.0.1:8080"
	DefaultDataDir    = "./openxet-data"
	maxDefaultBudget  = 4 << 30
	minMemoryBudget   = 64 << 20
	unlimitedQuotaTxt = "unlimited"
	maxMetricsTenants = 1000 // bounds the per-tenant series of /metrics
)

var settings = []setting{
	{"server.listen", DefaultListen, "address to listen on (host:port)", func(c *Config, v string) error {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return err
		}
		c.Listen = v
		return nil
	}},
	{"server.public_url", "", "base URL clients reach this server at (default http://<listen>); used in CAS URLs and fetch URLs", func(c *Config, v string) error {
		v = strings.TrimRight(v, "/")
		if v != "" && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			return errors.New("must start with http:// or https://")
		}
		c.PublicURL = v
		return nil
	}},
	{"server.data_dir", DefaultDataDir, "data directory (bucket and index live here by default)", func(c *Config, v string) error {
		if v == "" {
			return errors.New("must not be empty")
		}
		c.DataDir = v
		return nil
	}},
	{"server.bucket", "", "gocloud.dev/blob bucket URL: file://, mem:// or s3:// (default file://<data_dir>/bucket)", func(c *Config, v string) error {
		if v != "" {
			scheme, _, ok := strings.Cut(v, "://")
			if !ok || (scheme != "file" && scheme != "mem" && scheme != "s3") {
				return fmt.Errorf("%q is not a file://, mem:// or s3:// URL", v)
			}
		}
		c.Bucket = v
		return nil
	}},
	{"server.index", "", "the index: a SQLite file, or a postgres:// URL that several nodes share (optional schema=NAME parameter, default openxet; see docs/scale-out.md) (default <data_dir>/index.db)", func(c *Config, v string) error {
		if err := store.CheckIndexLocation(v); err != nil {
			return err
		}
		c.Index = v
		return nil
	}},
	{"server.index_busy_timeout", "5s", "how long a request waits for the index (SQLite's write lock, a PostgreSQL row lock, retries of a transaction another node won) before 503 unavailable", durationSetter(func(c *Config) *time.Duration { return &c.IndexBusyTimeout }, 10*time.Millisecond)},
	{"server.index_checkpoint", "100ms", "how often a background checkpoint folds a SQLite index's write-ahead log into the index file, on a connection of its own, so that no upload waits for one; 0: a commit that finds 1000 pages of log checkpoints before it answers (SQLite's own way, which stalls that request)", durationSetter(func(c *Config) *time.Duration { return &c.IndexCheckpoint }, 0)},
	{"server.index_lock_check", "2s", "how often a node checks that it still holds its shared lock on a PostgreSQL index (a restart or a dropped connection loses it) and takes it again; while it does not hold it, it answers writes 503 unavailable", durationSetter(func(c *Config) *time.Duration { return &c.IndexLockCheck }, 100*time.Millisecond)},
	{"server.trusted_proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is trusted (default none)", func(c *Config, v string) error {
		c.TrustedProxies = nil
		for _, p := range splitList(v) {
			pfx, err := netip.ParsePrefix(p)
			if err != nil {
				addr, aerr := netip.ParseAddr(p)
				if aerr != nil {
					return fmt.Errorf("%q is not a CIDR or an IP address", p)
				}
				pfx = netip.PrefixFrom(addr, addr.BitLen())
			}
			c.TrustedProxies = append(c.TrustedProxies, pfx)
		}
		return nil
	}},
	{"server.dedup_scope", "global", "which tenants' chunks a dedup query may offer: global or tenant", func(c *Config, v string) error {
		if v != "global" && v != "tenant" {
			return errors.New("must be global or tenant")
		}
		c.DedupScope = v
		return nil
	}},
	{"server.memory_budget", "auto", "bytes held for request work on this node (auto: a quarter of the machine's memory, at most 4GiB)", func(c *Config, v string) error {
		if v == "auto" {
			c.MemoryBudget = autoMemoryBudget()
			return nil
		}
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		if n < minMemoryBudget {
			return fmt.Errorf("must be at least 64MiB")
		}
		c.MemoryBudget = n
		return nil
	}},
	{"server.credential_memory_share", "0.25", "fraction of the memory budget one credential may hold (0.01 to 1)", func(c *Config, v string) error {
		f, err := parseShare(v)
		c.CredentialMemoryShare = f
		return err
	}},
	{"server.tenant_memory_share", "0.5", "fraction of the memory budget one tenant may hold (0.01 to 1)", func(c *Config, v string) error {
		f, err := parseShare(v)
		c.TenantMemoryShare = f
		return err
	}},
	{"server.memory_wait", "10s", "how long a request waits for memory before 503 memory_busy", durationSetter(func(c *Config) *time.Duration { return &c.MemoryWait }, 0)},
	{"server.work_slots", "8", "sections of index or CPU work (index reads and writes, hashing a body) that may run at once on this node (1 to 4096)", intRangeSetter(func(c *Config) *int { return &c.WorkSlots }, 1, work.MaxSlots)},
	{"server.tenant_work_share", "0.25", "fraction of the work slots one tenant may hold, at least one slot (0.01 to 1)", func(c *Config, v string) error {
		f, err := parseShare(v)
		c.TenantWorkShare = f
		return err
	}},
	{"server.work_wait", "10s", "how long a request waits for a work slot before 503 unavailable", durationSetter(func(c *Config) *time.Duration { return &c.WorkWait }, time.Millisecond)},
	{"server.turns_above_in_flight", "8", "requests one tenant (all its credentials) may have in progress on this node before each further one waits for a turn behind other tenants' requests (0 never; at most 1000000)", intRangeSetter(func(c *Config) *int { return &c.TurnsAboveInFlight }, 0, 1_000_000)},
	{"server.metrics_listen", "", "separate listener for /metrics without auth (default: /metrics on the main listener, admin scope)", optionalAddrSetter(func(c *Config) *string { return &c.MetricsListen })},
	{"server.debug_listen", "", "separate listener for Go's profiler (/debug/pprof/: CPU, heap, goroutine profiles and the runtime trace, in which each request is a task with its tenant), without auth: bind it to a loopback or private address (default: none)", optionalAddrSetter(func(c *Config) *string { return &c.DebugListen })},
	{"server.log_format", "text", "request log format: text or json", func(c *Config, v string) error {
		if v != "text" && v != "json" {
			return errors.New("must be text or json")
		}
		c.LogFormat = v
		return nil
	}},
	{"server.log_level", "info", "log level: debug, info, warn or error", func(c *Config, v string) error {
		switch v {
		case "debug", "info", "warn", "error":
			c.LogLevel = v
			return nil
		}
		return errors.New("must be debug, info, warn or error")
	}},
	{"hub.anonymous_reads", "false", "serve the read routes of public repos to requests without a token (true or false; docs/sharing.md)", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("must be true or false")
		}
		c.AnonymousReads = b
		return nil
	}},
	{"hub.default_visibility", "private", "visibility of a repo created without one: private, internal or public (docs/sharing.md)", func(c *Config, v string) error {
		if v != "private" && v != "internal" && v != "public" {
			return errors.New("must be private, internal or public")
		}
		c.DefaultVisibility = v
		return nil
	}},
	{"server.token_ttl", "1h", "lifetime of the CAS tokens the Hub token endpoints hand out", durationSetter(func(c *Config) *time.Duration { return &c.TokenTTL }, 2*time.Minute)},
	{"server.fetch_url_ttl", "1h", "lifetime of the signed fetch URLs in reconstruction answers", durationSetter(func(c *Config) *time.Duration { return &c.FetchURLTTL }, time.Minute)},
	{"server.read_header_timeout", "10s", "time a client has to send its request headers", durationSetter(func(c *Config) *time.Duration { return &c.ReadHeaderTimeout }, time.Second)},
	{"server.idle_timeout", "120s", "how long an idle keep-alive connection stays open", durationSetter(func(c *Config) *time.Duration { return &c.IdleTimeout }, time.Second)},
	{"server.body_read_timeout", "5m", "time a client has to send a request body, on every route (a xorb is up to 65MiB)", durationSetter(func(c *Config) *time.Duration { return &c.BodyReadTimeout }, time.Second)},
	{"server.shutdown_timeout", "30s", "how long shutdown waits for in-flight requests", durationSetter(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, 0)},
	{"server.max_header_bytes", "64KiB", "largest request header block accepted", func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		if n < 4096 || n > 16<<20 {
			return errors.New("must be between 4KiB and 16MiB")
		}
		c.MaxHeaderBytes = n
		return nil
	}},

	{"limits.tenant_requests_per_second", "2000", "requests per second one tenant may make to this node (0.001 to 1000000000)", floatSetter(func(c *Config) *float64 { return &c.TenantRequestsPerSecond })},
	{"limits.tenant_burst", "4000", "burst of requests one tenant may make to this node", intSetter(func(c *Config) *int { return &c.TenantBurst }, 1)},
	{"limits.credential_requests_per_second", "1000", "requests per second one credential may make to this node (0.001 to 1000000000)", floatSetter(func(c *Config) *float64 { return &c.CredentialRequestsPerSecond })},
	{"limits.credential_burst", "2000", "burst of requests one credential may make to this node", intSetter(func(c *Config) *int { return &c.CredentialBurst }, 1)},
	{"limits.max_in_flight_per_credential", "512", "requests one credential may have in progress on this node", intSetter(func(c *Config) *int { return &c.MaxInFlightPerCredential }, 1)},
	{"limits.auth_failures_per_minute", "60", "failed authentications one client IP may make per minute before it is refused", intSetter(func(c *Config) *int { return &c.AuthFailuresPerMinute }, 1)},
	{"limits.default_tenant_quota", unlimitedQuotaTxt, "stored bytes a tenant may own unless overridden (e.g. 10GiB, or unlimited)", func(c *Config, v string) error {
		n, err := ParseQuota(v)
		c.DefaultTenantQuota = n
		return err
	}},
	{"limits.cache_ttl", "10s", "how long a node trusts cached tenant limits and usage (at most 10s)", durationSetter(func(c *Config) *time.Duration { return &c.LimitsCacheTTL }, 0)},
	{"limits.refusal_pause", "1s", "after a 429 rate_limited for a request rate or failed authentications, how long that keep-alive connection goes unread (at most the answer's Retry-After and the time the limit's bucket takes to refill; at most 10s; 0 never)", durationSetter(func(c *Config) *time.Duration { return &c.RefusalPause }, 0)},
	{"limits.anonymous_requests_per_second", "20", "requests per second one client address without a token may make to this node (with hub.anonymous_reads; 0.001 to 1000000000)", floatSetter(func(c *Config) *float64 { return &c.AnonymousRequestsPerSecond })},
	{"limits.anonymous_burst", "40", "burst of requests one client address without a token may make to this node", intSetter(func(c *Config) *int { return &c.AnonymousBurst }, 1)},
	{"limits.anonymous_max_in_flight", "8", "requests one client address without a token may have in progress on this node", intSetter(func(c *Config) *int { return &c.AnonymousMaxInFlight }, 1)},
	{"limits.anonymous_pool_requests_per_second", "500", "requests per second all readers without a token together may make to this node (0.001 to 1000000000)", floatSetter(func(c *Config) *float64 { return &c.AnonymousPoolRequestsPerSecond })},
	{"limits.anonymous_pool_burst", "1000", "burst of requests all readers without a token together may make to this node", intSetter(func(c *Config) *int { return &c.AnonymousPoolBurst }, 1)},
	{"limits.anonymous_pool_max_in_flight", "128", "requests all readers without a token together may have in progress on this node", intSetter(func(c *Config) *int { return &c.AnonymousPoolMaxInFlight }, 1)},
	{"limits.anonymous_memory_share", "0.25", "fraction of the memory budget all readers without a token together may hold (0.01 to 1; with hub.anonymous_reads it must hold one maximum xorb)", func(c *Config, v string) error {
		f, err := parseShare(v)
		c.AnonymousMemoryShare = f
		return err
	}},
	{"limits.anonymous_pool_bytes_per_second", "32MiB", "bytes per second all answers to readers without a token together may send while a tenant's request is in progress on this node (none is: unpaced); 0: never paced", func(c *Config, v string) error {
		n, err := ParseSize(v)
		c.AnonymousPoolBytesPerSecond = n
		return err
	}},

	{"server.tls_cert", "", "PEM certificate chain file: serve HTTPS without a proxy (with server.tls_key; reloaded on SIGHUP or when the file changes)", func(c *Config, v string) error { c.TLSCert = v; return nil }},
	{"server.tls_key", "", "PEM private key file of server.tls_cert", func(c *Config, v string) error { c.TLSKey = v; return nil }},
	{"server.metrics_tenants", "0", "tenants whose stored bytes and quota /metrics exports, those nearest their quota first (0 to 1000; 0: none)", intRangeSetter(func(c *Config) *int { return &c.MetricsTenants }, 0, maxMetricsTenants)},
	{"gc.interval", "1h", "how often serve runs a collection pass; 0 turns the loop off (run `openxet gc` yourself)", daysSetter(func(c *Config) *time.Duration { return &c.GCInterval })},
	{"gc.grace", "22d", "how long an object nobody owns or references is kept after its last upload, registration or release (longer than hf_xet's 3-week local shard cache)", daysSetter(func(c *Config) *time.Duration { return &c.GCGrace })},
	{"mirror.upstream", "", "a Hub-compatible server (https://huggingface.co, another openxet) whose repos this server mirrors for repo ids whose namespace is not a local tenant; empty: no mirror (docs/mirror.md)", func(c *Config, v string) error {
		v = strings.TrimRight(v, "/")
		if v != "" && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			return errors.New("must start with http:// or https://")
		}
		c.MirrorUpstream = v
		return nil
	}},
	{"mirror.upstream_token", "", "token sent to mirror.upstream (its own host only), for the gated or private repos it may read; empty: anonymous", func(c *Config, v string) error { c.MirrorUpstreamToken = v; return nil }},
	{"mirror.tenant", "mirror", "tenant that owns the mirrored repos and the bytes pulled for them (its namespace is never mirrored)", func(c *Config, v string) error {
		if err := accounts.ValidTenant(v); err != nil {
			return err
		}
		c.MirrorTenant = v
		return nil
	}},
	{"mirror.visibility", "internal", "who may read mirrored repos: private (the mirror tenant only), internal (any credential) or public (also anonymous readers when hub.anonymous_reads is on)", func(c *Config, v string) error {
		if v != "private" && v != "internal" && v != "public" {
			return errors.New("must be private, internal or public")
		}
		c.MirrorVisibility = v
		return nil
	}},
	{"mirror.refresh", "10m", "how long a branch or tag resolved against the upstream is served before it is resolved again (a full commit sha is served forever)", durationSetter(func(c *Config) *time.Duration { return &c.MirrorRefresh }, time.Second)},
	{"mirror.quota", unlimitedQuotaTxt, "bytes of mirrored files kept; over it the least recently read revisions are evicted (e.g. 500GiB, or unlimited)", func(c *Config, v string) error {
		n, err := ParseQuota(v)
		c.MirrorQuota = n
		return err
	}},
	{"mirror.max_upstream_connections", "8", "upstream streams open at once, granted fairly between the tenants waiting (1 to 1024)", intRangeSetter(func(c *Config) *int { return &c.MirrorMaxUpstreamConnections }, 1, 1024)},
	{"mirror.allowed_hosts", "", "comma-separated host names the mirror may reach on a loopback, private or link-local address when the upstream names them (its CAS or file hosts inside your network); public addresses and the upstream's own host need no entry (docs/mirror.md)", func(c *Config, v string) error {
		c.MirrorAllowedHosts = nil
		for _, h := range splitList(v) {
			if strings.ContainsAny(h, ":/ ") {
				return fmt.Errorf("%q is not a host name (no scheme, port or path)", h)
			}
			c.MirrorAllowedHosts = append(c.MirrorAllowedHosts, strings.ToLower(h))
		}
		return nil
	}},
}

// daysSetter reads a duration that may also be a whole number of days
// ("22d"); never negative.
func daysSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		if n, ok := strings.CutSuffix(v, "d"); ok {
			days, err := strconv.Atoi(n)
			if err != nil || days < 0 {
				return fmt.Errorf("%q is not a duration like 12h or a number of days like 22d", v)
			}
			*field(c) = time.Duration(days) * 24 * time.Hour
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration like 12h or a number of days like 22d", v)
		}
		if d < 0 {
			return errors.New("must not be negative")
		}
		*field(c) = d
		return nil
	}
}

func durationSetter(field func(*Config) *time.Duration, min time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration like 10s or 2m", v)
		}
		if d < min {
			return fmt.Errorf("must be at least %s", min)
		}
		*field(c) = d
		return nil
	}
}

func floatSetter(field func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%q is not a number", v)
		}
		if f < limits.MinRequestsPerSecond || f > limits.MaxRequestsPerSecond {
			return fmt.Errorf("must be between %v and %v requests per second, got %v", limits.MinRequestsPerSecond, num(limits.MaxRequestsPerSecond), v)
		}
		*field(c) = f
		return nil
	}
}

func intSetter(field func(*Config) *int, min int) func(*Config, string) error {
	return intRangeSetter(field, min, math.MaxInt)
}

// optionalAddrSetter sets a host:port field, or "" for none.
func optionalAddrSetter(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v != "" {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return err
			}
		}
		*field(c) = v
		return nil
	}
}

// intRangeSetter sets a whole number between min and max inclusive
// (math.MaxInt: no upper bound).
func intRangeSetter(field func(*Config) *int, min, max int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		if max == math.MaxInt && n < min {
			return fmt.Errorf("must be at least %d", min)
		}
		if n < min || n > max {
			return fmt.Errorf("must be between %d and %d", min, max)
		}
		*field(c) = n
		return nil
	}
}

func parseShare(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	if f < 0.01 || f > 1 {
		return 0, errors.New("must be between 0.01 and 1")
	}
	return f, nil
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15, "e": 1e18, "eb": 1e18,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50, "eib": 1 << 60,
}

// ParseSize reads a byte size like 512MiB, 10GiB, 1.5GB or 1048576,
// exactly: a size that is not a whole number of bytes (1.5, 1.1KiB) or
// does not fit in an int64 (8EiB) is an error saying so.
func ParseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	mult, ok := sizeUnits[unit]
	n, isNum := new(big.Rat).SetString(num)
	if num == "" || !ok || !isNum {
		return 0, fmt.Errorf("%q is not a size like 512MiB or 10GiB", v)
	}
	n.Mul(n, new(big.Rat).SetInt64(mult))
	if !n.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", v)
	}
	if !n.Num().IsInt64() {
		return 0, fmt.Errorf("%q is too large: a size is at most %d bytes (8EiB less one byte)", v, int64(math.MaxInt64))
	}
	return n.Num().Int64(), nil
}

// ParseQuota reads a quota: a size, or "unlimited" (returned as -1).
func ParseQuota(v string) (int64, error) {
	if strings.EqualFold(strings.TrimSpace(v), unlimitedQuotaTxt) {
		return -1, nil
	}
	return ParseSize(v)
}

// autoMemoryBudget is a quarter of the machine's memory, at most 4GiB.
func autoMemoryBudget() int64 {
	total := int64(0)
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb int64
			if n, _ := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); n == 1 {
				total = kb * 1024
				break
			}
		}
		f.Close()
	}
	if total <= 0 {
		total = 4 << 30 // unknown: assume a small machine
	}
	return max(min(total/4, maxDefaultBudget), minMemoryBudget)
}

// source names where values come from, for error messages.
type source struct {
	name string
	vals map[string]string // key -> value
}

// LoadConfig builds a Config from defaults, then the TOML file (if path is
// not ""), then env and flags as given in overrides (key -> value, already
// merged with flags winning over env). Every problem is reported, one line
// each, naming the key.
func LoadConfig(path string, env, flags map[string]string) (Config, error) {
	var c Config
	var errs []error
	apply := func(s setting, from, v string) {
		if err := s.set(&c, v); err != nil {
			errs = append(errs, fmt.Errorf("config %s (%s): %w", s.key, from, err))
		}
	}
	file := map[string]string{}
	if path != "" {
		var err error
		if file, err = readTOML(path); err != nil {
			return Config{}, err
		}
	}
	known := map[string]bool{}
	for _, s := range settings {
		known[s.key] = true
		apply(s, "default", s.def)
		if v, ok := file[s.key]; ok {
			apply(s, path, v)
		}
		if v, ok := env[s.key]; ok {
			apply(s, s.envName(), v)
		}
		if v, ok := flags[s.key]; ok {
			apply(s, "--"+s.flagName(), v)
		}
	}
	var unknown []string
	for k := range file {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		errs = append(errs, fmt.Errorf("config %s (%s): unknown key", k, path))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	c.fillDerived()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// fillDerived sets the defaults that depend on other keys.
func (c *Config) fillDerived() {
	if c.Bucket == "" {
		abs, err := filepath.Abs(filepath.Join(c.DataDir, "bucket"))
		if err != nil {
			abs = filepath.Join(c.DataDir, "bucket")
		}
		c.Bucket = store.FileBucketURL(abs)
	}
	if c.Index == "" {
		c.Index = filepath.Join(c.DataDir, "index.db")
	}
}

// maxRefusalPause bounds limits.refusal_pause: a graceful shutdown ends
// the pauses, but nothing should hold a connection unread for long.
const maxRefusalPause = 10 * time.Second

// Validate checks the rules that tie keys together.
func (c Config) Validate() error {
	var errs []error
	// budget's own check: each share of the budget must hold one maximum xorb.
	if err := c.budgetConfig().Validate(xet.MaxXorbBytes); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("config %w", e))
		}
	}
	if capBytes := int64(math.Floor(float64(c.MemoryBudget) * c.AnonymousMemoryShare)); c.AnonymousReads && c.MemoryBudget > 0 && capBytes < xet.MaxXorbBytes {
		errs = append(errs, fmt.Errorf("config limits.anonymous_memory_share: server.memory_budget × limits.anonymous_memory_share = %d bytes cannot hold one maximum xorb of %d bytes (hub.anonymous_reads is on); raise either", capBytes, xet.MaxXorbBytes))
	}
	if c.LimitsCacheTTL > 10*time.Second {
		errs = append(errs, errors.New("config limits.cache_ttl: must be at most 10s (docs/design.md §5)"))
	}
	if c.RefusalPause > maxRefusalPause {
		errs = append(errs, fmt.Errorf("config limits.refusal_pause: must be at most %s (a shutdown waits for paused connections)", maxRefusalPause))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("config server.tls_cert, server.tls_key: set both (HTTPS) or neither (HTTP)"))
	}
	return errors.Join(errs...)
}

// budgetConfig is the memory budget's part of the configuration.
func (c Config) budgetConfig() budget.Config {
	return budget.Config{
		TotalBytes:      c.MemoryBudget,
		CredentialShare: c.CredentialMemoryShare,
		TenantShare:     c.TenantMemoryShare,
		Wait:            c.MemoryWait,
	}
}

// unjoin lists the errors an errors.Join made, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// readTOML reads a TOML file into section.key -> text value.
func readTOML(path string) (map[string]string, error) {
	var doc map[string]any
	if _, err := toml.DecodeFile(path, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	out := map[string]string{}
	for section, v := range doc {
		tbl, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("config file %s: %s: expected a [%s] table", path, section, section)
		}
		for k, val := range tbl {
			switch x := val.(type) {
			case []any:
				parts := make([]string, len(x))
				for i, p := range x {
					parts[i] = fmt.Sprint(p)
				}
				out[section+"."+k] = strings.Join(parts, ",")
			case float64:
				out[section+"."+k] = strconv.FormatFloat(x, 'f', -1, 64)
			default:
				out[section+"."+k] = fmt.Sprint(x)
			}
		}
	}
	return out, nil
}
