package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// Copies between tenants (docs/sharing.md, "Copying files between
// tenants"): huggingface_hub's CommitOperationCopy from another tenant's
// repo, as it sends it: lfs-files/duplicate on the source, then a commit
// into the target naming the file by its SHA-256 alone.

// duplicateBody is the body huggingface_hub's _duplicate_lfs_files sends.
func duplicateBody(target string, files ...hubFile) []byte {
	var fs []string
	for _, f := range files {
		fs = append(fs, fmt.Sprintf(`{"xetHash":%q,"sha256":%q,"filename":"weights.bin"}`, f.info.Hash.String(), f.sha))
	}
	return []byte(fmt.Sprintf(`{"target":{"type":"model","name":%q},"files":[%s]}`, target, strings.Join(fs, ",")))
}

// copyLine is the commit line of a CommitOperationCopy of an LFS file: its
// oid, no size.
func copyLine(path string, f hubFile) string {
	return fmt.Sprintf(`{"key":"lfsFile","value":{"path":%q,"algo":"sha256","oid":%q}}`, path, f.sha)
}

// duplicate posts a duplicate of files from alice/src into target as tok.
func (e *testEnv) duplicate(tok, src, target string, files ...hubFile) response {
	e.t.Helper()
	return e.do("POST", "/api/models/"+src+"/lfs-files/duplicate", tok, duplicateBody(target, files...), "Content-Type: application/json")
}

// failedOf is the answer's failed list.
func failedOf(t *testing.T, r response) []any {
	t.Helper()
	if r.Status != 200 {
		t.Fatalf("duplicate: %d %s", r.Status, r.Body)
	}
	failed, ok := r.json(t)["failed"].([]any)
	if !ok {
		t.Fatalf("no failed list: %s", r.Body)
	}
	return failed
}

// createRepoBody makes a repo from a repos/create body.
// wantHubError checks a Hub route's refusal: its status and the
// X-Error-Code huggingface_hub reads.
func wantHubError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.Status != status || r.Header.Get("X-Error-Code") != code {
		t.Fatalf("%d %s (%s), want %d %s", r.Status, r.Header.Get("X-Error-Code"), r.Body, status, code)
	}
}

func (e *testEnv) createRepoBody(tok, body string) {
	e.t.Helper()
	if r := e.do("POST", "/api/repos/create", tok, []byte(body)); r.Status != 200 {
		e.t.Fatalf("create %s: %d %s", body, r.Status, r.Body)
	}
}

// TestCopyFromAnotherTenant: bob copies weights.bin of alice's internal and
// public repos into a repo of his own, as huggingface_hub does; the copy
// downloads as the same bytes and reconstructs with bob's own credential.
// With dedup_scope global bob is charged nothing (his file references
// alice's xorb, as his upload of the same bytes would); with tenant he owns
// the xorb and is charged its stored size, once. Alice's usage and the
// bucket's xorbs do not change.
func TestCopyFromAnotherTenant(t *testing.T) {
	for _, scope := range []string{"global", "tenant"} {
		t.Run(scope, func(t *testing.T) {
			e := newSharingEnv(t, false, func(c *Config) { c.DedupScope = scope })
			e.createRepoBody(e.bob, `{"name":"copy"}`)
			aliceBefore, xorbsBefore := e.usageOf("alice"), countPrefix(e.snapshot().Objects, "xorbs/")
			var charged int64
			for _, name := range []string{"intern", "pub"} {
				f := e.files[name]
				if failed := failedOf(t, e.duplicate(e.bob, "alice/"+name, "bob/copy", f)); len(failed) != 0 {
					t.Fatalf("%s: failed %v", name, failed)
				}
				if r := e.hubCommit(e.bob, "bob/copy", "main", copyLine(name+".bin", f)); r.Status != 200 {
					t.Fatalf("%s: copy commit: %d %s", name, r.Status, r.Body)
				}
				got := e.do("GET", "/bob/copy/resolve/main/"+name+".bin", e.bob, nil)
				want := e.do("GET", "/alice/"+name+"/resolve/main/weights.bin", e.alice, nil)
				if got.Status != 200 || !bytes.Equal(got.Body, want.Body) || int64(len(got.Body)) != f.size {
					t.Fatalf("%s: bob's copy downloads %d, %d bytes; want alice's %d bytes", name, got.Status, len(got.Body), f.size)
				}
				if r := e.reconstruct(e.bob, f); r.Status != 200 {
					t.Errorf("%s: bob reconstructs his copy with his credential: %d %s", name, r.Status, r.Body)
				}
				if scope == "tenant" {
					charged += f.xorb.StreamLen
					if owns, _ := e.st.OwnsXorb(context.Background(), "bob", f.xorb.Hash); !owns {
						t.Errorf("%s: bob does not own the copy's xorb", name)
					}
				}
				if got := e.usageOf("bob"); got != charged {
					t.Errorf("%s: bob charged %d bytes, want %d", name, got, charged)
				}
				// Again: nothing more to charge.
				if failed := failedOf(t, e.duplicate(e.bob, "alice/"+name, "bob/copy", f)); len(failed) != 0 || e.usageOf("bob") != charged {
					t.Errorf("%s: a second duplicate failed %v or charged %d", name, failed, e.usageOf("bob")-charged)
				}
			}
			if got := e.usageOf("alice"); got != aliceBefore {
				t.Errorf("alice's usage went from %d to %d", aliceBefore, got)
			}
			if n := countPrefix(e.snapshot().Objects, "xorbs/"); n != xorbsBefore {
				t.Errorf("%d xorb objects after the copies, %d before", n, xorbsBefore)
			}
		})
	}
}

// TestCopyIsolation: a copy reaches exactly the files a shared repo's
// revisions name. A private source is not found; a file of alice that no
// revision of the source names (her unnamed file, her private repo's file)
// or whose SHA-256 is not the one sent, and a file deleted from every
// revision, are listed as failed with a sentence, and nothing changes; a
// target of another tenant is refused as every write to it is; a reader
// without write scope or without a token cannot copy.
func TestCopyIsolation(t *testing.T) {
	e := newSharingEnv(t, false, func(c *Config) { c.DedupScope = "tenant" })
	e.createRepoBody(e.bob, `{"name":"copy"}`)
	unchanged := func(step string, before snapshot) {
		t.Helper()
		after := e.snapshot()
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("%s changed the store:\n%v\nwas\n%v", step, after, before)
		}
	}
	before := e.snapshot()
	wantHubError(t, e.duplicate(e.bob, "alice/priv", "bob/copy", e.files["priv"]), 404, "RepoNotFound")
	unchanged("a copy from a private repo", before)
	for _, c := range []struct {
		step string
		f    hubFile
		want string
	}{
		{"alice's file no repo names", e.unnamed, "no revision of alice/intern has a Xet file of hash " + e.unnamed.info.Hash.String()},
		{"alice's private repo's file", e.files["priv"], "no revision of alice/intern has a Xet file of hash " + e.files["priv"].info.Hash.String()},
	} {
		failed := failedOf(t, e.duplicate(e.bob, "alice/intern", "bob/copy", e.files["intern"], c.f))
		if len(failed) != 1 || failed[0].(map[string]any)["sha256"] != c.f.sha || failed[0].(map[string]any)["error"] != c.want {
			t.Errorf("%s: failed %v, want %s: %q", c.step, failed, c.f.sha, c.want)
		}
		unchanged(c.step, before)
	}
	wrong := e.files["intern"]
	wrong.sha = e.files["pub"].sha
	failed := failedOf(t, e.duplicate(e.bob, "alice/intern", "bob/copy", wrong))
	if len(failed) != 1 || !strings.Contains(failed[0].(map[string]any)["error"].(string), "has SHA-256 "+e.files["intern"].sha) {
		t.Errorf("a wrong SHA-256: failed %v", failed)
	}
	unchanged("a wrong SHA-256", before)
	if r := e.hubCommit(e.bob, "bob/copy", "main", copyLine("x.bin", e.unnamed)); r.Status == 200 {
		t.Errorf("bob commits alice's unnamed file by its SHA-256 after a failed copy: %s", r.Body)
	}
	// Targets: another tenant's shared repo is 403, private 404, and a
	// repo bob does not have 404.
	for _, c := range []struct {
		target string
		status int
		code   string
	}{{"alice/intern", 403, "forbidden"}, {"alice/priv", 404, "RepoNotFound"}, {"carol/none", 404, "RepoNotFound"}, {"bob/none", 404, "RepoNotFound"}} {
		r := e.duplicate(e.bob, "alice/pub", c.target, e.files["pub"])
		if r.Status != c.status || r.Header.Get("X-Error-Code") != c.code {
			t.Errorf("target %s: %d %s %s, want %d %s", c.target, r.Status, r.Header.Get("X-Error-Code"), r.Body, c.status, c.code)
		}
	}
	unchanged("refused targets", before)
	if r := e.duplicate(e.bobRead, "alice/pub", "bob/copy", e.files["pub"]); r.Status != 403 {
		t.Errorf("a read credential copies: %d %s", r.Status, r.Body)
	}
	if r := e.duplicate("", "alice/pub", "bob/copy", e.files["pub"]); r.Status != 401 {
		t.Errorf("a request without a token copies: %d %s", r.Status, r.Body)
	}
	unchanged("refused credentials", before)
	// Deleted from every revision of the repo (delete, then squash), the
	// file is no longer offered.
	if r := e.hubCommit(e.alice, "alice/intern", "main", deleteOp("weights.bin")); r.Status != 200 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if r := e.do("POST", "/api/models/alice/intern/super-squash/main", e.alice, []byte(`{"message":"gone"}`)); r.Status != 200 {
		t.Fatalf("squash: %d %s", r.Status, r.Body)
	}
	before = e.snapshot()
	failed = failedOf(t, e.duplicate(e.bob, "alice/intern", "bob/copy", e.files["intern"]))
	if len(failed) != 1 || !strings.HasPrefix(failed[0].(map[string]any)["error"].(string), "no revision of alice/intern") {
		t.Errorf("a file deleted from every revision: failed %v", failed)
	}
	unchanged("a copy of a deleted file", before)
	// Made private, the repo is not found.
	if r := e.do("PUT", "/api/models/alice/pub/settings", e.alice, []byte(`{"private":true}`)); r.Status != 200 {
		t.Fatalf("settings: %d %s", r.Status, r.Body)
	}
	wantHubError(t, e.duplicate(e.bob, "alice/pub", "bob/copy", e.files["pub"]), 404, "RepoNotFound")
	unchanged("a copy from a repo made private", before)
}

// TestCopyQuota: with dedup_scope tenant, a copy that would take bob past
// his quota is 403 quota_exceeded in the project's refusal form, and
// nothing changed: no owner row, no counter change, no file, no object.
// Within the quota it is charged exactly the xorb's stored size.
func TestCopyQuota(t *testing.T) {
	e := newSharingEnv(t, false, func(c *Config) { c.DedupScope = "tenant" })
	e.createRepoBody(e.bob, `{"name":"copy"}`)
	f := e.files["intern"]
	e.putLimits("bob", map[string]any{"quota_bytes": f.xorb.StreamLen - 1})
	before := e.snapshot()
	r := e.duplicate(e.bob, "alice/intern", "bob/copy", f)
	wantError(t, r, 403, "quota_exceeded")
	m := r.json(t)
	if m["quota"] != float64(f.xorb.StreamLen-1) || m["usage"] != float64(0) || r.Header.Get("X-Error-Code") != "quota_exceeded" {
		t.Errorf("refusal: %s %v", r.Body, r.Header)
	}
	if fmt.Sprint(e.snapshot()) != fmt.Sprint(before) {
		t.Errorf("a copy past the quota changed the store:\n%v\nwas\n%v", e.snapshot(), before)
	}
	if owns, _ := e.st.OwnsXorb(context.Background(), "bob", f.xorb.Hash); owns || e.usageOf("bob") != 0 {
		t.Errorf("after the refusal bob owns the xorb (%v) or is charged %d", owns, e.usageOf("bob"))
	}
	if r := e.hubCommit(e.bob, "bob/copy", "main", copyLine("c.bin", f)); r.Status == 200 {
		t.Errorf("the commit of a refused copy went in: %s", r.Body)
	}
	e.putLimits("bob", map[string]any{"quota_bytes": f.xorb.StreamLen})
	if failed := failedOf(t, e.duplicate(e.bob, "alice/intern", "bob/copy", f)); len(failed) != 0 {
		t.Fatalf("within the quota: failed %v", failed)
	}
	if got := e.usageOf("bob"); got != f.xorb.StreamLen {
		t.Errorf("bob charged %d, want %d", got, f.xorb.StreamLen)
	}
}

// TestCopySurvivesOwnerDelete: after bob copied alice's file into his repo,
// alice deletes her repo and a collection pass runs: alice is charged
// nothing any more, and bob's copy still downloads, whole.
func TestCopySurvivesOwnerDelete(t *testing.T) {
	for _, scope := range []string{"global", "tenant"} {
		t.Run(scope, func(t *testing.T) {
			e := newLCEnv(t, func(c *Config) { c.DedupScope = scope })
			alice, bob := e.credential("alice", "write"), e.credential("bob", "write")
			e.createRepoBody(alice, `{"name":"base","visibility":"internal"}`)
			f := newHubFile(7)
			e.uploadHub(alice, f)
			if r := e.hubCommit(alice, "alice/base", "main", lfsOp("weights.bin", f)); r.Status != 200 {
				t.Fatalf("commit: %d %s", r.Status, r.Body)
			}
			e.createRepoBody(bob, `{"name":"copy"}`)
			if failed := failedOf(t, e.duplicate(bob, "alice/base", "bob/copy", f)); len(failed) != 0 {
				t.Fatalf("failed %v", failed)
			}
			if r := e.hubCommit(bob, "bob/copy", "main", copyLine("w.bin", f)); r.Status != 200 {
				t.Fatalf("copy commit: %d %s", r.Status, r.Body)
			}
			orig := e.do("GET", "/alice/base/resolve/main/weights.bin", alice, nil)
			if orig.Status != 200 || int64(len(orig.Body)) != f.size {
				t.Fatalf("alice's file: %d, %d bytes", orig.Status, len(orig.Body))
			}
			if r := e.do("DELETE", "/api/repos/delete", alice, []byte(`{"name":"base"}`)); r.Status != 200 {
				t.Fatalf("delete: %d %s", r.Status, r.Body)
			}
			e.gcPass()
			e.gcPass()
			if got := e.usageOf("alice"); got != 0 {
				t.Errorf("alice still charged %d bytes after deleting her repo", got)
			}
			want := map[string]int64{"global": 0, "tenant": f.xorb.StreamLen}[scope]
			if got := e.usageOf("bob"); got != want {
				t.Errorf("bob charged %d, want %d", got, want)
			}
			r := e.do("GET", "/bob/copy/resolve/main/w.bin", bob, nil)
			if r.Status != 200 || int64(len(r.Body)) != f.size || !bytes.Equal(r.Body, orig.Body) {
				t.Fatalf("bob's copy after alice's delete and a pass: %d, %d bytes", r.Status, len(r.Body))
			}
		})
	}
}
