package objects

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gocloud.dev/blob"
)

// fileblobKeys lists prefix through fileblob, one key at a time.
func fileblobKeys(tb testing.TB, b *blob.Bucket, prefix string) []string {
	tb.Helper()
	var keys []string
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return keys
		}
		if err != nil {
			tb.Fatal(err)
		}
		keys = append(keys, obj.Key)
	}
}

// The store's walk of a file:// bucket lists what fileblob lists, whatever
// the prefix, in key order (fileblob's order is its walk's, nearly
// sorted); keys fileblob escapes on disk are listed through fileblob.
func TestListFileBucketAsFileblob(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"plain", []string{"a/b", "a.c", "a/c/d", "a-b", "ab", "b/x.json", "xorbs/default/00", "xorbs/default/01", "xorb-owners/00/t", "xorb-owners/01/t"}},
		{"escaped", []string{"a/b", "a/odd__0x41__name", "a/ctl\x01", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			url := FileBucketURL(dir)
			b, err := Open(ctx, url, "")
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, k := range tc.keys {
				if err := b.WriteAll(ctx, k, []byte(k), nil); err != nil {
					t.Fatal(err)
				}
			}
			for _, prefix := range []string{"", "a", "a/", "a/c", "a-", "b/", "x", "xorbs/default/", "xorb-owners/", "none/"} {
				want := fileblobKeys(t, b.b, prefix)
				slices.Sort(want)
				got, err := b.ListKeys(ctx, prefix)
				if err != nil {
					t.Fatalf("prefix %q: %v", prefix, err)
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("prefix %q: listKeys differs from fileblob (-fileblob +listKeys):\n%s", prefix, diff)
				}
			}
		})
	}
}

// A listing of a file:// bucket taking writes (each a temporary file
// renamed into place) and deletes in the same directory lists every object
// that stays and never fails because an entry went away while it walked.
// fileblob's listing stats entries after reading their directory and
// failed with NotFound.
func TestListFileBucketWhileWriting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := FileBucketURL(dir)
	b, err := Open(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var stable []string
	for i := range 2000 {
		k := fmt.Sprintf("%s%064x", prefixXorbs, i*2)
		if err := b.WriteAll(ctx, k, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		stable = append(stable, k)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("%s%064x", prefixXorbs, (i%2000)*2+1+w*4000)
				b.WriteAll(ctx, k, []byte("churn"), nil)
				b.Delete(ctx, k)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for round := range 20 {
		keys, err := b.ListKeys(ctx, prefixXorbs)
		if err != nil {
			t.Fatalf("listing %d: %v", round, err)
		}
		for _, k := range stable {
			if _, found := slices.BinarySearch(keys, k); !found {
				t.Fatalf("listing %d: %s missing", round, k)
			}
		}
	}
}

func TestFileBucketDir(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{FileBucketURL("/data/bucket"), "/data/bucket"},
		{"file:///data/bucket", "/data/bucket"},
		{"file://./rel/bucket", "rel/bucket"},
		{"file:///data/bucket?prefix=p/", ""},
		{"mem://", ""},
		{"s3://bucket?region=x", ""},
	} {
		if got := fileBucketDir(tc.url); got != tc.want {
			t.Errorf("fileBucketDir(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

// A listing stops when its context is done, as gocloud's does.
func TestListFileBucketCancelled(t *testing.T) {
	dir := t.TempDir()
	url := FileBucketURL(dir)
	b, err := Open(context.Background(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.WriteAll(context.Background(), prefixShards+"s", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if keys, err := b.ListKeys(ctx, prefixShards); !errors.Is(err, context.Canceled) {
		t.Fatalf("listKeys with a cancelled context: %v, %v; want context.Canceled", keys, err)
	}
}
