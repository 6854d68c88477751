//go:build linux

package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketRoom tells how much of an answer the socket of a plain TCP
// connection takes now without blocking. sendShared uses it to hold a work
// slot only for writes that cannot block.
type socketRoom struct {
	rc syscall.RawConn
}

// roomOf returns the socketRoom of c, or nil when c is not a plain TCP
// connection (TLS adds records and buffers of its own).
func roomOf(c net.Conn) *socketRoom {
	rc := tcpSyscallConn(c)
	if rc == nil {
		return nil
	}
	return &socketRoom{rc}
}

// measure returns the bytes the kernel takes now without blocking, and the
// most it would take from an empty socket; ok is false when the socket
// could not tell. A write waits when the unsent bytes reach
// TCP_NOTSENT_LOWAT (limitUnsent sets maxUnsentBytes) or when the queue
// reaches the send buffer, whose bookkeeping counts more than the payload:
// half of SO_SNDBUF (the kernel doubles what is set for that overhead) is
// taken as the payload it holds.
func (r *socketRoom) measure() (room, capacity int, ok bool) {
	err := r.rc.Control(func(fd uintptr) {
		unsent, err1 := unix.IoctlGetInt(int(fd), unix.SIOCOUTQNSD)
		queued, err2 := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		sndbuf, err3 := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		if ok = err1 == nil && err2 == nil && err3 == nil; ok {
			capacity = min(maxUnsentBytes, sndbuf/2)
			room = max(min(maxUnsentBytes-unsent, sndbuf/2-queued), 0)
		}
	})
	return room, capacity, ok && err == nil
}
