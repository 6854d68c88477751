package store

import (
	"encoding/binary"
	"fmt"
	"sync"

	"openxet/xet"
)

// Chunk layouts of stored xorbs are immutable, so they are cached.

const chunkRecordBytes = 32 + 4 + 4

func encodeChunks(chunks []xet.XorbChunk) []byte {
	out := make([]byte, 0, len(chunks)*chunkRecordBytes)
	for _, c := range chunks {
		out = append(out, c.Hash[:]...)
		out = binary.LittleEndian.AppendUint32(out, c.Size)
		out = binary.LittleEndian.AppendUint32(out, c.SerializedEnd)
	}
	return out
}

func decodeChunks(b []byte) ([]xet.XorbChunk, error) {
	if len(b)%chunkRecordBytes != 0 {
		return nil, fmt.Errorf("chunk layout of %d bytes is not a multiple of %d", len(b), chunkRecordBytes)
	}
	out := make([]xet.XorbChunk, len(b)/chunkRecordBytes)
	var unc uint64
	for i := range out {
		r := b[i*chunkRecordBytes:]
		copy(out[i].Hash[:], r[:32])
		out[i].Size = binary.LittleEndian.Uint32(r[32:])
		out[i].SerializedEnd = binary.LittleEndian.Uint32(r[36:])
		unc += uint64(out[i].Size)
		out[i].UncompressedEnd = unc
	}
	return out, nil
}

const termRecordBytes = 32 + 4*4

func encodeTerms(terms []xet.Term) []byte {
	out := make([]byte, 0, len(terms)*termRecordBytes)
	for _, t := range terms {
		out = append(out, t.Xorb[:]...)
		out = binary.LittleEndian.AppendUint32(out, t.Flags)
		out = binary.LittleEndian.AppendUint32(out, t.UnpackedBytes)
		out = binary.LittleEndian.AppendUint32(out, t.ChunkStart)
		out = binary.LittleEndian.AppendUint32(out, t.ChunkEnd)
	}
	return out
}

// decodeTermWindow decodes, from an encoded term list, the terms that
// overlap the byte window [start, end) of the file (see Store.FileTerms),
// reading only the sizes of the others, and returns the file offset of the
// first.
func decodeTermWindow(b []byte, start, end uint64) ([]xet.Term, uint64, error) {
	if len(b)%termRecordBytes != 0 {
		return nil, 0, fmt.Errorf("term list of %d bytes is not a multiple of %d", len(b), termRecordBytes)
	}
	n := len(b) / termRecordBytes
	size := func(i int) uint64 { return uint64(binary.LittleEndian.Uint32(b[i*termRecordBytes+36:])) }
	var pos uint64
	first := 0
	for first < n && pos+size(first) <= start {
		pos += size(first)
		first++
	}
	offset := pos
	last := first
	for last < n && pos < end {
		pos += size(last)
		last++
	}
	if start >= end || first == last {
		return nil, 0, nil
	}
	out := make([]xet.Term, last-first)
	for i := range out {
		r := b[(first+i)*termRecordBytes:]
		copy(out[i].Xorb[:], r[:32])
		out[i].Flags = binary.LittleEndian.Uint32(r[32:])
		out[i].UnpackedBytes = binary.LittleEndian.Uint32(r[36:])
		out[i].ChunkStart = binary.LittleEndian.Uint32(r[40:])
		out[i].ChunkEnd = binary.LittleEndian.Uint32(r[44:])
	}
	return out, offset, nil
}

// layoutCache is a small bounded cache of xorb chunk layouts; when full it
// drops an arbitrary entry.
type layoutCache struct {
	mu  sync.Mutex
	max int
	m   map[xet.Hash][]xet.XorbChunk
}

func newLayoutCache(max int) *layoutCache {
	return &layoutCache{max: max, m: make(map[xet.Hash][]xet.XorbChunk)}
}

func (c *layoutCache) get(h xet.Hash) ([]xet.XorbChunk, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[h]
	return v, ok
}

func (c *layoutCache) put(h xet.Hash, v []xet.XorbChunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[h] = v
}

// decodeTerms decodes a whole encoded term list (collection and reindex,
// which need every xorb a file names).
func decodeTerms(b []byte) ([]xet.Term, error) {
	if len(b)%termRecordBytes != 0 {
		return nil, fmt.Errorf("term list of %d bytes is not a multiple of %d", len(b), termRecordBytes)
	}
	out := make([]xet.Term, len(b)/termRecordBytes)
	for i := range out {
		r := b[i*termRecordBytes:]
		copy(out[i].Xorb[:], r[:32])
		out[i].Flags = binary.LittleEndian.Uint32(r[32:])
		out[i].UnpackedBytes = binary.LittleEndian.Uint32(r[36:])
		out[i].ChunkStart = binary.LittleEndian.Uint32(r[40:])
		out[i].ChunkEnd = binary.LittleEndian.Uint32(r[44:])
	}
	return out, nil
}
