//go:build linux

package objects

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directAlign is the alignment O_DIRECT asks of a write's memory, file
// offset and length: the page size covers every block size in use.
const directAlign = 4096

// writeDirect writes data to f from its current offset (0, a new temporary
// file), the largest aligned prefix with O_DIRECT, straight from data to
// the device without a copy into the page cache, and the rest through the
// page cache. It reports false, having written nothing, when data is not
// aligned in memory or f refuses O_DIRECT (a file system without it, or
// one that takes the flag and refuses the write), and the caller writes it
// the ordinary way.
func writeDirect(f *os.File, data []byte) (bool, error) {
	n := len(data) &^ (directAlign - 1)
	if n == 0 || uintptr(unsafePointer(data))%directAlign != 0 {
		return false, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false, nil
	}
	setDirect := func(on bool) (err error) {
		cerr := rc.Control(func(fd uintptr) {
			var flags int
			if flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0); err != nil {
				return
			}
			if on {
				flags |= unix.O_DIRECT
			} else {
				flags &^= unix.O_DIRECT
			}
			_, err = unix.FcntlInt(fd, unix.F_SETFL, flags)
		})
		if cerr != nil {
			return cerr
		}
		return err
	}
	if setDirect(true) != nil {
		return false, nil
	}
	if w, err := f.Write(data[:n]); err != nil {
		if w == 0 && setDirect(false) == nil {
			return false, nil // a file system that takes the flag but not the write
		}
		return true, err
	}
	if err := setDirect(false); err != nil {
		return true, err
	}
	_, err = f.Write(data[n:])
	return true, err
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
