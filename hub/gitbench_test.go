package hub_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"openxet/gitobj"
	"openxet/store"
	"openxet/testgit"
)

// benchSize is an integer from the environment, or def (CI runs the
// benchmarks once, small; BENCHMARKS.md's figure sets them).
func benchSize(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkGitClone clones, with stock git, a repo of
// OPENXET_BENCH_GIT_FILES small files and OPENXET_BENCH_GIT_COMMITS
// commits (each changing a few files) from openxet, then the same history
// from C git (git clone --no-local of a bare copy), and reports each
// one's wall time and openxet's server CPU (this process's, during the
// clone) per clone, and the wall time of the first clone, which builds
// the trees the others read.
func BenchmarkGitClone(b *testing.B) {
	testgit.Need(b, false)
	files, commits := benchSize("OPENXET_BENCH_GIT_FILES", 500), benchSize("OPENXET_BENCH_GIT_COMMITS", 20)
	e := newEnv(b)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"big"}`)
	ctx := context.Background()
	id := store.RepoID{Tenant: "alice", Type: "model", Name: "big"}
	for c := 0; c < commits; c++ {
		var changes []store.Change
		for f := 0; f < files; f++ {
			if c > 0 && f%max(1, files/25) != c%max(1, files/25) {
				continue // after the first, a commit changes about 25 files
			}
			content := []byte(fmt.Sprintf("file %d, version %d\n", f, c))
			sum := sha256.Sum256(content)
			changes = append(changes, store.Change{Op: store.PutFile, Path: fmt.Sprintf("d%02d/f%05d.txt", f%50, f), Content: content,
				Entry: store.TreeEntry{SizeBytes: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), GitOID: gitobj.BlobID(content)}})
		}
		if _, err := e.Store.Commit(ctx, id, "main", store.NewCommit{Summary: fmt.Sprintf("commit %d", c), Changes: changes}); err != nil {
			b.Fatal(err)
		}
	}
	u, _ := url.Parse(e.URL)
	src := "http://git:" + alice + "@" + u.Host + "/alice/big"
	dir := b.TempDir()
	// The first clone builds every commit's trees and keeps them
	// (gitserve.TreeCache); the clones timed after it read them.
	t0 := time.Now()
	testgit.Must(b, dir, nil, "clone", "-q", "--bare", src, "bare.git")
	first := time.Since(t0)
	var oxWall, oxCPU, gitWall time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpu0 := processCPU()
		t0 := time.Now()
		testgit.Must(b, dir, nil, "clone", "-q", "--no-checkout", src, fmt.Sprintf("ox%d", i))
		oxWall += time.Since(t0)
		oxCPU += processCPU() - cpu0
		t0 = time.Now()
		testgit.Must(b, dir, nil, "clone", "-q", "--no-checkout", "--no-local", filepath.Join(dir, "bare.git"), fmt.Sprintf("git%d", i))
		gitWall += time.Since(t0)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(oxWall.Seconds()/n, "openxet-s/clone")
	b.ReportMetric(oxCPU.Seconds()/n, "openxet-cpu-s/clone")
	b.ReportMetric(gitWall.Seconds()/n, "cgit-s/clone")
	b.ReportMetric(oxWall.Seconds()/gitWall.Seconds(), "wall-ratio")
	b.ReportMetric(first.Seconds(), "first-clone-s")
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
