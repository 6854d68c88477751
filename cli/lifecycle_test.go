package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"openxet/server"
	"openxet/store"
	"openxet/xet"

	"openxet/store/accounts"
)

func TestGCConfigKeys(t *testing.T) {
	file := writeFile(t, "openxet.toml", "[gc]\ninterval = \"0s\"\ngrace = \"2h\"\n")
	c, err := LoadConfig(file, map[string]string{"gc.grace": "3d"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.GCInterval != 0 || c.GCGrace != 72*time.Hour {
		t.Fatalf("interval %v grace %v", c.GCInterval, c.GCGrace)
	}
	d, err := LoadConfig("", nil, nil)
	if err != nil || d.GCInterval != time.Hour || d.GCGrace != store.DefaultGCGrace {
		t.Fatalf("defaults: %v %v %v", d.GCInterval, d.GCGrace, err)
	}
	_, err = LoadConfig("", nil, map[string]string{"gc.grace": "-1s", "gc.interval": "soon"})
	for _, want := range []string{"config gc.grace (--gc-grace)", "config gc.interval (--gc-interval)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad values: %v (want %q)", err, want)
		}
	}
	for _, s := range settings {
		if s.key == "gc.grace" && (s.flagName() != "gc-grace" || s.envName() != "OPENXET_GC_GRACE") {
			t.Errorf("gc.grace is %s / %s", s.flagName(), s.envName())
		}
	}
}

// lcFile is a file built for the CLI tests.
type lcFile struct {
	info  xet.FileInfo
	xorbs []xet.XorbInfo
	body  [][]byte
	shard []byte
	data  []byte
}

func newLCFile(seed uint64) lcFile {
	rng := rand.New(rand.NewPCG(seed, 42))
	var f lcFile
	var leaves []xet.Leaf
	var cas []xet.CASInfo
	for range 2 {
		chunks := make([][]byte, 3)
		for i := range chunks {
			chunks[i] = make([]byte, 4096+rng.IntN(4096))
			for j := range chunks[i] {
				chunks[i][j] = byte(rng.Uint32())
			}
			f.data = append(f.data, chunks[i]...)
		}
		b, info := xet.BuildXorb(chunks, false)
		f.xorbs, f.body = append(f.xorbs, info), append(f.body, b[:info.StreamLen])
		hashes := make([]xet.Hash, len(info.Chunks))
		for i, c := range info.Chunks {
			hashes[i] = c.Hash
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		f.info.Terms = append(f.info.Terms, xet.Term{Xorb: info.Hash, UnpackedBytes: uint32(info.UncompressedSize()), ChunkEnd: uint32(len(info.Chunks))})
		f.info.Verification = append(f.info.Verification, xet.RangeHash(hashes))
		cas = append(cas, xet.CASInfoFromXorb(info))
	}
	f.info.Hash = xet.FileHash(leaves)
	f.info.Flags = xet.FileFlagVerification
	f.shard = (&xet.Shard{Files: []xet.FileInfo{f.info}, Xorbs: cas}).MarshalUpload()
	return f
}

func (f lcFile) size() int64 {
	var n int64
	for _, x := range f.xorbs {
		n += x.StreamLen
	}
	return n
}

// lcState is a data directory with state for the lifecycle commands:
// alice's kept file (CAS only), her repo file, and bob's file that
// shares a xorb with alice's repo file by dedup. It is made with a clock a
// minute in the past, so that a pass now sees every upload as settled.
type lcState struct {
	dir                string
	keep, repo, bobOwn lcFile
}

func makeLCState(t *testing.T) lcState {
	t.Helper()
	ctx := context.Background()
	s := lcState{dir: t.TempDir(), keep: newLCFile(1), repo: newLCFile(2), bobOwn: newLCFile(3)}
	cfg := store.DirConfig(s.dir)
	cfg.Now = func() time.Time { return time.Now().Add(-time.Minute) }
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(tenant string, f lcFile, xorbs bool) {
		if xorbs {
			for i, x := range f.xorbs {
				if _, err := st.PutXorb(ctx, tenant, x, f.body[i], store.Unlimited); err != nil {
					t.Fatal(err)
				}
			}
		}
		sh, err := xet.ParseShard(f.shard)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.VerifyShard(ctx, sh); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutShard(ctx, tenant, f.shard, sh); err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range []string{"alice", "bob"} {
		if _, _, err := st.CreateCredential(ctx, tn, []string{accounts.ScopeWrite}); err != nil {
			t.Fatal(err)
		}
	}
	put("alice", s.keep, true)
	put("alice", s.repo, true)
	put("bob", s.repo, false) // dedup: bob sends no xorb
	put("bob", s.bobOwn, true)
	r, err := st.CreateRepo(ctx, store.RepoID{Tenant: "alice", Type: "model", Name: "m"}, false)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := st.Resolve(ctx, r.RepoID, "main")
	if _, err := st.Commit(ctx, r.RepoID, "main", store.NewCommit{Parent: head.SHA, Summary: "add", Changes: []store.Change{{Op: store.PutFile, Path: "w.bin",
		Entry: store.TreeEntry{SizeBytes: int64(len(s.repo.data)), XetHash: s.repo.info.Hash.String(), SHA256: "ab", GitOID: "cd"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteRepo(ctx, r.RepoID); err != nil {
		t.Fatal(err)
	}
	return s
}

// readableIn checks every byte of a tenant's file through the store.
func readableIn(ctx context.Context, st *store.Store, tenant string, f lcFile) error {
	terms, _, err := st.FileTerms(ctx, tenant, f.info.Hash, 0, f.info.Size())
	if err != nil {
		return err
	}
	var out []byte
	for _, term := range terms {
		chunks, err := st.XorbChunks(ctx, term.Xorb)
		if err != nil {
			return err
		}
		r, err := st.OpenXorbRange(ctx, term.Xorb, 0, int64(chunks[len(chunks)-1].SerializedEnd))
		if err != nil {
			return err
		}
		stream, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return err
		}
		data, err := xet.DecodeChunks(stream)
		if err != nil {
			return err
		}
		for _, c := range data[term.ChunkStart:term.ChunkEnd] {
			out = append(out, c...)
		}
	}
	if !bytes.Equal(out, f.data) {
		return fmt.Errorf("%d bytes read back differ from the %d written", len(out), len(f.data))
	}
	return nil
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), append([]string{"openxet"}, args...), &out, &errOut, func(string) (string, bool) { return "", false })
	return code, out.String(), errOut.String()
}

func TestLifecycleCommands(t *testing.T) {
	s := makeLCState(t)
	code, out, errOut := runCLI(t, "usage", "--data-dir", s.dir, "--json")
	var v server.UsageView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("usage: %d %s %s", code, out, errOut)
	}
	byName := map[string]server.TenantUsageView{}
	for _, u := range v.Tenants {
		byName[u.Tenant] = u
	}
	alice := byName["alice"]
	// The repo is deleted: alice's repo file is releasable, her kept
	// file retained by the CAS-only rule.
	if alice.UsageBytes != s.keep.size()+s.repo.size() || alice.RetainedBytes != s.keep.size() || alice.ReleasableBytes != s.repo.size() ||
		alice.CASOnlyFiles != 1 || alice.QuotaBytes != -1 {
		t.Fatalf("alice %+v", alice)
	}
	if b := byName["bob"]; b.DedupBytes != s.repo.size() || b.UsageBytes != s.bobOwn.size() {
		t.Fatalf("bob %+v", b)
	}
	if code, out, _ := runCLI(t, "usage", "--data-dir", s.dir); code != 0 || !strings.Contains(out, "RELEASABLE") || !strings.Contains(out, "unowned but referenced") {
		t.Fatalf("usage table: %d\n%s", code, out)
	}
	if code, _, errOut := runCLI(t, "usage", "--data-dir", s.dir, "--tenant", "nobody"); code != 1 || !strings.Contains(errOut, "not known") {
		t.Fatalf("usage of an unknown tenant: %d %s", code, errOut)
	}

	// A dry run first, then the pass.
	code, out, errOut = runCLI(t, "gc", "--data-dir", s.dir, "--gc-grace", "0s", "--dry-run")
	if code != 0 || !strings.Contains(out, "would release 2 xorb owners") {
		t.Fatalf("dry run: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "gc", "--data-dir", s.dir, "--gc-grace", "0s")
	if code != 0 || !strings.Contains(out, "released 2 xorb owners") || !strings.Contains(out, "alice") {
		t.Fatalf("gc: %d\n%s%s", code, out, errOut)
	}
	// bob's dedup'd file still references the xorbs: unowned, not deleted.
	if !strings.Contains(out, "deleted 0 xorbs") {
		t.Fatalf("gc deleted xorbs bob's file references:\n%s", out)
	}

	hash := s.keep.info.Hash.String()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"files", "delete", "--data-dir", s.dir, "--tenant", "bob", hash}, 1, "not found"},
		{[]string{"files", "delete", "--data-dir", s.dir, "--tenant", "alice", "nothex"}, 2, "hash"},
		{[]string{"files", "delete", "--data-dir", s.dir, "--tenant", "Bad!", hash}, 1, "invalid tenant"},
		{[]string{"files", "delete", "--data-dir", s.dir, "--tenant", "alice"}, 2, "one xet hash"},
		{[]string{"tenants", "delete", "--data-dir", s.dir, "alice"}, 2, "--yes"},
		{[]string{"tenants", "delete", "--data-dir", s.dir, "--yes", "nobody"}, 1, "not found"},
		{[]string{"tenants", "delete", "--data-dir", s.dir, "--yes", "..x"}, 2, "invalid tenant"},
	} {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%v: exit %d, want %d with %q\n%s%s", c.args, code, c.code, c.want, out, errOut)
		}
	}
	if code, out, errOut := runCLI(t, "files", "delete", "--data-dir", s.dir, "--tenant", "alice", hash); code != 0 || !strings.Contains(out, "released file") {
		t.Fatalf("files delete: %d %s %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "tenants", "delete", "--data-dir", s.dir, "--yes", "--gc-grace", "0s", "--json", "bob")
	var del server.DeletedTenantView
	if code != 0 || json.Unmarshal([]byte(out), &del) != nil || del.Credentials != 1 || del.Collection == nil {
		t.Fatalf("tenants delete: %d %s %s", code, out, errOut)
	}
	// alice's last file went; the pass after bob's deletion collected
	// everything: nobody owns or references anything.
	ctx := context.Background()
	st, err := store.Open(ctx, store.DirConfig(s.dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tn := range []string{"alice", "bob"} {
		if u, _ := st.Usage(ctx, tn); u != 0 {
			t.Errorf("%s's usage %d", tn, u)
		}
	}
	rep, err := st.UsageReport(ctx, "")
	if err != nil || rep.StoredXorbBytes != 0 {
		t.Fatalf("left %+v %v", rep, err)
	}
	diffs, err := store.CheckIndex(ctx, store.ReindexConfig{IndexPath: filepath.Join(s.dir, "index.db"), BucketURL: store.DirConfig(s.dir).BucketURL})
	if err != nil || len(diffs) > 0 {
		t.Fatalf("reindex --check: %v %v", diffs, err)
	}
}

// gcCrashSteps are the steps of a collection pass a SIGKILL can stop.
var gcCrashSteps = []string{"resumed", "marked", "owners indexed", "owners released", "shard owners indexed",
	"shard owners released", "dedup recomputed", "doomed", "objects deleted", "swept", "tenants tidied"}

// gcKillChild runs in the child process of TestGCSIGKILLAtEveryStep: one
// pass on the data directory that SIGKILLs itself at the step named in
// OPENXET_TEST_GC_KILL_AT.
func gcKillChild(dir, step string) int {
	st, err := store.Open(context.Background(), store.DirConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	_, err = st.Collect(context.Background(), store.GCConfig{Hook: func(s string) error {
		if s == step {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		return nil
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestGCSIGKILLAtEveryStep kills a collection pass (a separate process)
// with SIGKILL at every step of release and sweep. Afterwards no retained
// file lost a byte and reindex --check reports only the bucket ahead of
// the index; once another process's pass (after the lease expired)
// finishes, reindex --check is clean and each usage equals the owned sizes.
func TestGCSIGKILLAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("crash harness skipped in -short mode")
	}
	for _, step := range gcCrashSteps {
		t.Run(step, func(t *testing.T) {
			s := makeLCState(t)
			ctx := context.Background()
			// bob goes too: his owners are released and his own file's
			// xorbs are swept in the killed pass.
			st, err := store.Open(ctx, store.DirConfig(s.dir))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.DeleteTenant(ctx, "bob"); err != nil {
				t.Fatal(err)
			}
			st.Close()

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "OPENXET_TEST_GC_KILL_AT="+step, "OPENXET_TEST_GC_DIR="+s.dir)
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			err = cmd.Run()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the pass was not killed at %q: %v %s", step, err, errOut.String())
			}

			h := &crashHarness{t: t, dir: s.dir}
			for _, d := range h.check() {
				ahead := d.leftover
				if !ahead {
					t.Errorf("after SIGKILL at %q: %+v", step, d)
				}
			}
			// Another process, once the dead pass's lease expired.
			later := store.DirConfig(s.dir)
			later.Now = func() time.Time { return time.Now().Add(store.DefaultGCLeaseTTL + time.Minute) }
			st2, err := store.Open(ctx, later)
			if err != nil {
				t.Fatal(err)
			}
			defer st2.Close()
			if err := readableIn(ctx, st2, "alice", s.keep); err != nil {
				t.Fatalf("alice's retained file after SIGKILL at %q: %v", step, err)
			}
			if _, err := st2.Collect(ctx, store.GCConfig{}); err != nil {
				t.Fatalf("the next pass: %v", err)
			}
			if diffs := h.check(); len(diffs) > 0 {
				t.Fatalf("reindex --check after the next pass: %+v", diffs)
			}
			if err := readableIn(ctx, st2, "alice", s.keep); err != nil {
				t.Fatalf("alice's retained file after the next pass: %v", err)
			}
			if u, _ := st2.Usage(ctx, "alice"); u != s.keep.size() {
				t.Fatalf("alice's usage %d, want %d", u, s.keep.size())
			}
			if u, _ := st2.Usage(ctx, "bob"); u != 0 {
				t.Fatalf("bob's usage %d", u)
			}
		})
	}
}
