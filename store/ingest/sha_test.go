package ingest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestSHAReader: the SHA-256 beside the chunking is the stream's, through
// reads of every size (one byte, half the buffer, more than a buffer, data
// with the error), and stop ends the hasher with or without Sum, twice.
func TestSHAReader(t *testing.T) {
	data := seeded("sha", 3*ingestSHABytes+12345)
	want := sha256.Sum256(data)
	for name, r := range map[string]func() io.Reader{
		"one byte":   func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
		"half":       func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
		"whole":      func() io.Reader { return bytes.NewReader(data) },
		"data + EOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
	} {
		t.Run(name, func(t *testing.T) {
			s := newSHAReader(r(), make([]byte, 2*ingestSHABytes))
			defer s.stop()
			got, err := io.ReadAll(io.LimitReader(s, int64(len(data))+1))
			if err != nil || len(got) != len(data) {
				t.Fatalf("read %d bytes, %v", len(got), err)
			}
			if sum := s.Sum(); sum != want {
				t.Fatalf("SHA-256 %x, want %x", sum, want)
			}
		})
	}
	s := newSHAReader(iotest.ErrReader(errors.New("gone")), make([]byte, 2*ingestSHABytes))
	if _, err := s.Read(make([]byte, 10)); err == nil {
		t.Fatal("a read error was lost")
	}
	s.stop()
	s.stop()
}
