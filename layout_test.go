package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLayout keeps the dependency rules of design §1 and style.md: imports
// point one way (cli → server → hub → {limits, budget, store} → xet; hub
// never imports server), only server and hub import echo, only cli
// urfave/cli, only store database/sql, gocloud.dev and the PostgreSQL driver.
func TestLayout(t *testing.T) {
	allowed := map[string][]string{ // openxet packages each package may import
		"xet":               {},
		"limits":            {},
		"budget":            {},
		"work":              {},
		"turns":             {},
		"wirejson":          {},
		"refusal":           {"openxet/wirejson"},
		"store":             {"openxet/xet"},
		"admin":             {},
		"load":              {"openxet/xet", "openxet/admin"},
		"hub":               {"openxet/xet", "openxet/store", "openxet/limits", "openxet/budget", "openxet/work", "openxet/refusal"},
		"server":            {"openxet/xet", "openxet/store", "openxet/limits", "openxet/budget", "openxet/work", "openxet/turns", "openxet/refusal", "openxet/wirejson", "openxet/hub"},
		"server/servertest": {"openxet/server", "openxet/store", "openxet/limits", "openxet/budget", "openxet/xet"},
		"cli":               {"openxet/xet", "openxet/store", "openxet/limits", "openxet/budget", "openxet/work", "openxet/server", "openxet/load", "openxet/admin"},
	}
	owners := map[string][]string{ // third-party import prefix → the packages that may use it
		"github.com/labstack/echo": {"server", "hub"},
		"github.com/urfave/cli":    {"cli"},
		"database/sql":             {"store"},
		"gocloud.dev":              {"store"},
		"github.com/aws/":          {"store"},
		"github.com/jackc/pgx":     {"store"},
		"go.yaml.in/yaml":          {"hub"},
	}
	for pkg, ok := range allowed {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "./"+pkg).Output()
		if err != nil {
			t.Fatalf("go list ./%s: %v", pkg, err)
		}
		for _, imp := range strings.Fields(string(out)) {
			if strings.HasPrefix(imp, "openxet/") && !slices.Contains(ok, imp) {
				t.Errorf("%s imports %s, against design §1", pkg, imp)
			}
			for prefix, owner := range owners {
				if strings.HasPrefix(imp, prefix) && !slices.Contains(owner, pkg) {
					t.Errorf("%s imports %s; only %s may", pkg, imp, strings.Join(owner, " and "))
				}
			}
		}
	}
}
