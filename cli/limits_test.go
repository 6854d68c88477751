package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"openxet/xet"
)

// TestLimitsSetRefusesBadValues: a value `limits set` cannot send exactly is
// refused before anything is sent, naming the flag, and the tenant's
// limits stay as they were. Before, --quota 1.5 set 1 byte, NaN and Inf
// rates failed inside JSON encoding, and 8EiB was "not a size".
func TestLimitsSetRefusesBadValues(t *testing.T) {
	url, tok := loadTestServer(t)
	env := map[string]string{"OPENXET_SERVER": url, "OPENXET_TOKEN": tok}
	if code, out, errOut := run(t, env, "credentials", "create", "--tenant", "alice", "--scope", "read"); code != 0 {
		t.Fatalf("credentials create: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, env, "limits", "set", "--tenant", "alice", "--quota", "1.5KiB", "--requests-per-second", "0.001"); code != 0 || !strings.Contains(out, "1536") {
		t.Fatalf("valid set: %d %s %s", code, out, errOut)
	}
	_, before, _ := run(t, env, "limits", "get", "--tenant", "alice", "--json")
	for _, c := range []struct {
		flag, value, says string
	}{
		{"quota", "1.5", "whole number of bytes"},
		{"quota", "1.5B", "whole number of bytes"},
		{"quota", "1.1KiB", "whole number of bytes"},
		{"quota", "8EiB", "too large"},
		{"quota", "lots", "not a size"},
		{"requests-per-second", "NaN", "between"},
		{"requests-per-second", "Inf", "between"},
		{"requests-per-second", "-1", "between"},
		{"requests-per-second", "1e-9", "between"},
		{"requests-per-second", "2e9", "between"},
		{"credential-requests-per-second", "NaN", "between"},
		{"credential-requests-per-second", "-Inf", "between"},
		{"credential-requests-per-second", "1e-300", "between"},
	} {
		code, out, errOut := run(t, env, "limits", "set", "--tenant", "alice", "--"+c.flag, c.value)
		if code != 2 || !strings.Contains(errOut, "--"+c.flag+":") || !strings.Contains(errOut, c.says) {
			t.Errorf("--%s %s: exit %d, stderr %q, stdout %q; want 2 and a message naming the flag and saying %q", c.flag, c.value, code, errOut, out, c.says)
		}
		if _, after, _ := run(t, env, "limits", "get", "--tenant", "alice", "--json"); after != before {
			t.Fatalf("--%s %s changed the limits: %s, was %s", c.flag, c.value, after, before)
		}
	}
}

// TestLimitsUnknownTenant: `limits get` and `limits set` refuse a tenant the
// server does not know (a typo would otherwise show or set limits nobody
// has) and say how to create it; `limits set --create` does.
func TestLimitsUnknownTenant(t *testing.T) {
	url, tok := loadTestServer(t)
	env := map[string]string{"OPENXET_SERVER": url, "OPENXET_TOKEN": tok}
	if code, out, errOut := run(t, env, "credentials", "create", "--tenant", "alice", "--scope", "read"); code != 0 {
		t.Fatalf("credentials create: %d %s %s", code, out, errOut)
	}
	for _, args := range [][]string{
		{"limits", "get", "--tenant", "alcie"},
		{"limits", "set", "--tenant", "alcie", "--quota", "1GiB"},
		{"limits", "set", "--tenant", "alcie", "--reset", "quota"},
	} {
		code, out, errOut := run(t, env, args...)
		if code == 0 || !strings.Contains(errOut, "alcie is unknown") || !strings.Contains(errOut, "--create") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a refusal naming the tenant and --create", args, code, out, errOut)
		}
	}
	if _, out, _ := run(t, env, "limits", "list"); strings.Contains(out, "alcie") {
		t.Fatalf("a refused set created the tenant:\n%s", out)
	}
	if code, out, errOut := run(t, env, "limits", "set", "--tenant", "carol", "--create", "--quota", "1GiB"); code != 0 || !strings.Contains(out, "1 GiB") {
		t.Fatalf("set --create: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, env, "limits", "get", "--tenant", "carol"); code != 0 || !strings.Contains(out, "1 GiB") {
		t.Fatalf("get after --create: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, env, "limits", "set", "--tenant", "alice", "--create", "--burst", "5"); code != 0 || !strings.Contains(out, "5") {
		t.Fatalf("set --create on a known tenant: %d %s %s", code, out, errOut)
	}
}

// TestLimitsSetHelp: the help of `limits set` says what a value means
// instead of showing "(default: 0)", which read as "0 is the default".
func TestLimitsSetHelp(t *testing.T) {
	code, out, _ := run(t, nil, "limits", "set", "--help")
	if code != 0 {
		t.Fatalf("help: %d", code)
	}
	for _, want := range []string{"0 means unlimited", "--create", "not changed", "--suspend", "--resume", "tenant_suspended"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "(default: 0)") {
		t.Errorf("help still says (default: 0):\n%s", out)
	}
}

// casStatus sends one CAS request with token and returns its status and
// error code: a reconstruction of a file nobody has, 404 when admitted.
func casStatus(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/reconstructions/"+strings.Repeat("ab", 32), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct{ Error string }
	json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body.Error
}

// tokenOf returns the token line of `credentials create`.
func tokenOf(t *testing.T, out string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if tok, ok := strings.CutPrefix(line, "token:  "); ok {
			return tok
		}
	}
	t.Fatalf("no token in %q", out)
	return ""
}

// TestLimitsSuspendResume: `limits set --suspend` stops a tenant's requests
// (403 tenant_suspended) without touching its credentials, other flags
// keep it, get and list show it, --resume lifts it, and both at once are
// refused without changing anything.
func TestLimitsSuspendResume(t *testing.T) {
	url, tok := loadTestServer(t)
	env := map[string]string{"OPENXET_SERVER": url, "OPENXET_TOKEN": tok}
	code, out, errOut := run(t, env, "credentials", "create", "--tenant", "alice", "--scope", "read")
	if code != 0 {
		t.Fatalf("credentials create: %d %s %s", code, out, errOut)
	}
	alice := tokenOf(t, out)
	if st, _ := casStatus(t, url, alice); st != 404 {
		t.Fatalf("before: %d, want 404 (admitted)", st)
	}

	if code, out, errOut := run(t, env, "limits", "set", "--tenant", "alice", "--suspend"); code != 0 || !strings.Contains(out, "suspended") || !strings.Contains(out, "--resume") {
		t.Fatalf("set --suspend: %d\n%s%s", code, out, errOut)
	}
	if st, ec := casStatus(t, url, alice); st != 403 || ec != "tenant_suspended" {
		t.Fatalf("suspended: %d %s, want 403 tenant_suspended", st, ec)
	}
	// Another flag keeps the suspension.
	if code, out, errOut := run(t, env, "limits", "set", "--tenant", "alice", "--quota", "1GiB"); code != 0 || !strings.Contains(out, "suspended") {
		t.Fatalf("set --quota on a suspended tenant: %d\n%s%s", code, out, errOut)
	}
	if st, _ := casStatus(t, url, alice); st != 403 {
		t.Fatalf("--quota lifted the suspension: %d", st)
	}
	_, js, _ := run(t, env, "limits", "get", "--tenant", "alice", "--json")
	var v struct {
		Suspended bool
		Overrides struct{ Suspended bool }
	}
	if err := json.Unmarshal([]byte(js), &v); err != nil || !v.Suspended || !v.Overrides.Suspended {
		t.Fatalf("get --json: %v %s", err, js)
	}
	if _, out, _ := run(t, env, "limits", "list"); !tableHas(out, "alice", "STATE", "suspended") || !tableHas(out, "admin", "STATE", "active") {
		t.Fatalf("list does not show who is suspended:\n%s", out)
	}

	code, out, errOut = run(t, env, "limits", "set", "--tenant", "alice", "--suspend", "--resume")
	if code != 2 || !strings.Contains(errOut, "--suspend") || !strings.Contains(errOut, "--resume") {
		t.Fatalf("--suspend --resume: %d %q %q, want exit 2 naming both", code, out, errOut)
	}
	if _, after, _ := run(t, env, "limits", "get", "--tenant", "alice", "--json"); after != js {
		t.Fatalf("a refused set changed the limits: %s, was %s", after, js)
	}

	if code, out, errOut := run(t, env, "limits", "set", "--tenant", "alice", "--resume"); code != 0 || !strings.Contains(out, "active") {
		t.Fatalf("set --resume: %d\n%s%s", code, out, errOut)
	}
	if st, _ := casStatus(t, url, alice); st != 404 {
		t.Fatalf("resumed: %d, want 404 (admitted)", st)
	}
	if _, out, _ := run(t, env, "limits", "get", "--tenant", "alice"); !strings.Contains(out, "1 GiB") {
		t.Fatalf("--resume dropped the quota:\n%s", out)
	}
}

// tableHas reports whether the row of a tab-aligned table that starts with
// first has want in the column headed column.
func tableHas(table, first, column, want string) bool {
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) < 2 {
		return false
	}
	col := strings.Index(lines[0], column)
	if col < 0 {
		return false
	}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, first+" ") && len(l) > col && strings.HasPrefix(l[col:], want) {
			return true
		}
	}
	return false
}

// TestLimitsHumanSizes: limits list and get show sizes rounded for people
// (4.7 GiB rather than 5023741823 B), get with the exact bytes beside,
// and --json keeps bytes.
func TestLimitsHumanSizes(t *testing.T) {
	url, tok := loadTestServer(t)
	env := map[string]string{"OPENXET_SERVER": url, "OPENXET_TOKEN": tok}
	_, out, _ := run(t, env, "credentials", "create", "--tenant", "alice", "--scope", "write")
	alice := tokenOf(t, out)
	body, info := xet.BuildXorb([][]byte{bytes.Repeat([]byte("seven b"), 3000)}, false)
	req, _ := http.NewRequest("POST", url+"/v1/xorbs/default/"+info.Hash.String(), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+alice)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("upload: %v %v", res, err)
	}
	res.Body.Close()
	usage := int64(info.StreamLen)
	if usage%1024 == 0 || usage < 1024 {
		t.Fatalf("the test needs a usage that is not whole KiB, got %d", usage)
	}
	human := fmt.Sprintf("%.1f KiB", float64(usage)/1024)
	if code, out, errOut := run(t, env, "limits", "set", "--tenant", "alice", "--quota", "1.5KiB"); code != 0 {
		t.Fatalf("set: %d %s %s", code, out, errOut)
	}

	_, list, _ := run(t, env, "limits", "list")
	if !tableHas(list, "alice", "USAGE", human) || !tableHas(list, "alice", "QUOTA", "1.5 KiB") || !tableHas(list, "admin", "QUOTA", "unlimited") {
		t.Errorf("list does not show %s used of 1.5 KiB:\n%s", human, list)
	}
	if strings.Contains(list, fmt.Sprint(usage)) {
		t.Errorf("list shows raw bytes:\n%s", list)
	}
	_, get, _ := run(t, env, "limits", "get", "--tenant", "alice")
	for _, want := range []string{human + " (" + fmt.Sprint(usage) + " bytes)", "1.5 KiB (1536 bytes)"} {
		if !strings.Contains(get, want) {
			t.Errorf("get lacks %q:\n%s", want, get)
		}
	}
	_, js, _ := run(t, env, "limits", "list", "--json")
	var tenants []struct {
		Tenant     string
		UsageBytes int64 `json:"usage_bytes"`
		QuotaBytes int64 `json:"quota_bytes"`
	}
	if err := json.Unmarshal([]byte(js), &tenants); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tn := range tenants {
		if tn.Tenant == "alice" {
			found = tn.UsageBytes == usage && tn.QuotaBytes == 1536
		}
	}
	if !found {
		t.Errorf("list --json does not keep bytes: %s", js)
	}
}
