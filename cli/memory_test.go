package cli

import (
	"strconv"
	"strings"
	"testing"
)

func TestGoMemoryLimit(t *testing.T) {
	env := func(vars map[string]string) Env {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	if got := goMemoryLimit(512<<20, env(nil)); got != 512<<20+GoMemoryLimitOverhead {
		t.Errorf("without GOMEMLIMIT: %d, want the budget plus %d", got, GoMemoryLimitOverhead)
	}
	for _, v := range []string{"300MiB", "off"} {
		if got := goMemoryLimit(512<<20, env(map[string]string{"GOMEMLIMIT": v})); got != 0 {
			t.Errorf("with GOMEMLIMIT=%s: %d, want 0 (the runtime's own)", v, got)
		}
	}
	if got := goMemoryLimit(512<<20, env(map[string]string{"GOMEMLIMIT": ""})); got != 512<<20+GoMemoryLimitOverhead {
		t.Errorf("with an empty GOMEMLIMIT: %d, want the budget plus %d", got, GoMemoryLimitOverhead)
	}
}

// TestServeSetsGoMemoryLimit: a server bounds its Go heap with a soft limit
// derived from the memory budget, unless GOMEMLIMIT says otherwise; the
// runtime's own metric shows it.
func TestServeSetsGoMemoryLimit(t *testing.T) {
	limit := func(p *proc) int64 {
		t.Helper()
		admin := p.adminToken(t)
		for _, line := range strings.Split(metrics(t, p, admin), "\n") {
			if v, ok := strings.CutPrefix(line, "go_gc_gomemlimit_bytes "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("go_gc_gomemlimit_bytes %q", v)
				}
				return int64(f)
			}
		}
		t.Fatal("no go_gc_gomemlimit_bytes in /metrics")
		return 0
	}
	t.Run("derived", func(t *testing.T) {
		t.Setenv("GOMEMLIMIT", "") // empty is unset, for the runtime too
		p := startServe(t, t.TempDir())
		if got, want := limit(p), int64(512<<20+GoMemoryLimitOverhead); got != want {
			t.Fatalf("soft memory limit %d, want %d", got, want)
		}
	})
	t.Run("GOMEMLIMIT", func(t *testing.T) {
		t.Setenv("GOMEMLIMIT", "300MiB")
		p := startServe(t, t.TempDir())
		if got := limit(p); got != 300<<20 {
			t.Fatalf("soft memory limit %d, want GOMEMLIMIT's %d", got, 300<<20)
		}
	})
}
