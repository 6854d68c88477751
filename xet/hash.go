package xet

import (
	"encoding/binary"
	"slices"
	"strconv"
)

// Hash is a 32-byte Xet hash (chunk, xorb, file, range or shard hash) in raw
// byte order, as stored in binary formats. The zero value is the all-zero
// hash, which the protocol uses for "empty" (the file hash of an empty file).
// Hash is comparable and can be used as a map key.
type Hash [32]byte

// HashStringLen is the length of the string form of a Hash.
const HashStringLen = 64

const hexDigits = "0123456789abcdef"

// String returns the protocol's string form (docs/protocol.md §2): each 8-byte group read as
// a little-endian u64 and printed as 16 lowercase hex digits. It is used in
// URLs, JSON and inside merkle node text.
func (h Hash) String() string {
	var b [HashStringLen]byte
	return string(h.AppendHex(b[:0]))
}

// AppendHex appends the docs/protocol.md §2 string form of h to dst (String without the
// string).
func (h Hash) AppendHex(dst []byte) []byte {
	for g := 0; g < 32; g += 8 {
		for i := g + 7; i >= g; i-- {
			c := h[i]
			dst = append(dst, hexDigits[c>>4], hexDigits[c&0x0f])
		}
	}
	return dst
}

// IsZero reports whether h is the all-zero hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText implements encoding.TextMarshaler with the docs/protocol.md §2 string form, so a
// Hash encodes as a JSON string and works as a JSON object key.
func (h Hash) MarshalText() ([]byte, error) {
	return h.AppendHex(make([]byte, 0, HashStringLen)), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; see ParseHash.
func (h *Hash) UnmarshalText(text []byte) error {
	v, err := ParseHash(string(text))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// ParseHash parses the docs/protocol.md §2 string form: exactly 64 lowercase hex digits (the
// form String prints and the stock clients send), so that a hash has one
// spelling in URLs, JSON and bucket keys. Upper case is refused. The error
// is a *FormatError wrapping ErrBadHash; its Offset is the position of the
// first bad character, or -1 for a wrong length.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != HashStringLen {
		return Hash{}, formatErr(ErrBadHash, -1, "want 64 lowercase hex digits, got "+strconv.Itoa(len(s))+" characters")
	}
	for p := 0; p < HashStringLen; p++ {
		v, ok := unhex(s[p])
		if !ok {
			what := "not a lowercase hex digit: "
			if 'A' <= s[p] && s[p] <= 'F' {
				what = "upper case; want 64 lowercase hex digits: "
			}
			return Hash{}, formatErr(ErrBadHash, p, what+strconv.QuoteRune(rune(s[p])))
		}
		// Position p is nibble (p%16) of group p/16, most significant first;
		// the group is a little-endian u64, so its top byte is stored last.
		i := p/16*8 + 7 - (p%16)/2
		if p%2 == 0 {
			h[i] |= v << 4
		} else {
			h[i] |= v
		}
	}
	return h, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// The BLAKE3 keys of docs/protocol.md §3.1. Never modified.
var (
	dataKey = [32]byte{102, 151, 245, 119, 91, 149, 80, 222, 49, 53, 203, 172, 165, 151, 24, 28,
		157, 228, 33, 16, 155, 235, 43, 88, 180, 208, 176, 75, 147, 173, 242, 41}
	internalNodeKey = [32]byte{1, 126, 197, 199, 165, 71, 41, 150, 253, 148, 102, 102, 180, 138, 2, 230,
		93, 221, 83, 111, 55, 199, 109, 210, 248, 99, 82, 230, 74, 83, 113, 63}
	verificationKey = [32]byte{127, 24, 87, 214, 206, 86, 237, 102, 18, 127, 249, 19, 231, 165, 195, 243,
		164, 205, 38, 213, 181, 219, 73, 230, 65, 36, 152, 127, 40, 251, 148, 195}
)

func keyedSum(key *[32]byte, data []byte) Hash {
	return newKeyedHasher(key).sum(data)
}

// ChunkHash returns the hash of an uncompressed chunk (docs/protocol.md §3.2):
// BLAKE3 keyed with DATA_KEY.
func ChunkHash(data []byte) Hash { return keyedSum(&dataKey, data) }

// Leaf is one input of a merkle aggregation: a chunk hash (or a lower node's
// hash) and its uncompressed size in bytes.
type Leaf struct {
	Hash Hash
	Size uint64
}

// AggregatedHash returns the merkle aggregation of docs/protocol.md §3.3 over leaves in order.
// It is the xorb hash when leaves are a xorb's chunks. No leaves gives the
// zero hash; one leaf gives that leaf's hash unchanged.
func AggregatedHash(leaves []Leaf) Hash {
	switch len(leaves) {
	case 0:
		return Hash{}
	case 1:
		return leaves[0].Hash
	}
	var a AggregatedHasher
	for _, l := range leaves {
		a.Add(l)
	}
	return a.Sum()
}

// AggregatedHasher computes AggregatedHash and FileHash over leaves added
// one at a time, in memory that grows with the logarithm of their number (a
// few hundred bytes per tree level), so files of millions of chunks can be
// hashed without building a leaf list. The zero value is ready to use.
// Not safe for concurrent use; do not copy an AggregatedHasher after its
// first Add.
type AggregatedHasher struct {
	levels []aggLevel
	kh     keyedHasher
	buf    [maxGroup * maxNodeLine]byte
}

// aggLevel holds the nodes of one tree level that are not yet grouped.
type aggLevel struct {
	pending [maxGroup]Leaf
	n       int    // nodes in pending
	total   uint64 // nodes ever added to this level
}

// Add appends one leaf.
func (a *AggregatedHasher) Add(l Leaf) { a.push(0, l) }

// Len returns the number of leaves added so far.
func (a *AggregatedHasher) Len() uint64 {
	if len(a.levels) == 0 {
		return 0
	}
	return a.levels[0].total
}

// Reset forgets all leaves.
func (a *AggregatedHasher) Reset() { a.levels = a.levels[:0] }

// push adds a node to level lvl. A group can be cut as soon as a level holds
// maxGroup nodes: the rule of docs/protocol.md §3.3 then looks at no node beyond them.
func (a *AggregatedHasher) push(lvl int, l Leaf) {
	if lvl == len(a.levels) {
		a.levels = append(a.levels, aggLevel{})
	}
	lv := &a.levels[lvl]
	lv.pending[lv.n] = l
	lv.n++
	lv.total++
	if lv.n == maxGroup {
		merged := a.cut(lvl)
		a.push(lvl+1, merged)
	}
}

// cut merges the first group of level lvl's pending nodes, as the rule of
// docs/protocol.md §3.3 chooses it for a level whose remaining nodes are exactly the pending
// ones, and drops them from pending.
func (a *AggregatedHasher) cut(lvl int) Leaf {
	if a.kh.h == nil {
		a.kh = newKeyedHasher(&internalNodeKey)
	}
	lv := &a.levels[lvl]
	n := nextMergeCut(lv.pending[:lv.n])
	merged := mergeNodes(a.kh, a.buf[:0], lv.pending[:n])
	copy(lv.pending[:], lv.pending[n:lv.n])
	lv.n -= n
	return merged
}

// Sum returns the aggregated hash of the leaves added so far. It does not
// change the state; more leaves may be added afterwards.
func (a *AggregatedHasher) Sum() Hash {
	if a.Len() == 0 {
		return Hash{}
	}
	c := AggregatedHasher{levels: slices.Clone(a.levels), kh: a.kh}
	for lvl := 0; ; lvl++ {
		if lvl == len(c.levels)-1 && c.levels[lvl].total == 1 {
			// Only one node ever reached this level: the root.
			a.kh = c.kh
			return c.levels[lvl].pending[0].Hash
		}
		for c.levels[lvl].n > 0 {
			merged := c.cut(lvl)
			c.push(lvl+1, merged)
		}
	}
}

// FileHash returns the file hash (docs/protocol.md §3.3) of the leaves added so far.
func (a *AggregatedHasher) FileHash() Hash {
	if a.Len() == 0 {
		return Hash{}
	}
	agg := a.Sum()
	var zeroKey [32]byte
	return keyedSum(&zeroKey, agg[:])
}

const (
	maxGroup    = 9               // 2 * mean branching factor 4 + 1
	maxNodeLine = 64 + 3 + 20 + 1 // hex, " : ", u64 decimal, "\n"
)

// nextMergeCut returns how many leading nodes form the next group (docs/protocol.md §3.3).
func nextMergeCut(nodes []Leaf) int {
	if len(nodes) <= 2 {
		return len(nodes)
	}
	end := min(maxGroup, len(nodes))
	for i := 2; i < end; i++ {
		if binary.LittleEndian.Uint64(nodes[i].Hash[24:32])%4 == 0 {
			return i + 1
		}
	}
	return end
}

func mergeNodes(kh keyedHasher, buf []byte, group []Leaf) Leaf {
	var total uint64
	for _, n := range group {
		buf = n.Hash.AppendHex(buf)
		buf = append(buf, " : "...)
		buf = strconv.AppendUint(buf, n.Size, 10)
		buf = append(buf, '\n')
		total += n.Size
	}
	return Leaf{Hash: kh.sum(buf), Size: total}
}

// FileHash returns the file hash of docs/protocol.md §3.3: BLAKE3 keyed with 32 zero bytes over
// the aggregated hash of all the file's chunks in order. An empty file
// (no leaves) has the zero hash.
func FileHash(leaves []Leaf) Hash {
	if len(leaves) == 0 {
		return Hash{}
	}
	agg := AggregatedHash(leaves)
	var zeroKey [32]byte
	return keyedSum(&zeroKey, agg[:])
}

// RangeHash returns the verification hash of docs/protocol.md §3.4 over a term's chunk hashes:
// BLAKE3 keyed with VERIFICATION_KEY over the raw hashes concatenated.
func RangeHash(chunks []Hash) Hash {
	kh := newKeyedHasher(&verificationKey)
	for i := range chunks {
		_, _ = kh.h.Write(chunks[i][:])
	}
	var out Hash
	kh.h.Sum(out[:0])
	return out
}

// KeyedChunkHash returns the keyed chunk hash of docs/protocol.md §3.5 that dedup shards store
// when their footer carries a non-zero key: BLAKE3 keyed with key over the
// raw 32 bytes of h.
func KeyedChunkHash(key [32]byte, h Hash) Hash { return keyedSum(&key, h[:]) }

// DedupEligible reports whether a chunk hash alone makes the chunk eligible
// for global dedup (docs/protocol.md §3.6): u64le(h[24:32]) % 1024 == 0. The other two rules
// (first chunk of a file, CAS entry flag bit 31) are the caller's to apply;
// see ChunkFlagGlobalDedup.
func DedupEligible(h Hash) bool {
	return binary.LittleEndian.Uint64(h[24:32])%1024 == 0
}
