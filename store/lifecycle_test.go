package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"openxet/store/accounts"
)

func TestDeleteRepoGivesQuotaBack(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	a, b := buildFile(chunkSet(1)), buildFile(chunkSet(2), chunkSet(3))
	l.upload("alice", a)
	l.upload("alice", b)
	r := l.repo("alice", "weights")
	l.commit(r, "main", map[string]*tfile{"a.bin": &a, "b.bin": &b})
	if err := l.s.PutBlob(ctx, "feed", []byte("small")); err != nil {
		t.Fatal(err)
	}
	full := l.usage("alice")
	if want := a.xorbs[0].StreamLen + b.xorbs[0].StreamLen + b.xorbs[1].StreamLen; full != want {
		t.Fatalf("usage %d, want %d", full, want)
	}
	// Nothing is released while the repo holds the files.
	if rep := l.collect(0); rep.ReleasedBytes != 0 || l.usage("alice") != full {
		t.Fatalf("a pass released %+v with every file in a revision", rep)
	}
	l.checkConsistent("alice")

	if err := l.s.DeleteRepo(ctx, r); err != nil {
		t.Fatal(err)
	}
	if l.usage("alice") != full {
		t.Fatal("deleting a repo changed usage outside the collector's transaction")
	}
	if _, err := l.s.File(ctx, "alice", a.hash()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a deleted repo's file is still retained: %v", err)
	}
	l.checkConsistent("alice")
	l.clock.advance(time.Second)
	rep := l.collect(0)
	if rep.ReleasedBytes != full || l.usage("alice") != 0 {
		t.Fatalf("after the delete a pass released %d of %d bytes; usage %d", rep.ReleasedBytes, full, l.usage("alice"))
	}
	if rep.DeletedXorbs != 3 {
		// The shard's owner waits out its grace only when grace > 0.
		t.Fatalf("deleted %d xorbs, want 3: %+v", rep.DeletedXorbs, rep)
	}
	for _, x := range append(a.xorbs, b.xorbs...) {
		if l.exists(xorbKey(x.Hash.String())) {
			t.Fatalf("xorb %s still stored", x.Hash)
		}
	}
	l.checkConsistent("alice")
	// The blob no revision names goes too, the shard with its owner.
	if l.exists("blobs/feed") {
		t.Fatal("an unreferenced blob survived a pass with no grace")
	}
	l.clock.advance(time.Second)
	l.collect(0)
	keys, _ := l.s.bucket.ListKeys(ctx, prefixShards)
	if len(keys) != 0 {
		t.Fatalf("shards left: %v", keys)
	}
	l.checkConsistent("alice")
}

func TestGracePeriodKeepsRecentUploads(t *testing.T) {
	l := newLC(t)
	const grace = 24 * time.Hour
	f := buildFile(chunkSet(4))
	// An upload in progress: xorbs sent, no shard yet.
	l.putXorbs(l.s, "alice", f)
	l.clock.advance(time.Hour)
	rep := l.collect(grace)
	if rep.ReleasedOwners != 0 || rep.DeletedXorbs != 0 {
		t.Fatalf("a pass within the grace period released %+v", rep)
	}
	// The shard comes an hour later: the file is whole and owned.
	if err := l.register(l.s, "alice", f); err != nil {
		t.Fatal(err)
	}
	l.mustReadable("alice", f)

	// A leftover xorb nobody registered goes once the grace period is over.
	g := buildFile(chunkSet(5))
	l.putXorbs(l.s, "bob", g)
	l.clock.advance(grace - time.Minute)
	if rep := l.collect(grace); rep.ReleasedOwners != 0 {
		t.Fatalf("released before the grace period was over: %+v", rep)
	}
	l.clock.advance(2 * time.Minute)
	if rep := l.collect(grace); rep.ReleasedOwners != 1 || rep.ReleasedBytes != g.xorbs[0].StreamLen {
		t.Fatalf("the leftover's owner was not released: %+v", rep)
	}
	if l.usage("bob") != 0 {
		t.Fatalf("bob's usage %d", l.usage("bob"))
	}
	// Its object waits out a grace period from the release.
	if !l.exists(xorbKey(g.xorbs[0].Hash.String())) {
		t.Fatal("the object was deleted at its release")
	}
	l.clock.advance(grace + time.Second)
	if rep := l.collect(grace); rep.DeletedXorbs != 1 {
		t.Fatalf("the released object was not collected: %+v", rep)
	}
	l.mustReadable("alice", f)
	l.checkConsistent("alice", "bob")
}

func TestCASOnlyFilesAreKeptUntilDeleted(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(6))
	l.upload("alice", f)
	l.clock.advance(48 * time.Hour)
	if rep := l.collect(DefaultGCGrace); rep.ReleasedOwners+rep.DeletedXorbs != 0 {
		t.Fatalf("a CAS-only file lost its bytes: %+v", rep)
	}
	l.mustReadable("alice", f)

	if err := l.s.ReleaseFile(ctx, "bob", f.hash()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob released alice's file: %v", err)
	}
	r := l.repo("alice", "m")
	l.commit(r, "main", map[string]*tfile{"f": &f})
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); !errors.Is(err, ErrFileInRepo) {
		t.Fatalf("released a file a revision references: %v", err)
	}
	l.mustReadable("alice", f)
	l.commit(r, "main", map[string]*tfile{"f": nil})
	// Still in the first revision.
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); !errors.Is(err, ErrFileInRepo) {
		t.Fatalf("released a file an older revision references: %v", err)
	}
	if _, err := l.s.SquashHistory(ctx, r, "main", ""); err != nil {
		t.Fatal(err)
	}
	// The squash released it (only old revisions referenced it).
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the squash: %v", err)
	}
	l.checkConsistent("alice")
	l.clock.advance(time.Second)
	if rep := l.collect(DefaultGCGrace); rep.ReleasedBytes != f.xorbs[0].StreamLen {
		t.Fatalf("a released file's xorb was not released at once: %+v", rep)
	}
	l.checkConsistent("alice")
}

func TestReleaseThenRegisterAgain(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(7))
	l.upload("alice", f)
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); err != nil {
		t.Fatal(err)
	}
	if !l.exists(fileReleaseKey("alice", f.hash().String())) {
		t.Fatal("no release record")
	}
	l.checkConsistent("alice")
	// The same shard again: the file is back, and reindex agrees.
	if err := l.register(l.s, "alice", f); err != nil {
		t.Fatal(err)
	}
	l.mustReadable("alice", f)
	l.checkConsistent("alice")
	l.clock.advance(time.Second)
	if rep := l.collect(0); rep.ReleasedOwners != 0 {
		t.Fatalf("registered again, yet released: %+v", rep)
	}
	// Released, collected, and uploaded again from scratch.
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	l.collect(0)
	l.clock.advance(time.Second)
	if rep := l.collect(0); l.usage("alice") != 0 || l.exists(xorbKey(f.xorbs[0].Hash.String())) {
		t.Fatalf("not collected: %+v usage %d", rep, l.usage("alice"))
	}
	l.checkConsistent("alice")
	l.upload("alice", f)
	l.mustReadable("alice", f)
	if l.usage("alice") != f.xorbs[0].StreamLen {
		t.Fatalf("usage %d after the upload again", l.usage("alice"))
	}
	l.checkConsistent("alice")
}

func TestCrossTenantDedupSurvivesOwnerRelease(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(8))
	l.upload("alice", f)
	// Bob registers the same file by dedup: he sends no xorb.
	if err := l.register(l.s, "bob", f); err != nil {
		t.Fatal(err)
	}
	if l.usage("bob") != 0 {
		t.Fatalf("dedup cost bob %d", l.usage("bob"))
	}
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	l.collect(0)
	l.clock.advance(time.Second)
	l.collect(0)
	if l.usage("alice") != 0 {
		t.Fatalf("alice's usage %d after releasing her only file", l.usage("alice"))
	}
	l.mustReadable("bob", f)
	rep, err := l.s.UsageReport(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.UnownedReferencedBytes != f.xorbs[0].StreamLen || rep.UnownedReferencedXorbs != 1 {
		t.Fatalf("usage report: %+v", rep)
	}
	var bob TenantUsage
	for _, u := range rep.Tenants {
		if u.Tenant == "bob" {
			bob = u
		}
	}
	if bob.ReferencedUnownedBytes != f.xorbs[0].StreamLen || bob.OwnedBytes != 0 {
		t.Fatalf("bob's report: %+v", bob)
	}
	l.checkConsistent("alice", "bob")
	// A file bob registers later over the unowned xorb makes him its owner.
	g := buildFile(chunkSet(8), chunkSet(9))
	l.putXorbs(l.s, "bob", tfile{xorbs: g.xorbs[1:], bodies: g.bodies[1:]})
	if err := l.register(l.s, "bob", g); err != nil {
		t.Fatal(err)
	}
	if want := g.xorbs[0].StreamLen + g.xorbs[1].StreamLen; l.usage("bob") != want {
		t.Fatalf("bob's usage %d, want %d (the unowned xorb adopted)", l.usage("bob"), want)
	}
	l.mustReadable("bob", g)
	l.checkConsistent("alice", "bob")
}

func TestSquashDeleteBranchAndTag(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	v1, v2, dev, tagged := buildFile(chunkSet(10)), buildFile(chunkSet(11)), buildFile(chunkSet(12)), buildFile(chunkSet(13))
	for _, f := range []tfile{v1, v2, dev, tagged} {
		l.upload("alice", f)
	}
	r := l.repo("alice", "m")
	l.commit(r, "main", map[string]*tfile{"w.bin": &v1})
	l.commit(r, "main", map[string]*tfile{"w.bin": &v2})
	head, _ := l.s.Resolve(ctx, r, "main")
	if err := l.s.CreateBranch(ctx, r, "dev", head); err != nil {
		t.Fatal(err)
	}
	l.commit(r, "dev", map[string]*tfile{"dev.bin": &dev})
	l.commit(r, "main", map[string]*tfile{"t.bin": &tagged})
	tagAt, _ := l.s.Resolve(ctx, r, "main")
	if err := l.s.CreateTag(ctx, r, "v1.0", tagAt); err != nil {
		t.Fatal(err)
	}
	if err := l.s.CreateTag(ctx, r, "v1.0", tagAt); !errors.Is(err, ErrRefExists) {
		t.Fatalf("tag twice: %v", err)
	}
	if c, err := l.s.Resolve(ctx, r, "v1.0"); err != nil || c.SHA != tagAt.SHA {
		t.Fatalf("resolve the tag: %v %v", c.SHA, err)
	}
	l.commit(r, "main", map[string]*tfile{"t.bin": nil})

	// Squashing main drops only main's last commit (the others are
	// ancestors of dev and of the tag): nothing is released yet.
	if _, err := l.s.SquashHistory(ctx, r, "main", "squash"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.s.SquashHistory(ctx, r, TagRef("v1.0"), ""); !errors.Is(err, ErrNotBranch) {
		t.Fatalf("squash a tag: %v", err)
	}
	retained := func(f tfile) bool { _, err := l.s.File(ctx, "alice", f.hash()); return err == nil }
	state := func() string {
		return fmt.Sprintf("v1 %v v2 %v dev %v tagged %v", retained(v1), retained(v2), retained(dev), retained(tagged))
	}
	if got := state(); got != "v1 true v2 true dev true tagged true" {
		t.Fatalf("after the squash: %s", got)
	}
	refs, _ := l.s.Refs(ctx, r)
	main, _ := l.s.Resolve(ctx, r, "main")
	if len(refs) != 3 || main.Parent != "" || len(main.Tree) != 1 {
		t.Fatalf("after the squash: refs %v, main %+v", refs, main)
	}
	l.checkConsistent("alice")
	if err := l.s.DeleteRef(ctx, r, "main"); !errors.Is(err, ErrNotBranch) {
		t.Fatalf("delete main: %v", err)
	}
	if err := l.s.DeleteRef(ctx, r, "dev"); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "v1 true v2 true dev false tagged true" {
		t.Fatalf("after deleting dev: %s", got)
	}
	if err := l.s.DeleteRef(ctx, r, TagRef("v1.0")); err != nil {
		t.Fatal(err)
	}
	// The old history is gone with the tag; main's squashed commit keeps v2.
	if got := state(); got != "v1 false v2 true dev false tagged false" {
		t.Fatalf("after deleting the tag: %s", got)
	}
	if _, err := l.s.Resolve(ctx, r, head.SHA); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a dropped commit still resolves: %v", err)
	}
	if err := l.s.DeleteRef(ctx, r, "dev"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete dev twice: %v", err)
	}
	l.checkConsistent("alice")
	l.clock.advance(time.Second)
	rep := l.collect(DefaultGCGrace)
	want := v1.xorbs[0].StreamLen + dev.xorbs[0].StreamLen + tagged.xorbs[0].StreamLen
	if rep.ReleasedBytes != want || l.usage("alice") != v2.xorbs[0].StreamLen {
		t.Fatalf("released %d, want %d; usage %d", rep.ReleasedBytes, want, l.usage("alice"))
	}
	l.mustReadable("alice", v2)
	l.checkConsistent("alice")
}

func TestDeleteTenant(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	shared, own := buildFile(chunkSet(14)), buildFile(chunkSet(15))
	l.upload("alice", shared)
	l.upload("alice", own)
	l.s.CreateCredential(ctx, "alice", []string{accounts.ScopeWrite})
	l.s.PutTenantLimits(ctx, "alice", []byte(`{"quota_bytes":100000000}`), ptr(int64(100000000)))
	r := l.repo("alice", "m")
	l.commit(r, "main", map[string]*tfile{"s": &shared})
	if err := l.register(l.s, "bob", shared); err != nil { // by dedup
		t.Fatal(err)
	}
	del, err := l.s.DeleteTenant(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if del.Credentials != 1 || len(del.Repos) != 1 || del.ReleasedFiles != 2 || !del.LimitsRemoved || del.OwnedBytes == 0 {
		t.Fatalf("deletion %+v", del)
	}
	if cs, _ := l.s.Credentials(ctx, "alice"); len(cs) != 0 {
		t.Fatalf("credentials left: %v", cs)
	}
	l.checkConsistent("alice", "bob")
	l.clock.advance(time.Second)
	l.collect(DefaultGCGrace)
	if l.usage("alice") != 0 {
		t.Fatalf("usage %d after the deletion and a pass", l.usage("alice"))
	}
	l.mustReadable("bob", shared)
	ts, _ := l.s.Tenants(ctx)
	for _, tn := range ts {
		if tn.Name == "alice" {
			t.Fatal("alice still has a tenant row")
		}
	}
	l.checkConsistent("alice", "bob")
	if _, err := l.s.DeleteTenant(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete an unknown tenant: %v", err)
	}
	if _, err := l.s.DeleteTenant(ctx, "Bad/Name"); !errors.Is(err, accounts.ErrBadTenant) {
		t.Fatalf("delete a malformed tenant: %v", err)
	}
}
