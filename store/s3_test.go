package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/store/s3test"
	"openxet/xet"

	"openxet/store/accounts"
)

// TestS3Unavailable: with the S3 server gone, writes and reads fail with
// ErrUnavailable (503 to clients) and change nothing in the index.
func TestS3Unavailable(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.Setenv(t)
	s := mustOpen(t, t.TempDir(), srv.BucketURL(srv.CreateBucket(t)))
	body, info := xet.BuildXorb(chunksOf(41, 2, 1000), false)
	if _, err := s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited); err != nil {
		t.Fatal(err)
	}
	before := dump(t, s)
	srv.Stop()
	body2, info2 := xet.BuildXorb(chunksOf(42, 2, 1000), false)
	if _, err := s.PutXorb(ctx, "alice", info2, body2[:info2.StreamLen], Unlimited); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put with the bucket down: %v, want ErrUnavailable", err)
	}
	if _, err := s.OpenXorbRange(ctx, info.Hash, 0, 10); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read with the bucket down: %v, want ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ping with the bucket down: %v, want ErrUnavailable", err)
	}
	if _, _, err := s.CreateCredential(ctx, "bob", []string{accounts.ScopeRead}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("credential with the bucket down: %v, want ErrUnavailable", err)
	}
	if diff := cmp.Diff(before, dump(t, s)); diff != "" {
		t.Fatalf("failed writes changed the index:\n%s", diff)
	}
}

// TestS3Settings: the bucket URL settings a self-hosted S3 store needs
// (endpoint, region, path-style addressing under either name) and
// credentials from the environment; wrong credentials stop Open with an
// error that is not "unavailable" (nothing to wait out).
func TestS3Settings(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.Setenv(t)
	bucket := srv.CreateBucket(t)
	base := "s3://" + bucket + "?endpoint=" + url.QueryEscape(srv.Endpoint) + "&region=" + s3test.Region
	for _, tc := range []struct {
		name, url string
		ok        bool
	}{
		{"use_path_style", base + "&use_path_style=true", true},
		{"s3ForcePathStyle", base + "&s3ForcePathStyle=true", true},
		{"virtual-hosted (no path style)", base, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctx, Config{IndexPath: testIndex(t, t.TempDir()), BucketURL: tc.url})
			if (err == nil) != tc.ok {
				t.Fatalf("open %s: %v, want ok=%v", tc.url, err, tc.ok)
			}
			if err == nil {
				s.Close()
			}
		})
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-"+srv.SecretKey)
	_, err := Open(ctx, Config{IndexPath: testIndex(t, t.TempDir()), BucketURL: srv.BucketURL(bucket)})
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("open with a wrong secret key: %v, want a non-retryable error", err)
	}
}

// TestS3PlainHTTPWritesAreUnsignedWithChecksum: over a plain-HTTP endpoint
// a write is signed as UNSIGNED-PAYLOAD (no SHA-256 pass over the body) and
// carries its CRC32, which the S3 server checks: a body changed on the way
// is refused and leaves no object.
// s3Front is a proxy in front of a MinIO that records the headers of each
// PUT and, while corrupt is set, flips a bit of its body on the way.
type s3Front struct {
	url     string
	mu      sync.Mutex
	puts    []http.Header
	paths   []string // of puts
	corrupt bool
}

func startS3Front(t *testing.T, srv *s3test.Server) *s3Front {
	t.Helper()
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	f := &s3Front{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			f.mu.Lock()
			f.puts = append(f.puts, r.Header.Clone())
			f.paths = append(f.paths, r.URL.Path)
			if f.corrupt {
				body, _ := io.ReadAll(r.Body)
				body[len(body)/2] ^= 1
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			f.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	f.url = front.URL
	return f
}

// storeBehindFront opens a store on a new bucket of a new MinIO, reached
// through an s3Front; q is the bucket URL's query, to open it again with
// other parameters.
func storeBehindFront(t *testing.T) (s *Store, front *s3Front, bucket string, q url.Values) {
	t.Helper()
	srv := s3test.Start(t)
	srv.Setenv(t)
	bucket = srv.CreateBucket(t)
	front = startS3Front(t, srv)
	q = url.Values{"endpoint": {front.url}, "region": {s3test.Region}, "use_path_style": {"true"}}
	return mustOpen(t, t.TempDir(), "s3://"+bucket+"?"+q.Encode()), front, bucket, q
}

func (f *s3Front) lastPut() http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts[len(f.puts)-1]
}

// putOf returns the headers of the last PUT of a path ending in suffix.
func (f *s3Front) putOf(t *testing.T, suffix string) http.Header {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.paths) - 1; i >= 0; i-- {
		if strings.HasSuffix(f.paths[i], suffix) {
			return f.puts[i]
		}
	}
	t.Fatalf("no PUT of …%s among %v", suffix, f.paths)
	return nil
}

func (f *s3Front) setCorrupt(v bool) {
	f.mu.Lock()
	f.corrupt = v
	f.mu.Unlock()
}

func TestS3PlainHTTPWritesAreUnsignedWithChecksum(t *testing.T) {
	ctx := context.Background()
	s, front, bucket, q := storeBehindFront(t)

	data := bytes.Repeat([]byte("openxet "), 1<<17) // 1 MiB
	if _, err := s.writeObject(ctx, "xorbs/default/plain", data, typeBinary, true); err != nil {
		t.Fatal(err)
	}
	h := front.lastPut()
	if got := h.Get("X-Amz-Content-Sha256"); got != "UNSIGNED-PAYLOAD" {
		t.Errorf("x-amz-content-sha256 %q, want UNSIGNED-PAYLOAD", got)
	}
	if h.Get("X-Amz-Checksum-Crc32") == "" {
		t.Errorf("no x-amz-checksum-crc32 header in %v", h)
	}
	if got, err := s.bucket.ReadAll(ctx, "xorbs/default/plain"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}

	front.setCorrupt(true)
	if _, err := s.writeObject(ctx, "xorbs/default/bent", data, typeBinary, true); err == nil {
		t.Fatal("a body changed on the way was stored")
	}
	if ok, err := s.bucket.Exists(ctx, "xorbs/default/bent"); err != nil || ok {
		t.Fatalf("object of the refused write: exists %v, %v", ok, err)
	}

	// Without the CRC32 the signed SHA-256 stays the body's check.
	front.setCorrupt(false)
	q.Set("request_checksum_calculation", "when_required")
	s = mustOpen(t, t.TempDir(), "s3://"+bucket+"?"+q.Encode())
	if _, err := s.writeObject(ctx, "xorbs/default/signed", data, typeBinary, true); err != nil {
		t.Fatal(err)
	}
	h = front.lastPut()
	if got := h.Get("X-Amz-Content-Sha256"); len(got) != 64 || h.Get("X-Amz-Checksum-Crc32") != "" {
		t.Errorf("with request_checksum_calculation=when_required: x-amz-content-sha256 %q, crc32 %q; want the body's SHA-256 and no CRC32",
			got, h.Get("X-Amz-Checksum-Crc32"))
	}
}

// A xorb's write sends the CRC32 ParseXorb computed, and the service checks
// it: a wrong one stores nothing. With request_checksum_calculation=
// when_required no CRC32 is sent, known or not.
func TestS3XorbWriteSendsTheParsedCRC(t *testing.T) {
	ctx := context.Background()
	s, front, bucket, q := storeBehindFront(t)

	body, info := xet.BuildXorb([][]byte{bytes.Repeat([]byte("chunk one "), 7000), bytes.Repeat([]byte("two "), 9000)}, true)
	if _, err := s.PutXorb(ctx, "alice", info, body, -1); err != nil {
		t.Fatal(err)
	}
	var want [4]byte
	binary.BigEndian.PutUint32(want[:], crc32.ChecksumIEEE(body))
	if got := front.putOf(t, xorbKey(info.Hash.String())).Get("X-Amz-Checksum-Crc32"); got != base64.StdEncoding.EncodeToString(want[:]) {
		t.Errorf("xorb write: x-amz-checksum-crc32 %q, want %q", got, base64.StdEncoding.EncodeToString(want[:]))
	}

	wrong := info.StreamCRC32 ^ 1
	key := "xorbs/default/wrongcrc"
	if _, err := s.writeObjectCRC(ctx, key, body, typeBinary, true, &wrong); err == nil {
		t.Fatal("a write with a wrong CRC32 was stored")
	}
	if ok, err := s.bucket.Exists(ctx, key); err != nil || ok {
		t.Fatalf("object of the refused write: exists %v, %v", ok, err)
	}

	q.Set("request_checksum_calculation", "when_required")
	s = mustOpen(t, t.TempDir(), "s3://"+bucket+"?"+q.Encode())
	if _, err := s.writeObjectCRC(ctx, key, body, typeBinary, true, &wrong); err != nil {
		t.Fatal(err)
	}
	if got := front.lastPut().Get("X-Amz-Checksum-Crc32"); got != "" {
		t.Errorf("with request_checksum_calculation=when_required: x-amz-checksum-crc32 %q, want none", got)
	}
}

// Over HTTPS the xorb's write also carries the parsed CRC32 (in a header,
// not the SDK's trailing checksum), the body goes out whole, and a wrong
// CRC32 stores nothing.
func TestS3XorbWriteOverHTTPS(t *testing.T) {
	ctx := context.Background()
	srv := s3test.StartTLS(t)
	srv.Setenv(t)
	bucket := srv.CreateBucket(t)
	s := mustOpen(t, t.TempDir(), srv.BucketURL(bucket))

	chunks := [][]byte{make([]byte, 200<<10), make([]byte, 90<<10)}
	for _, c := range chunks {
		rand.Read(c)
	}
	body, info := xet.BuildXorb(chunks, false)
	if _, err := s.PutXorb(ctx, "alice", info, body, -1); err != nil {
		t.Fatal(err)
	}
	key := xorbKey(info.Hash.String())
	if got, err := s.bucket.ReadAll(ctx, key); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d of %d bytes, %v", len(got), len(body), err)
	}
	wrong := info.StreamCRC32 ^ 1
	if _, err := s.writeObjectCRC(ctx, "xorbs/default/wrongcrc", body, typeBinary, true, &wrong); err == nil {
		t.Fatal("a write with a wrong CRC32 was stored")
	}
	if ok, err := s.bucket.Exists(ctx, "xorbs/default/wrongcrc"); err != nil || ok {
		t.Fatalf("object of the refused write: exists %v, %v", ok, err)
	}
}
