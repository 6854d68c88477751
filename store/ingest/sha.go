package ingest

import (
	"crypto/sha256"
	"hash"
	"io"
)

// ingestSHABytes is each of the two buffers through which shaReader hands
// its reads to the hasher (BufferBytes counts both).
const ingestSHABytes = 128 << 10

// shaReader reads r and computes the SHA-256 of what it read on a
// goroutine of its own, so that an ingestion's SHA-256 (a third of its
// CPU) runs beside its chunking and chunk hashing instead of after them.
// Each read, at most ingestSHABytes, is copied into the buffer the hasher
// finished two reads ago and handed to it. Sum waits for the hasher; stop
// ends it, whatever the state (File defers it).
type shaReader struct {
	r     io.Reader
	bufs  [2][]byte
	next  int
	work  chan []byte   // reads to hash
	free  chan struct{} // a token per buffer the hasher is done with
	ended chan struct{} // closed when the hasher has returned
	sha   hash.Hash
	sent  bool // whether work is closed
}

// newSHAReader starts the hasher; buf holds the two buffers
// (2 × ingestSHABytes).
func newSHAReader(r io.Reader, buf []byte) *shaReader {
	s := &shaReader{r: r, work: make(chan []byte, 2), free: make(chan struct{}, 2), ended: make(chan struct{}), sha: sha256.New()}
	s.bufs[0], s.bufs[1] = buf[:ingestSHABytes:ingestSHABytes], buf[ingestSHABytes:2*ingestSHABytes:2*ingestSHABytes]
	s.free <- struct{}{}
	s.free <- struct{}{}
	go func() {
		defer close(s.ended)
		for b := range s.work {
			s.sha.Write(b)
			s.free <- struct{}{}
		}
	}()
	return s
}

func (s *shaReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p[:min(len(p), ingestSHABytes)])
	if n > 0 {
		<-s.free
		b := s.bufs[s.next][:n]
		s.next ^= 1
		copy(b, p[:n])
		s.work <- b
	}
	return n, err
}

// Sum returns the SHA-256 of everything read, once the hasher is done
// with it; no Read may follow.
func (s *shaReader) Sum() [sha256.Size]byte {
	s.stop()
	var sum [sha256.Size]byte
	s.sha.Sum(sum[:0])
	return sum
}

// stop ends the hasher and waits for it; safe to call twice.
func (s *shaReader) stop() {
	if !s.sent {
		s.sent = true
		close(s.work)
	}
	<-s.ended
}
