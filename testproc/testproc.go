// Package testproc holds what tests need to run a server as a child
// process: an output buffer the child's writer goroutine and the test can
// share, and a free loopback address. Only tests and test helpers
// (store/s3test, store/pgtest) import it.
package testproc

import (
	"bytes"
	"net"
	"sync"
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
