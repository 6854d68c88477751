package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"openxet/server"
	"openxet/xet"
)

// registeredFamilies are the metric families of a serve process, with
// per-tenant series switched on, a tenant to show and a request of each
// kind, so that labelled families have a series.
func registeredFamilies(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	cfg, err := LoadConfig("", nil, map[string]string{"server.data_dir": dir, "server.metrics_tenants": "5", "limits.default_tenant_quota": "1GiB"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := openStore(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	body, info := xet.BuildXorb([][]byte{[]byte(strings.Repeat("metrics", 100))}, false)
	if _, err := st.PutXorb(ctx, "alice", info, body[:info.StreamLen], -1); err != nil {
		t.Fatal(err)
	}
	reg := newRegistry()
	srv, err := server.New(serverConfig(cfg, nil), st, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/v1/reconstructions/" + strings.Repeat("ab", 32)} {
		srv.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		out[f.GetName()] = true
	}
	return out
}

// TestMetricFamiliesAreDocumented: every family serve registers appears in
// docs/operations.md, and every openxet_ family the page names exists.
// The standard go_* and process_* families are documented by prefix.
func TestMetricFamiliesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	registered := registeredFamilies(t)
	for name := range registered {
		prefix, _, _ := strings.Cut(name, "_")
		switch prefix {
		case "go", "process":
			if !strings.Contains(string(doc), "`"+prefix+"_*`") {
				t.Errorf("docs/operations.md does not mention the %s_* families (%s)", prefix, name)
			}
		default:
			if !strings.Contains(string(doc), "`"+name+"`") {
				t.Errorf("docs/operations.md does not document %s", name)
			}
		}
	}
	for _, want := range []string{"openxet_build_info", "openxet_ready", "openxet_stored_xorb_bytes", "openxet_tenant_usage_bytes", "openxet_tenant_quota_bytes"} {
		if !registered[want] {
			t.Errorf("%s is not registered", want)
		}
	}
	for _, m := range regexp.MustCompile("`(openxet_[a-z_]+)`").FindAllStringSubmatch(string(doc), -1) {
		if !registered[m[1]] {
			t.Errorf("docs/operations.md names %s, which is not registered", m[1])
		}
	}
}

func TestBuildInfo(t *testing.T) {
	reg := newRegistry()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "openxet_build_info" {
			continue
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] != Version || labels["go_version"] != runtime.Version() || labels["revision"] == "" {
			t.Fatalf("openxet_build_info: %v", m)
		}
		return
	}
	t.Fatal("no openxet_build_info")
}
