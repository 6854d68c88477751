package hub_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"

	"openxet/server"
	"openxet/server/servertest"
)

// The Hub's tests run it mounted in a whole server (servertest): every
// Hub route sits behind the server's auth and limits, and its refusals are
// rendered by the server.

// env is a whole server with the helpers of these tests.
type env struct{ *servertest.Env }

func newEnv(t testing.TB, mutate ...func(*server.Config)) env {
	t.Helper()
	return env{servertest.New(t, mutate...)}
}

type response = servertest.Response

// commitLines commits the operation lines given (NDJSON) to repo's main.
func (e env) commitLines(token, repo string, lines ...string) response {
	e.TB.Helper()
	body := `{"key":"header","value":{"summary":"test"}}` + "\n"
	for _, l := range lines {
		body += l + "\n"
	}
	return e.Do("POST", "/api/models/"+repo+"/commit/main", token, []byte(body))
}

func regularFileLine(path string, content []byte) string {
	return fmt.Sprintf(`{"key":"file","value":{"path":%q,"content":%q,"encoding":"base64"}}`, path, base64.StdEncoding.EncodeToString(content))
}

// xetFileLine uploads a file through the CAS (xorb, then a shard that
// records its sha256) and returns the commit line adding it at path.
func (e env) xetFileLine(token, path string, seed uint64) (line string, content []byte) {
	e.TB.Helper()
	sha, content := e.XetFile(token, seed)
	return fmt.Sprintf(`{"key":"lfsFile","value":{"path":%q,"algo":"sha256","oid":%q,"size":%d}}`, path, sha, len(content)), content
}

func (e env) createRepoJSON(token, body string) {
	e.TB.Helper()
	if r := e.Do("POST", "/api/repos/create", token, []byte(body)); r.Status != 200 {
		e.TB.Fatalf("create %s: %d %s", body, r.Status, r.Body)
	}
}

func mustHead(t *testing.T, e env, token, repo string) string {
	t.Helper()
	var info struct{ SHA string }
	json.Unmarshal(e.Do("GET", "/api/models/"+repo, token, nil).Body, &info)
	if info.SHA == "" {
		t.Fatalf("no head for %s", repo)
	}
	return info.SHA
}

// hubRefusal checks a refusal on a Hub route: the sentence both stock
// clients print is the body's "error" and X-Error-Message; the machine code
// is the body's "code" and X-Error-Code (xErrorCode when the route names
// the Hub's own code); message, hint and request_id are there too.
func hubRefusal(t *testing.T, name string, r response, status int, code, xErrorCode, text string) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d (%s)", name, r.Status, status, r.Body)
	}
	m := r.JSON(t)
	if m["error"] != text || r.Header.Get("X-Error-Message") != text {
		t.Errorf("%s: error %q, X-Error-Message %q; want both %q", name, m["error"], r.Header.Get("X-Error-Message"), text)
	}
	if m["code"] != code || r.Header.Get("X-Error-Code") != xErrorCode {
		t.Errorf("%s: code %v, X-Error-Code %q; want %s, %s", name, m["code"], r.Header.Get("X-Error-Code"), code, xErrorCode)
	}
	if m["message"] == nil || m["request_id"] != r.Header.Get("X-Request-Id") || m["request_id"] == "" {
		t.Errorf("%s: message %v, request_id %v (header %q)", name, m["message"], m["request_id"], r.Header.Get("X-Request-Id"))
	}
	return m
}
