package budget

import (
	"context"
	"math/bits"
)

// MinPooledBytes is the smallest buffer ReserveBuffer keeps for reuse;
// smaller ones are plain allocations that the garbage collector handles well.
const MinPooledBytes = 64 << 10

// maxClassStep bounds the rounding of BufferBytes: above 16 MiB classes are
// whole MiB, so a 64 MiB xorb buffer is reused by any body of 63–64 MiB.
const maxClassStep = 1 << 20

// BufferBytes is what ReserveBuffer reserves for an n-byte buffer: n rounded
// up to its size class (less than 1/16 more, and less than 1 MiB more), or n
// itself below MinPooledBytes. Whole MiB sizes are their own class.
func BufferBytes(n int64) int64 {
	if n < MinPooledBytes {
		return n
	}
	// A step of 1/32 of the next power of two is under 1/16 of n.
	step := int64(1) << max(bits.Len64(uint64(n-1))-5, 0)
	step = min(step, maxClassStep)
	return (n + step - 1) / step * step
}

// ReserveBuffer is Reserve for memory the caller wants as one []byte of n
// bytes. It reserves BufferBytes(n) and returns a buffer of length n (and
// that capacity), taken from the budget's pool of released buffers when one
// of that size class is there, allocated otherwise; its contents are
// undefined. Releasing the reservation returns the buffer to the pool: the
// caller must not touch the buffer, or anything sliced from it, after
// Release.
//
// The pool holds only what the budget has room for: free buffers plus
// reserved bytes never exceed Config.TotalBytes. A reservation of any kind
// that needs the room drops pooled buffers for the garbage collector, and
// TrimBuffers drops the pool once it has gone unused. Errors are those of
// Reserve.
func (b *Budget) ReserveBuffer(ctx context.Context, k Key, n int64) (Reservation, []byte, error) {
	size := BufferBytes(n)
	if size < MinPooledBytes {
		r, err := b.Reserve(ctx, k, size)
		if err != nil || size == 0 {
			return r, nil, err
		}
		return r, make([]byte, n), nil
	}
	r, err := b.reserve(ctx, k, size, true)
	if err != nil {
		return r, nil, err
	}
	b.mu.Lock()
	buf := r.t.V.buf
	b.mu.Unlock()
	if buf == nil {
		// A miss: allocate outside the lock, then hand the buffer to the
		// ticket so that Release pools it.
		buf = make([]byte, size)
		b.mu.Lock()
		if r.t.Gen() == r.gen {
			r.t.V.buf = buf
		}
		b.mu.Unlock()
	}
	return r, buf[:n], nil
}

// popBuffer takes a free buffer of exactly size bytes from the pool, or
// returns nil. b.mu is held.
func (b *Budget) popBuffer(size int64) []byte {
	free := b.pool[size]
	if len(free) == 0 {
		b.bufferMisses++
		return nil
	}
	buf := free[len(free)-1]
	free[len(free)-1] = nil
	b.pool[size] = free[:len(free)-1]
	b.pooledBytes -= size
	b.bufferHits++
	b.poolUsed = true
	return buf
}

// pushBuffer returns a released buffer to the pool. The bytes it held were
// reserved until now, so the pool stays within the budget. b.mu is held.
func (b *Budget) pushBuffer(buf []byte) {
	size := int64(cap(buf))
	if b.pool == nil {
		b.pool = make(map[int64][][]byte)
	}
	b.pool[size] = append(b.pool[size], buf[:size])
	b.pooledBytes += size
}

// makeRoom drops pooled buffers until free buffers and reservations fit in
// the budget together. b.mu is held.
func (b *Budget) makeRoom() {
	for size, free := range b.pool {
		for len(free) > 0 && b.reserved+b.pooledBytes > b.total {
			free[len(free)-1] = nil
			free = free[:len(free)-1]
			b.pooledBytes -= size
			b.bufferDropped += size
		}
		if len(free) == 0 {
			delete(b.pool, size)
		} else {
			b.pool[size] = free
		}
		if b.reserved+b.pooledBytes <= b.total {
			return
		}
	}
}

// TrimBuffers drops every pooled buffer, for the garbage collector to free,
// unless a buffer was taken from the pool since the previous call; it
// returns the bytes dropped. The server calls it periodically, so that a
// pool that helped a burst of uploads does not hold their memory for ever
// once the burst is over.
func (b *Budget) TrimBuffers() (droppedBytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.poolUsed {
		b.poolUsed = false
		return 0
	}
	droppedBytes = b.pooledBytes
	b.pool = nil
	b.pooledBytes = 0
	b.bufferDropped += droppedBytes
	return droppedBytes
}
