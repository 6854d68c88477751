package hub_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"openxet/xet"
)

// TestResolveSaysTheSizeOfAnEmptyFile: @huggingface/hub's fileDownloadInfo
// asks for a file with "Range: bytes=0-0" and reads its size from the
// xet-fileinfo JSON or else from Content-Range (after the "/"). An empty
// file has no byte to send, so the answer is 200 with Content-Length: 0,
// and it still carries "Content-Range: bytes */0"; without it the client
// fails with "Expected size information". A file with bytes answers 206
// with its Content-Range as before.
func TestResolveSaysTheSizeOfAnEmptyFile(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	if r := e.Do("POST", "/api/repos/create", alice, []byte(`{"name":"m"}`)); r.Status != 200 {
		t.Fatalf("create repo: %d %s", r.Status, r.Body)
	}
	// An empty Xet file: a shard registering a file without terms.
	empty := sha256.Sum256(nil)
	emptySHA, err := xet.ParseHash(hex.EncodeToString(empty[:]))
	if err != nil {
		t.Fatal(err)
	}
	f := xet.FileInfo{Hash: xet.FileHash(nil), Flags: 0x40000000, SHA256: &emptySHA}
	if r := e.Do("POST", "/v1/shards", alice, (&xet.Shard{Files: []xet.FileInfo{f}}).MarshalUpload()); r.Status != 200 {
		t.Fatalf("shard of an empty file: %d %s", r.Status, r.Body)
	}
	r := e.commitLines(alice, "alice/m",
		regularFileLine("empty.txt", nil),
		regularFileLine("one.txt", []byte("x")),
		fmt.Sprintf(`{"key":"lfsFile","value":{"path":"empty.bin","algo":"sha256","oid":%q,"size":0}}`, emptySHA.String()),
	)
	if r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	fileInfo := []string{"Range: bytes=0-0", "Accept: application/vnd.xet-fileinfo+json, */*"}
	for _, c := range []struct {
		path, method string
		headers      []string
		status       int
		contentRange string
		length       string
	}{
		{"empty.txt", "GET", fileInfo, 200, "bytes */0", "0"},
		{"empty.txt", "HEAD", fileInfo, 200, "bytes */0", "0"},
		{"empty.txt", "GET", []string{"Range: bytes=0-"}, 200, "bytes */0", "0"},
		{"empty.txt", "GET", nil, 200, "", "0"},
		{"empty.bin", "GET", []string{"Range: bytes=0-0"}, 200, "bytes */0", "0"},
		{"empty.bin", "HEAD", []string{"Range: bytes=0-0"}, 200, "bytes */0", "0"},
		{"empty.bin", "GET", nil, 200, "", "0"},
		{"one.txt", "GET", fileInfo, 206, "bytes 0-0/1", "1"},
	} {
		name := fmt.Sprintf("%s %s %q", c.method, c.path, c.headers)
		r := e.Do(c.method, "/alice/m/resolve/main/"+c.path, alice, nil, c.headers...)
		if r.Status != c.status || r.Header.Get("Content-Range") != c.contentRange || r.Header.Get("Content-Length") != c.length || r.Header.Get("ETag") == "" {
			t.Errorf("%s: %d, Content-Range %q, Content-Length %q, ETag %q; want %d, %q, %q and an ETag", name, r.Status,
				r.Header.Get("Content-Range"), r.Header.Get("Content-Length"), r.Header.Get("ETag"), c.status, c.contentRange, c.length)
		}
	}
}
