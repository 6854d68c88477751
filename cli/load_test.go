package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"openxet/budget"
	"openxet/limits"
	"openxet/load"
	"openxet/server"
	"openxet/store"
)

// runLoadCommand runs `openxet load args...` through loadCommand alone
// (until the command is registered in NewApp) and returns the exit code
// and output.
func runLoadCommand(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := &cli.App{
		Name: "openxet", Writer: &stdout, ErrWriter: &stderr,
		ExitErrHandler: func(*cli.Context, error) {},
		Commands:       []*cli.Command{loadCommand(func(k string) (string, bool) { v, ok := env[k]; return v, ok })},
	}
	err := app.RunContext(context.Background(), append([]string{"openxet", "load"}, args...))
	code := 0
	if err != nil {
		code = 1
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		stderr.WriteString(err.Error())
	}
	return code, stdout.String(), stderr.String()
}

// loadTestServer is an in-process server with default limits and its
// admin token.
func loadTestServer(t *testing.T) (url, token string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		Limits:                limits.DefaultLimits(),
		AuthFailuresPerMinute: 60,
		Budget:                budget.Config{TotalBytes: 512 << 20, CredentialShare: 0.25, TenantShare: 0.5, Wait: time.Second},
		MetricsOnMain:         true,
	}, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	_, tok, err := st.CreateCredential(context.Background(), "admin", []string{"admin"})
	if err != nil {
		t.Fatal(err)
	}
	return hs.URL, tok
}

func TestLoadCommandRefusals(t *testing.T) {
	tok := map[string]string{"OPENXET_TOKEN": "hf_oxt_x"}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		says string
	}{
		{"remote server", tok, []string{"--scenario", "abuse", "--server", "http://203.0.113.9:8080"}, "--allow-remote"},
		{"no token", nil, []string{"--scenario", "abuse"}, "OPENXET_TOKEN"},
		{"unknown scenario", tok, []string{"--scenario", "stampede"}, "many_tenants, abuse or public"},
		{"bad size", tok, []string{"--scenario", "abuse", "--xorb-max", "lots"}, "--xorb-max"},
		{"no readers", tok, []string{"--scenario", "abuse", "--readers", "0"}, "--readers"},
		{"no public readers", tok, []string{"--scenario", "public", "--public-readers", "-1"}, "public readers"},
		{"empty node", tok, []string{"--scenario", "abuse", "--server", "http://127.0.0.1:1,,http://127.0.0.1:2"}, "--server: element 2 of 3 is empty"},
		{"trailing comma", tok, []string{"--scenario", "abuse", "--server", "http://127.0.0.1:1,"}, "--server: element 2 of 2 is empty"},
		{"bad node URL", tok, []string{"--scenario", "abuse", "--server", "http://127.0.0.1:1,127.0.0.1:2"}, `--server: "127.0.0.1:2" (element 2): want an http:// or https:// URL`},
		{"duplicate node", tok, []string{"--scenario", "abuse", "--server", "http://127.0.0.1:1,http://127.0.0.1:2,http://127.0.0.1:1/"}, "--server: \"http://127.0.0.1:1\" is listed twice (elements 1 and 3)"},
		{"bad node list in env", map[string]string{"OPENXET_TOKEN": "hf_oxt_x", "OPENXET_SERVER": "http://127.0.0.1:1, "}, []string{"--scenario", "abuse"}, "OPENXET_SERVER: element 2 of 2 is empty"},
		{"metrics per node", tok, []string{"--scenario", "abuse", "--server", "http://127.0.0.1:1,http://127.0.0.1:2", "--metrics", "http://127.0.0.1:9/metrics"}, "--metrics: 1 URLs for 2 nodes"},
		{"remote node", tok, []string{"--scenario", "abuse", "--server", "http://127.0.0.1:1,http://203.0.113.9:8080"}, "--allow-remote"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runLoadCommand(t, c.env, c.args...)
			if code != 2 || !strings.Contains(stderr, c.says) {
				t.Errorf("exit %d, stderr %q; want 2 and a message about %s", code, stderr, c.says)
			}
		})
	}
}

func TestLoadCommandRuns(t *testing.T) {
	url, tok := loadTestServer(t)
	report := filepath.Join(t.TempDir(), "report.html")
	code, stdout, stderr := runLoadCommand(t, map[string]string{"OPENXET_TOKEN": tok},
		"--scenario", "many_tenants", "--server", url, "--duration", "700ms", "--tenants", "3",
		"--think-min", "30ms", "--think-max", "90ms", "--xorb-min", "8KiB", "--xorb-max", "64KiB",
		"--rss-overhead", "off", "--json", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	var r load.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	// How many operations fit in the phase depends on the machine; that
	// they run at all is package load's test (which holds its phases open).
	if !r.OK || r.Scenario != "many_tenants" || len(r.Phases) != 1 || len(r.Phases[0].Tenants) != 3 {
		t.Errorf("report: ok %v scenario %s phases %d", r.OK, r.Scenario, len(r.Phases))
	}
	page, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("<svg")) || !bytes.Contains(page, []byte("Result: OK")) {
		t.Errorf("the HTML report lacks its plots or result")
	}
	if !strings.Contains(stderr, "report written to") {
		t.Errorf("stderr %q does not say where the report went", stderr)
	}
}

// TestLoadCleanupFlag: a load run cleans up its tenants unless told
// --cleanup=false.
func TestLoadCleanupFlag(t *testing.T) {
	env := func(k string) (string, bool) {
		return map[string]string{"OPENXET_TOKEN": "hf_oxt_x"}[k], k == "OPENXET_TOKEN"
	}
	for _, c := range []struct {
		args []string
		keep bool
	}{
		{nil, false},
		{[]string{"--cleanup"}, false},
		{[]string{"--cleanup=false"}, true},
	} {
		cmd := loadCommand(env)
		var got load.Config
		cmd.Action = func(c *cli.Context) error {
			var err error
			got, err = loadConfigFrom(c, env)
			return err
		}
		app := &cli.App{Name: "openxet", Writer: io.Discard, ErrWriter: io.Discard, ExitErrHandler: func(*cli.Context, error) {}, Commands: []*cli.Command{cmd}}
		if err := app.RunContext(context.Background(), append([]string{"openxet", "load", "--scenario", "many_tenants"}, c.args...)); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got.KeepTenants != c.keep {
			t.Errorf("%v: KeepTenants %v, want %v", c.args, got.KeepTenants, c.keep)
		}
	}
}

// TestLoadServerList: --server and OPENXET_SERVER take a comma-separated
// list of nodes (spaces and trailing slashes ignored, the flag winning over
// the environment); --metrics defaults to each node's /metrics or takes one
// URL per node.
func TestLoadServerList(t *testing.T) {
	for _, c := range []struct {
		env          map[string]string
		args         []string
		servers, met []string
	}{
		{nil, nil, []string{"http://" + DefaultListen}, []string{"http://" + DefaultListen + "/metrics"}},
		{map[string]string{"OPENXET_SERVER": "http://127.0.0.1:1/, http://127.0.0.1:2"}, nil,
			[]string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, []string{"http://127.0.0.1:1/metrics", "http://127.0.0.1:2/metrics"}},
		{map[string]string{"OPENXET_SERVER": "http://127.0.0.1:9"}, []string{"--server", "http://127.0.0.1:1,http://127.0.0.1:2", "--metrics", "http://127.0.0.1:7/m,http://127.0.0.1:8/m"},
			[]string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, []string{"http://127.0.0.1:7/m", "http://127.0.0.1:8/m"}},
	} {
		vars := map[string]string{"OPENXET_TOKEN": "hf_oxt_x"}
		maps.Copy(vars, c.env)
		env := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
		cmd := loadCommand(env)
		var got load.Config
		cmd.Action = func(c *cli.Context) error {
			var err error
			got, err = loadConfigFrom(c, env)
			return err
		}
		app := &cli.App{Name: "openxet", Writer: io.Discard, ErrWriter: io.Discard, ExitErrHandler: func(*cli.Context, error) {}, Commands: []*cli.Command{cmd}}
		if err := app.RunContext(context.Background(), append([]string{"openxet", "load", "--scenario", "many_tenants"}, c.args...)); err != nil {
			t.Fatalf("%v %v: %v", c.env, c.args, err)
		}
		if got = got.WithDefaults(); !slices.Equal(got.Servers, c.servers) || !slices.Equal(got.MetricsURLs, c.met) {
			t.Errorf("%v %v: servers %q metrics %q, want %q %q", c.env, c.args, got.Servers, got.MetricsURLs, c.servers, c.met)
		}
	}
}

// TestLoadAgainstNodes runs `openxet load` against two `openxet serve`
// processes on one data directory: the report names both nodes, measures
// each one's memory against its own budget (and the two together against
// both), and finds every tenant's usage, uploaded through both nodes and
// read back through one, to be what it stored.
func TestLoadAgainstNodes(t *testing.T) {
	dir := t.TempDir()
	a := startServe(t, dir)
	admin := a.adminToken(t)
	b := startServe(t, dir)
	code, stdout, stderr := runLoadCommand(t, map[string]string{"OPENXET_TOKEN": admin, "OPENXET_SERVER": a.url + "," + b.url},
		"--scenario", "many_tenants", "--duration", "700ms", "--tenants", "3",
		"--think-min", "30ms", "--think-max", "90ms", "--xorb-min", "8KiB", "--xorb-max", "64KiB",
		"--rss-overhead", "off", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	var r load.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	if !r.OK || r.Server != a.url+","+b.url || len(r.Nodes) != 2 || r.Nodes[0].URL != a.url || r.Nodes[1].URL != b.url {
		t.Fatalf("report: ok %v server %q nodes %+v", r.OK, r.Server, r.Nodes)
	}
	for _, n := range r.Nodes {
		if !n.Memory.Measured || n.Memory.BudgetBytes != 512<<20 || n.CPUs == "" || n.MetricsURL != n.URL+"/metrics" {
			t.Errorf("node %s: memory %+v, CPUs %q, metrics %s; want its own RSS against its own 512MiB budget", n.URL, n.Memory, n.CPUs, n.MetricsURL)
		}
	}
	if !r.Memory.Measured || r.Memory.BudgetBytes != 2*512<<20 {
		t.Errorf("the nodes together: %+v, want both budgets summed", r.Memory)
	}
	// Each tenant's warm-up upload sent its xorb to one node and its shard
	// to the other.
	if ac := r.Accounting; ac == nil || ac.Checked != 3 || ac.Mismatches != 0 || ac.StoredBytes == 0 {
		t.Errorf("accounting %+v", r.Accounting)
	}
	if !strings.Contains(stderr, "2 nodes: "+a.url+", "+b.url) {
		t.Errorf("progress does not name the nodes:\n%s", stderr)
	}
	a.stop()
	b.stop()
}
