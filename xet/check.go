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

// CheckError is a refusal by CheckFile, CheckFileHash or CheckCASInfo:
// which field of the caller's shard disagrees with the stored xorb it
// names. It carries the caller's own values only, never one computed from
// stored data (docs/design.md §2: a refusal says which field is wrong, never
// what the right value is), so that no probe learns a chunk hash, a count
// or a size it did not send.
type CheckError struct {
	Kind  error  // ErrInvalidShard or ErrHashMismatch; what Unwrap returns
	Xorb  Hash   // the stored xorb the field was compared with; zero for a file's own hash
	Term  int    // the file's term, or -1 (a CAS block, or the file as a whole)
	Field string // the wrong field, one of the Field… constants
	// Reason is the sentence: the subject (file and term, or CAS block)
	// and the caller's value of Field.
	Reason string
}

// The fields a CheckError names.
const (
	FieldVerificationCount = "verification entries"
	FieldChunkRange        = "chunk range"
	FieldUnpackedBytes     = "unpacked_segment_bytes"
	FieldVerification      = "verification hash"
	FieldFileHash          = "file hash"
	FieldChunkCount        = "num_entries"
	FieldChunkHash         = "chunk hash"
	FieldChunkPlace        = "chunk size or offset"
	FieldBytesInXorb       = "num_bytes_in_xorb"
)

// Error returns "<kind>: <reason>".
func (e *CheckError) Error() string { return e.Kind.Error() + ": " + e.Reason }

// Unwrap returns Kind.
func (e *CheckError) Unwrap() error { return e.Kind }

// CheckFileHash verifies that f.Hash is the file hash (docs/protocol.md §3.3) of the chunks
// its terms reference, looked up with chunks. Each term's chunk range must
// lie inside its xorb and its UnpackedBytes must equal the sum of those
// chunk sizes. A file without terms is valid only with the zero hash.
//
// Errors: the lookup's error (wrapped); *CheckError (ErrInvalidShard for a
// term outside its xorb or with wrong UnpackedBytes, ErrHashMismatch for a
// wrong file hash). Memory use is constant apart from what chunks returns.
func CheckFileHash(f FileInfo, chunks ChunkLookup) error {
	return checkFile(f, chunks, false)
}

// CheckFile does everything CheckFileHash does and also verifies each
// verification entry, when f has them, against RangeHash over the term's
// chunk hashes (docs/protocol.md §6.7): proof that the uploader had the data. A file without
// verification entries is not an error here; whoever decides that a file
// must prove possession (the store, for terms naming another tenant's
// xorbs) checks f.Verification != nil itself. Each term is checked in full
// (range, size, verification) before the next, and the file hash last.
func CheckFile(f FileInfo, chunks ChunkLookup) error {
	return checkFile(f, chunks, true)
}

func checkFile(f FileInfo, lookup ChunkLookup, verify bool) error {
	file := "file " + f.Hash.String()
	if verify && f.Verification != nil && len(f.Verification) != len(f.Terms) {
		return &CheckError{Kind: ErrInvalidShard, Term: -1, Field: FieldVerificationCount,
			Reason: file + " has " + strconv.Itoa(len(f.Verification)) + " verification entries for " + strconv.Itoa(len(f.Terms)) + " terms"}
	}
	var (
		agg     AggregatedHasher
		vh      keyedHasher
		cache   = make(map[Hash][]XorbChunk)
		termErr = func(kind error, i int, t Term, field, reason string) error {
			return &CheckError{Kind: kind, Xorb: t.Xorb, Term: i, Field: field,
				Reason: file + " term " + strconv.Itoa(i) + ": " + reason}
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
		span := "chunks [" + strconv.FormatUint(uint64(t.ChunkStart), 10) + ", " + strconv.FormatUint(uint64(t.ChunkEnd), 10) + ")"
		if t.ChunkStart >= t.ChunkEnd || int64(t.ChunkEnd) > int64(len(cl)) {
			return termErr(ErrInvalidShard, i, t, FieldChunkRange, span+" is not a range of chunks of xorb "+t.Xorb.String())
		}
		var sum uint64
		for _, c := range cl[t.ChunkStart:t.ChunkEnd] {
			sum += uint64(c.Size)
			agg.Add(Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		if sum != uint64(t.UnpackedBytes) {
			return termErr(ErrInvalidShard, i, t, FieldUnpackedBytes, "unpacked_segment_bytes "+
				strconv.FormatUint(uint64(t.UnpackedBytes), 10)+" is not the size of "+span+" of xorb "+t.Xorb.String())
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
				return termErr(ErrHashMismatch, i, t, FieldVerification, "verification hash "+f.Verification[i].String()+
					" is not the range hash of "+span+" of xorb "+t.Xorb.String())
			}
		}
	}
	if got := agg.FileHash(); got != f.Hash {
		return &CheckError{Kind: ErrHashMismatch, Term: -1, Field: FieldFileHash,
			Reason: file + ": the file hash is not the hash of the chunks its terms name"}
	}
	return nil
}

// CheckCASInfo verifies a shard's CAS-info block against the chunk list of
// the stored xorb it names (docs/protocol.md §6.7): same number of chunks, same hashes, sizes
// and uncompressed offsets, and NumBytesInXorb equal to the xorb's
// uncompressed size. Flags and NumBytesOnDisk are not checked (hf_xet writes
// 0 for the latter). Chunk hashes must be unkeyed (upload shards are).
//
// Errors: *CheckError, ErrInvalidShard for count, size or offset
// differences, ErrHashMismatch for a differing chunk hash; like CheckFile's,
// it names the wrong field and never the stored value.
func CheckCASInfo(c CASInfo, chunks []XorbChunk) error {
	bad := func(kind error, field, reason string) error {
		return &CheckError{Kind: kind, Xorb: c.Xorb, Term: -1, Field: field,
			Reason: "CAS block for xorb " + c.Xorb.String() + ": " + reason}
	}
	if len(c.Chunks) != len(chunks) {
		return bad(ErrInvalidShard, FieldChunkCount, strconv.Itoa(len(c.Chunks))+" chunks: not the stored xorb's count")
	}
	var total uint64
	for i, sc := range chunks {
		e := c.Chunks[i]
		start := sc.UncompressedEnd - uint64(sc.Size)
		switch {
		case e.Hash != sc.Hash:
			return bad(ErrHashMismatch, FieldChunkHash, "chunk "+strconv.Itoa(i)+" hash "+e.Hash.String()+" is not the stored chunk's")
		case e.UnpackedBytes != sc.Size || uint64(e.ByteRangeStart) != start:
			return bad(ErrInvalidShard, FieldChunkPlace, "chunk "+strconv.Itoa(i)+" size or offset differs from the stored xorb")
		}
		total += uint64(sc.Size)
	}
	if uint64(c.NumBytesInXorb) != total {
		return bad(ErrInvalidShard, FieldBytesInXorb, "num_bytes_in_xorb "+strconv.FormatUint(uint64(c.NumBytesInXorb), 10)+
			" is not the stored xorb's size")
	}
	return nil
}
