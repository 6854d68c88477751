package budget

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	mib     = 1 << 20
	maxXorb = 64 * mib
)

func goodConfig() Config {
	return Config{
		TotalBytes:      1024 * mib,
		CredentialShare: DefaultCredentialShare,
		TenantShare:     DefaultTenantShare,
		Wait:            DefaultWait,
	}
}

// configErrors returns the *ConfigErrors inside err, in order.
func configErrors(t *testing.T, err error) []*ConfigError {
	t.Helper()
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []*ConfigError
	for _, e := range errs {
		var ce *ConfigError
		if !errors.As(e, &ce) {
			t.Fatalf("error %q (%T) is not a *ConfigError", e, e)
		}
		out = append(out, ce)
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(*Config)
		maxItem  int64
		wantKeys []string // keys named, in order; nil means valid
		wantText string   // also in the message
	}{
		{name: "defaults", edit: func(*Config) {}, maxItem: maxXorb},
		{name: "shares at the bounds", edit: func(c *Config) { c.CredentialShare, c.TenantShare = 1, 1 }, maxItem: maxXorb},
		{name: "lowest shares, no item check", edit: func(c *Config) { c.CredentialShare, c.TenantShare = 0.01, 0.01 }, maxItem: 0},
		{name: "tenant share below credential share", edit: func(c *Config) { c.CredentialShare, c.TenantShare = 0.5, 0.25 }, maxItem: maxXorb},
		{name: "credential share holds exactly one xorb", edit: func(c *Config) { c.TotalBytes = 4 * maxXorb }, maxItem: maxXorb},

		{name: "zero budget", edit: func(c *Config) { c.TotalBytes = 0 }, maxItem: maxXorb,
			wantKeys: []string{KeyMemoryBudget}, wantText: "server.memory_budget = 0: must be a positive number of bytes"},
		{name: "negative budget", edit: func(c *Config) { c.TotalBytes = -1 }, maxItem: maxXorb,
			wantKeys: []string{KeyMemoryBudget}, wantText: "server.memory_budget = -1"},
		{name: "zero credential share", edit: func(c *Config) { c.CredentialShare = 0 }, maxItem: maxXorb,
			wantKeys: []string{KeyCredentialShare}, wantText: "server.credential_memory_share = 0: must be between 0.01 and 1"},
		{name: "credential share below bound", edit: func(c *Config) { c.CredentialShare = 0.009 }, maxItem: 0,
			wantKeys: []string{KeyCredentialShare}, wantText: "server.credential_memory_share = 0.009"},
		{name: "credential share above one", edit: func(c *Config) { c.CredentialShare = 1.5 }, maxItem: maxXorb,
			wantKeys: []string{KeyCredentialShare}, wantText: "server.credential_memory_share = 1.5"},
		{name: "credential share negative", edit: func(c *Config) { c.CredentialShare = -0.25 }, maxItem: maxXorb,
			wantKeys: []string{KeyCredentialShare}, wantText: "server.credential_memory_share = -0.25"},
		{name: "credential share NaN", edit: func(c *Config) { c.CredentialShare = math.NaN() }, maxItem: maxXorb,
			wantKeys: []string{KeyCredentialShare}, wantText: "server.credential_memory_share = NaN"},
		{name: "zero tenant share", edit: func(c *Config) { c.TenantShare = 0 }, maxItem: maxXorb,
			wantKeys: []string{KeyTenantShare}, wantText: "server.tenant_memory_share = 0: must be between 0.01 and 1"},
		{name: "tenant share above one", edit: func(c *Config) { c.TenantShare = 2 }, maxItem: maxXorb,
			wantKeys: []string{KeyTenantShare}, wantText: "server.tenant_memory_share = 2"},
		{name: "tenant share infinite", edit: func(c *Config) { c.TenantShare = math.Inf(1) }, maxItem: maxXorb,
			wantKeys: []string{KeyTenantShare}, wantText: "server.tenant_memory_share = +Inf"},
		{name: "zero wait", edit: func(c *Config) { c.Wait = 0 }, maxItem: maxXorb,
			wantKeys: []string{KeyMemoryWait}, wantText: "server.memory_wait = 0s: must be a positive duration"},
		{name: "negative wait", edit: func(c *Config) { c.Wait = -time.Second }, maxItem: maxXorb,
			wantKeys: []string{KeyMemoryWait}, wantText: "server.memory_wait = -1s"},
		{name: "credential share cannot hold one xorb", edit: func(c *Config) { c.TotalBytes = 4*maxXorb - 1 }, maxItem: maxXorb,
			wantKeys: []string{KeyCredentialShare},
			wantText: "server.memory_budget × server.credential_memory_share = 67108863 bytes cannot hold one maximum xorb of 67108864 bytes"},
		{name: "tenant share cannot hold one xorb", edit: func(c *Config) { c.CredentialShare, c.TenantShare = 1, 0.01 }, maxItem: maxXorb,
			wantKeys: []string{KeyTenantShare},
			wantText: "server.memory_budget × server.tenant_memory_share = 10737418 bytes cannot hold one maximum xorb"},
		{name: "budget smaller than one xorb", edit: func(c *Config) { c.TotalBytes = mib }, maxItem: maxXorb,
			wantKeys: []string{KeyCredentialShare, KeyTenantShare}, wantText: "raise server.memory_budget or server.credential_memory_share"},
		{name: "every field bad", edit: func(c *Config) { *c = Config{TotalBytes: -5, CredentialShare: 3, TenantShare: -1, Wait: -1} }, maxItem: maxXorb,
			wantKeys: []string{KeyMemoryBudget, KeyCredentialShare, KeyTenantShare, KeyMemoryWait}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := goodConfig()
			tt.edit(&c)
			err := c.Validate(tt.maxItem)
			var gotKeys []string
			for _, ce := range configErrors(t, err) {
				gotKeys = append(gotKeys, ce.Key)
				if !strings.Contains(ce.Error(), ce.Key) {
					t.Errorf("message %q does not name its key %s", ce.Error(), ce.Key)
				}
			}
			if diff := cmp.Diff(tt.wantKeys, gotKeys); diff != "" {
				t.Fatalf("Validate(%+v, %d) keys (-want +got):\n%s\nerror: %v", c, tt.maxItem, diff, err)
			}
			if tt.wantText != "" && !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Validate(%+v) = %q, want it to contain %q", c, err, tt.wantText)
			}
		})
	}
}

func TestNewCaps(t *testing.T) {
	tests := []struct {
		name                       string
		c                          Config
		wantTotal, wantCred, wantT int64
	}{
		{name: "zero fields take defaults", c: Config{TotalBytes: 1000}, wantTotal: 1000, wantCred: 250, wantT: 500},
		{name: "shares round down", c: Config{TotalBytes: 999, CredentialShare: 0.25, TenantShare: 0.5}, wantTotal: 999, wantCred: 249, wantT: 499},
		{name: "share of one is the total", c: Config{TotalBytes: math.MaxInt64, CredentialShare: 1, TenantShare: 1}, wantTotal: math.MaxInt64, wantCred: math.MaxInt64, wantT: math.MaxInt64},
		{name: "huge budget stays in range", c: Config{TotalBytes: math.MaxInt64, CredentialShare: 0.9999999999999999, TenantShare: 0.5}, wantTotal: math.MaxInt64, wantCred: math.MaxInt64 - 1023, wantT: 1 << 62},
		{name: "out of range shares clamp", c: Config{TotalBytes: 1000, CredentialShare: 7, TenantShare: -1}, wantTotal: 1000, wantCred: 1000, wantT: 10},
		{name: "negative total refuses all", c: Config{TotalBytes: -1}, wantTotal: 0, wantCred: 0, wantT: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.c).Stats()
			got := [3]int64{s.TotalBytes, s.CredentialBytes, s.TenantBytes}
			want := [3]int64{tt.wantTotal, tt.wantCred, tt.wantT}
			if got != want {
				t.Errorf("New(%+v) caps (total, credential, tenant) = %v, want %v", tt.c, got, want)
			}
		})
	}
}
