// Package pgtest starts a real PostgreSQL server for tests: a throwaway
// cluster in a temporary directory, listening on 127.0.0.1 on a free port,
// stopped and removed when the test ends. Only tests import it.
//
// PostgreSQL refuses to run as root. When the tests run as root (CI does),
// the cluster runs as the "postgres" user that Debian's postgresql package
// creates. The binaries are found in $OPENXET_PG_BIN, else the newest
// /usr/lib/postgresql/<version>/bin (Debian), else on PATH. When there are
// none, Start skips the test with a message saying how to install them,
// unless OPENXET_REQUIRE_PG=1 (set by CI after installing them), which makes
// their absence a failure.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"openxet/testproc"
)

// Server is one running PostgreSQL cluster.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr string

	dir    string
	bin    string
	args   []string
	cred   *syscall.Credential
	cmd    *exec.Cmd
	out    *testproc.Buffer
	exited chan struct{}

	stopOnce sync.Once
}

// user is the cluster's superuser; local connections are trusted.
const dbUser = "openxet"

// startWait bounds how long the server may take to accept connections on a
// loaded machine; it only catches a server that never starts.
const startWait = 2 * time.Minute

// BinDir returns the directory of initdb and postgres, or "".
func BinDir() string {
	if d := os.Getenv("OPENXET_PG_BIN"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start starts a cluster for tb and removes it when tb ends. It skips tb
// when PostgreSQL is not installed (see the package comment). The cluster
// does not wait for its writes to reach the disk (fsync off): a test's
// cluster never outlives a crash of the machine. Benchmarks use
// StartDurable.
func Start(tb testing.TB) *Server { return startCluster(tb, false) }

// StartDurable is Start with the durability of a real deployment: every
// commit waits for its write-ahead log to reach the disk.
func StartDurable(tb testing.TB) *Server { return startCluster(tb, true) }

func startCluster(tb testing.TB, durable bool) *Server {
	tb.Helper()
	if BinDir() == "" {
		msg := "PostgreSQL is not installed: apt-get install postgresql (or set OPENXET_PG_BIN to its bin directory) to run the PostgreSQL tests"
		if os.Getenv("OPENXET_REQUIRE_PG") == "1" {
			tb.Fatal(msg + " (OPENXET_REQUIRE_PG=1 requires them)")
		}
		tb.Skip(msg)
	}
	s, err := Launch(durable)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("postgres output:\n%s", s.out)
		}
		s.Close()
	})
	return s
}

// Launch starts a cluster outside any test (for a TestMain); the caller
// must Close it. Start is the usual way.
func Launch(durable bool) (*Server, error) {
	bin := BinDir()
	if bin == "" {
		return nil, errors.New("PostgreSQL is not installed (apt-get install postgresql, or set OPENXET_PG_BIN)")
	}
	var lastErr error
	for range 3 { // a free port may be taken by someone else before postgres binds it
		s, err := start(bin, durable)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(bin string, durable bool) (*Server, error) {
	dir, err := os.MkdirTemp("", "openxet-pg-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("chown %s: %w", dir, err))
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "--no-sync", "--auth=trust", "--username="+dbUser,
		"--encoding=UTF8", "--locale=C", "-D", data)
	initdb.Env = env(dir)
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w\n%s", err, out))
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	s := &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:  dir,
		bin:  bin,
		cred: cred,
		out:  &testproc.Buffer{},
	}
	// Only 127.0.0.1 and a socket directory of its own.
	args := []string{"-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", dir,
		"-c", "max_connections=200", "-c", "shared_buffers=64MB"}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	s.args = args
	if err := s.run(); err != nil {
		return fail(err)
	}
	if err := s.waitReady(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// run starts the postgres process on the cluster's directory and port.
func (s *Server) run() error {
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), s.args...)
	cmd.Env = env(s.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	return nil
}

// Restart stops the server as an operator's restart does (fast shutdown:
// every session ends, with the locks it held) and starts it again on the
// same port and data, returning once it accepts connections. Not after
// Stop or Kill.
func (s *Server) Restart() error {
	s.halt()
	if err := s.run(); err != nil {
		return err
	}
	return s.waitReady()
}

// Halt stops the server as Restart does, and leaves it stopped until
// Resume: an index that does not answer.
func (s *Server) Halt() { s.halt() }

// Resume starts a server Halt stopped, on the same port and data, and
// returns once it accepts connections.
func (s *Server) Resume() error {
	if err := s.run(); err != nil {
		return err
	}
	return s.waitReady()
}

// Freeze stops every process of the server (SIGSTOP: the postmaster, then
// each backend and helper it forked, which PostgreSQL puts in sessions of
// their own) without ending a session: PostgreSQL hangs, as a stalled
// host or a paused VM does, until Thaw. Linux only (it reads /proc).
func (s *Server) Freeze() error { return s.signalAll(syscall.SIGSTOP) }

// Thaw resumes a server Freeze stopped; every session goes on where it was.
func (s *Server) Thaw() error { return s.signalAll(syscall.SIGCONT) }

// signalAll sends sig to the postmaster and to every process whose parent
// it is.
func (s *Server) signalAll(sig syscall.Signal) error {
	pid := s.cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return err
	}
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		child, err := strconv.Atoi(strings.Fields(string(b))[0])
		if err == nil {
			syscall.Kill(child, sig)
		}
	}
	return nil
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
}

// runAs is the credential the cluster runs with: the postgres user when
// this process is root, else nil (this process's own user).
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func env(dir string) []string {
	return []string{"HOME=" + dir, "LC_ALL=C", "PATH=" + os.Getenv("PATH"), "TZ=UTC"}
}

// waitReady connects until the server answers, the process exits, or
// startWait (a child process no virtual clock can reach).
func (s *Server) waitReady() error {
	deadline := time.Now().Add(startWait)
	for {
		db, err := sql.Open("pgx", s.URL("postgres", ""))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = db.PingContext(ctx)
			cancel()
			db.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited before it was ready:\n%s", s.out)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready within %s: %v\n%s", startWait, err, s.out)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process
	}
}

// URL is the postgres:// URL of database db, with openxet's schema
// parameter when schema is not "".
func (s *Server) URL(db, schema string) string {
	q := url.Values{}
	q.Set("sslmode", "disable")
	if schema != "" {
		q.Set("schema", schema)
	}
	return (&url.URL{Scheme: "postgres", User: url.User(dbUser), Host: s.Addr, Path: "/" + db, RawQuery: q.Encode()}).String()
}

// NewIndex returns the URL of a new, empty index: a database of its own,
// so tests sharing a server never see each other's tables.
func (s *Server) NewIndex(tb testing.TB) string {
	tb.Helper()
	u, err := s.CreateIndex()
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// CreateIndex is NewIndex outside a test.
func (s *Server) CreateIndex() (string, error) {
	name := "openxet_" + randomHex(6)
	db, err := sql.Open("pgx", s.URL("postgres", ""))
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE DATABASE ` + name); err != nil {
		return "", fmt.Errorf("create database %s: %w\n%s", name, err, s.out)
	}
	return s.URL(name, ""), nil
}

// Stop stops the server (fast shutdown, then SIGKILL after 30s) and waits
// for it to exit. It is safe to call twice.
func (s *Server) Stop() { s.stopOnce.Do(s.halt) }

func (s *Server) halt() {
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// Kill stops the server at once, as a crash would.
func (s *Server) Kill() {
	s.stopOnce.Do(func() {
		s.cmd.Process.Kill()
		<-s.exited
	})
}

func freePort() (int, error) {
	addr, err := testproc.FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
