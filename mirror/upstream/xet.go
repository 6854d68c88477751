package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"openxet/mirror"
	"openxet/xet"
)

const (
	// DefaultReconstructionWindow is the span of a file asked for in one
	// reconstruction request: its answer stays small (a term per xorb
	// range, some 16 per GiB) however large the file.
	DefaultReconstructionWindow = 1 << 30
	// decodeBatchBytes is how much of a fetch answer (whole chunks) is
	// decoded at once: with the decoded copy, a stream holds about twice
	// this, plus the decoder's fixed buffers.
	decodeBatchBytes = 2 << 20
	// maxTokens caps the cached CAS tokens.
	maxTokens = 1024
	// tokenMargin is how long before its expiry a token is refreshed, as
	// hf_xet does.
	tokenMargin = 30 * time.Second
)

// Open streams f of the revision sha of repo from offset: through the
// upstream's Xet CAS when f has a Xet hash (xet-read-token, then
// reconstructions and their fetch URLs, chunks decoded and cut to the
// terms), through its resolve route otherwise. The stream yields exactly
// f.Size-offset bytes or fails: a length or a chunk that does not check
// out is ErrBadAnswer, a connection lost mid-stream ErrUnreachable (Open
// again at the offset reached to resume). The bytes are not hashed here;
// the caller checks them against f.
//
// ctx governs the whole stream: every request it sends, also from Read.
//
// Memory: a stream holds at most one reconstruction window's answer and
// about 2 × 2 MiB of chunk data (a batch of whole chunks and its decoded
// copy), whatever the file's size. It holds one of MaxConns while a
// request of it is open; Close gives it back.
func (c *Client) Open(ctx context.Context, repo mirror.RepoRef, sha string, f mirror.File, offset int64) (io.ReadCloser, error) {
	api, err := repoAPIPath(repo)
	if err != nil {
		return nil, err
	}
	if !isFullSHA(sha) {
		return nil, fmt.Errorf("commit %q: want 40 hex digits", sha)
	}
	if offset < 0 || offset > f.Size {
		return nil, fmt.Errorf("offset %d outside %s (%d bytes)", offset, f.Path, f.Size)
	}
	if err := checkPath(f.Path); err != nil {
		return nil, err
	}
	if offset == f.Size {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	if f.XetHash == "" {
		return c.openResolve(ctx, repo, sha, f, offset)
	}
	h, err := xet.ParseHash(f.XetHash)
	if err != nil {
		return nil, fmt.Errorf("xet hash of %s: %w", f.Path, err)
	}
	s := &xetStream{c: c, ctx: ctx, key: tokenKey{api: api, sha: strings.ToLower(sha)}, hash: h,
		path: f.Path, size: f.Size, pos: offset, windowEnd: offset}
	// The first window is asked for now, so that a missing file, a token
	// refused or an unreachable upstream is Open's error.
	if err := s.nextWindow(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// tokenKey names the repo and commit a CAS token reads.
type tokenKey struct{ api, sha string }

// casToken is a xet-read-token answer.
type casToken struct {
	casURL *url.URL
	token  string
	exp    time.Time
}

// casToken returns a CAS read token for key, from the cache unless it is
// within tokenMargin of its expiry or fresh is set.
func (c *Client) casToken(ctx context.Context, key tokenKey, fresh bool) (casToken, error) {
	now := c.now()
	c.tokensMu.Lock()
	t, ok := c.tokens[key]
	c.tokensMu.Unlock()
	if ok && !fresh && now.Add(tokenMargin).Before(t.exp) {
		return t, nil
	}
	u := c.urlOf(key.api+"/xet-read-token/"+key.sha, "")
	body, err := c.getJSON(ctx, "xet-read-token", u)
	if err != nil {
		return casToken{}, err
	}
	t, err = parseCASToken(body)
	if err != nil {
		return casToken{}, badAnswer("xet-read-token", u, 200, "%v", err)
	}
	c.tokensMu.Lock()
	if len(c.tokens) >= c.maxTokens {
		for k, old := range c.tokens {
			if !now.Before(old.exp) || len(c.tokens) >= c.maxTokens {
				delete(c.tokens, k)
			}
		}
	}
	c.tokens[key] = t
	c.tokensMu.Unlock()
	return t, nil
}

// parseCASToken reads {"casUrl": …, "accessToken": …, "exp": unix seconds}.
func parseCASToken(body []byte) (casToken, error) {
	var raw struct {
		CASURL      *string      `json:"casUrl"`
		AccessToken *string      `json:"accessToken"`
		Exp         *json.Number `json:"exp"`
	}
	if err := strictObject(body, &raw); err != nil {
		return casToken{}, err
	}
	if raw.CASURL == nil || raw.AccessToken == nil || raw.Exp == nil {
		return casToken{}, fmt.Errorf("casUrl, accessToken or exp missing")
	}
	u, err := url.Parse(strings.TrimRight(*raw.CASURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return casToken{}, fmt.Errorf("casUrl %q is not an http(s) URL", *raw.CASURL)
	}
	exp, err := strconv.ParseInt(raw.Exp.String(), 10, 64)
	if err != nil {
		return casToken{}, fmt.Errorf("exp %s is not whole unix seconds", raw.Exp)
	}
	if strings.ContainsAny(*raw.AccessToken, "\r\n") {
		return casToken{}, fmt.Errorf("accessToken has a line break")
	}
	return casToken{casURL: u, token: *raw.AccessToken, exp: time.Unix(exp, 0)}, nil
}

// reconstruction is a parsed v1 reconstruction answer.
type reconstruction struct {
	Offset uint64
	Terms  []reconTerm
	Fetch  map[xet.Hash][]fetchEntry
}

type reconTerm struct {
	Xorb     xet.Hash
	Unpacked uint64
	Start    uint32 // chunk index, inclusive
	End      uint32 // chunk index, exclusive
}

type fetchEntry struct {
	Start, End uint32 // chunk range, end exclusive
	URL        *url.URL
	ByteStart  uint64 // url_range, both ends inclusive
	ByteEnd    uint64
}

type jsonRange struct {
	Start *uint64 `json:"start"`
	End   *uint64 `json:"end"`
}

func (r *jsonRange) get() (uint64, uint64, bool) {
	if r == nil || r.Start == nil || r.End == nil {
		return 0, 0, false
	}
	return *r.Start, *r.End, true
}

// parseReconstruction reads a v1 reconstruction answer
// (docs/protocol.md: offset_into_first_range, terms, fetch_info) and
// checks that it adds up: hashes are 64 hex digits, chunk ranges are
// non-empty and within MaxXorbChunks, every term lies inside a fetch
// entry of its xorb, url_ranges are ordered and fit a xorb, URLs are
// absolute http(s), and offset_into_first_range is inside the first term.
// Unknown fields are ignored.
func parseReconstruction(body []byte) (reconstruction, error) {
	var raw struct {
		Offset *uint64 `json:"offset_into_first_range"`
		Terms  []struct {
			Hash     *string    `json:"hash"`
			Unpacked *uint64    `json:"unpacked_length"`
			Range    *jsonRange `json:"range"`
		} `json:"terms"`
		FetchInfo map[string][]struct {
			Range    *jsonRange `json:"range"`
			URL      *string    `json:"url"`
			URLRange *jsonRange `json:"url_range"`
		} `json:"fetch_info"`
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return reconstruction{}, fmt.Errorf("a reconstruction is not a JSON object")
	}
	if err := strictObject(body, &raw); err != nil {
		return reconstruction{}, err
	}
	var rec reconstruction
	if raw.Offset != nil {
		rec.Offset = *raw.Offset
	}
	rec.Fetch = make(map[xet.Hash][]fetchEntry, len(raw.FetchInfo))
	for k, entries := range raw.FetchInfo {
		h, err := xet.ParseHash(k)
		if err != nil {
			return reconstruction{}, fmt.Errorf("fetch_info key %q is not a xorb hash", k)
		}
		for i, e := range entries {
			s, en, ok := e.Range.get()
			bs, be, ok2 := e.URLRange.get()
			if !ok || !ok2 || e.URL == nil {
				return reconstruction{}, fmt.Errorf("fetch_info %s[%d] lacks range, url or url_range", k, i)
			}
			if s >= en || en > xet.MaxXorbChunks {
				return reconstruction{}, fmt.Errorf("fetch_info %s[%d]: chunk range [%d,%d) is empty or too long", k, i, s, en)
			}
			if bs > be || be-bs+1 > xet.MaxXorbBytes || be-bs+1 < (en-s)*xet.ChunkHeaderBytes {
				return reconstruction{}, fmt.Errorf("fetch_info %s[%d]: url_range [%d,%d] does not fit %d chunks", k, i, bs, be, en-s)
			}
			u, err := url.Parse(*e.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return reconstruction{}, fmt.Errorf("fetch_info %s[%d]: url is not an absolute http(s) URL", k, i)
			}
			rec.Fetch[h] = append(rec.Fetch[h], fetchEntry{Start: uint32(s), End: uint32(en), URL: u, ByteStart: bs, ByteEnd: be})
		}
	}
	for i, t := range raw.Terms {
		if t.Hash == nil || t.Unpacked == nil {
			return reconstruction{}, fmt.Errorf("term %d lacks hash or unpacked_length", i)
		}
		h, err := xet.ParseHash(*t.Hash)
		if err != nil {
			return reconstruction{}, fmt.Errorf("term %d: hash %q is not a xorb hash", i, *t.Hash)
		}
		s, e, ok := t.Range.get()
		if !ok || s >= e || e > xet.MaxXorbChunks {
			return reconstruction{}, fmt.Errorf("term %d: no chunk range, or an empty or too long one", i)
		}
		if *t.Unpacked == 0 || *t.Unpacked > (e-s)*xet.MaxChunkBytes {
			return reconstruction{}, fmt.Errorf("term %d: unpacked_length %d does not fit %d chunks", i, *t.Unpacked, e-s)
		}
		term := reconTerm{Xorb: h, Unpacked: *t.Unpacked, Start: uint32(s), End: uint32(e)}
		if _, ok := rec.entryFor(term); !ok {
			return reconstruction{}, fmt.Errorf("term %d: chunks [%d,%d) of %s are in no fetch_info entry", i, s, e, h)
		}
		rec.Terms = append(rec.Terms, term)
	}
	if len(rec.Terms) > 0 && rec.Offset >= rec.Terms[0].Unpacked {
		return reconstruction{}, fmt.Errorf("offset_into_first_range %d is past the first term (%d bytes)", rec.Offset, rec.Terms[0].Unpacked)
	}
	if len(rec.Terms) == 0 && rec.Offset != 0 {
		return reconstruction{}, fmt.Errorf("offset_into_first_range %d without terms", rec.Offset)
	}
	return rec, nil
}

// entryFor finds the fetch entry whose chunk range holds t's.
// window is the plan of bytes [from, to) of r's own window (offsets
// relative to the first byte r gives): the terms that overlap it, the
// offset into the first of them, every fetch entry. ok is false when r's
// terms do not reach to.
func (r reconstruction) window(from, to uint64) (reconstruction, bool) {
	out := reconstruction{Fetch: r.Fetch}
	var pos uint64 // plan offset (after r.Offset) of the current term's start, plus r.Offset
	first := true
	for _, t := range r.Terms {
		tStart, tEnd := pos, pos+t.Unpacked // in term-stream bytes
		pos = tEnd
		if tEnd <= r.Offset+from {
			continue
		}
		if tStart >= r.Offset+to {
			break
		}
		if first {
			out.Offset = r.Offset + from - tStart
			first = false
		}
		out.Terms = append(out.Terms, t)
	}
	return out, !first && pos >= r.Offset+to
}

func (r reconstruction) entryFor(t reconTerm) (fetchEntry, bool) {
	for _, e := range r.Fetch[t.Xorb] {
		if e.Start <= t.Start && t.End <= e.End {
			return e, true
		}
	}
	return fetchEntry{}, false
}

// xetStream reads a file window by window: a reconstruction answer per
// window, then each term's chunks from its fetch entry.
type xetStream struct {
	c    *Client
	ctx  context.Context
	key  tokenKey
	hash xet.Hash
	path string
	size int64

	pos       int64 // file offset of the next byte Read returns
	windowEnd int64 // end of the window asked for so far (exclusive)
	rec       reconstruction
	term      int    // next term of rec to start
	skip      uint64 // bytes of the next term's start to drop (offset_into_first_range)
	left      int64  // bytes of the current window still to give

	fetch      io.ReadCloser // the open fetch answer's body, nil if none
	fetchCode  int           // its status (0 for a range read from a relay's spool)
	fetchEntry fetchEntry    // what fetch reads
	fetchChunk uint32        // chunk index the fetch body is at
	fetchLeft  int64         // bytes of the fetch answer not read yet
	raw        []byte        // undecoded bytes read from fetch
	outBuf     []byte        // the buffer of the last batch decoded
	out        []byte        // decoded bytes of the current term still to give
	termLeft   uint64        // bytes of the current term not yet decoded into out
	termChunk  uint32        // next chunk index of the current term
	termEnd    uint32
	inTerm     bool
	err        error // sticky

	// spool, when set, is the relay spool the stream reads, through segs
	// (its windows, in file order) alone: the check of a relayed file
	// (verify.go), which sends no request upstream.
	spool *spool
	segs  []spooledSegment
}

// nextWindow asks for the reconstruction of the next window of the file.
func (s *xetStream) nextWindow() error {
	start := s.windowEnd
	end := min(start+s.c.window, s.size)
	if s.spool != nil {
		if len(s.segs) == 0 || s.segs[0].from != start {
			return fmt.Errorf("relay check of %s: no plan for bytes from %d", s.path, start)
		}
		seg := s.segs[0]
		s.segs = s.segs[1:]
		rec, ok := seg.rec.window(uint64(seg.from-seg.start), uint64(seg.to-seg.start))
		if !ok {
			return badAnswer("reconstruction", s.c.base, 0, "the terms of the plan of bytes from %d end before %d", seg.start, seg.to)
		}
		s.rec, s.term, s.skip, s.left, s.inTerm = rec, 0, rec.Offset, seg.to-seg.from, false
		s.windowEnd = seg.to
		return nil
	}
	// A window a relay's client had planned is read from that plan: the
	// same upstream answer, checked alike, and no request that a gone
	// upstream could fail.
	rec, ok := s.c.relayedPlan(s.hash, start, end)
	if !ok {
		var err error
		if rec, err = s.c.reconstructionOf(s.ctx, s.key, s.hash, start, end, s.size); err != nil {
			return err
		}
	}
	s.rec, s.term, s.skip, s.left, s.inTerm = rec, 0, rec.Offset, end-start, false
	s.windowEnd = end
	return nil
}

// reconstructionOf asks the upstream for its reconstruction of bytes
// [start, end) of the file h, with a CAS token for key (asked for once
// more when the upstream refuses the cached one), and checks that its
// terms cover the window; a window that ends at size (the file's size as
// the tree lists it) must be covered exactly: terms past it mean a file
// larger than listed, refused before a byte of it is read.
func (c *Client) reconstructionOf(ctx context.Context, key tokenKey, h xet.Hash, start, end, size int64) (reconstruction, error) {
	tok, err := c.casToken(ctx, key, false)
	if err != nil {
		return reconstruction{}, err
	}
	u := tok.casURL.JoinPath("v1", "reconstructions", h.String())
	refreshed := false
	r := request{op: "reconstruction", url: u, bearer: tok.token,
		header: http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", start, end-1)}},
		accept: func(st int) bool { return st == http.StatusOK || st == http.StatusPartialContent }}
	var a *answer
	for {
		a, err = c.get(ctx, r)
		var e *Error
		if err != nil && !refreshed && asError(err, &e) && e.Status == http.StatusUnauthorized {
			// The token expired early or was revoked: ask once for another.
			refreshed = true
			if tok, err = c.casToken(ctx, key, true); err != nil {
				return reconstruction{}, err
			}
			r.bearer = tok.token
			continue
		}
		break
	}
	if err != nil {
		return reconstruction{}, err
	}
	body, err := readCapped(a.Body, c.maxJSON)
	a.Close()
	if err != nil {
		return reconstruction{}, c.bodyError("reconstruction", a, err)
	}
	rec, err := parseReconstruction(body)
	if err != nil {
		return reconstruction{}, badAnswer("reconstruction", u, a.StatusCode, "%v", err)
	}
	var total uint64
	for _, t := range rec.Terms {
		total += t.Unpacked
	}
	if total-rec.Offset < uint64(end-start) {
		return reconstruction{}, badAnswer("reconstruction", u, a.StatusCode, "terms give %d bytes from %d, the window is %d", total-rec.Offset, start, end-start)
	}
	if end == size && total-rec.Offset != uint64(end-start) {
		return reconstruction{}, badAnswer("reconstruction", u, a.StatusCode, "terms give %d bytes from %d, past the %d bytes the tree lists for the file", total-rec.Offset, start, size)
	}
	return rec, nil
}

func asError(err error, e **Error) bool {
	x, ok := err.(*Error)
	if ok {
		*e = x
	}
	return ok
}

// Read gives the file's next bytes.
func (s *xetStream) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n := 0
	for n < len(p) {
		if len(s.out) > 0 {
			k := copy(p[n:], s.out)
			s.out = s.out[k:]
			n += k
			s.pos += int64(k)
			continue
		}
		if s.pos == s.size {
			s.closeFetch()
			if n == 0 {
				return 0, io.EOF
			}
			return n, nil
		}
		if n > 0 {
			return n, nil // what is here now; the next step may wait
		}
		if err := s.step(); err != nil {
			s.err = err
			s.closeFetch()
			return n, err
		}
	}
	return n, nil
}

// step makes s.out non-empty (or fails): it decodes the next batch of the
// current term's chunks, starting the next term or window as needed.
func (s *xetStream) step() error {
	if s.left == 0 {
		// The fetch answer's slot goes back first: with MaxConns 1 the
		// reconstruction could not be asked for otherwise.
		s.closeFetch()
		if err := s.nextWindow(); err != nil {
			return err
		}
	}
	if !s.inTerm {
		if s.term >= len(s.rec.Terms) {
			return badAnswer("reconstruction", s.c.base, 0, "the terms end before the window")
		}
		t := s.rec.Terms[s.term]
		s.term++
		e, _ := s.rec.entryFor(t)
		if err := s.seek(t.Xorb, e, t.Start); err != nil {
			return err
		}
		s.inTerm, s.termChunk, s.termEnd, s.termLeft = true, t.Start, t.End, t.Unpacked
	}
	data, err := s.decode()
	if err != nil {
		return err
	}
	if uint64(len(data)) > s.termLeft {
		return badAnswer("fetch", s.fetchEntry.URL, 0, "chunks of xorb %s give more bytes than the term's unpacked_length", s.rec.Terms[s.term-1].Xorb)
	}
	s.termLeft -= uint64(len(data))
	if s.termChunk == s.termEnd {
		if s.termLeft != 0 {
			return badAnswer("fetch", s.fetchEntry.URL, 0, "chunks of xorb %s give %d bytes fewer than the term's unpacked_length", s.rec.Terms[s.term-1].Xorb, s.termLeft)
		}
		s.inTerm = false
	}
	if s.skip > 0 {
		k := min(s.skip, uint64(len(data)))
		data = data[k:]
		s.skip -= k
	}
	if int64(len(data)) > s.left {
		data = data[:s.left]
	}
	s.left -= int64(len(data))
	s.out = data
	return nil
}

// seek makes the open fetch answer one of entry e of xorb x positioned at
// chunk index want: the open one if it reads e and has not passed want,
// else a new one for e's url_range: from the relay's spool while the file
// is relayed (relay.go), else a request to the upstream.
func (s *xetStream) seek(x xet.Hash, e fetchEntry, want uint32) error {
	if s.fetch == nil || s.fetchEntry.URL != e.URL || s.fetchEntry.ByteStart != e.ByteStart || s.fetchChunk > want {
		s.closeFetch()
		n := int64(e.ByteEnd - e.ByteStart + 1)
		var rc io.ReadCloser
		var ok bool
		var err error
		if s.spool != nil {
			rc, err = s.c.landed(s.ctx, s.spool, x, e)
			ok = true
		} else {
			rc, ok, err = s.c.spooled(s.ctx, s.hash, x, e)
		}
		if err != nil {
			return err
		}
		code := 0
		if !ok {
			a, err := s.c.openRange(s.ctx, e)
			if err != nil {
				return err
			}
			rc, code = a.Body, a.StatusCode
		}
		s.fetch, s.fetchCode, s.fetchEntry, s.fetchChunk, s.fetchLeft = rc, code, e, e.Start, n
	}
	for s.fetchChunk < want {
		if _, _, err := s.readChunks(want - s.fetchChunk); err != nil {
			return err
		}
	}
	return nil
}

// openRange asks the upstream for e's url_range and checks that the
// answer is that range: its length, and not the whole object instead.
func (c *Client) openRange(ctx context.Context, e fetchEntry) (*answer, error) {
	a, err := c.get(ctx, request{op: "fetch", url: e.URL,
		header: http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", e.ByteStart, e.ByteEnd)}},
		accept: func(st int) bool { return st == http.StatusOK || st == http.StatusPartialContent }})
	if err != nil {
		return nil, err
	}
	n := int64(e.ByteEnd - e.ByteStart + 1)
	if a.ContentLength >= 0 && a.ContentLength != n {
		a.Close()
		return nil, badAnswer("fetch", e.URL, a.StatusCode, "answer of %d bytes for a range of %d", a.ContentLength, n)
	}
	if a.StatusCode == http.StatusOK && e.ByteStart != 0 {
		a.Close()
		return nil, badAnswer("fetch", e.URL, a.StatusCode, "the whole object instead of bytes %d-%d", e.ByteStart, e.ByteEnd)
	}
	return a, nil
}

// decode decodes the current term's next batch of whole chunks and
// returns their bytes.
func (s *xetStream) decode() ([]byte, error) {
	data, n, err := s.readChunks(s.termEnd - s.termChunk)
	s.termChunk += n
	return data, err
}

// readChunks reads up to most whole chunks (at least one, and no more
// once decodeBatchBytes are read) from the fetch answer, decodes them and
// returns their bytes and how many chunks they were.
func (s *xetStream) readChunks(most uint32) ([]byte, uint32, error) {
	e := s.fetchEntry
	s.raw = s.raw[:0]
	var count uint32
	for count < most && (count == 0 || len(s.raw) < decodeBatchBytes) {
		if s.fetchChunk+count >= e.End {
			return nil, 0, badAnswer("fetch", e.URL, 0, "a term reads past chunk %d, the end of its fetch entry", e.End)
		}
		hdr, err := s.readFull(xet.ChunkHeaderBytes)
		if err != nil {
			return nil, 0, err
		}
		csize := int(hdr[1]) | int(hdr[2])<<8 | int(hdr[3])<<16
		if csize > xet.MaxCompressedChunkBytes {
			return nil, 0, badAnswer("fetch", e.URL, 0, "chunk %d: compressed size %d over the limit", s.fetchChunk+count, csize)
		}
		if _, err := s.readFull(csize); err != nil {
			return nil, 0, err
		}
		count++
	}
	// s.out is given out before the next batch is read: its buffer is
	// reused.
	if cap(s.outBuf) < decodeBatchBytes+xet.MaxChunkBytes {
		s.outBuf = make([]byte, 0, decodeBatchBytes+xet.MaxChunkBytes)
	}
	out, decoded, err := xet.AppendChunks(s.outBuf[:0], s.raw)
	if err != nil {
		return nil, 0, &Error{Kind: mirror.ErrBadAnswer, Op: "fetch", URL: strip(e.URL), Message: "chunks do not decode", Err: err}
	}
	s.outBuf = out
	if uint32(decoded) != count {
		return nil, 0, badAnswer("fetch", e.URL, 0, "%d chunks decoded, %d read", decoded, count)
	}
	s.fetchChunk += count
	if s.fetchChunk == e.End && s.fetchLeft != 0 {
		return nil, 0, badAnswer("fetch", e.URL, 0, "%d bytes after the last chunk of the range", s.fetchLeft)
	}
	return out, count, nil
}

// readFull appends n bytes of the fetch answer to s.raw and returns them.
// An answer that ends cleanly before them is a bad answer; one whose
// connection breaks, the upstream unreachable.
func (s *xetStream) readFull(n int) ([]byte, error) {
	if int64(n) > s.fetchLeft {
		return nil, badAnswer("fetch", s.fetchEntry.URL, s.fetchCode, "chunk %d runs past the end of the range", s.fetchChunk)
	}
	at := len(s.raw)
	s.raw = append(s.raw, make([]byte, n)...)
	buf := s.raw[at:]
	for len(buf) > 0 {
		k, err := s.fetch.Read(buf)
		buf = buf[k:]
		s.fetchLeft -= int64(k)
		if len(buf) == 0 {
			break
		}
		switch {
		case err == nil:
		case s.ctx.Err() != nil:
			return nil, s.ctx.Err()
		case err == io.EOF:
			return nil, badAnswer("fetch", s.fetchEntry.URL, s.fetchCode, "the answer ends inside chunk %d", s.fetchChunk)
		default:
			return nil, &Error{Kind: mirror.ErrUnreachable, Op: "fetch", URL: strip(s.fetchEntry.URL), Status: s.fetchCode, Message: "answer cut off", Err: err}
		}
	}
	return s.raw[at:], nil
}

func (s *xetStream) closeFetch() {
	if s.fetch != nil {
		s.fetch.Close()
		s.fetch = nil
	}
}

// Close ends the stream and gives back its connection slot.
func (s *xetStream) Close() error {
	s.closeFetch()
	if s.err == nil {
		s.err = errClosed
	}
	return nil
}

var errClosed = fmt.Errorf("upstream stream closed")
