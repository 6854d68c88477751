package cli

import (
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"openxet/limits"
)

// FuzzParseSize: ParseSize never panics, never returns a negative size,
// is exact for whole numbers of bytes and binary units below 2^53, agrees
// with ParseQuota, and reads back what limits.FormatBytes prints.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1", "512MiB", "10GiB", "1.5GB", "1048576", " 64 kib ", "8PiB", "8192PiB", "9223372036854775807",
		"9007199254740993", ".5k", "1.", ".", "", "1e9", "-1", "+1", "NaN", "Inf", "0x10", "1 2", "1..2kb", "unlimited", "99999999999999999999999tb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if !strings.EqualFold(strings.TrimSpace(s), "unlimited") {
			q, qerr := ParseQuota(s)
			if (qerr == nil) != (err == nil) || q != n {
				t.Fatalf("ParseQuota(%q) = %d, %v; ParseSize = %d, %v", s, q, qerr, n, err)
			}
		}
		if err == nil {
			if exact, ok := exactSize(s); ok && exact.IsInt64() && exact.Int64() < 1<<53 && exact.Int64() != n {
				t.Fatalf("ParseSize(%q) = %d, want %s", s, n, exact)
			}
			if n < 1<<53 {
				if back, err := ParseSize(limits.FormatBytes(n)); err != nil || back != n {
					t.Fatalf("ParseSize(limits.FormatBytes(%d) = %q) = %d, %v", n, limits.FormatBytes(n), back, err)
				}
			}
		}
	})
}

// exactSize computes a size written as digits and a unit exactly, when it
// is a whole number of bytes.
func exactSize(s string) (*big.Int, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	mult, ok := sizeUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if i == 0 || !ok {
		return nil, false
	}
	n, _ := new(big.Int).SetString(s[:i], 10)
	return n.Mul(n, big.NewInt(mult)), true
}

// FuzzLoadConfig feeds LoadConfig an arbitrary TOML file and one arbitrary
// flag value. It never panics; every refusal names a configuration key or
// the file; every configuration it accepts satisfies every documented rule
// (docs/configuration.md), and loading the same input again gives the same
// configuration.
func FuzzLoadConfig(f *testing.F) {
	path := filepath.Join(f.TempDir(), "openxet.toml")
	f.Add("", uint8(0), "")
	f.Add(`
[server]
listen = "127.0.0.1:9001"
memory_wait = "3s"
trusted_proxies = ["10.0.0.0/8", "192.168.1.1"]
memory_budget = "1GiB"
credential_memory_share = 0.25
max_header_bytes = "64KiB"

[limits]
tenant_burst = 11
credential_burst = 12
default_tenant_quota = "10GiB"
cache_ttl = "10s"
`, uint8(3), "global")
	f.Add("[server]\nmemory_budget = 1e20\n", uint8(6), "auto")
	f.Add("[server]\ntoken_ttl = \"1m\"\n[limits]\ntenant_requests_per_second = nan\n", uint8(20), "inf")
	f.Add("x = 1\n[[server]]\n", uint8(1), "ftp://nope")
	f.Add("[server]\n[server.sub]\nkey = 1\n", uint8(0), "[::1]:80")
	for i, s := range settings {
		f.Add("", uint8(i), s.def)
	}
	f.Fuzz(func(t *testing.T, file string, key uint8, value string) {
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		flags := map[string]string{settings[int(key)%len(settings)].key: value}
		c, err := LoadConfig(path, nil, flags)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config ") {
				t.Fatalf("refusal does not name a key or the file: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted a configuration that does not validate: %v", err)
		}
		checkConfig(t, c)
		again, err := LoadConfig(path, nil, flags)
		if err != nil {
			t.Fatalf("second load: %v", err)
		}
		if diff := cmp.Diff(c, again, cmpopts.EquateComparable(netip.Prefix{})); diff != "" {
			t.Fatalf("two loads differ:\n%s", diff)
		}
	})
}

// checkConfig checks the documented bounds of every key.
func checkConfig(t *testing.T, c Config) {
	t.Helper()
	fail := func(key string, v any) { t.Fatalf("accepted %s = %v", key, v) }
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		fail("server.listen", c.Listen)
	}
	if c.PublicURL != "" && !strings.HasPrefix(c.PublicURL, "http://") && !strings.HasPrefix(c.PublicURL, "https://") || strings.HasSuffix(c.PublicURL, "/") {
		fail("server.public_url", c.PublicURL)
	}
	if c.DataDir == "" || c.Index == "" {
		fail("server.data_dir", c.DataDir)
	}
	if scheme, _, _ := strings.Cut(c.Bucket, "://"); scheme != "file" && scheme != "mem" && scheme != "s3" {
		fail("server.bucket", c.Bucket)
	}
	if c.DedupScope != "global" && c.DedupScope != "tenant" {
		fail("server.dedup_scope", c.DedupScope)
	}
	if c.MemoryBudget < minMemoryBudget {
		fail("server.memory_budget", c.MemoryBudget)
	}
	for key, share := range map[string]float64{"server.credential_memory_share": c.CredentialMemoryShare, "server.tenant_memory_share": c.TenantMemoryShare} {
		if !(share >= 0.01 && share <= 1) {
			fail(key, share)
		}
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		fail("server.log_format", c.LogFormat)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		fail("server.log_level", c.LogLevel)
	}
	for key, d := range map[string]struct{ v, min time.Duration }{
		"server.memory_wait": {c.MemoryWait, 0}, "server.token_ttl": {c.TokenTTL, 2 * time.Minute}, "server.fetch_url_ttl": {c.FetchURLTTL, time.Minute},
		"server.read_header_timeout": {c.ReadHeaderTimeout, time.Second}, "server.idle_timeout": {c.IdleTimeout, time.Second},
		"server.body_read_timeout": {c.BodyReadTimeout, time.Second}, "server.shutdown_timeout": {c.ShutdownTimeout, 0},
		"limits.cache_ttl": {c.LimitsCacheTTL, 0},
	} {
		if d.v < d.min {
			fail(key, d.v)
		}
	}
	if c.LimitsCacheTTL > 10*time.Second {
		fail("limits.cache_ttl", c.LimitsCacheTTL)
	}
	if c.MaxHeaderBytes < 4096 || c.MaxHeaderBytes > 16<<20 {
		fail("server.max_header_bytes", c.MaxHeaderBytes)
	}
	for key, r := range map[string]float64{"limits.tenant_requests_per_second": c.TenantRequestsPerSecond, "limits.credential_requests_per_second": c.CredentialRequestsPerSecond} {
		if !(r >= limits.MinRequestsPerSecond && r <= limits.MaxRequestsPerSecond) {
			fail(key, r)
		}
	}
	for key, n := range map[string]int{"limits.tenant_burst": c.TenantBurst, "limits.credential_burst": c.CredentialBurst,
		"limits.max_in_flight_per_credential": c.MaxInFlightPerCredential, "limits.auth_failures_per_minute": c.AuthFailuresPerMinute} {
		if n < 1 {
			fail(key, n)
		}
	}
	if c.DefaultTenantQuota < -1 {
		fail("limits.default_tenant_quota", c.DefaultTenantQuota)
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			fail("server.trusted_proxies", p)
		}
	}
}
