package mirror_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestReadsNeverRedirect: huggingface_hub 2.x follows a redirect of a
// download to a Hub host with the user's token, so a redirect to another
// host would hand the caller's token to it. openxet answers every read
// itself, from a repo of its own or from what it mirrors of the upstream:
// no read route answers 3xx or names a Location, whether the file is in
// Xet or not, whole or in a range, found or not, before the mirror holds
// the file and after.
func TestReadsNeverRedirect(t *testing.T) {
	u := newUpstream(t)
	weights := randomBytes(7, 300_000)
	up := u.repo(t, "google-bert", "bert-tiny", map[string][]byte{"model.safetensors": weights}, map[string][]byte{"config.json": []byte(`{"a": 1}`)})
	e := newMirror(t, u)
	tok := e.Credential("bob", "read", "write")
	if r := e.Do("POST", "/api/repos/create", tok, []byte(`{"name":"own","type":"model"}`)); r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	line := `{"key":"header","value":{"summary":"add"}}` + "\n" +
		`{"key":"file","value":{"path":"README.md","content":"aGVsbG8K","encoding":"base64"}}` + "\n"
	if r := e.Do("POST", "/api/models/bob/own/commit/main", tok, []byte(line)); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	paths := []string{
		"/google-bert/bert-tiny/resolve/main/model.safetensors",
		"/google-bert/bert-tiny/resolve/" + up.SHA + "/model.safetensors",
		"/google-bert/bert-tiny/resolve/main/config.json",
		"/google-bert/bert-tiny/raw/main/config.json",
		"/google-bert/bert-tiny/resolve/main/missing.bin",
		"/google-bert/no-such-repo/resolve/main/config.json",
		"/bob/own/resolve/main/README.md",
		"/bob/own/raw/main/README.md",
		"/bob/own/resolve/no-such-branch/README.md",
		"/bob/own/resolve/main/missing.txt",
	}
	for round := range 2 { // before the mirror holds a file, and after
		for _, p := range paths {
			for _, method := range []string{"HEAD", "GET"} {
				for _, rng := range []string{"", "bytes=1-10"} {
					req, _ := http.NewRequest(method, e.URL+p, nil)
					req.Header.Set("Authorization", "Bearer "+tok)
					if rng != "" {
						req.Header.Set("Range", rng)
					}
					res, err := noFollow.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					res.Body.Close()
					if found := !strings.Contains(p, "missing") && !strings.Contains(p, "no-such"); found != (res.StatusCode/100 == 2) {
						t.Errorf("round %d: %s %s (Range %q): %d", round, method, p, rng, res.StatusCode)
					}
					if res.StatusCode/100 == 3 || res.Header.Get("Location") != "" {
						t.Errorf("round %d: %s %s (Range %q): %d, Location %q", round, method, p, rng, res.StatusCode, res.Header.Get("Location"))
					}
				}
			}
		}
	}
}
