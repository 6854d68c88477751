// Package testproc holds what tests and measurement programs need to run
// a server as a child process: an output buffer the child's writer
// goroutine and the test can share, a free loopback address, the first
// start's admin token, readiness, a credential. Only tests, test helpers
// (store/s3test, store/pgtest) and the programs under testdata import it.
package testproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"

	"openxet/admin"
)

// Buffer collects a child's output; Write and String are safe to call at
// once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns 127.0.0.1:<port> of a port free a moment ago. Another
// process may take it before the child binds it: callers retry a start
// that fails to listen.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

var tokenRE = regexp.MustCompile(`hf_oxt_[A-Za-z0-9_]+`)

// ReadAdminToken reads a first start's output until the admin token it
// prints, and returns the token.
func ReadAdminToken(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := tokenRE.FindString(sc.Text()); m != "" {
			return m, nil
		}
	}
	return "", errors.New("the server printed no admin token")
}

// WaitReady polls base's /readyz (a child process no virtual clock can
// reach) until it answers 200, for at most within.
func WaitReady(base string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if res, err := http.Get(base + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within %s", base, within)
}

// CreateCredential makes a write credential of tenant through base's admin
// API and returns its token.
func CreateCredential(base, adminToken, tenant string) (string, error) {
	var v struct {
		Token string `json:"token"`
	}
	c := admin.Client{Base: base, Token: adminToken}
	if err := c.Do(context.Background(), http.MethodPost, "/credentials", map[string]any{"tenant": tenant, "scopes": []string{"write"}}, &v); err != nil {
		return "", fmt.Errorf("create credential: %w", err)
	}
	return v.Token, nil
}
