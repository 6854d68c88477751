package hub_test

import (
	"testing"
)

const lfsFilesHint = "List a revision's files with GET /api/{type}s/{repo}/tree/{rev}?recursive=true; to free a file's bytes, delete it from every revision (a commit, then super-squash) and the collector releases them"

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
		{"GET", "/api/models/alice/m/lfs-files", "openxet does not serve LFS file listings. " + lfsFilesHint},
		{"GET", "/api/datasets/alice/none/lfs-files?cursor=x", "openxet does not serve LFS file listings. " + lfsFilesHint},
		{"POST", "/api/models/alice/m/lfs-files/batch", "openxet does not serve LFS file deletion. " + lfsFilesHint},
		{"GET", "/api/spaces/alice/s/runtime", "openxet does not serve Space runtimes. This server stores a Space's files but runs nothing; run the app elsewhere"},
		{"POST", "/api/spaces/alice/s/secrets", "openxet does not serve Space secrets. This server stores a Space's files but runs nothing; run the app elsewhere"},
		{"POST", "/api/spaces/alice/s/restart", "openxet does not serve Space runtimes. This server stores a Space's files but runs nothing; run the app elsewhere"},
		{"GET", "/api/spaces/alice/s/logs/run", "openxet does not serve Space logs. This server stores a Space's files but runs nothing; run the app elsewhere"},
		{"GET", "/api/models/alice/m/user-access-request/pending", "openxet does not serve gated access requests. Repos here are never gated; a repo's tenant reads it"},
		{"POST", "/api/collections", "openxet does not serve collections. This server stores repos and their files; there is nothing to like, follow or discuss"},
		{"GET", "/api/settings/webhooks", "openxet does not serve webhooks. Poll the repo's refs (GET /api/{type}s/{repo}/refs) instead"},
		{"POST", "/api/jobs/alice", "openxet does not serve jobs. This server stores files and runs nothing"},
		{"POST", "/api/buckets/alice/b", "openxet does not serve buckets. Store the files in a model or dataset repo"},
		{"GET", "/api/organizations/acme/overview", "openxet does not serve organization profiles. GET /api/organizations/{org}/members lists its members and their roles"},
	} {
		hubRefusal(t, c.method+" "+c.path, e.Do(c.method, c.path, alice, []byte(`{}`)), 501, "not_served", "not_served", c.text)
	}
	// Behind the guard: no token, no answer about the feature.
	if r := e.Do("GET", "/api/users/alice/likes", "", nil); r.Status != 401 {
		t.Errorf("anonymous likes: %d %s, want 401", r.Status, r.Body)
	}
	if r := e.Do("GET", "/api/models/alice/m/lfs-files", "", nil); r.Status != 401 || r.Header.Get("X-Error-Code") != "RepoNotFound" {
		t.Errorf("anonymous lfs-files: %d %q %s, want 401 RepoNotFound", r.Status, r.Header.Get("X-Error-Code"), r.Body)
	}
	// A read-only credential learns it is not served, too.
	if r := e.Do("POST", "/api/models/alice/m/lfs-files/batch", e.Credential("alice", "read"), []byte(`{}`)); r.Status != 501 {
		t.Errorf("read-only lfs-files/batch: %d %s, want 501", r.Status, r.Body)
	}
	// lfs-files/duplicate beside them is served.
	if r := e.Do("POST", "/api/models/alice/m/lfs-files/duplicate", alice, []byte(`{"target":{"type":"model","name":"alice/m"},"files":[]}`)); r.Status == 501 || r.Status == 404 && r.Header.Get("X-Error-Code") == "not_found" {
		t.Errorf("lfs-files/duplicate: %d %s", r.Status, r.Body)
	}
	// The repo routes beside them still answer.
	for _, p := range []string{"/api/spaces/alice/s", "/api/models/alice/m", "/api/models/alice/m/tree/main", "/api/spaces"} {
		if r := e.Do("GET", p, alice, nil); r.Status != 200 {
			t.Errorf("%s: %d %s", p, r.Status, r.Body)
		}
	}
}
