package cli

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"openxet/limits"
	"openxet/store"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, "openxet.toml", `
[server]
listen = "127.0.0.1:9001"
memory_wait = "3s"
trusted_proxies = ["10.0.0.0/8", "192.168.1.1"]

[limits]
tenant_burst = 11
credential_burst = 12
default_tenant_quota = "10GiB"
`)
	env := map[string]string{"server.memory_wait": "4s", "limits.credential_burst": "13"}
	flags := map[string]string{"limits.credential_burst": "14"}
	c, err := LoadConfig(file, env, flags)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen from file", c.Listen, "127.0.0.1:9001"},
		{"memory_wait env over file", c.MemoryWait, 4 * time.Second},
		{"tenant_burst from file", c.TenantBurst, 11},
		{"credential_burst flag over env", c.CredentialBurst, 14},
		{"quota size", c.DefaultTenantQuota, int64(10 << 30)},
		{"proxies", len(c.TrustedProxies), 2},
		{"default rps", c.TenantRequestsPerSecond, 2000.0},
		{"default share", c.CredentialMemoryShare, 0.25},
		{"derived index", c.Index, filepath.Join(DefaultDataDir, "index.db")},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if !strings.HasPrefix(c.Bucket, "file://") || !strings.Contains(c.Bucket, "openxet-data/bucket") {
		t.Errorf("bucket default %q", c.Bucket)
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := LoadConfig("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8080" || c.DataDir != "./openxet-data" || c.DefaultTenantQuota != -1 ||
		c.TenantBurst != 4000 || c.CredentialRequestsPerSecond != 1000 || c.MaxInFlightPerCredential != 512 ||
		c.AuthFailuresPerMinute != 60 || c.TenantMemoryShare != 0.5 || c.MemoryWait != 10*time.Second || c.DedupScope != "global" {
		t.Fatalf("defaults: %+v", c)
	}
	if c.MemoryBudget < minMemoryBudget || c.MemoryBudget > maxDefaultBudget {
		t.Fatalf("auto memory budget %d", c.MemoryBudget)
	}
}

// TestInvalidValues: every invalid value stops start-up with a line naming
// the key.
func TestInvalidValues(t *testing.T) {
	cases := map[string]string{
		"server.listen":                             "nope",
		"server.bucket":                             "ftp://x",
		"server.public_url":                         "ftp://x",
		"server.data_dir":                           "",
		"server.trusted_proxies":                    "10.0.0.0/99",
		"server.dedup_scope":                        "everyone",
		"server.memory_budget":                      "12 parsecs",
		"server.credential_memory_share":            "0.001",
		"server.tenant_memory_share":                "1.5",
		"server.memory_wait":                        "soon",
		"server.work_slots":                         "0",
		"server.turns_above_in_flight":              "-1",
		"server.tenant_work_share":                  "2",
		"server.work_wait":                          "0s",
		"server.metrics_listen":                     "9090",
		"server.debug_listen":                       "6060",
		"server.log_format":                         "xml",
		"hub.anonymous_reads":                       "sometimes",
		"hub.default_visibility":                    "protected",
		"server.log_level":                          "loud",
		"server.token_ttl":                          "1s",
		"server.fetch_url_ttl":                      "-1m",
		"server.read_header_timeout":                "0s",
		"server.idle_timeout":                       "x",
		"server.body_read_timeout":                  "x",
		"server.shutdown_timeout":                   "x",
		"server.max_header_bytes":                   "1",
		"limits.tenant_requests_per_second":         "-5",
		"limits.tenant_burst":                       "0",
		"limits.credential_requests_per_second":     "NaN",
		"limits.credential_burst":                   "many",
		"limits.max_in_flight_per_credential":       "0",
		"limits.auth_failures_per_minute":           "0",
		"limits.default_tenant_quota":               "lots",
		"limits.cache_ttl":                          "1m",
		"limits.refusal_pause":                      "11s",
		"limits.anonymous_requests_per_second":      "0",
		"limits.anonymous_burst":                    "0",
		"limits.anonymous_max_in_flight":            "0",
		"limits.anonymous_pool_requests_per_second": "2e9",
		"limits.anonymous_pool_burst":               "-1",
		"limits.anonymous_pool_max_in_flight":       "none",
		"limits.anonymous_memory_share":             "0.001",
		"limits.anonymous_pool_bytes_per_second":    "fast",
		"server.tls_cert":                           "/etc/openxet/cert.pem", // without server.tls_key
		"server.tls_key":                            "/etc/openxet/key.pem",  // without server.tls_cert
		"server.metrics_tenants":                    "1001",
		"gc.interval":                               "hourly",
		"gc.grace":                                  "-1d",
		"server.index":                              "postgres://db.example/openxet?schema=Not-A-Schema", // any path is valid, a URL must be
		"server.index_busy_timeout":                 "1ms",
		"server.index_checkpoint":                   "-1s",
		"server.index_lock_check":                   "10ms",
		"mirror.upstream":                           "huggingface.co",
		"mirror.tenant":                             "Mirror",
		"mirror.visibility":                         "protected",
		"mirror.refresh":                            "10ms",
		"mirror.quota":                              "big",
		"mirror.max_upstream_connections":           "0",
		"mirror.allowed_hosts":                      "cas.internal:8080",
	}
	anyValue := map[string]bool{"mirror.upstream_token": true}
	for _, s := range settings {
		if _, ok := cases[s.key]; !ok && !anyValue[s.key] {
			t.Errorf("no invalid-value case for %s", s.key)
		}
	}
	for key, val := range cases {
		t.Run(key, func(t *testing.T) {
			_, err := LoadConfig("", nil, map[string]string{key: val})
			if err == nil {
				t.Fatalf("%s=%q accepted", key, val)
			}
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("error does not name %s: %v", key, err)
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Fatalf("want one line, got %q", err)
			}
		})
	}
}

func TestConfigFileErrors(t *testing.T) {
	unknown := writeFile(t, "a.toml", "[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n")
	if _, err := LoadConfig(unknown, nil, nil); err == nil || !strings.Contains(err.Error(), "server.lisen") {
		t.Fatalf("unknown key: %v", err)
	}
	broken := writeFile(t, "b.toml", "[server\n")
	if _, err := LoadConfig(broken, nil, nil); err == nil {
		t.Fatal("broken TOML accepted")
	}
	small := writeFile(t, "c.toml", "[server]\nmemory_budget = \"100MiB\"\n")
	if _, err := LoadConfig(small, nil, nil); err == nil || !strings.Contains(err.Error(), "server.credential_memory_share") ||
		!strings.Contains(err.Error(), "server.tenant_memory_share") {
		t.Fatalf("shares that cannot hold one xorb: %v", err)
	}
	// The anonymous pool's share must hold one xorb only when anonymous
	// reads are on.
	pool := map[string]string{"server.memory_budget": "512MiB", "limits.anonymous_memory_share": "0.1"}
	if _, err := LoadConfig("", nil, pool); err != nil {
		t.Fatalf("a small anonymous share with anonymous reads off: %v", err)
	}
	pool["hub.anonymous_reads"] = "true"
	if _, err := LoadConfig("", nil, pool); err == nil || !strings.Contains(err.Error(), "limits.anonymous_memory_share") || strings.Count(err.Error(), "\n") != 0 {
		t.Fatalf("an anonymous share that cannot hold one xorb: %v", err)
	}
}

// TestConfigRateBounds: a configured rate must lie within the bounds the
// limiter's headers are exact in; outside, start-up fails naming the key.
func TestConfigRateBounds(t *testing.T) {
	for _, key := range []string{"limits.tenant_requests_per_second", "limits.credential_requests_per_second"} {
		for _, v := range []string{"0.001", "1e9", "1000000000", "2000"} {
			if _, err := LoadConfig("", nil, map[string]string{key: v}); err != nil {
				t.Errorf("%s=%s refused: %v", key, v, err)
			}
		}
		for _, v := range []string{"1e-9", "1e-300", "0.000999", "1000000001", "1e300", "0", "-1", "Inf", "NaN"} {
			_, err := LoadConfig("", nil, map[string]string{key: v})
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s=%s: %v, want an error naming the key", key, v, err)
			}
		}
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"512MiB": 512 << 20, "10GiB": 10 << 30, "1.5GB": 1_500_000_000, "1048576": 1 << 20, "2 KiB": 2048} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]int64{"1.5KiB": 1536, "0.5k": 500, "7EiB": 7 << 60, "9223372036854775807": math.MaxInt64} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for bad, says := range map[string]string{
		"": "not a size", "GiB": "not a size", "-1": "not a size", "1.2.3MiB": "not a size", "5 parsecs": "not a size", "1e30": "not a size", ".": "not a size",
		// Fractions of a byte are refused, not truncated (1.5 was 1 byte).
		"1.5": "whole number of bytes", "1.5B": "whole number of bytes", "1.1KiB": "whole number of bytes", "0.0000000001GB": "whole number of bytes",
		"8EiB": "too large", "8192PiB": "too large", "9223372036854775808": "too large", "99999999999999999999999tb": "too large", "10EB": "too large",
	} {
		if n, err := ParseSize(bad); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseSize(%q) = %d, %v; want an error saying %q", bad, n, err, says)
		}
	}
	if q, _ := ParseQuota("Unlimited"); q != -1 {
		t.Errorf("unlimited = %d", q)
	}
	for _, n := range []int64{0, 1000, 1536, 10 << 30, 7 << 60, math.MaxInt64} {
		if back, err := ParseSize(limits.FormatBytes(n)); err != nil || back != n {
			t.Errorf("ParseSize(FormatBytes(%d) = %q) = %d, %v", n, limits.FormatBytes(n), back, err)
		}
	}
}

func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code := Run(context.Background(), append([]string{"openxet"}, args...), &out, &errb, lookup)
	return code, out.String(), errb.String()
}

func TestHelpAndVersion(t *testing.T) {
	code, out, _ := run(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "openxet "+Version) {
		t.Fatalf("version: %d %q", code, out)
	}
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"reindex", "--help"}, {"limits", "--help"}, {"limits", "set", "--help"},
		{"credentials", "--help"}, {"credentials", "create", "--help"}} {
		code, out, errOut := run(t, nil, args...)
		if code != 0 || !strings.Contains(out, "USAGE") {
			t.Errorf("%v: code %d\n%s%s", args, code, out, errOut)
		}
	}
	code, _, errOut := run(t, nil, "serve", "--tenant-burst", "zero")
	if code != 2 || !strings.Contains(errOut, "limits.tenant_burst") {
		t.Fatalf("bad flag value: %d %q", code, errOut)
	}
	code, _, errOut = run(t, map[string]string{"OPENXET_TENANT_BURST": "-1"}, "serve")
	if code != 2 || !strings.Contains(errOut, "OPENXET_TENANT_BURST") {
		t.Fatalf("bad env value: %d %q", code, errOut)
	}
}

func TestCredentialsOffline(t *testing.T) {
	// Run where no server keeps its data, a local command is refused and
	// creates nothing, rather than answering from a fresh empty directory.
	empty := t.TempDir()
	for _, args := range [][]string{{"credentials", "create", "--tenant", "alice", "--scope", "write"}, {"credentials", "list"}, {"usage"}, {"gc"}} {
		code, out, errOut := run(t, nil, append(args, "--data-dir", filepath.Join(empty, "data"))...)
		if code != 1 || out != "" || !strings.Contains(errOut, "no index at") || !strings.Contains(errOut, "nothing was created") {
			t.Errorf("%v in a directory without an index: %d %q %q", args, code, out, errOut)
		}
	}
	if left, _ := os.ReadDir(empty); len(left) != 0 {
		t.Errorf("a refused local command left %v", left)
	}
	dir := serverDataDir(t)
	code, out, errOut := run(t, nil, "credentials", "create", "--data-dir", dir, "--tenant", "alice", "--scope", "write")
	if code != 0 || !strings.Contains(out, "token:  hf_oxt_") {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
	code, out, _ = run(t, nil, "credentials", "list", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, id) || strings.Contains(out, "hf_oxt_") {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, _, errOut := run(t, nil, "credentials", "revoke", "--data-dir", dir, id); code != 0 {
		t.Fatalf("revoke: %s", errOut)
	}
	code, out, _ = run(t, nil, "credentials", "list", "--data-dir", dir, "--json")
	if code != 0 || !strings.Contains(out, `"revoked"`) {
		t.Fatalf("list after revoke: %s", out)
	}
	if code, _, errOut := run(t, nil, "credentials", "create", "--data-dir", dir, "--tenant", "../etc", "--scope", "write"); code == 0 || !strings.Contains(errOut, "tenant") {
		t.Fatalf("bad tenant: %d %s", code, errOut)
	}
	if code, _, _ := run(t, nil, "credentials", "create", "--data-dir", dir, "--tenant", "a", "--scope", "root"); code == 0 {
		t.Fatal("bad scope accepted")
	}
}

// serverDataDir is a data directory as `openxet serve` leaves it: an
// index and a bucket, no credential. Local commands refuse a directory
// without an index (existingIndex).
func serverDataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
