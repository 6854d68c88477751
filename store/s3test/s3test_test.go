package s3test

import (
	"os"
	"regexp"
	"testing"
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
