package server

import (
	"bytes"
	"reflect"
	"testing"
)

// Duplicating another tenant's repo (docs/sharing.md, "Duplicating a repo
// of another tenant"): duplicate_repo and `hf repos duplicate` of a repo
// bob may read, into his own namespace.

// TestDuplicateAnotherTenantsRepo: bob duplicates alice's internal and
// public repos into his namespace; each copy has her history and
// downloads as her bytes, keeps reading after she deletes her repo, and
// bob is charged as an upload of the same bytes would charge him (nothing
// with dedup_scope global, the xorb's stored size with tenant). Her
// private repo is not found; a taken name, her namespace and a read-only
// credential are refused; none of the refusals changes anything.
func TestDuplicateAnotherTenantsRepo(t *testing.T) {
	for _, scope := range []string{"global", "tenant"} {
		t.Run(scope, func(t *testing.T) {
			e := newSharingEnv(t, false, func(c *Config) { c.DedupScope = scope })
			aliceBefore := e.usageOf("alice")
			var charged int64
			for _, name := range []string{"intern", "pub"} {
				r := e.do("POST", "/api/models/alice/"+name+"/duplicate", e.bob, []byte(`{"repository":"bob/`+name+`-copy"}`))
				if r.Status != 200 {
					t.Fatalf("duplicate alice/%s: %d %s", name, r.Status, r.Body)
				}
				if m := r.json(t); m["id"] != "bob/"+name+"-copy" || m["filesCopyPending"] != false {
					t.Errorf("duplicate answer %v", m)
				}
				src := e.info(t, e.alice, "/api/models/alice/"+name)
				dup := e.info(t, e.bob, "/api/models/bob/"+name+"-copy")
				if dup["sha"] != src["sha"] || dup["private"] != src["private"] {
					t.Errorf("bob/%s-copy: sha %v private %v, want alice's %v %v", name, dup["sha"], dup["private"], src["sha"], src["private"])
				}
				if scope == "tenant" {
					charged += e.files[name].xorb.StreamLen
				}
				if got := e.usageOf("bob"); got != charged {
					t.Errorf("bob's usage %d after duplicating alice/%s, want %d", got, name, charged)
				}
			}
			if got := e.usageOf("alice"); got != aliceBefore {
				t.Errorf("alice's usage went from %d to %d", aliceBefore, got)
			}
			before := e.snapshot()
			for _, c := range []struct {
				name, path, tok, body, code string
				status                      int
			}{
				{"private source", "/api/models/alice/priv/duplicate", e.bob, `{"repository":"bob/priv-copy"}`, "RepoNotFound", 404},
				{"missing source", "/api/models/alice/none/duplicate", e.bob, `{"repository":"bob/none-copy"}`, "RepoNotFound", 404},
				{"taken name", "/api/models/alice/pub/duplicate", e.bob, `{"repository":"bob/intern-copy"}`, "", 409},
				{"her namespace", "/api/models/alice/pub/duplicate", e.bob, `{"repository":"alice/bobs"}`, "", 403},
				{"read-only credential", "/api/models/alice/pub/duplicate", e.bobRead, `{"repository":"bob/ro-copy"}`, "", 403},
			} {
				r := e.do("POST", c.path, c.tok, []byte(c.body))
				if r.Status != c.status || r.Header.Get("X-Error-Code") != c.code && c.code != "" {
					t.Errorf("%s: %d %s (%s), want %d %s", c.name, r.Status, r.Header.Get("X-Error-Code"), r.Body, c.status, c.code)
				}
			}
			if after := e.snapshot(); !reflect.DeepEqual(after, before) {
				t.Errorf("a refused duplicate changed the store:\n%+v\nwant\n%+v", after, before)
			}
			// The copy is bob's: it reads after alice deletes her repo.
			want := e.do("GET", "/alice/pub/resolve/main/weights.bin", e.alice, nil).Body
			if r := e.do("DELETE", "/api/repos/delete", e.alice, []byte(`{"name":"pub","type":"model"}`)); r.Status != 200 {
				t.Fatalf("alice deletes pub: %d %s", r.Status, r.Body)
			}
			if r := e.do("GET", "/bob/pub-copy/resolve/main/weights.bin", e.bob, nil); r.Status != 200 || !bytes.Equal(r.Body, want) {
				t.Errorf("bob's copy after alice deleted hers: %d, %d bytes (want %d)", r.Status, len(r.Body), len(want))
			}
			if r := e.reconstruct(e.bob, e.files["pub"]); r.Status != 200 {
				t.Errorf("bob reconstructs the copied file: %d %s", r.Status, r.Body)
			}
			// Past the quota (tenant: the xorb would be charged), refused
			// before anything is written.
			carol := e.credential("carol", "write")
			e.putLimits("carol", map[string]any{"quota_bytes": 1000})
			before = e.snapshot()
			r := e.do("POST", "/api/models/alice/intern/duplicate", carol, []byte(`{"repository":"carol/c"}`))
			if scope == "global" {
				if r.Status != 200 || e.usageOf("carol") != 0 {
					t.Errorf("carol's duplicate under global: %d %s, usage %d", r.Status, r.Body, e.usageOf("carol"))
				}
				return
			}
			wantError(t, r, 403, "quota_exceeded")
			if after := e.snapshot(); !reflect.DeepEqual(after, before) {
				t.Errorf("a duplicate past the quota changed the store:\n%+v\nwant\n%+v", after, before)
			}
			if r := e.do("GET", "/api/models/carol/c", carol, nil); r.Status != 404 {
				t.Errorf("carol/c after the refused duplicate: %d", r.Status)
			}
		})
	}
}
