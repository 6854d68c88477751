package objects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/smithy-go"

	"openxet/store/s3test"
)

// TestS3WriteCopiesNothing: writing a 64 MiB object to S3 allocates next
// to nothing beside the caller's slice (through gocloud's writer it
// allocated 83 MiB: the transfer manager's first-part copy and part
// buffers), reads back the same, and a create-if-absent write over it
// changes nothing.
func TestS3WriteCopiesNothing(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.Setenv(t)
	s := mustOpen(t, srv.BucketURL(srv.CreateBucket(t)), "")
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	const key = "xorbs/default/big"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	written, err := s.Write(ctx, key, data, typeBinary, true)
	runtime.ReadMemStats(&after)
	if err != nil || !written {
		t.Fatalf("write: %v %v", written, err)
	}
	// A bound well above what one PutObject allocates (about 0.1 MiB) and
	// well below any copy of the object.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Fatalf("writing 64 MiB allocated %.1f MiB; want no copy of the object (under 8 MiB)", float64(alloc)/(1<<20))
	}
	if written, err := s.Write(ctx, key, []byte("other"), typeBinary, true); err != nil || written {
		t.Fatalf("create-if-absent over an object: %v %v", written, err)
	}
	got, err := s.ReadAll(ctx, key)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	attrs, err := s.b.Attributes(ctx, key)
	if err != nil || attrs.ContentType != typeBinary {
		t.Fatalf("attributes %+v %v", attrs, err)
	}
	// A key gocloud would escape goes through gocloud's writer, and reads
	// back through gocloud under the same key.
	odd := "repos/x/model/a_b__0x41/repo.json"
	if written, err := s.Write(ctx, odd, []byte(`{}`), typeJSON, false); err != nil || !written {
		t.Fatalf("write %s: %v", odd, err)
	}
	if got, err := s.ReadAll(ctx, odd); err != nil || string(got) != `{}` {
		t.Fatalf("read %s: %q %v", odd, got, err)
	}
}

func TestS3ErrorClasses(t *testing.T) {
	for _, tc := range []struct {
		err         error
		unavailable bool
	}{
		{&smithy.GenericAPIError{Code: "SlowDown"}, true},
		{&smithy.GenericAPIError{Code: "InternalError"}, true},
		{&smithy.GenericAPIError{Code: "ServiceUnavailable"}, true},
		{fmt.Errorf("dial: %w", errors.New("connection refused")), true},
		{context.DeadlineExceeded, true},
		{&smithy.GenericAPIError{Code: "AccessDenied"}, false},
		{&smithy.GenericAPIError{Code: "NoSuchBucket"}, false},
		{&smithy.GenericAPIError{Code: "InvalidAccessKeyId"}, false},
		{&smithy.GenericAPIError{Code: "SignatureDoesNotMatch"}, false},
		{&smithy.GenericAPIError{Code: "NotImplemented"}, false},
		{context.Canceled, false},
	} {
		if got := errors.Is(s3Err(tc.err), ErrUnavailable); got != tc.unavailable {
			t.Errorf("%v: unavailable %v, want %v", tc.err, got, tc.unavailable)
		}
		if !errors.Is(s3Err(tc.err), tc.err) {
			t.Errorf("%v: the cause is lost", tc.err)
		}
	}
}

func TestS3URLDefaults(t *testing.T) {
	for in, want := range map[string]string{
		"s3://b?region=x": "response_checksum_validation=when_required",
		"s3://b?response_checksum_validation=when_supported": "response_checksum_validation=when_supported",
	} {
		u, _ := url.Parse(in)
		got, _ := url.Parse(withS3Defaults(u))
		if got.Host != "b" || !bytes.Contains([]byte(got.RawQuery), []byte(want)) {
			t.Errorf("%s: %s, want %s in it", in, got, want)
		}
	}
	// The SSE settings of the URL reach the writer; a bad one is refused
	// (by gocloud when the bucket opens, before the writer is made).
	if _, err := Open(context.Background(), "s3://b?region=x&ssetype=nope", ""); err == nil {
		t.Fatal("ssetype=nope accepted")
	}
}

// BenchmarkS3WriteObject64MiB: one 64 MiB object written to MinIO (figures
// in BENCHMARKS.md; B/op is what the write allocates beside the object).
func BenchmarkS3WriteObject64MiB(b *testing.B) {
	srv := s3test.Start(b)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
	s := mustOpen(b, srv.BucketURL(srv.CreateBucket(b)), "")
	data := make([]byte, 64<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Write(context.Background(), "bench/object", data, typeBinary, false); err != nil {
			b.Fatal(err)
		}
	}
}
