package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCredentialsListActive: `credentials list --active` leaves revoked
// credentials out, in the table and in --json, offline and through the
// admin API alike; without it revoked ones are listed as before.
func TestCredentialsListActive(t *testing.T) {
	url, tok := loadTestServer(t)
	remote := map[string]string{"OPENXET_SERVER": url, "OPENXET_TOKEN": tok}
	offlineDir := serverDataDir(t)
	for _, c := range []struct {
		name  string
		env   map[string]string
		extra []string
	}{
		{"through the admin API", remote, nil},
		{"offline", nil, []string{"--data-dir", offlineDir}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The flags go before any argument: urfave/cli stops reading
			// flags at the first one.
			cmd := func(sub string, args ...string) (int, string, string) {
				return run(t, c.env, append(append([]string{"credentials", sub}, c.extra...), args...)...)
			}
			idOf := func(out string) string { return strings.Fields(strings.SplitN(out, "\n", 2)[0])[1] }
			_, out, _ := cmd("create", "--tenant", "alice", "--scope", "read")
			kept := idOf(out)
			_, out, _ = cmd("create", "--tenant", "alice", "--scope", "write")
			gone := idOf(out)
			if code, _, errOut := cmd("revoke", gone); code != 0 {
				t.Fatalf("revoke: %s", errOut)
			}

			code, all, errOut := cmd("list", "--tenant", "alice")
			if code != 0 || !strings.Contains(all, kept) || !strings.Contains(all, gone) {
				t.Fatalf("list: %d %s %s", code, all, errOut)
			}
			code, active, errOut := cmd("list", "--tenant", "alice", "--active")
			if code != 0 || !strings.Contains(active, kept) || strings.Contains(active, gone) {
				t.Fatalf("list --active: %d\n%s%s", code, active, errOut)
			}
			if head := strings.SplitN(all, "\n", 2)[0]; !strings.HasPrefix(active, head+"\n") {
				t.Errorf("list --active changed the table's header: %q, want %q", strings.SplitN(active, "\n", 2)[0], head)
			}
			_, js, _ := cmd("list", "--tenant", "alice", "--active", "--json")
			var views []struct {
				ID      string
				Revoked string
			}
			if err := json.Unmarshal([]byte(js), &views); err != nil {
				t.Fatalf("--json: %v %s", err, js)
			}
			if len(views) != 1 || views[0].ID != kept || views[0].Revoked != "" {
				t.Fatalf("list --active --json: %s, want only %s", js, kept)
			}
		})
	}
}
