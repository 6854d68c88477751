package cli

import (
	"strings"
	"testing"
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
	if code, out, errOut := run(t, env, "limits", "set", "--tenant", "carol", "--create", "--quota", "1GiB"); code != 0 || !strings.Contains(out, "1GiB") {
		t.Fatalf("set --create: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, env, "limits", "get", "--tenant", "carol"); code != 0 || !strings.Contains(out, "1GiB") {
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
	for _, want := range []string{"0 means unlimited", "--create", "not changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "(default: 0)") {
		t.Errorf("help still says (default: 0):\n%s", out)
	}
}
