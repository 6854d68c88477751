package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"openxet/xet"
)

// Shape of the honest workload.
const (
	// Operation mix once a tenant has a file: uploads, downloads, dedup
	// queries (the rest).
	shareUpload   = 0.15
	shareDownload = 0.55
	// An uploaded file is its new xorb plus, with these probabilities, a
	// whole xorb the tenant uploaded before or one another tenant uploaded
	// (referenced through global dedup).
	shareReuseOwn   = 0.3
	shareReuseOther = 0.1
	// Of dedup queries, this share asks for a chunk nobody has (404).
	shareDedupMiss = 0.2
	// A tenant reads among its last maxFiles files; the pool of xorbs other
	// tenants may reference keeps the last poolXorbs.
	maxFiles  = 16
	poolXorbs = 1024
)

// tenant is one honest tenant and what it has registered.
type tenant struct {
	idx   int32
	name  string
	creds []credential
	seq   atomic.Uint64

	// What its uploads must have added to its usage, for the accounting
	// check (checkAccounting): stored counts the xorbs the server took as
	// new and whose file was registered; unsure counts those it may or may
	// not have kept (answer lost, file not registered, odd answer).
	stored, unsure atomic.Int64

	mu    sync.Mutex
	files []*fileSpec
	xorbs []*xorbSpec
}

func (t *tenant) addFile(f *fileSpec, x *xorbSpec) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.files = append(t.files, f)
	if len(t.files) > maxFiles {
		t.files = slices.Delete(t.files, 0, len(t.files)-maxFiles)
	}
	t.xorbs = append(t.xorbs, x)
	if len(t.xorbs) > maxFiles {
		t.xorbs = slices.Delete(t.xorbs, 0, len(t.xorbs)-maxFiles)
	}
}

func (t *tenant) randomFile(r *rand.Rand) *fileSpec {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.files) == 0 {
		return nil
	}
	return t.files[r.IntN(len(t.files))]
}

func (t *tenant) randomXorb(r *rand.Rand) *xorbSpec {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.xorbs) == 0 {
		return nil
	}
	return t.xorbs[r.IntN(len(t.xorbs))]
}

// xorbPool holds recent xorbs of every tenant, for cross-tenant references.
type xorbPool struct {
	mu    sync.Mutex
	xorbs []*xorbSpec
	next  int
}

func (p *xorbPool) add(x *xorbSpec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.xorbs) < poolXorbs {
		p.xorbs = append(p.xorbs, x)
		return
	}
	p.xorbs[p.next] = x
	p.next = (p.next + 1) % poolXorbs
}

func (p *xorbPool) random(r *rand.Rand) *xorbSpec {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.xorbs) == 0 {
		return nil
	}
	return p.xorbs[r.IntN(len(p.xorbs))]
}

// honest drives the honest tenants. Each credential's worker spreads its
// requests over every node in turn (a cursor per worker, starting at the
// worker's own offset): an upload's xorb and its shard go to different
// nodes, a reconstruction to the next, so each tenant's usage is built
// through all nodes at once and its files are read back through nodes that
// did not store them.
type honest struct {
	cfg     Config
	nodes   nodes
	c       *client
	rec     *recorder
	seed    uint64
	tenants []*tenant
	pool    xorbPool
	inOps   atomic.Int64 // operations running now
	targets *targets     // fetch URLs must pass it
}

// run starts one worker per credential; each does an operation, waits a
// think time, and repeats until stop is done. Operations in progress run
// under ctx. It returns when every worker has returned.
func (h *honest) run(ctx context.Context, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for _, t := range h.tenants {
		for ci := range t.creds {
			r := rand.New(rand.NewPCG(h.seed, uint64(t.idx)<<8|uint64(ci)))
			cur := newCursor(int(t.idx)*len(t.creds)+ci, len(h.nodes))
			wg.Go(func() {
				// Spread the first operations over one think time.
				first := time.Duration(r.Int64N(int64(h.cfg.ThinkMax) + 1))
				if !wait(stop, first) {
					return
				}
				for {
					h.step(ctx, t, ci, r, cur)
					think := h.cfg.ThinkMin + time.Duration(r.Int64N(int64(h.cfg.ThinkMax-h.cfg.ThinkMin)+1))
					if !wait(stop, think) {
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// wait waits d and reports false if stop was done first.
func wait(stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// step runs one operation, chosen at random.
func (h *honest) step(ctx context.Context, t *tenant, ci int, r *rand.Rand, cur *cursor) {
	h.inOps.Add(1)
	defer h.inOps.Add(-1)
	if t.randomFile(r) == nil {
		h.upload(ctx, t, ci, r, cur)
		return
	}
	switch p := r.Float64(); {
	case p < shareUpload:
		h.upload(ctx, t, ci, r, cur)
	case p < shareUpload+shareDownload:
		h.download(ctx, t, ci, r, cur)
	default:
		h.dedup(ctx, t, ci, r, cur)
	}
}

// check records a failure unless a is one of the statuses wanted, and
// reports whether it was. An answer lost because ctx ended is no failure
// (the run stopped it); the drain accounts for those.
func (h *honest) check(ctx context.Context, t *tenant, route string, a answer, want ...int) bool {
	switch {
	case a.err != nil:
		if ctx.Err() == nil {
			h.rec.fail(failTransport, "tenant %s %s: %v", t.name, route, a.err)
		}
		return false
	case slices.Contains(want, a.status):
		return true
	case isRefusal(a.status):
		h.rec.fail(failRefused, "tenant %s %s: %s", t.name, route, a.describe())
	default:
		h.rec.fail(failStatus, "tenant %s %s: %s (want %v)", t.name, route, a.describe(), want)
	}
	return false
}

func (h *honest) op(t *tenant, kind string, start time.Time, n int64, ok bool) {
	h.rec.op(opRecord{start: h.rec.since(start), dur: time.Since(start), bytes: n, tenant: t.idx, kind: kind, ok: ok})
}

// upload makes a new xorb, uploads it, and registers a file made of it
// (and maybe of an older xorb) with a shard sent to the next node.
func (h *honest) upload(ctx context.Context, t *tenant, ci int, r *rand.Rand, cur *cursor) {
	start := time.Now()
	size := h.cfg.XorbMinBytes + r.Int64N(h.cfg.XorbMaxBytes-h.cfg.XorbMinBytes+1)
	seed := mix(h.seed ^ uint64(t.idx)<<40 ^ t.seq.Add(1))
	x, body := newXorb(seed, int(size))
	xorbs := []*xorbSpec{x}
	switch p := r.Float64(); {
	case p < shareReuseOwn:
		if old := t.randomXorb(r); old != nil {
			xorbs = append(xorbs, old)
		}
	case p < shareReuseOwn+shareReuseOther:
		if other := h.pool.random(r); other != nil {
			xorbs = append(xorbs, other)
		}
	}
	if len(xorbs) == 2 && r.IntN(2) == 0 {
		xorbs[0], xorbs[1] = xorbs[1], xorbs[0]
	}
	tok := t.creds[ci].Token
	w := who{classHonest, routeXorb, t.idx, cur.next()}
	a := h.c.do(ctx, w, "POST", h.nodes[w.node]+"/v1/xorbs/default/"+x.info.Hash.String(), tok, body)
	if a.err != nil || (a.status >= 500 && a.status != http.StatusServiceUnavailable) {
		// The server may have stored it before the answer was lost or
		// the error happened (503 refuses before anything is stored).
		t.unsure.Add(x.info.StreamLen)
	}
	if !h.check(ctx, t, routeXorb, a, http.StatusOK) {
		h.op(t, "upload", start, 0, false)
		return
	}
	var xr struct {
		WasInserted *bool `json:"was_inserted"`
	}
	if json.Unmarshal(a.body, &xr) != nil || xr.WasInserted == nil || !*xr.WasInserted {
		h.rec.fail(failProtocol, "tenant %s xorb %s: a new xorb answered %s, want was_inserted true", t.name, x.info.Hash, bytes.TrimSpace(a.body))
		t.unsure.Add(x.info.StreamLen)
		h.op(t, "upload", start, int64(len(body)), false)
		return
	}
	f, fi := newFile(xorbs)
	shard := shardFor(fi, x)
	w.route, w.node = routeShard, cur.next()
	a = h.c.do(ctx, w, "POST", h.nodes[w.node]+"/v1/shards", tok, shard)
	if !h.check(ctx, t, routeShard, a, http.StatusOK) {
		t.unsure.Add(x.info.StreamLen) // stored, but no file keeps it: the collector may release it
		h.op(t, "upload", start, int64(len(body)), false)
		return
	}
	t.stored.Add(x.info.StreamLen)
	var sr struct {
		Result *int `json:"result"`
	}
	if json.Unmarshal(a.body, &sr) != nil || sr.Result == nil || *sr.Result != 1 {
		h.rec.fail(failProtocol, "tenant %s shard for file %s: answered %s, want result 1", t.name, f.hash, bytes.TrimSpace(a.body))
	}
	t.addFile(f, x)
	h.pool.add(x)
	h.op(t, "upload", start, int64(len(body)+len(shard)), true)
}

// reconstruction is the JSON answer of GET /v1/reconstructions (docs/protocol.md §1.4).
type reconstruction struct {
	Offset uint64 `json:"offset_into_first_range"`
	Terms  []struct {
		Hash           string `json:"hash"`
		UnpackedLength uint32 `json:"unpacked_length"`
		Range          struct {
			Start uint32 `json:"start"`
			End   uint32 `json:"end"`
		} `json:"range"`
	} `json:"terms"`
	FetchInfo map[string][]fetchEntry `json:"fetch_info"`
}

type fetchEntry struct {
	Range struct {
		Start uint32 `json:"start"`
		End   uint32 `json:"end"`
	} `json:"range"`
	URL      string `json:"url"`
	URLRange struct {
		Start uint64 `json:"start"`
		End   uint64 `json:"end"`
	} `json:"url_range"`
	chunks [][]byte
}

// download reads a random window of one of the tenant's files the way
// hf_xet does (reconstruction from the next node, then each fetch URL, on
// the node that made it, with its Range), decodes the chunks and compares
// the bytes with what was uploaded.
func (h *honest) download(ctx context.Context, t *tenant, ci int, r *rand.Rand, cur *cursor) {
	start := time.Now()
	f := t.randomFile(r)
	var s, e uint64 // the window [s, e)
	var rangeHdr string
	switch r.IntN(4) {
	case 0: // the whole file, asked the way hf_xet asks
		s, e = 0, f.size
		rangeHdr = "bytes=0-18446744073709551614"
	case 1: // a tail
		s = r.Uint64N(f.size)
		e = f.size
		rangeHdr = fmt.Sprintf("bytes=%d-", s)
	default: // a window inside
		s = r.Uint64N(f.size)
		e = s + 1 + r.Uint64N(f.size-s)
		rangeHdr = fmt.Sprintf("bytes=%d-%d", s, e-1)
	}
	tok := t.creds[ci].Token
	w := who{classHonest, routeReconstruction, t.idx, cur.next()}
	a := h.c.do(ctx, w, "GET", h.nodes[w.node]+"/v1/reconstructions/"+f.hash.String(), tok, nil, "Range", rangeHdr)
	if !h.check(ctx, t, routeReconstruction, a, http.StatusOK) {
		h.op(t, "download", start, 0, false)
		return
	}
	n := int64(len(a.body))
	var rec reconstruction
	if err := json.Unmarshal(a.body, &rec); err != nil {
		h.rec.fail(failProtocol, "tenant %s file %s %s: reconstruction is not JSON: %v", t.name, f.hash, rangeHdr, err)
		h.op(t, "download", start, n, false)
		return
	}
	w.route = routeFetch
	keys := make([]string, 0, len(rec.FetchInfo))
	for k := range rec.FetchInfo {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for i := range rec.FetchInfo[k] {
			fe := &rec.FetchInfo[k][i]
			if err := h.targets.check(ctx, fe.URL); err != nil {
				h.rec.fail(failRemote, "tenant %s: refusing fetch URL %s: %v (the server's public URL is not this machine; pass --allow-remote)", t.name, fe.URL, err)
				h.op(t, "download", start, n, false)
				return
			}
			w.node = h.nodes.of(fe.URL)
			fa := h.c.do(ctx, w, "GET", fe.URL, "", nil, "Range", fmt.Sprintf("bytes=%d-%d", fe.URLRange.Start, fe.URLRange.End))
			if !h.check(ctx, t, routeFetch, fa, http.StatusPartialContent, http.StatusOK) {
				h.op(t, "download", start, n, false)
				return
			}
			n += int64(len(fa.body))
			if want := fe.URLRange.End - fe.URLRange.Start + 1; uint64(len(fa.body)) != want {
				h.rec.fail(failProtocol, "tenant %s xorb %s bytes %d-%d: fetch gave %d bytes, want %d", t.name, k, fe.URLRange.Start, fe.URLRange.End, len(fa.body), want)
				h.op(t, "download", start, n, false)
				return
			}
			chunks, err := xet.DecodeChunks(fa.body)
			if err == nil && len(chunks) != int(fe.Range.End)-int(fe.Range.Start) {
				err = fmt.Errorf("%d chunks, want %d", len(chunks), fe.Range.End-fe.Range.Start)
			}
			if err != nil {
				h.rec.fail(failMismatch, "tenant %s xorb %s bytes %d-%d: fetched chunks do not decode: %v", t.name, k, fe.URLRange.Start, fe.URLRange.End, err)
				h.op(t, "download", start, n, false)
				return
			}
			fe.chunks = chunks
		}
	}
	got, err := assemble(rec)
	if err != nil {
		h.rec.fail(failProtocol, "tenant %s file %s %s: %v", t.name, f.hash, rangeHdr, err)
		h.op(t, "download", start, n, false)
		return
	}
	if uint64(len(got)) > e-s {
		got = got[:e-s]
	}
	want := f.content(s, e)
	if !bytes.Equal(got, want) {
		h.rec.fail(failMismatch, "tenant %s file %s %s: %s", t.name, f.hash, rangeHdr, firstDifference(got, want))
		h.op(t, "download", start, n, false)
		return
	}
	h.op(t, "download", start, n, true)
}

// assemble puts a reconstruction's fetched chunks together into the bytes
// of the window it answered, as the client does (docs/protocol.md §1.4, docs/protocol.md §8): from the first
// term's offset to the end of the last term's last chunk, which may run past
// the window (the caller cuts it).
func assemble(rec reconstruction) ([]byte, error) {
	var total int
	for _, t := range rec.Terms {
		total += int(t.UnpackedLength)
	}
	out := make([]byte, 0, min(total, 64<<20)) // a lying unpacked_length allocates no more than a large file
	for i, t := range rec.Terms {
		var src *fetchEntry
		for j := range rec.FetchInfo[t.Hash] {
			fe := &rec.FetchInfo[t.Hash][j]
			if fe.Range.Start <= t.Range.Start && t.Range.End <= fe.Range.End {
				src = fe
				break
			}
		}
		if src == nil || src.chunks == nil {
			return nil, fmt.Errorf("term %d (xorb %s chunks [%d,%d)) lies in no fetch_info range", i, t.Hash, t.Range.Start, t.Range.End)
		}
		var n int
		for _, c := range src.chunks[t.Range.Start-src.Range.Start : t.Range.End-src.Range.Start] {
			out = append(out, c...)
			n += len(c)
		}
		if n != int(t.UnpackedLength) {
			return nil, fmt.Errorf("term %d (xorb %s): chunks hold %d bytes, unpacked_length says %d", i, t.Hash, n, t.UnpackedLength)
		}
	}
	if rec.Offset > uint64(len(out)) {
		return nil, fmt.Errorf("offset_into_first_range %d is past the %d bytes of the terms", rec.Offset, len(out))
	}
	return out[rec.Offset:], nil
}

// firstDifference says where got and want first differ.
func firstDifference(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("byte %d of the window is %#02x, want %#02x (window %d bytes, got %d)", i, got[i], want[i], len(want), len(got))
		}
	}
	return fmt.Sprintf("got %d bytes, want %d", len(got), len(want))
}

// dedup asks the global dedup endpoint for a chunk of one of the tenant's
// files (the answer must offer it) or for a chunk nobody has (404).
func (h *honest) dedup(ctx context.Context, t *tenant, ci int, r *rand.Rand, cur *cursor) {
	start := time.Now()
	tok := t.creds[ci].Token
	w := who{classHonest, routeDedup, t.idx, cur.next()}
	base := h.nodes[w.node]
	if r.Float64() < shareDedupMiss {
		var miss xet.Hash
		for i := range miss {
			miss[i] = byte(r.Uint32())
		}
		a := h.c.do(ctx, w, "GET", base+"/v1/chunks/default/"+miss.String(), tok, nil)
		h.op(t, "dedup", start, 0, h.check(ctx, t, routeDedup, a, http.StatusNotFound))
		return
	}
	f := t.randomFile(r)
	a := h.c.do(ctx, w, "GET", base+"/v1/chunks/default/"+f.firstChunk.String(), tok, nil)
	if !h.check(ctx, t, routeDedup, a, http.StatusOK) {
		h.op(t, "dedup", start, 0, false)
		return
	}
	if err := offers(a.body, f.firstChunk); err != nil {
		h.rec.fail(failProtocol, "tenant %s dedup of chunk %s (first of file %s): %v", t.name, f.firstChunk, f.hash, err)
		h.op(t, "dedup", start, int64(len(a.body)), false)
		return
	}
	h.op(t, "dedup", start, int64(len(a.body)), true)
}

// offers checks that a dedup answer (a shard with a footer) offers chunk.
func offers(body []byte, chunk xet.Hash) error {
	sh, err := xet.ParseShard(body)
	if err != nil {
		return err
	}
	if sh.Footer == nil {
		return fmt.Errorf("the answer has no footer")
	}
	want := chunk
	if sh.Footer.ChunkHashKey != ([32]byte{}) {
		want = xet.KeyedChunkHash(sh.Footer.ChunkHashKey, chunk)
	}
	for _, x := range sh.Xorbs {
		for _, c := range x.Chunks {
			if c.Hash == want {
				return nil
			}
		}
	}
	return fmt.Errorf("none of its %d CAS blocks holds the chunk", len(sh.Xorbs))
}
