package xet

import (
	"fmt"
	"strconv"
)

// ChunkLookup returns the chunk list of a stored xorb (XorbInfo.Chunks as
// ParseXorb returned it when the xorb was stored). When the xorb is not
// stored it returns the caller's own "not found" error, which the functions
// taking a ChunkLookup pass through wrapped, for errors.Is.
// The returned slice is only read.
type ChunkLookup = func(xorb Hash) ([]XorbChunk, error)

// FileChunkCount returns the number of chunk references in terms: the sum of
// ChunkEnd - ChunkStart (0 for malformed terms). CheckFile and
// CheckFileHash take time proportional to it (a shard can reference the
// same large chunk range many times), so a server may bound it first.
func FileChunkCount(terms []Term) uint64 {
	var n uint64
	for _, t := range terms {
		if t.ChunkEnd > t.ChunkStart {
			n += uint64(t.ChunkEnd - t.ChunkStart)
		}
	}
	return n
}

// CheckFileHash verifies that f.Hash is the file hash (docs/protocol.md §3.3) of the chunks
// its terms reference, looked up with chunks. Each term's chunk range must
// lie inside its xorb and its UnpackedBytes must equal the sum of those
// chunk sizes. A file without terms is valid only with the zero hash.
//
// Errors: the lookup's error (wrapped); ErrInvalidShard for a term outside
// its xorb or with wrong UnpackedBytes; ErrHashMismatch for a wrong file hash.
// Memory use is constant apart from what chunks returns.
func CheckFileHash(f FileInfo, chunks ChunkLookup) error {
	return checkFile(f, chunks, false)
}

// CheckFile does everything CheckFileHash does and also verifies each
// verification entry, when f has them, against RangeHash over the term's
// chunk hashes (docs/protocol.md §6.7): proof that the uploader had the data. A file without
// verification entries is not an error here; a server that requires them
// checks f.Verification != nil itself.
func CheckFile(f FileInfo, chunks ChunkLookup) error {
	return checkFile(f, chunks, true)
}

func checkFile(f FileInfo, lookup ChunkLookup, verify bool) error {
	if verify && f.Verification != nil && len(f.Verification) != len(f.Terms) {
		return formatErr(ErrInvalidShard, -1, "file "+f.Hash.String()+" has "+strconv.Itoa(len(f.Verification))+
			" verification entries for "+strconv.Itoa(len(f.Terms))+" terms")
	}
	var (
		agg     AggregatedHasher
		vh      keyedHasher
		cache   = make(map[Hash][]XorbChunk)
		termErr = func(i int, reason string) error {
			return formatErr(ErrInvalidShard, -1, "file "+f.Hash.String()+" term "+strconv.Itoa(i)+": "+reason)
		}
	)
	for i, t := range f.Terms {
		cl, ok := cache[t.Xorb]
		if !ok {
			var err error
			cl, err = lookup(t.Xorb)
			if err != nil {
				return fmt.Errorf("xet: file %s term %d: xorb %s: %w", f.Hash, i, t.Xorb, err)
			}
			cache[t.Xorb] = cl
		}
		if t.ChunkStart >= t.ChunkEnd || int64(t.ChunkEnd) > int64(len(cl)) {
			return termErr(i, "chunk range ["+strconv.FormatUint(uint64(t.ChunkStart), 10)+", "+
				strconv.FormatUint(uint64(t.ChunkEnd), 10)+") is outside xorb "+t.Xorb.String()+
				" of "+strconv.Itoa(len(cl))+" chunks")
		}
		var sum uint64
		for _, c := range cl[t.ChunkStart:t.ChunkEnd] {
			sum += uint64(c.Size)
			agg.Add(Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		if sum != uint64(t.UnpackedBytes) {
			return termErr(i, "unpacked bytes "+strconv.FormatUint(uint64(t.UnpackedBytes), 10)+
				", its chunks hold "+strconv.FormatUint(sum, 10))
		}
		if verify && f.Verification != nil {
			if vh.h == nil {
				vh = newKeyedHasher(&verificationKey)
			}
			vh.h.Reset()
			for _, c := range cl[t.ChunkStart:t.ChunkEnd] {
				_, _ = vh.h.Write(c.Hash[:])
			}
			var got Hash
			vh.h.Sum(got[:0])
			if got != f.Verification[i] {
				return formatErr(ErrHashMismatch, -1, "file "+f.Hash.String()+" term "+strconv.Itoa(i)+
					": verification hash "+f.Verification[i].String()+", chunks give "+got.String())
			}
		}
	}
	if got := agg.FileHash(); got != f.Hash {
		return formatErr(ErrHashMismatch, -1, "file hash "+f.Hash.String()+", its chunks give "+got.String())
	}
	return nil
}

// CheckCASInfo verifies a shard's CAS-info block against the chunk list of
// the stored xorb it names (docs/protocol.md §6.7): same number of chunks, same hashes, sizes
// and uncompressed offsets, and NumBytesInXorb equal to the xorb's
// uncompressed size. Flags and NumBytesOnDisk are not checked (hf_xet writes
// 0 for the latter). Chunk hashes must be unkeyed (upload shards are).
//
// Errors: ErrInvalidShard for count, size or offset differences;
// ErrHashMismatch for a differing chunk hash.
func CheckCASInfo(c CASInfo, chunks []XorbChunk) error {
	prefix := "CAS block for xorb " + c.Xorb.String() + ": "
	if len(c.Chunks) != len(chunks) {
		return formatErr(ErrInvalidShard, -1, prefix+strconv.Itoa(len(c.Chunks))+" chunks, stored xorb has "+strconv.Itoa(len(chunks)))
	}
	var total uint64
	for i, sc := range chunks {
		e := c.Chunks[i]
		start := sc.UncompressedEnd - uint64(sc.Size)
		switch {
		case e.Hash != sc.Hash:
			return formatErr(ErrHashMismatch, -1, prefix+"chunk "+strconv.Itoa(i)+" hash "+e.Hash.String()+", stored "+sc.Hash.String())
		case e.UnpackedBytes != sc.Size || uint64(e.ByteRangeStart) != start:
			return formatErr(ErrInvalidShard, -1, prefix+"chunk "+strconv.Itoa(i)+" size or offset differs from the stored xorb")
		}
		total += uint64(sc.Size)
	}
	if uint64(c.NumBytesInXorb) != total {
		return formatErr(ErrInvalidShard, -1, prefix+"num_bytes_in_xorb "+strconv.FormatUint(uint64(c.NumBytesInXorb), 10)+
			", stored xorb holds "+strconv.FormatUint(total, 10))
	}
	return nil
}
