package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"openxet/xet"
)

// copyFixture is alice's internal repo m naming one file at w.bin, a file
// of alice no revision names, and bob with a quota.
type copyFixture struct {
	s             *Store
	dir, bucket   string
	repo          RepoID
	named, hidden xet.FileInfo
}

func newCopyFixture(t *testing.T) *copyFixture {
	t.Helper()
	dir := t.TempDir()
	fx := &copyFixture{dir: dir, bucket: fileBucket(dir)}
	fx.s = mustOpen(t, dir, fx.bucket)
	ctx := context.Background()
	fx.named = putFile(t, fx.s, "alice", Unlimited, chunksOf(1, 3, 4000), chunksOf(2, 2, 4000))
	fx.hidden = putFile(t, fx.s, "alice", Unlimited, chunksOf(3, 3, 4000))
	fx.repo = RepoID{Tenant: "alice", Type: "model", Name: "m"}
	if _, err := fx.s.CreateRepoWith(ctx, fx.repo, "internal"); err != nil {
		t.Fatal(err)
	}
	entry := TreeEntry{XetHash: fx.named.Hash.String(), SHA256: fx.named.SHA256.String(), SizeBytes: 20000, GitOID: fakeOID("x")}
	if _, err := fx.s.Commit(ctx, fx.repo, "main", NewCommit{Summary: "w", Changes: []Change{{Op: PutFile, Path: "w.bin", Entry: entry}}}); err != nil {
		t.Fatal(err)
	}
	return fx
}

func copyOf(f xet.FileInfo) FileCopy { return FileCopy{Hash: f.Hash, SHA256: f.SHA256.String()} }

// state is what a refused copy must leave as it was: the index's rows,
// every tenant's usage and the bucket's keys.
func (fx *copyFixture) state(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	counts, err := fx.s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, tbl := range indexTables {
		b.WriteString(tbl + "=" + itoa(counts[tbl]) + " ")
	}
	for _, tn := range []string{"alice", "bob"} {
		u, _ := fx.s.Usage(ctx, tn)
		b.WriteString(tn + ":" + itoa(u) + " ")
	}
	it := fx.s.Bucket().List(nil)
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			break
		}
		if strings.HasPrefix(obj.Key, "xorb") || strings.HasPrefix(obj.Key, "shard") || strings.HasPrefix(obj.Key, "file") {
			b.WriteString("\n" + obj.Key)
		}
	}
	return b.String()
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// TestCopyFilesAcrossTenants: bob copies the file alice's internal repo
// names. Without Own (dedup_scope global) his file references alice's
// xorbs at no charge; with Own (tenant) he owns both xorbs and is charged
// their stored sizes, once. Either way he reads the file as his own, and
// reindex rebuilds the same index from the bucket.
func TestCopyFilesAcrossTenants(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(map[bool]string{false: "reference", true: "own"}[own], func(t *testing.T) {
			fx := newCopyFixture(t)
			ctx := context.Background()
			aliceBefore, _ := fx.s.Usage(ctx, "alice")
			res, err := fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.named), copyOf(fx.named)}, CopyOptions{Own: own, DefaultQuotaBytes: Unlimited})
			if err != nil {
				t.Fatal(err)
			}
			var want int64
			if own {
				for _, tm := range fx.named.Terms {
					row, _, _ := fx.s.xorbRow(ctx, tm.Xorb.String())
					want += row.size
				}
			}
			if res.Files != 1 || res.NewBytes != want || (own && res.NewXorbs != 2) {
				t.Fatalf("copy: %+v, want 1 file and %d new bytes", res, want)
			}
			if u, _ := fx.s.Usage(ctx, "bob"); u != want {
				t.Errorf("bob's usage %d, want %d", u, want)
			}
			if u, _ := fx.s.Usage(ctx, "alice"); u != aliceBefore {
				t.Errorf("alice's usage went from %d to %d", aliceBefore, u)
			}
			for _, tm := range fx.named.Terms {
				if owns, _ := fx.s.OwnsXorb(ctx, "bob", tm.Xorb); owns != own {
					t.Errorf("bob owns xorb %s: %v, want %v", tm.Xorb, owns, own)
				}
			}
			f, err := fx.s.FileBySHA256(ctx, "bob", fx.named.SHA256.String())
			if err != nil || f.Hash != fx.named.Hash {
				t.Fatalf("bob's file by SHA-256: %v %v", f.Hash, err)
			}
			terms, _, err := fx.s.FileTerms(ctx, "bob", fx.named.Hash, 0, f.SizeBytes)
			if err != nil || len(terms) != len(fx.named.Terms) {
				t.Fatalf("bob's terms: %v %v", terms, err)
			}
			// Again: nothing new to charge.
			if res, err := fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.named)}, CopyOptions{Own: own, DefaultQuotaBytes: Unlimited}); err != nil || res.NewBytes != 0 {
				t.Fatalf("second copy: %+v %v", res, err)
			}
			fx.s.Close()
			diffs, err := CheckIndex(ctx, ReindexConfig{IndexPath: testIndex(t, fx.dir), BucketURL: fx.bucket})
			if err != nil || len(diffs) != 0 {
				t.Fatalf("index against the bucket: %v %v", diffs, err)
			}
		})
	}
}

// TestCopyFilesRefusesWhatTheRepoDoesNotName: a file of alice no revision
// of the repo names, a wrong SHA-256, a private repo, a file squashed out
// of every revision: each refuses the whole copy and changes nothing.
func TestCopyFilesRefusesWhatTheRepoDoesNotName(t *testing.T) {
	fx := newCopyFixture(t)
	ctx := context.Background()
	opt := CopyOptions{Own: true, DefaultQuotaBytes: Unlimited}
	before := fx.state(t)
	wantRefused := func(step string, files []FileCopy, n int, reason string) {
		t.Helper()
		_, err := fx.s.CopyFiles(ctx, fx.repo, "bob", files, opt)
		refused, ok := errors.AsType[*CopyRefusedError](err)
		if !ok || len(refused.Refused) != n || !strings.Contains(refused.Refused[0].Reason, reason) || !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: %v, want %d refused (%q)", step, err, n, reason)
		}
		if got := fx.state(t); got != before {
			t.Fatalf("%s changed the store:\n%s\nwas\n%s", step, got, before)
		}
	}
	wantRefused("a file no revision names", []FileCopy{copyOf(fx.named), copyOf(fx.hidden)}, 1, "no revision of alice/m has a Xet file")
	wrong := copyOf(fx.named)
	wrong.SHA256 = strings.Repeat("0", 64)
	wantRefused("a wrong SHA-256", []FileCopy{wrong}, 1, "has SHA-256 "+fx.named.SHA256.String()+", not 000")
	private := "private"
	if _, err := fx.s.SetRepoSettings(ctx, fx.repo, RepoSettings{Visibility: &private}); err != nil {
		t.Fatal(err)
	}
	before = fx.state(t)
	if _, err := fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.named)}, opt); !errors.Is(err, ErrNotFound) {
		t.Fatalf("from a private repo: %v, want ErrNotFound", err)
	}
	if got := fx.state(t); got != before {
		t.Fatalf("a copy from a private repo changed the store")
	}
	internal := "internal"
	if _, err := fx.s.SetRepoSettings(ctx, fx.repo, RepoSettings{Visibility: &internal}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.s.Commit(ctx, fx.repo, "main", NewCommit{Summary: "rm", Changes: []Change{{Op: DeleteFile, Path: "w.bin"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.s.SquashHistory(ctx, fx.repo, "main", "squash"); err != nil {
		t.Fatal(err)
	}
	before = fx.state(t)
	wantRefused("a file squashed out of every revision", []FileCopy{copyOf(fx.named)}, 1, "no revision")
}

// TestCopyFilesQuota: with Own, a copy past bob's quota is refused before
// anything is written; a copy whose quota is lowered after its records are
// written (another upload won the room) is refused by the index
// transaction, which withdraws them: no owner row, no counter change, no
// file, and the bucket agrees with the index.
func TestCopyFilesQuota(t *testing.T) {
	fx := newCopyFixture(t)
	ctx := context.Background()
	var need int64
	for _, tm := range fx.named.Terms {
		row, _, _ := fx.s.xorbRow(ctx, tm.Xorb.String())
		need += row.size
	}
	setQuota := func(q int64) {
		t.Helper()
		if err := fx.s.PutTenantLimits(ctx, "bob", []byte(`{}`), &q); err != nil {
			t.Fatal(err)
		}
	}
	setQuota(need - 1)
	before := fx.state(t)
	_, err := fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.named)}, CopyOptions{Own: true, DefaultQuotaBytes: Unlimited})
	oq, ok := errors.AsType[*OverQuotaError](err)
	if !ok || oq.QuotaBytes != need-1 || oq.UsageBytes != 0 || oq.SizeBytes != need {
		t.Fatalf("past the quota: %v, want *OverQuotaError of %d bytes", err, need)
	}
	if got := fx.state(t); got != before {
		t.Fatalf("a copy past the quota changed the store:\n%s\nwas\n%s", got, before)
	}
	// Room when checked, none by the transaction.
	setQuota(need)
	before = fx.state(t)
	fx.s.hook = func(step string) error {
		if step == "copy: written" {
			setQuota(need - 1)
		}
		return nil
	}
	_, err = fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.named)}, CopyOptions{Own: true, DefaultQuotaBytes: Unlimited})
	fx.s.hook = nil
	if !errors.Is(err, ErrOverQuota) {
		t.Fatalf("quota lowered during the copy: %v, want ErrOverQuota", err)
	}
	if got := fx.state(t); !sameButShards(got, before) {
		t.Fatalf("a copy refused by its transaction changed the store:\n%s\nwas\n%s", got, before)
	}
	if _, err := fx.s.FileBySHA256(ctx, "bob", fx.named.SHA256.String()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob has the file after a refused copy: %v", err)
	}
	setQuota(need)
	if res, err := fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.named)}, CopyOptions{Own: true, DefaultQuotaBytes: Unlimited}); err != nil || res.NewBytes != need {
		t.Fatalf("within the quota: %+v %v", res, err)
	}
	if u, _ := fx.s.Usage(ctx, "bob"); u != need {
		t.Fatalf("bob's usage %d, want %d", u, need)
	}
	fx.s.Close()
	if diffs, err := CheckIndex(ctx, ReindexConfig{IndexPath: testIndex(t, fx.dir), BucketURL: fx.bucket}); err != nil || len(diffs) != 0 {
		t.Fatalf("index against the bucket: %v %v", diffs, err)
	}
}

// sameButShards compares two states but for shard objects (shards/…): a
// copy refused in its transaction leaves its shard object, owned by
// nobody, for collection, as a refused shard upload does.
func sameButShards(a, b string) bool {
	strip := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "shards/") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	return strip(a) == strip(b)
}

// TestCopyFilesReservesMemory: a copy takes CopyMemoryBytes of each
// file's term count through Reserve, only for files a revision of the
// source names (a hash that is not offered costs no memory and so cannot
// be told from one that does not exist), gives it all back, and a refusal
// of Reserve ends the copy with nothing changed.
func TestCopyFilesReservesMemory(t *testing.T) {
	fx := newCopyFixture(t)
	ctx := context.Background()
	var asked []int64
	released := 0
	var refuse error
	opt := CopyOptions{Own: true, DefaultQuotaBytes: Unlimited, Reserve: func(n int64) (func(), error) {
		asked = append(asked, n)
		if refuse != nil {
			return nil, refuse
		}
		return func() { released++ }, nil
	}}
	if _, err := fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.hidden)}, opt); !errors.Is(err, ErrNotFound) || len(asked) != 0 {
		t.Fatalf("a file not offered: %v, reserved %v", err, asked)
	}
	refuse = errors.New("memory busy")
	before := fx.state(t)
	if _, err := fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.named)}, opt); !errors.Is(err, refuse) {
		t.Fatalf("reservation refused: %v", err)
	}
	if got := fx.state(t); got != before {
		t.Fatalf("a copy whose memory was refused changed the store")
	}
	refuse, asked = nil, nil
	if _, err := fx.s.CopyFiles(ctx, fx.repo, "bob", []FileCopy{copyOf(fx.named)}, opt); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != CopyMemoryBytes(len(fx.named.Terms)) || released != 1 {
		t.Fatalf("reserved %v (want [%d]), released %d", asked, CopyMemoryBytes(len(fx.named.Terms)), released)
	}
}

// TestDuplicateRepoAcrossTenants: a duplicate into another tenant needs
// the source's files registered for that tenant first (HistoryFiles, then
// CopyFiles); before that it is refused and changes nothing, and a private
// source is not found whatever the copies.
func TestDuplicateRepoAcrossTenants(t *testing.T) {
	fx := newCopyFixture(t)
	ctx := context.Background()
	dup := RepoID{Tenant: "bob", Type: "model", Name: "copy"}
	before := fx.state(t)
	if _, err := fx.s.DuplicateRepo(ctx, fx.repo, dup, ""); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "not held by tenant bob") {
		t.Fatalf("duplicate before the copy: %v", err)
	}
	if got := fx.state(t); got != before {
		t.Errorf("a refused duplicate changed the store:\n%s\nwant\n%s", got, before)
	}
	files, err := fx.s.HistoryFiles(ctx, fx.repo)
	if err != nil || len(files) != 1 || files[0] != copyOf(fx.named) {
		t.Fatalf("HistoryFiles = %v, %v; want the named file alone", files, err)
	}
	if _, err := fx.s.CopyFiles(ctx, fx.repo, "bob", files, CopyOptions{DefaultQuotaBytes: Unlimited}); err != nil {
		t.Fatal(err)
	}
	r, err := fx.s.DuplicateRepo(ctx, fx.repo, dup, "private")
	if err != nil || r.VisibilityOf() != "private" {
		t.Fatalf("duplicate after the copy: %+v %v", r, err)
	}
	src, _ := fx.s.Resolve(ctx, fx.repo, "main")
	if got, err := fx.s.Resolve(ctx, dup, "main"); err != nil || got.SHA != src.SHA {
		t.Errorf("the duplicate's main: %s %v, want %s", got.SHA, err, src.SHA)
	}
	if _, err := fx.s.File(ctx, "bob", fx.named.Hash); err != nil {
		t.Errorf("bob's copy of the file: %v", err)
	}
	// Made private, alice's repo is not found for a duplicate into bob.
	private := "private"
	if _, err := fx.s.SetRepoSettings(ctx, fx.repo, RepoSettings{Visibility: &private}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.s.DuplicateRepo(ctx, fx.repo, RepoID{Tenant: "bob", Type: "model", Name: "copy2"}, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("duplicate of a private repo of another tenant: %v", err)
	}
	if _, err := fx.s.Repo(ctx, RepoID{Tenant: "bob", Type: "model", Name: "copy2"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("copy2 after the refused duplicate: %v", err)
	}
}
