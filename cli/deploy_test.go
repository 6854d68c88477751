package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"openxet/limits"
)

// The files under deploy/ are checked here against the command line they
// drive: the systemd unit's flags, the metric families the dashboard and
// the alert rules query, the release build's -ldflags.

// tool finds an external checker, or skips the test naming the package
// that provides it.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (Debian package %s); skipping its check", name, pkg)
	}
	return p
}

func runTool(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

var familyRef = regexp.MustCompile(`\bopenxet_[a-z_]+`)

// checkFamilies fails for every openxet_ name in text that serve does not
// register (histogram series name their family with a suffix).
func checkFamilies(t *testing.T, what, text string, registered map[string]bool) {
	t.Helper()
	for _, name := range familyRef.FindAllString(text, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && registered[b] {
				base = b
			}
		}
		if !registered[base] {
			t.Errorf("%s queries %s, which openxet does not export", what, name)
		}
	}
}

// TestAlertRules: deploy/prometheus/alerts.yml passes `promtool check
// rules`, its unit tests (alerts_test.yml) pass `promtool test rules`, and
// it queries only families openxet exports.
func TestAlertRules(t *testing.T) {
	dir := "../deploy/prometheus"
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	checkFamilies(t, "alerts.yml", string(rules), registeredFamilies(t))
	for _, alert := range []string{"OpenxetRefusalSpike", "OpenxetMemoryWaits", "OpenxetNotReady", "OpenxetTenantQuotaNearlyFull"} {
		if !strings.Contains(string(rules), "alert: "+alert+"\n") {
			t.Errorf("alerts.yml lacks %s", alert)
		}
	}
	promtool := tool(t, "promtool", "prometheus")
	out := runTool(t, dir, promtool, "check", "rules", "alerts.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules:\n%s", out)
	}
	if out := runTool(t, dir, promtool, "test", "rules", "alerts_test.yml"); !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		ID         int    `json:"id"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
}

// TestGrafanaDashboard: deploy/grafana/openxet.json is a dashboard with the
// panels an operator needs, every query on the dashboard's data source
// variable, only exported families, and (with promtool) valid PromQL.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/openxet.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	registered := registeredFamilies(t)
	titles := map[string]bool{}
	ids := map[int]bool{}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for _, p := range d.Panels {
		titles[p.Title] = true
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %q, want ${datasource}", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkFamilies(t, "panel "+strconv.Quote(p.Title), tg.Expr, registered)
			expr := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(tg.Expr)
			fmt.Fprintf(&rules, "      - record: dashboard:panel_%d_%s\n        expr: %s\n", p.ID, tg.RefID, strconv.Quote(expr))
		}
	}
	for _, want := range []string{"Request rate by status", "Refusals by code", "Memory reserved vs budget", "Memory waits", "Stored bytes", "Readiness", "Tenants nearest their quota"} {
		if !titles[want] {
			t.Errorf("dashboard lacks the panel %q", want)
		}
	}
	if d.Title != "openxet" || d.UID == "" || len(d.Templating.List) < 2 || d.Templating.List[0].Name != "datasource" {
		t.Errorf("dashboard title %q uid %q templating %+v", d.Title, d.UID, d.Templating.List)
	}
	promtool := tool(t, "promtool", "prometheus")
	p := filepath.Join(t.TempDir(), "dashboard_queries.yml")
	os.WriteFile(p, []byte(rules.String()), 0o644)
	runTool(t, "", promtool, "check", "rules", p)
}

// unitFile reads a systemd unit: section -> key -> values in order.
func unitFile(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: cannot read %q", path, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// systemdBytes reads a systemd size (K, M, G, T are powers of 1024).
func systemdBytes(t *testing.T, v string) int64 {
	t.Helper()
	mult := int64(1)
	if i := strings.IndexAny(v, "KMGT"); i >= 0 {
		mult = map[byte]int64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}[v[i]]
		v = v[:i]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("size %q: %v", v, err)
	}
	return n * mult
}

// TestSystemdUnit: deploy/systemd/openxet.service is hardened as documented,
// its MemoryMax leaves room above the largest automatic memory budget, its
// stop timeout covers the shutdown timeout, the flags of its ExecStart are
// ones serve accepts, and (where systemd-analyze exists) it verifies.
func TestSystemdUnit(t *testing.T) {
	const path = "../deploy/systemd/openxet.service"
	u := unitFile(t, path)
	svc := u["Service"]
	for key, want := range map[string]string{
		"DynamicUser":             "yes",
		"StateDirectory":          "openxet",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"NoNewPrivileges":         "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"CapabilityBoundingSet":   "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"SystemCallArchitectures": "native",
		"MemoryDenyWriteExecute":  "yes",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
	} {
		if got := svc[key]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s = %q, want %q", key, got, want)
		}
	}
	if f := svc["SystemCallFilter"]; len(f) == 0 || f[0] != "@system-service" {
		t.Errorf("SystemCallFilter %q, want @system-service first", f)
	}
	if svc["ProcSubset"] != nil {
		t.Error("ProcSubset hides /proc/meminfo, which memory_budget = auto reads")
	}
	if mm := svc["MemoryMax"]; len(mm) != 1 || systemdBytes(t, mm[0]) < maxDefaultBudget*3/2+256<<20 {
		t.Errorf("MemoryMax %q leaves too little room above the largest auto memory budget (%s)", mm, limits.FormatBytes(maxDefaultBudget))
	}
	def, _ := LoadConfig("", nil, nil)
	if ts := svc["TimeoutStopSec"]; len(ts) != 1 {
		t.Errorf("TimeoutStopSec %q", ts)
	} else if d, err := time.ParseDuration(ts[0]); err != nil || d <= def.ShutdownTimeout {
		t.Errorf("TimeoutStopSec %s is not above server.shutdown_timeout %s", ts[0], def.ShutdownTimeout)
	}

	// ExecStart's flags, with the unit's directories in a temporary root
	// and the shipped example as the config file, are accepted by serve.
	exec0 := strings.Fields(svc["ExecStart"][0])
	if exec0[0] != "/usr/local/bin/openxet" || exec0[1] != "serve" {
		t.Fatalf("ExecStart %q", exec0)
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/openxet"), 0o755)
	example, _ := os.ReadFile(examplePath)
	os.WriteFile(filepath.Join(root, "etc/openxet/openxet.toml"), example, 0o644)
	args := []string{"serve", "--print-config"}
	for _, a := range exec0[2:] {
		args = append(args, strings.NewReplacer("%E", filepath.Join(root, "etc"), "%S", filepath.Join(root, "var/lib")).Replace(a))
	}
	code, out, errOut := run(t, nil, args...)
	if code != 0 || !strings.Contains(out, `data_dir = "`+filepath.Join(root, "var/lib/openxet")+`"  # flag --data-dir`) {
		t.Fatalf("ExecStart's flags: %d %q\n%s", code, errOut, out)
	}

	analyze := tool(t, "systemd-analyze", "systemd")
	// verify needs ExecStart's binary to exist: point it at an executable.
	unit, _ := os.ReadFile(path)
	p := filepath.Join(t.TempDir(), "openxet.service")
	os.WriteFile(p, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/openxet", os.Args[0])), 0o644)
	cmd := exec.Command(analyze, "verify", p)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
	if b, err := cmd.CombinedOutput(); err != nil || len(b) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, b)
	}
}

// TestReleaseConfig: .goreleaser.yaml builds static binaries for
// linux/darwin × amd64/arm64 with checksums and sets the version that
// `openxet version` prints; `goreleaser check` runs when the pinned
// GoReleaser is on PATH or in $OPENXET_GORELEASER (deploy/tools builds it).
func TestReleaseConfig(t *testing.T) {
	b, err := os.ReadFile("../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, want := range []string{"version: 2\n", "CGO_ENABLED=0", "goos: [linux, darwin]", "goarch: [amd64, arm64]",
		"-X openxet/cli.Version={{ .Version }}", "-X openxet/cli.Revision={{ .FullCommit }}", "checksum:", "algorithm: sha256",
		"openxet.example.toml", "deploy/systemd/openxet.service"} {
		if !strings.Contains(cfg, want) {
			t.Errorf(".goreleaser.yaml lacks %q", want)
		}
	}
	bin := os.Getenv("OPENXET_GORELEASER")
	if bin == "" {
		bin = tool(t, "goreleaser", "none; build it in deploy/tools, see .goreleaser.yaml")
	}
	out := runTool(t, "..", bin, "check")
	if !strings.Contains(out, "1 configuration file(s) validated") {
		t.Fatalf("goreleaser check:\n%s", out)
	}
}

// TestVersionFromLdflags: the -ldflags of the release build set what
// `openxet version` and openxet_build_info show.
func TestVersionFromLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "openxet")
	cmd := exec.Command("go", "build", "-ldflags", "-X openxet/cli.Version=7.7.7 -X openxet/cli.Revision=abcdef0123456789", "-o", bin, "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(context.Background(), bin, "version").Output()
	if err != nil || string(out) != "openxet 7.7.7 (abcdef012345)\n" {
		t.Fatalf("version: %q %v", out, err)
	}
}
