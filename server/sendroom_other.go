//go:build !linux

package server

import "net"

// socketRoom is Linux only; elsewhere sendShared copies as a plain copy.
type socketRoom struct{}

func roomOf(net.Conn) *socketRoom { return nil }

func (*socketRoom) measure() (room, capacity int, ok bool) { return 0, 0, false }
