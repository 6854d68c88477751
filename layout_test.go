package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLayout keeps the dependency rules of docs/design.md §1: imports
// point one way (cli → server → hub → {limits, budget, store} → {xet,
// gitobj}; only gitobj imports go-git; hub
// never imports server; store → store/accounts → {store/index,
// store/objects} → store/fault), only server and hub import echo, only cli
// urfave/cli, only store, store/accounts and store/index (and their test
// helpers) database/sql and the
// PostgreSQL driver, only store/objects (and store/s3test) gocloud.dev and
// the AWS SDK. Every package `go list ./...` finds must have a row: a new
// package gets one with the openxet packages it may import, or the test
// fails.
func TestLayout(t *testing.T) {
	allowed := map[string][]string{ // openxet packages each package may import ("." is the module root)
		".":                      {"openxet/cli"},
		"xet":                    {"openxet/xet/internal/widehash"},
		"xet/internal/widehash":  {},
		"limits":                 {},
		"fairq":                  {},
		"budget":                 {"openxet/fairq"},
		"work":                   {"openxet/fairq"},
		"turns":                  {},
		"wirejson":               {},
		"refusal":                {"openxet/wirejson"},
		"gitobj":                 {},                 // git's object model: pure, nothing of openxet
		"gitserve":               {"openxet/gitobj"}, // git's protocols for one repo: no store, no HTTP routes
		"store":                  {"openxet/xet", "openxet/gitobj", "openxet/store/keep", "openxet/store/accounts", "openxet/store/objects", "openxet/store/index", "openxet/store/fault"},
		"store/keep":             {},                                                                      // the keep rule: pure, nothing of openxet
		"store/ingest":           {"openxet/xet", "openxet/store/objects"},                                // never openxet/store: it stores through ingest.CAS
		"store/accounts":         {"openxet/store/index", "openxet/store/objects", "openxet/store/fault"}, // never openxet/store: store → accounts
		"store/objects":          {"openxet/store/fault"},                                                 // never openxet/store: store → objects
		"store/fault":            {},
		"store/index":            {"openxet/store/fault"}, // never openxet/store: store → index
		"store/pgtest":           {"openxet/testproc"},
		"store/s3test":           {"openxet/testcert", "openxet/testproc"},
		"testcert":               {},
		"testgit":                {},
		"testproc":               {"openxet/admin"},
		"admin":                  {},
		"load":                   {"openxet/xet", "openxet/admin", "openxet/load/report"},
		"load/report":            {},
		"hub":                    {"openxet/xet", "openxet/gitobj", "openxet/gitserve", "openxet/store", "openxet/store/accounts", "openxet/store/ingest", "openxet/limits", "openxet/budget", "openxet/work", "openxet/refusal"},
		"server":                 {"openxet/xet", "openxet/store", "openxet/store/accounts", "openxet/limits", "openxet/budget", "openxet/work", "openxet/turns", "openxet/refusal", "openxet/wirejson", "openxet/hub", "openxet/mirror"},
		"server/servertest":      {"openxet/server", "openxet/store", "openxet/limits", "openxet/budget", "openxet/xet"},
		"cli":                    {"openxet/xet", "openxet/store", "openxet/store/accounts", "openxet/limits", "openxet/budget", "openxet/work", "openxet/server", "openxet/load", "openxet/admin", "openxet/mirror", "openxet/mirror/upstream"},
		"compat/tools/manyterms": {"openxet/xet"},
		"load/cmd/gcupload":      {"openxet/testproc", "openxet/xet"},
		"load/cmd/memstorm":      {"openxet/testproc", "openxet/xet"},
		"load/cmd/tracewait":     {},
		"mirror":                 {"openxet/xet", "openxet/store", "openxet/store/accounts", "openxet/store/ingest", "openxet/refusal", "openxet/work"},
		"mirror/upstream":        {"openxet/mirror", "openxet/xet"},
		"mirror/upstreamtest":    {"openxet/xet"},
	}
	owners := map[string][]string{ // third-party import prefix → the packages that may use it
		"github.com/labstack/echo": {"server", "hub"},
		"github.com/urfave/cli":    {"cli"},
		"database/sql":             {"store", "store/index", "store/accounts", "store/pgtest"},
		"gocloud.dev":              {"store/objects"},
		"github.com/aws/":          {"store/objects", "store/s3test"},
		"github.com/jackc/pgx":     {"store", "store/index", "store/pgtest"},
		"go.yaml.in/yaml":          {"hub"},
		"github.com/go-git/":       {"gitobj", "gitserve"},
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], "openxet"), "/")
		if pkg == "" {
			pkg = "."
		}
		seen[pkg] = true
		ok, known := allowed[pkg]
		if !known {
			t.Errorf("package %s has no row in TestLayout: add one with the openxet packages it may import", pkg)
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, "openxet/") && !slices.Contains(ok, imp) {
				t.Errorf("%s imports %s, against docs/design.md §1", pkg, imp)
			}
			for prefix, owner := range owners {
				if strings.HasPrefix(imp, prefix) && !slices.Contains(owner, pkg) {
					t.Errorf("%s imports %s; only %s may", pkg, imp, strings.Join(owner, " and "))
				}
			}
		}
	}
	for pkg := range allowed {
		if !seen[pkg] {
			t.Errorf("TestLayout has a row for %s, which go list ./... does not find", pkg)
		}
	}
}
