//go:build linux

package server

import (
	"crypto/tls"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLimitUnsent: an accepted connection, plain or TLS, gets
// TCP_NOTSENT_LOWAT, so a slow reader cannot make the kernel take more of
// an answer than maxUnsentBytes beyond what is in flight.
func TestLimitUnsent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	raw := <-accepted
	if raw == nil {
		t.Fatal("no connection accepted")
	}
	defer raw.Close()
	lowat := func() int {
		rc, err := raw.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var gerr error
		rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT) })
		if gerr != nil {
			t.Fatal(gerr)
		}
		return v
	}
	before := lowat()
	for _, tc := range []struct {
		name string
		conn net.Conn
		want int
	}{
		{"tls", tls.Server(raw, &tls.Config{}), 64 << 10},
		{"plain", raw, maxUnsentBytes},
	} {
		if !limitUnsent(tc.conn, tc.want) {
			t.Fatalf("%s: limitUnsent did not set the option", tc.name)
		}
		if got := lowat(); got != tc.want {
			t.Errorf("%s: TCP_NOTSENT_LOWAT %d after limitUnsent, want %d (was %d)", tc.name, got, tc.want, before)
		}
	}
	if limitUnsent(&net.UnixConn{}, maxUnsentBytes) {
		t.Error("limitUnsent claims to have set a TCP option on a unix socket")
	}
}
