package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// bucketObjects is every key in a bucket with its content, as text.
func bucketObjects(tb testing.TB, bucketURL string) map[string]string {
	tb.Helper()
	ctx := context.Background()
	b, err := OpenBucket(ctx, bucketURL)
	if err != nil {
		tb.Fatal(err)
	}
	defer b.Close()
	keys, err := b.ListKeys(ctx, "")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		data, err := b.ReadAll(ctx, k)
		if err != nil {
			tb.Fatal(err)
		}
		out[k] = string(data)
	}
	return out
}

func TestDeploymentMarkerNewStore(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	id := s.Deployment()
	if len(id) != 32 || !isHex(id) {
		t.Fatalf("deployment id %q, want 32 hex digits", id)
	}
	ctx := context.Background()
	if got, err := bucketDeployment(ctx, s.Bucket()); err != nil || got != id {
		t.Fatalf("bucket marker %q %v, want %q", got, err, id)
	}
	if got, err := indexDeployment(ctx, s.db); err != nil || got != id {
		t.Fatalf("index marker %q %v, want %q", got, err, id)
	}
	s.Close()
	if s2 := mustOpen(t, dir, fileBucket(dir)); s2.Deployment() != id {
		t.Fatalf("reopened: deployment %q, want %q", s2.Deployment(), id)
	}
}

// TestDeploymentMarkerMismatch: an index pointed at another deployment's
// bucket, or at a bucket without a marker, is refused at Open, naming both
// ids, and nothing changes in either.
func TestDeploymentMarkerMismatch(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		other      func(t *testing.T, dir string) string // the bucket the index is then pointed at
		wantBucket func(t *testing.T, url string) string // the id the error names for it
	}{
		{"another deployment", func(t *testing.T, dir string) string {
			url := fileBucket(filepath.Join(dir, "other"))
			s := mustOpen(t, filepath.Join(dir, "other"), url)
			populate(t, s)
			s.Close()
			return url
		}, func(t *testing.T, url string) string {
			b, _ := OpenBucket(ctx, url)
			defer b.Close()
			id, err := bucketDeployment(ctx, b)
			if err != nil || id == "" {
				t.Fatalf("other bucket's marker %q %v", id, err)
			}
			return id
		}},
		{"empty bucket", func(t *testing.T, dir string) string {
			return fileBucket(filepath.Join(dir, "empty"))
		}, func(*testing.T, string) string { return "" }},
		{"bucket without a marker", func(t *testing.T, dir string) string {
			url := fileBucket(filepath.Join(dir, "unmarked"))
			s := mustOpen(t, filepath.Join(dir, "unmarked"), url)
			populate(t, s)
			if err := s.Bucket().Delete(ctx, deploymentKey); err != nil {
				t.Fatal(err)
			}
			s.Close()
			return url
		}, func(*testing.T, string) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir, fileBucket(dir))
			populate(t, s)
			id := s.Deployment()
			before := dump(t, s)
			s.Close()
			other := tc.other(t, dir)
			wantBucket := tc.wantBucket(t, other)
			otherBefore := bucketObjects(t, other)

			cfg := Config{IndexPath: testIndex(t, dir), BucketURL: other}
			_, err := Open(ctx, cfg)
			var me *DeploymentMismatchError
			if !errors.As(err, &me) || !errors.Is(err, ErrDeploymentMismatch) {
				t.Fatalf("open against %s: %v, want a DeploymentMismatchError", tc.name, err)
			}
			want := DeploymentMismatchError{IndexPath: cfg.IndexPath, BucketURL: other, IndexID: id, BucketID: wantBucket}
			if diff := cmp.Diff(want, *me); diff != "" {
				t.Fatalf("mismatch error (-want +got):\n%s", diff)
			}
			for _, part := range []string{id, cfg.IndexPath, other} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("message %q does not name %q", err, part)
				}
			}
			if wantBucket != "" && !strings.Contains(err.Error(), wantBucket) {
				t.Errorf("message %q does not name the bucket's deployment %s", err, wantBucket)
			}
			if diff := cmp.Diff(otherBefore, bucketObjects(t, other)); diff != "" {
				t.Fatalf("the refused open changed the other bucket:\n%s", diff)
			}
			s2 := mustOpen(t, dir, fileBucket(dir))
			if s2.Deployment() != id {
				t.Fatalf("deployment after a refused open: %q, want %q", s2.Deployment(), id)
			}
			if diff := cmp.Diff(before, dump(t, s2)); diff != "" {
				t.Fatalf("the refused open changed the index:\n%s", diff)
			}
		})
	}
}

// TestDeploymentMarkerAdoptedByNewIndex: an index without a marker (new, or
// made before markers) adopts the bucket's.
func TestDeploymentMarkerAdoptedByNewIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	populate(t, s)
	id := s.Deployment()
	s.Close()

	// A second, empty index on the same bucket.
	s2 := mustOpen(t, filepath.Join(dir, "second"), fileBucket(dir))
	if s2.Deployment() != id {
		t.Fatalf("new index: deployment %q, want the bucket's %q", s2.Deployment(), id)
	}
	s2.Close()

	// An index with data but no marker (an upgrade).
	s3 := mustOpen(t, dir, fileBucket(dir))
	if _, err := s3.db.Exec(`DELETE FROM deployment`); err != nil {
		t.Fatal(err)
	}
	s3.Close()
	s4 := mustOpen(t, dir, fileBucket(dir))
	if s4.Deployment() != id {
		t.Fatalf("unmarked index: deployment %q, want the bucket's %q", s4.Deployment(), id)
	}
	if got, err := indexDeployment(ctx, s4.db); err != nil || got != id {
		t.Fatalf("unmarked index after open: %q %v", got, err)
	}
}

// TestDeploymentMarkerReindex: reindex gives the rebuilt index the bucket's
// marker (the cure for a mismatch), and reindex --check reports a
// mismatch as a difference.
func TestDeploymentMarkerReindex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	populate(t, s)
	s.Close()
	otherDir := filepath.Join(dir, "other")
	o := mustOpen(t, otherDir, fileBucket(otherDir))
	populate(t, o)
	otherID := o.Deployment()
	o.Close()

	cfg := ReindexConfig{IndexPath: testIndex(t, dir), BucketURL: fileBucket(otherDir)}
	diffs, err := CheckIndex(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var marker []Difference
	for _, d := range diffs {
		if d.Table == "deployment" {
			marker = append(marker, d)
		}
	}
	if len(marker) != 1 || marker[0].Bucket != otherID || marker[0].Index == "" || marker[0].Index == otherID {
		t.Fatalf("check against another deployment's bucket: marker differences %v", marker)
	}
	if err := Reindex(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, Config{IndexPath: cfg.IndexPath, BucketURL: cfg.BucketURL})
	if err != nil {
		t.Fatalf("open after reindex: %v", err)
	}
	defer s2.Close()
	if s2.Deployment() != otherID {
		t.Fatalf("deployment after reindex %q, want %q", s2.Deployment(), otherID)
	}
	if diffs, err := CheckIndex(ctx, cfg); err != nil || len(diffs) != 0 {
		t.Fatalf("check after reindex: %v %v", diffs, err)
	}
}

func TestDeploymentMarkerDamaged(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	if err := s.Bucket().WriteAll(context.Background(), deploymentKey, []byte("{"), nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(context.Background(), Config{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir)})
	if err == nil || errors.Is(err, ErrDeploymentMismatch) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("open with a damaged marker: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "bucket", deploymentKey)); string(data) != "{" {
		t.Fatalf("the damaged marker was replaced: %q", data)
	}
}

// TestDeploymentMarkerRacingStarts: processes starting at once on a new
// data directory end with one deployment id.
func TestDeploymentMarkerRacingStarts(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := Open(context.Background(), DirConfig(dir))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = s.Deployment()
			s.Close()
		})
	}
	wg.Wait()
	for i := range ids {
		if ids[i] == "" || ids[i] != ids[0] {
			t.Fatalf("deployment ids %v, want one", ids)
		}
	}
}
