// Package s3test starts a real S3-compatible server, MinIO, for tests: on
// 127.0.0.1, on free ports, with a temporary data directory and random root
// credentials, stopped when the test ends. Only tests import it.
//
// The MinIO binary is built from its Go module at the pinned MinioVersion
// by .ci/minio.sh, into a cache directory later runs reuse. Binary says
// where the tests look for it. When it is absent, Start skips the test with
// a message saying how to install it, unless OPENXET_REQUIRE_S3=1 (set by
// CI after installing it), which makes the absence a failure.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"openxet/testcert"
	"openxet/testproc"
)

// MinioVersion is the version of github.com/minio/minio that .ci/minio.sh
// installs and the tests run.
const MinioVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"

// Region is the region every bucket URL names (MinIO accepts any).
const Region = "us-east-1"

// Binary returns the path of the MinIO binary, or "" when there is none:
// $OPENXET_MINIO if set, else where .ci/minio.sh installs it
// ($OPENXET_CACHE, else $XDG_CACHE_HOME/openxet, else
// ~/.cache/openxet, then minio-<MinioVersion>/minio), else "minio" on PATH.
func Binary() string {
	if p := os.Getenv("OPENXET_MINIO"); p != "" {
		return p
	}
	cache := os.Getenv("OPENXET_CACHE")
	if cache == "" {
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
			cache = filepath.Join(x, "openxet")
		} else if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "openxet")
		}
	}
	if cache != "" {
		p := filepath.Join(cache, "minio-"+MinioVersion, "minio")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	return ""
}

// Server is one running MinIO server.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:<port>
	// (https:// from StartTLS).
	Endpoint string
	// CAFile is the PEM file of the CA that issued the certificate a
	// StartTLS server presents ("" for Start); Env points AWS_CA_BUNDLE at it.
	CAFile string
	// AccessKey and SecretKey are its root credentials.
	AccessKey, SecretKey string

	client *s3.Client
	http   *http.Client // trusts CAFile
	cmd    *exec.Cmd
	out    *testproc.Buffer
	exited chan struct{}

	stopOnce sync.Once
}

// startWait bounds how long MinIO may take to answer its health check on a
// loaded machine; it only catches a server that never starts.
const startWait = 2 * time.Minute

// Start starts a MinIO server for tb and stops it when tb ends. It skips
// tb when the binary is absent (see the package comment).
func Start(tb testing.TB) *Server { return startServer(tb, false) }

// StartTLS is Start with MinIO serving HTTPS, with a certificate for
// 127.0.0.1 from a CA made for this server (CAFile).
func StartTLS(tb testing.TB) *Server { return startServer(tb, true) }

// StartNoCompat is Start with MinIO's --no-compat: objects get a random
// ETag instead of their body's MD5, MinIO's costliest pass over an upload
// (docs/scale-out.md, "S3"). openxet reads no ETag; the conformance suite
// runs on it to keep that true.
func StartNoCompat(tb testing.TB) *Server { return startServer(tb, false, "--no-compat") }

func startServer(tb testing.TB, tls bool, args ...string) *Server {
	tb.Helper()
	bin := Binary()
	if bin == "" {
		msg := "MinIO is not installed: run .ci/minio.sh (or set OPENXET_MINIO to a minio binary) to run the S3 tests"
		if os.Getenv("OPENXET_REQUIRE_S3") == "1" {
			tb.Fatal(msg + " (OPENXET_REQUIRE_S3=1 requires them)")
		}
		tb.Skip(msg)
	}
	var lastErr error
	for range 3 { // a free port may be taken by someone else before MinIO binds it
		s, err := start(tb, bin, tls, args)
		if err == nil {
			return s
		}
		lastErr = err
	}
	tb.Fatal(lastErr)
	return nil
}

func start(tb testing.TB, bin string, tls bool, args []string) (*Server, error) {
	tb.Helper()
	dir := tb.TempDir()
	api, console := freeAddr(tb), freeAddr(tb)
	s := &Server{
		Endpoint:  "http://" + api,
		AccessKey: "oxt" + randomHex(8),
		SecretKey: randomHex(20),
		http:      http.DefaultClient,
		out:       &testproc.Buffer{},
		exited:    make(chan struct{}),
	}
	if tls {
		// MinIO serves the certificate and key it finds in its certs
		// directory.
		certs := filepath.Join(dir, "certs")
		if err := os.MkdirAll(certs, 0o700); err != nil {
			return nil, err
		}
		ca := testcert.NewCA(tb)
		ca.Issue(tb, 1, filepath.Join(certs, "public.crt"), filepath.Join(certs, "private.key"))
		s.CAFile, s.http = ca.PEMFile, ca.Client()
		s.Endpoint = "https://" + api
	}
	// Only 127.0.0.1, no console, no update checks, no call-home, no
	// certificates or configuration from the user's home, and nothing
	// from the environment but what is set here.
	argv := append([]string{"server", "--quiet", "--anonymous",
		"--address", api, "--console-address", console,
		"--certs-dir", filepath.Join(dir, "certs")}, args...)
	s.cmd = exec.Command(bin, append(argv, filepath.Join(dir, "data"))...)
	s.cmd.Env = []string{
		"HOME=" + dir,
		"TMPDIR=" + os.TempDir(),
		"PATH=" + os.Getenv("PATH"),
		"MINIO_ROOT_USER=" + s.AccessKey,
		"MINIO_ROOT_PASSWORD=" + s.SecretKey,
		"MINIO_UPDATE=off",
		"MINIO_BROWSER=off",
		"MINIO_CALLHOME_ENABLE=off",
		"MINIO_CI_CD=1", // a data directory on the root file system is fine
		"GOMAXPROCS=2",
	}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start minio: %w", err)
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	tb.Cleanup(func() {
		s.Stop()
		if tb.Failed() {
			tb.Logf("minio output:\n%s", s.out)
		}
	})
	if err := s.waitReady(); err != nil {
		s.Stop()
		return nil, err
	}
	s.client = s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		HTTPClient:   s.http,
	})
	return s, nil
}

// waitReady polls MinIO's liveness endpoint (a child process no virtual
// clock can reach) until it answers, the process exits, or startWait.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(startWait)
	for {
		res, err := s.http.Get(s.Endpoint + "/minio/health/ready")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("minio exited before it was ready:\n%s", s.out)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("minio not ready within %s:\n%s", startWait, s.out)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 30s) and waits for it
// to exit. It is safe to call twice.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// CreateBucket creates a new, empty bucket with a unique name and returns
// its name.
func (s *Server) CreateBucket(tb testing.TB) string {
	tb.Helper()
	name := "openxet-" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Fatalf("create bucket %s: %v\n%s", name, err, s.out)
	}
	return name
}

// BucketURL is the gocloud.dev s3:// URL of bucket on this server (path
// style, the server's endpoint and region). The credentials are not in it:
// they come from the environment (Env, Setenv).
func (s *Server) BucketURL(bucket string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("region", Region)
	q.Set("use_path_style", "true")
	return "s3://" + bucket + "?" + q.Encode()
}

// Env is the environment a process needs to reach the server with the
// AWS SDK: the root credentials, the certificate to trust (StartTLS), and
// no shared configuration files or instance metadata lookups of the
// machine running the tests.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_SESSION_TOKEN=",
		"AWS_PROFILE=",
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CA_BUNDLE=" + s.CAFile,
	}
}

// Setenv sets Env in this process for the rest of t (so t and its parents
// cannot be parallel).
func (s *Server) Setenv(t *testing.T) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

func freeAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := testproc.FreeAddr()
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
