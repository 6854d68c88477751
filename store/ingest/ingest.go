// Package ingest turns bytes that arrive without Xet (the Hub's LFS
// transfer, the mirror's pull, later git pushes of LFS objects) into a
// tenant's Xet file, as an hf_xet upload would store them: cut with Xet's
// content-defined chunking, deduplicated against what the store holds,
// packed into xorbs and registered with a shard, all through the CAS
// operations a client's upload uses (the CAS interface, which a
// *store.Store satisfies), so the quota, the possession rule and the
// lifecycle hold as for any upload.
//
// It knows nothing of HTTP and does not import openxet/store: its
// consumer's interface is CAS (docs/design.md §1).
package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"openxet/store/objects"
	"openxet/xet"
)

// CAS is what an ingestion stores through: the operations of a Xet
// upload (a *store.Store has them).
type CAS interface {
	// DedupAnswer is the dedup route's answer for a chunk: the xorbs
	// (at most max) that hold it and chunks around it, or an error that
	// is objects.ErrNotFound when none does.
	DedupAnswer(ctx context.Context, tenant string, chunk xet.Hash, global bool, max int) ([]xet.CASInfo, error)
	// PutXorb stores a xorb and makes tenant its owner, within the quota.
	PutXorb(ctx context.Context, tenant string, info xet.XorbInfo, stream []byte, defaultQuotaBytes int64) (inserted bool, err error)
	// VerifyShard checks a shard against the stored xorbs.
	VerifyShard(ctx context.Context, sh *xet.Shard) error
	// PutShard registers a verified shard's files for tenant.
	PutShard(ctx context.Context, tenant string, body []byte, sh *xet.Shard) (inserted bool, err error)
}

// Options says what File may assume of a stream and how it
// stores it.
type Options struct {
	// SizeBytes is the length the stream must have; -1 when not known.
	SizeBytes int64
	// SHA256, when not nil, is the SHA-256 the stream must have (an LFS
	// object id).
	SHA256 *[sha256.Size]byte
	// XetHash, when not nil, is the Xet file hash the stream must have (a
	// mirror's upstream named it): a stream of other bytes is refused,
	// before the file is registered, as a SHA-256 mismatch is.
	XetHash *xet.Hash
	// DedupGlobal lets the file reference any tenant's chunks, as the
	// dedup answers of server.dedup_scope = "global" do; else only the
	// tenant's own.
	DedupGlobal bool
	// DefaultQuotaBytes is the quota of a tenant without an override
	// (store.Unlimited for none), as PutXorb takes it.
	DefaultQuotaBytes int64
	// Buffer is the memory the ingestion works in: the xorb being built
	// and the read buffer. The caller reserves BufferBytes(SizeBytes)
	// (and may pass that much here); a shorter Buffer is replaced by one of
	// the ingestion's own. File keeps no slice of it once it returns.
	Buffer []byte
	// Work, when not nil, is called before each stretch of CPU work on
	// bytes already read (cutting, hashing, packing chunks); its done is
	// called before the next read of the stream and before a xorb is
	// stored, so that nothing is held while the client or the bucket is
	// waited for. An error of Work ends the ingestion with it.
	Work func() (done func(), err error)
}

// Stored is what File registered.
type Stored struct {
	Hash      xet.Hash // the Xet file hash, as hf_xet computes it
	SizeBytes int64
	SHA256    [sha256.Size]byte
	// NewXorbs and NewBytes count the xorbs this tenant came to own and
	// their stored bytes: what the file cost the tenant's quota.
	NewXorbs int
	NewBytes int64
}

// ingestReadBytes is the read buffer of an ingestion (chunks are cut from
// it and copied into the xorb only when new).
const ingestReadBytes = 512 << 10

// ingestXorbBytes is the most a xorb being built takes: XorbTargetBytes of
// data and the headers of XorbTargetChunks chunks (a chunk is stored
// compressed only when that is smaller). With the read buffer and the
// SHA-256's buffers it stays under xet.MaxXorbBytes, which every
// credential's memory share holds.
const ingestXorbBytes = xet.XorbTargetBytes + xet.XorbTargetChunks*xet.ChunkHeaderBytes

// BufferBytes returns the memory File works in for a stream of
// sizeBytes (-1 when not known): a read buffer, one xorb and the SHA-256's
// two buffers (shaReader), no bigger than the stream needs, and never more
// than xet.MaxXorbBytes.
func BufferBytes(sizeBytes int64) int64 {
	read, xorb, sha := buffers(sizeBytes)
	return read + xorb + sha
}

// buffers splits BufferBytes into the read buffer, the xorb
// and the two buffers of the SHA-256 beside the chunking (shaReader), for
// a stream that is not known to be shorter than the read buffer; a shorter
// one is hashed inline (sha 0).
func buffers(sizeBytes int64) (read, xorb, sha int64) {
	read, xorb, sha = ingestReadBytes, ingestXorbBytes, 2*ingestSHABytes
	if sizeBytes >= 0 {
		xorb = min(xorb, sizeBytes+(sizeBytes/xet.ChunkMinBytes+1)*xet.ChunkHeaderBytes)
		if sizeBytes < read {
			read, sha = xet.ChunkReaderBufBytes, 0
		}
	}
	return read, xorb, sha
}

// File stores the bytes of r as tenant's file, the way an hf_xet
// upload stores them: cut with Xet's content-defined chunking, each chunk
// hashed, chunks the dedup index already knows referenced where they are
// (the first chunk of the file and every dedup-eligible chunk is looked
// up, and the answer's xorbs cover the chunks around it, as hf_xet does),
// the new ones packed into xorbs of up to 64 MiB / 8192 chunks stored with
// PutXorb, and the file registered with a shard through VerifyShard and
// PutShard, carrying its SHA-256. The file hash is the one hf_xet computes
// for the same bytes, and a later upload of them through Xet dedups
// against what this stored (and the other way round).
//
// It holds BufferBytes(opt.SizeBytes) of memory, a map of at most
// ingestKnownChunks chunks it may reference, and the file's terms and new
// xorbs' chunk lists for its shard (about 50 bytes a chunk: 1 MiB for a
// GiB of new data).
//
// Errors: a read error of r, wrapped (a *refusal.Error the caller's reader
// returns stays reachable with errors.As); xet.ErrHashMismatch when the
// stream's length, SHA-256 or Xet hash is not what opt says; *store.OverQuotaError when a
// new xorb would pass the quota; ErrUnavailable (fault.ErrUnavailable). The length and SHA-256 are
// checked before the last xorb is stored, so a refused stream of up to one
// xorb (64 MiB) changes nothing; of a longer one, the xorbs stored before
// its end stay owned by tenant in no file (as after an interrupted hf_xet
// upload) until collection releases them.
func File(ctx context.Context, s CAS, tenant string, r io.Reader, opt Options) (Stored, error) {
	in := &ingestion{s: s, ctx: ctx, tenant: tenant, opt: opt, sha: sha256.New(), known: map[xet.Hash]chunkRef{}}
	buf := opt.Buffer
	if int64(len(buf)) < BufferBytes(opt.SizeBytes) {
		// The caller reserved less than it should have; the ingestion
		// still works, in memory of its own.
		buf = make([]byte, BufferBytes(opt.SizeBytes))
	}
	read, xorb, shaBufs := buffers(opt.SizeBytes)
	if shaBufs > 0 {
		sr := newSHAReader(r, buf[read+xorb:read+xorb+shaBufs])
		defer sr.stop()
		r, in.sha = sr, nil
		in.shaSum = sr.Sum
	} else {
		in.shaSum = func() (sum [sha256.Size]byte) {
			in.sha.Sum(sum[:0])
			return sum
		}
	}
	cr := xet.NewChunkReader(r, buf[:read])
	in.xorb = xet.NewXorbWriter(buf[read:read+xorb], true)
	in.cur = -1
	defer in.rest()
	for first := true; ; first = false {
		if !cr.Buffered() {
			in.rest()
		}
		chunk, err := cr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Stored{}, fmt.Errorf("ingest: read: %w", err)
		}
		if opt.SizeBytes >= 0 && cr.BytesRead() > opt.SizeBytes {
			return Stored{}, fmt.Errorf("ingest: %w: the stream is longer than its %d bytes", xet.ErrHashMismatch, opt.SizeBytes)
		}
		if err := in.work(); err != nil {
			return Stored{}, fmt.Errorf("ingest: %w", err)
		}
		if err := in.add(chunk, first); err != nil {
			return Stored{}, err
		}
	}
	in.rest()
	if opt.SizeBytes >= 0 && in.size != opt.SizeBytes {
		return Stored{}, fmt.Errorf("ingest: %w: the stream has %d bytes, want %d", xet.ErrHashMismatch, in.size, opt.SizeBytes)
	}
	sum := in.shaSum()
	if opt.SHA256 != nil && sum != *opt.SHA256 {
		return Stored{}, fmt.Errorf("ingest: %w: the stream's SHA-256 is %s, want %s", xet.ErrHashMismatch,
			hex.EncodeToString(sum[:]), hex.EncodeToString(opt.SHA256[:]))
	}
	if opt.XetHash != nil {
		if got := in.agg.FileHash(); got != *opt.XetHash {
			return Stored{}, fmt.Errorf("ingest: %w: the stream's Xet hash is %s, want %s", xet.ErrHashMismatch, got, *opt.XetHash)
		}
	}
	if err := in.flush(); err != nil {
		return Stored{}, err
	}
	return in.register(sum)
}

// chunkRef places a chunk: chunk index of the xorb with sequence number seq
// in ingestion.xorbs.
type chunkRef struct {
	seq   int
	index uint32
}

// pendingTerm is a term whose xorb may still be the one being built.
type pendingTerm struct {
	seq        int
	start, end uint32
	bytes      uint32
}

type ingestion struct {
	s      CAS
	ctx    context.Context
	tenant string
	opt    Options
	sha    hash.Hash                // the stream's SHA-256 when hashed inline, else nil
	shaSum func() [sha256.Size]byte // the stream's SHA-256, inline or from a shaReader
	agg    xet.AggregatedHasher
	size   int64

	known  map[xet.Hash]chunkRef // chunks of looked-up and built xorbs
	xorbs  []xet.Hash            // by sequence number; zero while being built
	looked map[xet.Hash]bool     // xorbs whose chunks are in known
	xorb   *xet.XorbWriter
	cur    int // sequence number of the xorb being built, -1 for none
	built  []xet.CASInfo
	terms  []pendingTerm

	newXorbs int
	newBytes int64
	done     func() // of opt.Work, while held
}

// work holds opt.Work for the chunks that follow, unless held already.
func (in *ingestion) work() error {
	if in.done != nil || in.opt.Work == nil {
		return nil
	}
	done, err := in.opt.Work()
	if err != nil {
		return err
	}
	in.done = done
	return nil
}

// rest gives opt.Work back, if held.
func (in *ingestion) rest() {
	if in.done != nil {
		in.done()
		in.done = nil
	}
}

// add places one chunk of the stream.
func (in *ingestion) add(chunk []byte, first bool) error {
	h := xet.ChunkHash(chunk)
	if in.sha != nil {
		in.sha.Write(chunk)
	}
	in.agg.Add(xet.Leaf{Hash: h, Size: uint64(len(chunk))})
	in.size += int64(len(chunk))
	if len(in.known) >= ingestKnownChunks {
		clear(in.known)
		clear(in.looked)
	}
	ref, ok := in.known[h]
	if !ok && (first || xet.DedupEligible(h)) {
		if err := in.lookup(h); err != nil {
			return err
		}
		ref, ok = in.known[h]
	}
	if !ok {
		if !in.xorb.Fits(len(chunk)) {
			if err := in.flush(); err != nil {
				return err
			}
		}
		if in.cur < 0 {
			in.cur = len(in.xorbs)
			in.xorbs = append(in.xorbs, xet.Hash{})
		}
		ref = chunkRef{seq: in.cur, index: uint32(in.xorb.Len())}
		in.xorb.Add(h, chunk)
		in.known[h] = ref
	}
	if n := len(in.terms); n > 0 && in.terms[n-1].seq == ref.seq && in.terms[n-1].end == ref.index {
		in.terms[n-1].end++
		in.terms[n-1].bytes += uint32(len(chunk))
		return nil
	}
	in.terms = append(in.terms, pendingTerm{seq: ref.seq, start: ref.index, end: ref.index + 1, bytes: uint32(len(chunk))})
	return nil
}

// lookup asks the dedup index for a chunk and learns the chunks of the
// xorbs the answer names.
func (in *ingestion) lookup(h xet.Hash) error {
	infos, err := in.s.DedupAnswer(in.ctx, in.tenant, h, in.opt.DedupGlobal, dedupAnswerXorbs)
	if errors.Is(err, objects.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	if in.looked == nil {
		in.looked = map[xet.Hash]bool{}
	}
	for _, ci := range infos {
		if in.looked[ci.Xorb] {
			continue
		}
		in.looked[ci.Xorb] = true
		seq := len(in.xorbs)
		in.xorbs = append(in.xorbs, ci.Xorb)
		for i, c := range ci.Chunks {
			if _, ok := in.known[c.Hash]; !ok {
				in.known[c.Hash] = chunkRef{seq: seq, index: uint32(i)}
			}
		}
	}
	return nil
}

// dedupAnswerXorbs is how many xorbs one dedup lookup of an ingestion may
// learn, as many as a GET /v1/chunks answer offers (server.go): the first
// chunk of a file stored before finds all the xorbs of its shard.
const dedupAnswerXorbs = 32

// ingestKnownChunks bounds the chunk map of an ingestion (about 60 bytes an
// entry); past it the map starts over, which costs dedup, not correctness.
const ingestKnownChunks = 1 << 18

// flush stores the xorb being built, if any.
func (in *ingestion) flush() error {
	if in.cur < 0 {
		return nil
	}
	in.rest()
	body, info := in.xorb.Finish()
	inserted, err := in.s.PutXorb(in.ctx, in.tenant, info, body, in.opt.DefaultQuotaBytes)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	if inserted {
		in.newXorbs++
		in.newBytes += info.StreamLen
	}
	in.xorbs[in.cur] = info.Hash
	in.built = append(in.built, xet.CASInfoFromXorb(info))
	in.cur = -1
	in.xorb.Reset()
	return nil
}

// register writes the shard of the file and returns it.
func (in *ingestion) register(sum [sha256.Size]byte) (Stored, error) {
	sha, err := xet.ParseHash(hex.EncodeToString(sum[:])) // hash byte order (xet.FileInfo.SHA256)
	if err != nil {
		return Stored{}, err
	}
	f := xet.FileInfo{Hash: in.agg.FileHash(), SHA256: &sha, Terms: make([]xet.Term, len(in.terms))}
	for i, t := range in.terms {
		f.Terms[i] = xet.Term{Xorb: in.xorbs[t.seq], ChunkStart: t.start, ChunkEnd: t.end, UnpackedBytes: t.bytes}
	}
	sh := &xet.Shard{Files: []xet.FileInfo{f}, Xorbs: in.built}
	body := sh.MarshalUpload()
	if err := in.s.VerifyShard(in.ctx, sh); err != nil {
		return Stored{}, fmt.Errorf("ingest: %w", err)
	}
	if _, err := in.s.PutShard(in.ctx, in.tenant, body, sh); err != nil {
		return Stored{}, fmt.Errorf("ingest: %w", err)
	}
	return Stored{Hash: f.Hash, SizeBytes: in.size, SHA256: sum, NewXorbs: in.newXorbs, NewBytes: in.newBytes}, nil
}
