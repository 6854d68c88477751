package server

import (
	"bytes"
	"context"
	"io"
	"testing"

	"openxet/xet"
)

// A range of a file:// bucket's object is a section of its file, which
// sendShared hands to the socket with sendfile; the section reads back as
// the range.
func TestFileSourceOfAFileBucketRange(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	x, info := xet.BuildXorb(randomChunks(62, 8, 64<<10), false)
	e.upload(alice, x)
	r, err := e.st.OpenXorbRange(context.Background(), info.Hash, 1000, 200<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := fileSource(r)
	if f == nil {
		t.Fatalf("no file behind the range reader %T of a file:// bucket", r)
	}
	if f.N != 200<<10 {
		t.Fatalf("file section of %d bytes, want %d", f.N, 200<<10)
	}
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, x[1000:1000+200<<10]) {
		t.Fatalf("file section reads %d bytes (%v), not the range", len(got), err)
	}
	if fileSource(bytes.NewReader(x)) != nil {
		t.Error("a file section found behind a bytes.Reader")
	}
}
