package hub

import (
	"context"
	"reflect"
	"testing"

	"github.com/labstack/echo/v4"

	"openxet/limits"
	"openxet/store"

	"openxet/store/accounts"
)

// config is a Config with every dependency set, none of which these tests
// call: they check what New and Owns decide on their own.
func config(t *testing.T, reserved ...string) Config {
	t.Helper()
	st, err := store.Open(context.Background(), store.DirConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return Config{
		Store: st,
		Guard: func(string) echo.MiddlewareFunc { return func(next echo.HandlerFunc) echo.HandlerFunc { return next } },
		GuardURLToken: func(string) echo.MiddlewareFunc {
			return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
		},
		GuardPublic: func() echo.MiddlewareFunc {
			return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
		},
		GuardOpen: func() echo.MiddlewareFunc {
			return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
		},
		Uploads:   func() UploadConfig { return UploadConfig{} },
		Principal: func(echo.Context) *Principal { return nil },
		BaseURL:   func(echo.Context) string { return "http://x" },
		Reserve:   func(echo.Context, int64) (func(), error) { return func() {}, nil },
		ReserveBuffer: func(_ echo.Context, n int64) ([]byte, func(), error) {
			return make([]byte, n), func() {}, nil
		},
		Work:         func(echo.Context) (func(), error) { return func() {}, nil },
		TenantLimits: func(echo.Context, string) (limits.Limits, error) { return limits.Limits{}, nil },
		CASToken:     func(*Principal, string, store.RepoID) (string, int64) { return "", 0 },
		Credential: func(context.Context, string) (accounts.Credential, error) {
			return accounts.Credential{}, store.ErrNotFound
		},
		ServeXetFile: func(echo.Context, string, store.TreeEntry) error { return nil },
		ReadXetRange: func(echo.Context, string, store.TreeEntry, int64, int64) ([]byte, error) { return nil, nil },
		Released:     func() {},
		Ready:        func(context.Context) bool { return true },

		ReservedNamespaces: reserved,
	}
}

// TestNewNeedsEveryDependency: a Config without one of the server's
// dependencies is refused at construction, not at the first request.
func TestNewNeedsEveryDependency(t *testing.T) {
	full := config(t)
	if _, err := New(full); err != nil {
		t.Fatalf("New with every dependency: %v", err)
	}
	typ := reflect.TypeOf(full)
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Name == "Version" || f.Name == "ReservedNamespaces" || f.Name == "DefaultVisibility" || f.Name == "AnonymousReads" || f.Name == "Mirror" {
			continue
		}
		cfg := full
		reflect.ValueOf(&cfg).Elem().Field(i).SetZero()
		if _, err := New(cfg); err == nil {
			t.Errorf("New without %s: no error", f.Name)
		}
	}
	for _, v := range []string{"protected", "everyone"} {
		cfg := full
		cfg.DefaultVisibility = v
		if _, err := New(cfg); err == nil {
			t.Errorf("New with DefaultVisibility %q: no error", v)
		}
	}
}

// TestOwns: the paths whose refusals follow the Hub's convention are the
// Hub API under /api/, the file and LFS routes and the repo pages, never a
// path under a namespace the server reserves for its own routes.
func TestOwns(t *testing.T) {
	h, err := New(config(t, "v1", "xorbs", "healthz"))
	if err != nil {
		t.Fatal(err)
	}
	bare, err := New(config(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path       string
		owns, bare bool // with the reserved namespaces, without
	}{
		{"/api/models/alice/m", true, true},
		{"/api/whoami-v2", true, true},
		{"/api/nothing", true, true},
		{"/alice/m/resolve/main/a.txt", true, true},
		{"/datasets/alice/d/raw/main/a.csv", true, true},
		{"/alice/m.git/info/lfs/objects/batch", true, true},
		{"/alice/m", true, true},
		{"/spaces/alice/s", true, true},
		{"/alice/m/tree/main/dir", true, true},
		{"/alice/m/blob/main/a.txt", true, true},
		{"/alice/m/commit/abc", true, true},
		{"/alice/m/other", false, false},
		{"/alice", false, false},
		{"/", false, false},
		{"/v1/shards", false, true},
		{"/xorbs/default", false, true},
		{"/healthz/x", false, true},
		{"/api/x", true, true},
	} {
		if got := h.Owns(c.path); got != c.owns {
			t.Errorf("Owns(%q) = %v, want %v", c.path, got, c.owns)
		}
		if got := bare.Owns(c.path); got != c.bare {
			t.Errorf("without reserved namespaces, Owns(%q) = %v, want %v", c.path, got, c.bare)
		}
	}
}
