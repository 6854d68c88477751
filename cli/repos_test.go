package cli

import (
	"net/http"
	"strings"
	"testing"
)

// TestReposVisibility: `openxet repos visibility` reads and sets a repo's
// visibility through the admin API; a bad value or name exits non-zero
// with the server's refusal and changes nothing.
func TestReposVisibility(t *testing.T) {
	url, tok := loadTestServer(t)
	env := map[string]string{"OPENXET_SERVER": url, "OPENXET_TOKEN": tok}
	code, out, errOut := run(t, env, "credentials", "create", "--tenant", "alice", "--scope", "write")
	if code != 0 {
		t.Fatalf("credentials create: %d %s %s", code, out, errOut)
	}
	alice := tokenOf(t, out)
	if st := httpStatus(t, "POST", url+"/api/repos/create", alice, `{"name":"base"}`); st != 200 {
		t.Fatalf("create repo: %d", st)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"alice/base"}, 0, "model alice/base: private"},
		{[]string{"alice/base", "public"}, 0, "model alice/base: public"},
		{[]string{"alice/base"}, 0, "model alice/base: public"},
		{[]string{"alice/base", "everyone"}, 1, "400"},
		{[]string{"alice/base"}, 0, "model alice/base: public"},
		{[]string{"alice/none", "public"}, 1, "404"},
		{[]string{"--repo-type", "dataset", "alice/base"}, 1, "404"},
		{[]string{"alice"}, 2, "TENANT/NAME"},
		{[]string{}, 2, "TENANT/NAME"},
	} {
		code, out, errOut := run(t, env, append([]string{"repos", "visibility"}, c.args...)...)
		if code != c.code || !strings.Contains(out+errOut, c.says) {
			t.Errorf("repos visibility %v: exit %d, %q %q; want %d and %q", c.args, code, out, errOut, c.code, c.says)
		}
	}
}

// httpStatus sends one request with a bearer token and returns its status.
func httpStatus(t *testing.T, method, url, token, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
