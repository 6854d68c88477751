package load

import (
	"encoding/binary"
	"math/rand/v2"

	"openxet/xet"
)

// xorbSpec is a generated xorb: its content is a pure function of seed and
// size, so it need not be kept to check downloads against it.
type xorbSpec struct {
	seed uint64
	size int
	info xet.XorbInfo
}

// fileSpec is a file a tenant registered: whole xorbs, in order.
type fileSpec struct {
	hash  xet.Hash
	xorbs []*xorbSpec
	size  uint64
	// firstChunk is the hash of the file's first chunk, which the server
	// enters in its dedup index.
	firstChunk xet.Hash
}

// mix is splitmix64: it turns related inputs into unrelated seeds.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// genData returns the content of the xorb (seed, size), and the same bytes
// cut into chunkBytes chunks (genChunk makes each).
func genData(seed uint64, size int) (data []byte, chunks [][]byte) {
	data = make([]byte, size)
	for i, off := 0, 0; off < size; i, off = i+1, off+chunkBytes {
		c := data[off:min(off+chunkBytes, size)]
		genChunk(seed, i, c)
		chunks = append(chunks, c)
	}
	return data, chunks
}

// genChunk fills c with chunk i of the xorb with this seed. Each chunk
// comes from a PCG stream of its own, so that a window of a xorb is
// regenerated without the chunks before it (fileSpec.content). One chunk in
// three (by seed and index) is compressible, a repeated pattern with sparse
// noise, so that the xorb carries LZ4 chunks as well as stored ones; the
// others are random. PCG rather than ChaCha8: the data need not be
// unpredictable, only incompressible, and the generator regenerates every
// byte an honest tenant downloads to check it, so a slow stream is CPU the
// generator takes from its own measurements.
func genChunk(seed uint64, i int, c []byte) {
	src := rand.NewPCG(mix(seed), mix(seed+1+uint64(i)<<32))
	r := rand.New(src)
	if r.IntN(3) != 0 {
		fill(src, c)
		return
	}
	pattern := make([]byte, 1+r.IntN(1024))
	fill(src, pattern)
	for i := 0; i < len(c); i += len(pattern) {
		copy(c[i:], pattern)
	}
	for i := r.IntN(97); i < len(c); i += 97 {
		c[i] = byte(r.Uint32())
	}
}

func fill(src *rand.PCG, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, src.Uint64())
		b = b[8:]
	}
	for v := src.Uint64(); len(b) > 0; v >>= 8 {
		b[0] = byte(v)
		b = b[1:]
	}
}

// newXorb generates the xorb (seed, size) and its upload body.
func newXorb(seed uint64, size int) (*xorbSpec, []byte) {
	_, chunks := genData(seed, size)
	body, info := xet.BuildXorb(chunks, true)
	return &xorbSpec{seed: seed, size: size, info: info}, body
}

// newFile describes a file made of whole xorbs, with the shard entry that
// registers it (verification entries included, as hf_xet sends them).
func newFile(xorbs []*xorbSpec) (*fileSpec, xet.FileInfo) {
	var fi xet.FileInfo
	var leaves []xet.Leaf
	f := &fileSpec{xorbs: xorbs}
	for _, x := range xorbs {
		hashes := make([]xet.Hash, len(x.info.Chunks))
		for i, c := range x.info.Chunks {
			hashes[i] = c.Hash
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		fi.Terms = append(fi.Terms, xet.Term{Xorb: x.info.Hash, UnpackedBytes: uint32(x.info.UncompressedSize()), ChunkStart: 0, ChunkEnd: uint32(len(x.info.Chunks))})
		fi.Verification = append(fi.Verification, xet.RangeHash(hashes))
		f.size += x.info.UncompressedSize()
	}
	fi.Hash = xet.FileHash(leaves)
	f.hash = fi.Hash
	f.firstChunk = xorbs[0].info.Chunks[0].Hash
	return f, fi
}

// shardFor is the upload shard registering file fi and the CAS blocks of
// the xorbs in fresh.
func shardFor(fi xet.FileInfo, fresh ...*xorbSpec) []byte {
	sh := xet.Shard{Files: []xet.FileInfo{fi}}
	for _, x := range fresh {
		sh.Xorbs = append(sh.Xorbs, xet.CASInfoFromXorb(x.info))
	}
	return sh.MarshalUpload()
}

// content returns bytes [start, end) of file f, regenerated from its xorbs'
// seeds: only the chunks the window covers.
func (f *fileSpec) content(start, end uint64) []byte {
	out := make([]byte, 0, end-start)
	var scratch []byte
	var off uint64 // where the chunk starts in the file
	for _, x := range f.xorbs {
		for i := 0; i*chunkBytes < x.size; i++ {
			cs, ce := off, off+uint64(min(chunkBytes, x.size-i*chunkBytes))
			off = ce
			if ce <= start || cs >= end {
				continue
			}
			if scratch == nil {
				scratch = make([]byte, chunkBytes)
			}
			c := scratch[:ce-cs]
			genChunk(x.seed, i, c)
			out = append(out, c[max(start, cs)-cs:min(end, ce)-cs]...)
		}
	}
	return out
}
