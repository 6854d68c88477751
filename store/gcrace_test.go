package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"
)

// passSteps are the steps a pass reports to its Hook, in order, the reads
// of its mark included.
var passSteps = []string{"resumed",
	"mark: owners read", "mark: files read", "mark: shard owners read", "mark: commits read", "mark: refs read",
	"mark: revisions read", "mark: objects read", "marked",
	"owners indexed", "owners released", "shard owners indexed", "shard owners released",
	"doomed", "objects deleted", "swept", "dedup recomputed", "tenants tidied"}

// TestPassRacesCommits (issue 34 item 0): a repo whose regular files
// (blobs), xet files (xorbs) and shards nobody touched for longer than the
// grace period, and at each step of a pass, the reads of its mark
// included, a change to the repo: a commit of another regular file, of
// another xet file, a squash, a new branch with a commit on main that
// drops a file the branch keeps. After every pass each file of every
// branch head is still there, byte for byte, and reindex --check is clean.
// A commit retains its parent's entries without touching them, so only a
// mark that reads one consistent state of the index keeps them.
func TestPassRacesCommits(t *testing.T) { onEngines(t, testPassRacesCommits) }

func testPassRacesCommits(t *testing.T, newLC func(testing.TB) *lc) {
	for _, race := range []struct {
		name string
		do   func(r *repoRace, i int) error
	}{
		{"commit of a regular file", func(r *repoRace, i int) error {
			return r.commitBlob("main", fmt.Sprintf("raced-%d.txt", i), fmt.Sprintf("raced small file %d", i))
		}},
		{"commit of a xet file", func(r *repoRace, i int) error {
			return r.commitXet("main", fmt.Sprintf("raced-%d.bin", i), uint64(1000+i))
		}},
		{"squash", func(r *repoRace, i int) error {
			_, err := r.l.s.SquashHistory(context.Background(), r.id, "main", "")
			return err
		}},
		{"branch, then main drops a file", func(r *repoRace, i int) error {
			ctx := context.Background()
			head, err := r.l.s.Resolve(ctx, r.id, "main")
			if err != nil {
				return err
			}
			if err := r.l.s.CreateBranch(ctx, r.id, fmt.Sprintf("keep-%d", i), head); err != nil {
				return err
			}
			drop := Change{Op: DeleteFile, Path: fmt.Sprintf("small-%d.txt", i%8)}
			if !slices.ContainsFunc(head.Tree, func(e TreeEntry) bool { return e.Path == drop.Path }) {
				return nil // an earlier race dropped it
			}
			_, err = r.l.s.Commit(ctx, r.id, "main", NewCommit{Parent: head.SHA, Summary: "drop", Changes: []Change{drop}})
			return err
		}},
	} {
		t.Run(race.name, func(t *testing.T) {
			l := newLC(t)
			r := &repoRace{l: l, id: l.repo("alice", "m"), xet: map[string]tfile{}}
			for i := range 8 {
				if err := r.commitBlob("main", fmt.Sprintf("small-%d.txt", i), fmt.Sprintf("small file %d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.commitXet("main", "big.bin", 900); err != nil {
				t.Fatal(err)
			}
			for i, step := range passSteps {
				// Everything so far was last touched longer ago than the
				// grace period; a blob nobody references is garbage the
				// pass deletes (so that it condemns something).
				l.clock.advance(2 * time.Hour)
				if err := l.s.PutBlob(context.Background(), hexSHA(fmt.Sprintf("garbage %d", i)), []byte(fmt.Sprintf("garbage %d", i))); err != nil {
					t.Fatal(err)
				}
				l.clock.advance(2 * time.Hour)
				raced := false
				rep, err := l.s.Collect(context.Background(), GCConfig{Grace: time.Hour, Hook: func(s string) error {
					if s == step && !raced {
						raced = true
						if err := race.do(r, i); err != nil {
							t.Errorf("%s at %q: %v", race.name, step, err)
						}
					}
					return nil
				}})
				if err != nil {
					t.Fatalf("pass racing at %q: %v", step, err)
				}
				if !raced && (step != "owners indexed" && step != "shard owners indexed") {
					t.Fatalf("the pass never reported %q", step)
				}
				if err := r.checkHeads(); err != nil {
					t.Fatalf("%s at %q: %v (pass %+v)", race.name, step, err, rep)
				}
			}
			l.checkConsistent("alice")
		})
	}
}

// repoRace is a repo under test and the xet files committed to it.
type repoRace struct {
	l   *lc
	id  RepoID
	xet map[string]tfile // xet hash → file
}

func hexSHA(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// commitBlob stores content as a regular file and commits it at path.
func (r *repoRace) commitBlob(ref, path, content string) error {
	ctx := context.Background()
	sum := hexSHA(content)
	if err := r.l.s.PutBlob(ctx, sum, []byte(content)); err != nil {
		return err
	}
	return r.commitEntry(ref, TreeEntry{Path: path, SizeBytes: int64(len(content)), SHA256: sum, GitOID: fakeOID("oid-" + path)})
}

// commitXet uploads a xet file and commits it at path.
func (r *repoRace) commitXet(ref, path string, seed uint64) error {
	f := buildFile(chunkSet(seed))
	r.l.upload(r.id.Tenant, f)
	r.xet[f.hash().String()] = f
	return r.commitEntry(ref, TreeEntry{Path: path, SizeBytes: int64(len(f.data)), XetHash: f.hash().String(), SHA256: f.info.SHA256.String(), GitOID: fakeOID("oid-" + path)})
}

func (r *repoRace) commitEntry(ref string, e TreeEntry) error {
	ctx := context.Background()
	head, err := r.l.s.Resolve(ctx, r.id, ref)
	if err != nil {
		return err
	}
	put := Change{Op: PutFile, Path: e.Path, Entry: e}
	_, err = r.l.s.Commit(ctx, r.id, ref, NewCommit{Parent: head.SHA, Summary: "add " + e.Path, Changes: []Change{put}})
	return err
}

// checkHeads reads every file of every ref's head: a regular file's blob
// byte for byte, a xet file's bytes through its xorbs, and the shard that
// registered it.
func (r *repoRace) checkHeads() error {
	ctx := context.Background()
	refs, err := r.l.s.Refs(ctx, r.id)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		head, err := r.l.s.Resolve(ctx, r.id, ref.Commit)
		if err != nil {
			return fmt.Errorf("ref %s: %w", ref.Name, err)
		}
		for _, e := range head.Tree {
			if e.XetHash == "" {
				rd, err := r.l.s.OpenBlob(ctx, e.SHA256)
				if err != nil {
					return fmt.Errorf("ref %s, %s: %w", ref.Name, e.Path, err)
				}
				b, err := io.ReadAll(rd)
				rd.Close()
				if err != nil || hexSHA(string(b)) != e.SHA256 {
					return fmt.Errorf("ref %s, %s: blob %s reads %d bytes (%v), not its content", ref.Name, e.Path, e.SHA256, len(b), err)
				}
				continue
			}
			f, ok := r.xet[e.XetHash]
			if !ok {
				return fmt.Errorf("ref %s, %s: unknown xet file %s", ref.Name, e.Path, e.XetHash)
			}
			if err := r.l.readable(r.id.Tenant, f); err != nil {
				return fmt.Errorf("ref %s, %s: %w", ref.Name, e.Path, err)
			}
			var shard string
			if err := r.l.s.db.QueryRow(`SELECT shard FROM files WHERE tenant = ? AND hash = ?`, r.id.Tenant, e.XetHash).Scan(&shard); err != nil {
				return fmt.Errorf("ref %s, %s: shard of %s: %w", ref.Name, e.Path, e.XetHash, err)
			}
			if !r.l.exists(shardKey(shard)) {
				return fmt.Errorf("ref %s, %s: shard %s of %s is gone", ref.Name, e.Path, shard, e.XetHash)
			}
		}
	}
	return nil
}

// TestCommitOfACollectedBlob: a blob stored and collected before the
// commit that names it (with a grace period shorter than the gap) makes
// the commit wait with ErrCollecting instead of naming a missing object;
// stored again, the commit goes through.
func TestCommitOfACollectedBlob(t *testing.T) { onEngines(t, testCommitOfACollectedBlob) }

func testCommitOfACollectedBlob(t *testing.T, newLC func(testing.TB) *lc) {
	l := newLC(t)
	ctx := context.Background()
	r := &repoRace{l: l, id: l.repo("alice", "m"), xet: map[string]tfile{}}
	content := "stored, then collected before its commit"
	sum := hexSHA(content)
	if err := l.s.PutBlob(ctx, sum, []byte(content)); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	if rep := l.collect(0); rep.DeletedBlobs != 1 {
		t.Fatalf("pass %+v, want the unreferenced blob deleted", rep)
	}
	e := TreeEntry{Path: "a.txt", SizeBytes: int64(len(content)), SHA256: sum, GitOID: fakeOID("oid")}
	if err := r.commitEntry("main", e); !errors.Is(err, ErrCollecting) {
		t.Fatalf("commit naming a collected blob: %v, want ErrCollecting", err)
	}
	if err := r.commitBlob("main", "a.txt", content); err != nil {
		t.Fatal(err)
	}
	if err := r.checkHeads(); err != nil {
		t.Fatal(err)
	}
}
