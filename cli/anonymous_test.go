package cli

import (
	"testing"

	"openxet/limits"
	"openxet/server"
)

// TestAnonymousSettings: the limits.anonymous_* keys default to the
// limits package's and the server's defaults and reach the server's
// configuration, from flags as from the environment.
func TestAnonymousSettings(t *testing.T) {
	c, err := LoadConfig("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := serverConfig(c, nil)
	if sc.AnonymousPoolBytesPerSecond != 32<<20 {
		t.Errorf("default pool bandwidth %v B/s, want 32MiB", sc.AnonymousPoolBytesPerSecond)
	}
	if sc.Anonymous != limits.DefaultAnonymous() || sc.AnonymousMemoryShare != server.DefaultAnonymousMemoryShare {
		t.Errorf("defaults: %+v share %v, want %+v share %v", sc.Anonymous, sc.AnonymousMemoryShare, limits.DefaultAnonymous(), server.DefaultAnonymousMemoryShare)
	}
	c, err = LoadConfig("", map[string]string{"limits.anonymous_pool_burst": "77"}, map[string]string{
		"limits.anonymous_requests_per_second": "2.5", "limits.anonymous_burst": "5", "limits.anonymous_max_in_flight": "3",
		"limits.anonymous_pool_requests_per_second": "60", "limits.anonymous_pool_max_in_flight": "9",
		"limits.anonymous_memory_share": "0.5", "hub.anonymous_reads": "true", "server.memory_budget": "1GiB",
		"limits.anonymous_pool_bytes_per_second": "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	sc = serverConfig(c, nil)
	want := limits.Anonymous{AddressRate: limits.Rate{PerSecond: 2.5, Burst: 5}, AddressMaxInFlight: 3,
		PoolRate: limits.Rate{PerSecond: 60, Burst: 77}, PoolMaxInFlight: 9}
	if sc.Anonymous != want || sc.AnonymousMemoryShare != 0.5 || !sc.AnonymousReads || sc.AnonymousPoolBytesPerSecond != 0 {
		t.Errorf("set: %+v share %v, want %+v share 0.5", sc.Anonymous, sc.AnonymousMemoryShare, want)
	}
}
