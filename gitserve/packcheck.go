package gitserve

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// checkPack reads the object headers of a pack before go-git parses it,
// inflating each object no further than its declared size and a delta only
// as far as the size of what it makes, and refuses the pack when an
// object, a delta's result, the objects' count or their total is over lim.
// go-git inflates an object as it reads its header, before a caller can
// look at the size, and applies a delta at the size the delta says; this
// bounds both (a zlib bomb, a delta bomb) at a cost of one inflate pass.
// It checks bounds only: the format is go-git's to parse.
func checkPack(pack []byte, lim Limits) error {
	r := bytes.NewReader(pack)
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || string(hdr[:4]) != "PACK" {
		return errors.New("not a git pack")
	}
	if v := binary.BigEndian.Uint32(hdr[4:8]); v != 2 && v != 3 {
		return fmt.Errorf("pack version %d", v)
	}
	count := binary.BigEndian.Uint32(hdr[8:12])
	if int64(count) > int64(lim.Objects) {
		return refuse("the pack holds %d objects, over the %d one push may bring: push fewer commits at a time", count, lim.Objects)
	}
	var total int64
	for i := uint32(0); i < count; i++ {
		typ, size, err := objectHeader(r)
		if err != nil {
			return fmt.Errorf("object %d of the pack: %w", i, err)
		}
		if size > lim.Object {
			return refuse("the pack holds an object of %d bytes, over the %d one object may have: push large files with git-lfs or git-xet", size, lim.Object)
		}
		switch typ {
		case 6: // OFS delta: the base's offset, a varint
			for {
				b, err := r.ReadByte()
				if err != nil {
					return err
				}
				if b&0x80 == 0 {
					break
				}
			}
		case 7: // REF delta: the base's id
			if _, err := r.Seek(20, io.SeekCurrent); err != nil {
				return err
			}
		case 1, 2, 3, 4:
		default:
			return fmt.Errorf("object %d of the pack has type %d", i, typ)
		}
		made, err := inflated(r, size, typ >= 6)
		if err != nil {
			return fmt.Errorf("object %d of the pack: %w", i, err)
		}
		if made > lim.Object {
			return refuse("the pack holds a delta that makes an object of %d bytes, over the %d one object may have", made, lim.Object)
		}
		if total += made; total > lim.Total {
			return refuse("the pack's objects come to over %d bytes: push large files with git-lfs or git-xet, and fewer commits at a time", lim.Total)
		}
	}
	return nil
}

// objectHeader reads an object's type and declared size.
func objectHeader(r io.ByteReader) (typ byte, size int64, err error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	typ, size = (b>>4)&7, int64(b&0x0f)
	for shift := uint(4); b&0x80 != 0; shift += 7 {
		if shift > 56 {
			return 0, 0, errors.New("object size overflows")
		}
		if b, err = r.ReadByte(); err != nil {
			return 0, 0, err
		}
		size |= int64(b&0x7f) << shift
	}
	return typ, size, nil
}

// inflated inflates the zlib stream at r (which it leaves right after it)
// up to size bytes, and returns size, or for a delta the size of what it
// makes (the second varint of the delta).
func inflated(r *bytes.Reader, size int64, delta bool) (int64, error) {
	zr, err := zlib.NewReader(r)
	if err != nil {
		return 0, err
	}
	defer zr.Close()
	lr := &io.LimitedReader{R: zr, N: size + 1}
	made := size
	if delta {
		br := bufio.NewReaderSize(lr, 64)
		if _, err := binary.ReadUvarint(br); err != nil { // the base's size
			return 0, fmt.Errorf("delta header: %w", err)
		}
		target, err := binary.ReadUvarint(br)
		if err != nil || target > 1<<62 {
			return 0, fmt.Errorf("delta header: %v", err)
		}
		made = int64(target)
		if _, err := io.Copy(io.Discard, br); err != nil {
			return 0, err
		}
	} else if _, err := io.Copy(io.Discard, lr); err != nil {
		return 0, err
	}
	if lr.N == 0 {
		return 0, fmt.Errorf("inflates past its declared %d bytes", size)
	}
	return made, nil
}
