package s3test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"os"
	"regexp"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestVersionMatchesScript: the tests look for the MinIO version that
// .ci/minio.sh installs.
func TestVersionMatchesScript(t *testing.T) {
	script, err := os.ReadFile("../../.ci/minio.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version=(\S+)$`).FindSubmatch(script)
	if m == nil || string(m[1]) != MinioVersion {
		t.Fatalf(".ci/minio.sh installs %q, MinioVersion is %q", m, MinioVersion)
	}
}

// TestStartAndStop: a started server answers with the bucket it made, and
// Stop ends the process.
func TestStartAndStop(t *testing.T) {
	s := Start(t)
	name := s.CreateBucket(t)
	if name == "" || s.BucketURL(name) == "" {
		t.Fatal("no bucket")
	}
	s.Stop()
	select {
	case <-s.exited:
	default:
		t.Fatal("minio still running after Stop")
	}
	s.Stop() // twice is fine
}

// StartNoCompat's MinIO gives objects a random ETag, Start's the body's
// MD5: the flag the conformance suite's s3-no-compat driver relies on does
// what docs/scale-out.md says.
func TestNoCompatETagIsNotMD5(t *testing.T) {
	body := []byte("openxet reads no ETag")
	sum := md5.Sum(body)
	want := `"` + hex.EncodeToString(sum[:]) + `"`
	for _, c := range []struct {
		name  string
		start func(testing.TB) *Server
		md5   bool
	}{{"default", Start, true}, {"no-compat", StartNoCompat, false}} {
		t.Run(c.name, func(t *testing.T) {
			s := c.start(t)
			bucket := s.CreateBucket(t)
			out, err := s.client.PutObject(context.Background(), &s3.PutObjectInput{
				Bucket: aws.String(bucket), Key: aws.String("x"), Body: bytes.NewReader(body)})
			if err != nil {
				t.Fatal(err)
			}
			if got := aws.ToString(out.ETag) == want; got != c.md5 {
				t.Fatalf("ETag %s, body MD5 %s: equal %v, want %v", aws.ToString(out.ETag), want, got, c.md5)
			}
		})
	}
}
