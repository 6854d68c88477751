package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// Possession, not knowledge of a hash (docs/design.md §2, SECURITY.md): a
// tenant that learns where another tenant's private file is stored (its
// xorb hashes and chunk ranges) cannot register that file as its own
// through the CAS, and no refusal of its probes hands out a value computed
// from the stored data.

// theftScene is alice's one upload of a small public file and a private
// file packed into the same two xorbs, the private file committed to a
// private repo and the public one to a public repo; bob holds the public
// file's bytes and nothing else.
//
//	xa: chunks 0 1 (pub) 2 3 4 (priv)    xb: chunks 0 1 (priv)
type theftScene struct {
	*testEnv
	alice, bob string
	xa, xb     xet.XorbInfo
	xaBody     []byte
	pub, priv  xet.FileInfo
	pubData    []byte
	privData   []byte
	// secrets is every value derived from the stored data that bob did not
	// already have: the private file's hash, its chunk hashes, the range
	// hashes and byte sums of every chunk range of both xorbs, and the
	// xorbs' chunk counts, as they would print.
	secrets []string
}

func newTheftScene(t *testing.T, scope string) *theftScene {
	t.Helper()
	e := &theftScene{testEnv: newTestEnv(t, func(c *Config) { c.DedupScope = scope })}
	e.alice, e.bob = e.credential("alice", "write"), e.credential("bob", "write")
	r := rand.New(rand.NewPCG(45, 0))
	chunk := func(size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	// Sizes all differ, so that a leaked sum could not pass for another.
	var aChunks, bChunks [][]byte
	for _, n := range []int{20_011, 20_123, 21_357, 22_469, 23_581} {
		aChunks = append(aChunks, chunk(n))
	}
	for _, n := range []int{24_693, 25_707} {
		bChunks = append(bChunks, chunk(n))
	}
	var xbBody []byte
	e.xaBody, e.xa = xet.BuildXorb(aChunks, false)
	xbBody, e.xb = xet.BuildXorb(bChunks, false)
	for _, c := range aChunks[:2] {
		e.pubData = append(e.pubData, c...)
	}
	for _, c := range append(aChunks[2:], bChunks...) {
		e.privData = append(e.privData, c...)
	}
	e.pub = fileFromTerms(t, []xet.XorbInfo{e.xa}, []xet.Term{{Xorb: e.xa.Hash, ChunkStart: 0, ChunkEnd: 2}}, e.pubData)
	e.priv = fileFromTerms(t, []xet.XorbInfo{e.xa, e.xb}, []xet.Term{{Xorb: e.xa.Hash, ChunkStart: 2, ChunkEnd: 5}, {Xorb: e.xb.Hash, ChunkStart: 0, ChunkEnd: 2}}, e.privData)

	for _, x := range []struct {
		body []byte
		h    xet.Hash
	}{{e.xaBody, e.xa.Hash}, {xbBody, e.xb.Hash}} {
		if r := e.postXorb(e.alice, x.body, x.h); r.Status != 200 {
			t.Fatalf("alice's xorb: %d %s", r.Status, r.Body)
		}
	}
	sh := &xet.Shard{Files: []xet.FileInfo{e.pub, e.priv}, Xorbs: []xet.CASInfo{xet.CASInfoFromXorb(e.xa), xet.CASInfoFromXorb(e.xb)}}
	if r := e.do("POST", "/v1/shards", e.alice, sh.MarshalUpload()); r.Status != 200 {
		t.Fatalf("alice's shard: %d %s", r.Status, r.Body)
	}
	for name, f := range map[string]xet.FileInfo{"pub": e.pub, "priv": e.priv} {
		vis := map[string]string{"pub": "public", "priv": "private"}[name]
		if r := e.do("POST", "/api/repos/create", e.alice, []byte(`{"name":"`+name+`","visibility":"`+vis+`"}`)); r.Status != 200 {
			t.Fatalf("create %s: %d %s", name, r.Status, r.Body)
		}
		op := fmt.Sprintf(`{"key":"lfsFile","value":{"path":"weights.bin","algo":"sha256","oid":%q,"size":%d}}`, f.SHA256.String(), xet.FileSize(f.Terms))
		if r := e.hubCommit(e.alice, "alice/"+name, "main", op); r.Status != 200 {
			t.Fatalf("commit to %s: %d %s", name, r.Status, r.Body)
		}
	}

	e.secrets = []string{e.priv.Hash.String()}
	for _, x := range []xet.XorbInfo{e.xa, e.xb} {
		n := strconv.Itoa(len(x.Chunks))
		e.secrets = append(e.secrets, n+" chunks", "of "+n, "has "+n)
		for i := range x.Chunks {
			var hs []xet.Hash
			var sum uint64
			for j := i; j < len(x.Chunks); j++ {
				hs = append(hs, x.Chunks[j].Hash)
				sum += uint64(x.Chunks[j].Size)
				if x.Hash != e.xa.Hash || j >= 2 { // a range of chunks bob does not hold
					e.secrets = append(e.secrets, xet.RangeHash(hs).String(), strconv.FormatUint(sum, 10))
				}
			}
			if x.Hash != e.xa.Hash || i >= 2 { // bob hashed xa's first two chunks himself
				e.secrets = append(e.secrets, x.Chunks[i].Hash.String())
			}
		}
		e.secrets = append(e.secrets, strconv.FormatUint(x.UncompressedSize(), 10))
	}
	return e
}

// fileFromTerms completes terms (UnpackedBytes) and makes the file they
// form, with verification entries and the SHA-256 of data.
func fileFromTerms(t *testing.T, xorbs []xet.XorbInfo, terms []xet.Term, data []byte) xet.FileInfo {
	t.Helper()
	byHash := map[xet.Hash]xet.XorbInfo{}
	for _, x := range xorbs {
		byHash[x.Hash] = x
	}
	f := xet.FileInfo{Flags: xet.FileFlagVerification | xet.FileFlagMetadataExt}
	var leaves []xet.Leaf
	for _, tm := range terms {
		var hs []xet.Hash
		for _, c := range byHash[tm.Xorb].Chunks[tm.ChunkStart:tm.ChunkEnd] {
			tm.UnpackedBytes += c.Size
			hs = append(hs, c.Hash)
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		f.Terms = append(f.Terms, tm)
		f.Verification = append(f.Verification, xet.RangeHash(hs))
	}
	f.Hash = xet.FileHash(leaves)
	sum := sha256.Sum256(data)
	sha, err := xet.ParseHash(hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatal(err)
	}
	f.SHA256 = &sha
	return f
}

// leaks returns the secrets that body holds and that sent (what the
// caller's own request carried) does not.
func (e *theftScene) leaks(body []byte, sent *xet.Shard) []string {
	own := map[string]bool{}
	for _, f := range sent.Files {
		own[f.Hash.String()] = true
		for _, v := range f.Verification {
			own[v.String()] = true
		}
		for _, tm := range f.Terms {
			own[strconv.FormatUint(uint64(tm.UnpackedBytes), 10)] = true
		}
	}
	for _, c := range sent.Xorbs {
		own[strconv.FormatUint(uint64(c.NumBytesInXorb), 10)] = true
		for _, cc := range c.Chunks {
			own[cc.Hash.String()] = true
		}
	}
	var out []string
	for _, s := range e.secrets {
		// A secret counts where it stands as a whole token: a stored
		// count may appear by chance inside a hash or a request id.
		if !own[s] && regexp.MustCompile(`(^|[^0-9A-Za-z])`+regexp.QuoteMeta(s)+`([^0-9A-Za-z]|$)`).Match(body) {
			out = append(out, s)
		}
	}
	return out
}

// theftProbes are the shards an attacker who knows the private file's
// xorbs and chunk ranges sends to make it its own, the last of them
// naming the file hash too (as if it had leaked): each is refused.
func (e *theftScene) theftProbes() map[string]*xet.Shard {
	noVerif := func(f xet.FileInfo) xet.FileInfo {
		f.Verification, f.Flags = nil, 0
		f.Terms = append([]xet.Term(nil), f.Terms...)
		return f
	}
	withVerif := func(f xet.FileInfo, seed byte) xet.FileInfo {
		f.Terms = append([]xet.Term(nil), f.Terms...)
		f.Verification = make([]xet.Hash, len(f.Terms))
		for i := range f.Verification {
			f.Verification[i] = xet.Hash{seed, byte(i), 0x45}
		}
		f.Flags = xet.FileFlagVerification
		return f
	}
	guess := xet.Hash{0xba, 0xd}
	probes := map[string]*xet.Shard{}
	add := func(name string, f xet.FileInfo) { probes[name] = &xet.Shard{Files: []xet.FileInfo{f}} }

	f := noVerif(e.priv)
	add("the private file's own terms and hash, no verification", f)
	f = noVerif(e.priv)
	f.Hash = guess
	add("its terms, a guessed file hash, no verification", f)
	f = noVerif(e.priv)
	f.Terms[0].ChunkEnd = 9
	add("a chunk range past the xorb's end, no verification", f)
	f = noVerif(e.priv)
	f.Terms[0].UnpackedBytes++
	add("wrong unpacked_segment_bytes, no verification", f)
	f = withVerif(e.priv, 1)
	add("guessed verification hashes", f)
	f = withVerif(e.priv, 2)
	f.Hash = guess
	add("guessed verification and file hashes", f)
	f = withVerif(e.priv, 3)
	f.Terms[0].ChunkEnd = 9
	add("guessed verification, a range past the xorb's end", f)
	f = withVerif(e.priv, 4)
	f.Terms[1].UnpackedBytes--
	add("guessed verification, wrong unpacked_segment_bytes", f)
	// The pub file's chunks proved (bob holds them), the private ones not.
	f = withVerif(e.priv, 5)
	f.Terms = append([]xet.Term{e.pub.Terms[0]}, f.Terms...)
	f.Verification = append([]xet.Hash{e.pub.Verification[0]}, f.Verification...)
	add("a proved term of the public file before guessed ones", f)

	// CAS blocks for alice's xorb: the two chunk hashes bob computed,
	// guesses for the rest, which an answer naming the stored hash of a
	// chunk would hand him one by one.
	cas := xet.CASInfoFromXorb(e.xa)
	cas.Chunks = append([]xet.CASChunk(nil), cas.Chunks...)
	for i := 2; i < len(cas.Chunks); i++ {
		cas.Chunks[i].Hash = xet.Hash{byte(i), 0xca, 0x5}
	}
	probes["a CAS block with guessed chunk hashes"] = &xet.Shard{Xorbs: []xet.CASInfo{cas}}
	short := xet.CASInfoFromXorb(e.xa)
	short.Chunks = short.Chunks[:2]
	short.NumBytesInXorb = uint32(len(e.pubData))
	probes["a CAS block of the chunks bob holds"] = &xet.Shard{Xorbs: []xet.CASInfo{short}}
	size := xet.CASInfoFromXorb(e.xa)
	size.NumBytesInXorb++
	probes["a CAS block with a wrong num_bytes_in_xorb"] = &xet.Shard{Xorbs: []xet.CASInfo{size}}
	return probes
}

// TestNoTheftThroughShardRegistration: with dedup_scope global and
// tenant, every probe is refused on every shard route, the refusal holds
// none of the stored values bob lacks, nothing changes, and bob never
// reconstructs the private file; what bob truly holds he still registers
// under global dedup, and no more.
func TestNoTheftThroughShardRegistration(t *testing.T) {
	for _, scope := range []string{"global", "tenant"} {
		t.Run("dedup_scope="+scope, func(t *testing.T) {
			e := newTheftScene(t, scope)
			e.learnXorbs(t, scope)
			before := e.snapshot()
			for name, sh := range e.theftProbes() {
				body := sh.MarshalUpload()
				for _, route := range []string{"/v1/shards", "/shard/default/" + xet.Hash{7}.String(), "/v2/shards"} {
					r := e.do("POST", route, e.bob, body)
					if route == "/v2/shards" {
						wantErrorFrame(t, r, name)
					} else {
						if r.Status != 400 || r.json(t)["error"] != "invalid_shard" {
							t.Errorf("%s via %s: %d %s, want 400 invalid_shard", name, route, r.Status, r.Body)
						}
					}
					if l := e.leaks(r.Body, sh); len(l) > 0 {
						t.Errorf("%s via %s: the refusal reveals stored values %q: %s", name, route, l, r.Body)
					}
				}
			}
			if d := cmp.Diff(before, e.snapshot()); d != "" {
				t.Fatalf("refused probes changed state (-before +after):\n%s", d)
			}
			for _, h := range []xet.Hash{e.priv.Hash, e.pub.Hash} {
				wantError(t, e.do("GET", "/v1/reconstructions/"+h.String(), e.bob, nil), 404, "not_found")
			}
			wantError(t, e.do("GET", "/alice/priv/resolve/main/weights.bin", e.bob, nil), 404, "not_found")

			// What bob holds, he proves: the public file by its own chunks.
			own := &xet.Shard{Files: []xet.FileInfo{e.pub}}
			r := e.do("POST", "/v1/shards", e.bob, own.MarshalUpload())
			if scope == "tenant" {
				if r.Status != 400 || !strings.Contains(string(r.Body), "is not stored") {
					t.Fatalf("bob's proved file under dedup_scope tenant: %d %s, want 400 (xorb not his)", r.Status, r.Body)
				}
				return
			}
			if r.Status != 200 {
				t.Fatalf("bob registers the public file he holds, with verification: %d %s", r.Status, r.Body)
			}
			if got := e.download(t, e.bob, e.pub.Hash); string(got) != string(e.pubData) {
				t.Fatalf("bob's download of his file: %d bytes, want %d", len(got), len(e.pubData))
			}
			wantError(t, e.do("GET", "/v1/reconstructions/"+e.priv.Hash.String(), e.bob, nil), 404, "not_found")
			if u := e.usageOf("bob"); u != 0 {
				t.Errorf("bob's usage %d: referencing alice's xorb costs nothing", u)
			}
		})
	}
}

// learnXorbs is how bob learns where alice's files are: the dedup answer
// for the first chunk of the public file (global dedup only), which offers
// the one xorb that holds it and not the other xorb of alice's upload, with
// chunk hashes keyed; and the reconstruction of the public file through
// the public repo's read token, which names that xorb and the public
// file's chunk range only.
func (e *theftScene) learnXorbs(t *testing.T, scope string) {
	t.Helper()
	first := xet.ChunkHash(e.pubData[:e.xa.Chunks[0].Size])
	r := e.do("GET", "/v1/chunks/default/"+first.String(), e.bob, nil)
	if scope == "tenant" {
		wantError(t, r, 404, "not_found")
	} else {
		if r.Status != 200 {
			t.Fatalf("dedup query of the public file's first chunk: %d %s", r.Status, r.Body)
		}
		sh, err := xet.ParseShard(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if len(sh.Xorbs) != 1 || sh.Xorbs[0].Xorb != e.xa.Hash {
			t.Fatalf("dedup answer for another tenant's chunk offers %d xorbs, want only the one holding it", len(sh.Xorbs))
		}
		for i, c := range sh.Xorbs[0].Chunks {
			if c.Hash == e.xa.Chunks[i].Hash {
				t.Fatalf("dedup answer: chunk %d hash unkeyed", i)
			}
		}
		if l := e.leaks(r.Body, &xet.Shard{}); len(l) > 0 {
			t.Fatalf("dedup answer holds %q", l)
		}
	}
	tok := e.do("GET", "/api/models/alice/pub/xet-read-token/main", e.bob, nil)
	if tok.Status != 200 {
		t.Fatalf("read token of the public repo: %d %s", tok.Status, tok.Body)
	}
	cas, _ := tok.json(t)["accessToken"].(string)
	rec := e.do("GET", "/v1/reconstructions/"+e.pub.Hash.String(), cas, nil)
	if rec.Status != 200 {
		t.Fatalf("reconstruction of the public file: %d %s", rec.Status, rec.Body)
	}
	var ans struct {
		Terms []struct {
			Hash  string `json:"hash"`
			Range struct{ Start, End int }
		} `json:"terms"`
	}
	if err := json.Unmarshal(rec.Body, &ans); err != nil || len(ans.Terms) != 1 || ans.Terms[0].Hash != e.xa.Hash.String() {
		t.Fatalf("reconstruction of the public file: %v %s", err, rec.Body)
	}
	if l := e.leaks(rec.Body, &xet.Shard{}); len(l) > 0 {
		t.Fatalf("reconstruction of the public file holds %q", l)
	}
	wantError(t, e.do("GET", "/v1/reconstructions/"+e.priv.Hash.String(), cas, nil), 404, "not_found")
}

// wantErrorFrame checks that an NDJSON shard answer ends in an error frame.
func wantErrorFrame(t *testing.T, r response, name string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(r.Body)), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last["type"] != "error" {
		t.Errorf("%s via /v2/shards: %d %s, want an error frame", name, r.Status, r.Body)
	}
}

// download reconstructs file h as tok and fetches its bytes.
func (e *theftScene) download(t *testing.T, tok string, h xet.Hash) []byte {
	t.Helper()
	r := e.do("GET", "/v1/reconstructions/"+h.String(), tok, nil)
	if r.Status != 200 {
		t.Fatalf("reconstruction: %d %s", r.Status, r.Body)
	}
	return e.assemble(r.Body)
}
