//go:build linux

package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// limitUnsent sets TCP_NOTSENT_LOWAT on c's socket (unwrapping TLS): the
// kernel then takes a write only while fewer than unsentBytes of what the
// socket holds are still unsent, however large its send buffer has grown.
// Data in flight to a fast client is not limited, so its throughput is not
// either; a slow one holds at most unsentBytes waiting in the server's
// socket instead of a send buffer's worth (up to tcp_wmem's maximum, 4 MiB
// by default). It reports whether the option was set.
func limitUnsent(c net.Conn, unsentBytes int) bool {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	rc := tcpSyscallConn(c)
	if rc == nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, unsentBytes)
	}); err != nil {
		return false
	}
	return serr == nil
}

// tcpSyscallConn is the raw socket of a plain TCP connection, or nil.
func tcpSyscallConn(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
