package hub_test

import (
	"testing"
)

// TestNotServedFeaturesSaySo: the routes of Hub features openxet does not
// serve answer 501 not_served with "openxet does not serve X" in
// X-Error-Message and the body's error (what huggingface_hub and
// @huggingface/hub print), behind the guard; the repo routes beside them
// still answer.
func TestNotServedFeaturesSaySo(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	e.createRepoJSON(alice, `{"name":"s","type":"space"}`)
	for _, c := range []struct{ method, path, text string }{
		{"POST", "/api/models/alice/m/like", "openxet does not serve likes. " + "This server stores repos and their files; there is nothing to like, follow or discuss"},
		{"DELETE", "/api/models/alice/m/like", "openxet does not serve likes. This server stores repos and their files; there is nothing to like, follow or discuss"},
		{"GET", "/api/datasets/alice/d/likers", "openxet does not serve likes. This server stores repos and their files; there is nothing to like, follow or discuss"},
		{"GET", "/api/users/alice/likes", "openxet does not serve likes. This server stores repos and their files; there is nothing to like, follow or discuss"},
		{"GET", "/api/models/alice/m/discussions", "openxet does not serve discussions or pull requests. Commit to a branch instead (create_pr=False), and merge branches on your side"},
		{"POST", "/api/models/alice/m/discussions", "openxet does not serve discussions or pull requests. Commit to a branch instead (create_pr=False), and merge branches on your side"},
		{"POST", "/api/models/alice/m/discussions/3/comment", "openxet does not serve discussions or pull requests. Commit to a branch instead (create_pr=False), and merge branches on your side"},
		{"POST", "/api/models/alice/m/preupload/main?create_pr=1", "openxet does not serve pull requests. Commit to a branch instead (create_pr=False), and merge branches on your side"},
		{"GET", "/api/spaces/alice/s/runtime", "openxet does not serve Space runtimes. This server stores a Space's files but runs nothing; run the app elsewhere"},
		{"POST", "/api/spaces/alice/s/secrets", "openxet does not serve Space secrets. This server stores a Space's files but runs nothing; run the app elsewhere"},
		{"POST", "/api/spaces/alice/s/restart", "openxet does not serve Space runtimes. This server stores a Space's files but runs nothing; run the app elsewhere"},
		{"GET", "/api/spaces/alice/s/logs/run", "openxet does not serve Space logs. This server stores a Space's files but runs nothing; run the app elsewhere"},
		{"GET", "/api/models/alice/m/user-access-request/pending", "openxet does not serve gated access requests. Repos here are never gated; a repo's tenant reads it"},
		{"POST", "/api/collections", "openxet does not serve collections. This server stores repos and their files; there is nothing to like, follow or discuss"},
		{"GET", "/api/settings/webhooks", "openxet does not serve webhooks. Poll the repo's refs (GET /api/{type}s/{repo}/refs) instead"},
		{"POST", "/api/jobs/alice", "openxet does not serve jobs. This server stores files and runs nothing"},
		{"POST", "/api/buckets/alice/b", "openxet does not serve buckets. Store the files in a model or dataset repo"},
		{"GET", "/api/organizations/acme/members", "openxet does not serve organizations. A namespace is a tenant"},
	} {
		hubRefusal(t, c.method+" "+c.path, e.Do(c.method, c.path, alice, []byte(`{}`)), 501, "not_served", "not_served", c.text)
	}
	// Behind the guard: no token, no answer about the feature.
	if r := e.Do("GET", "/api/users/alice/likes", "", nil); r.Status != 401 {
		t.Errorf("anonymous likes: %d %s, want 401", r.Status, r.Body)
	}
	// The repo routes beside them still answer.
	for _, p := range []string{"/api/spaces/alice/s", "/api/models/alice/m", "/api/models/alice/m/tree/main", "/api/spaces"} {
		if r := e.Do("GET", p, alice, nil); r.Status != 200 {
			t.Errorf("%s: %d %s", p, r.Status, r.Body)
		}
	}
}
