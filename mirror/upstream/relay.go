package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"openxet/mirror"
	"openxet/xet"
)

// DefaultRelayTTL is how long a relay of a file lasts after its last plan
// (Options.RelayTTL): its fetch URLs are valid that long, and its spool is
// kept that long for the clients still reading it.
const DefaultRelayTTL = 10 * time.Minute

// A relay lets the first download of a file not mirrored yet overlap its
// pull (docs/mirror.md, "First downloads"). The client is answered with
// the upstream's own plan of the file (Plan): its terms, and the upstream
// xorb ranges they read, which it fetches through the mirror (Relay). The
// pull reads the same ranges. Each range crosses from the upstream once,
// into the file's spool (an unlinked temporary file), and whoever needs it
// next, the client or the pull, reads it from there.
type spool struct {
	file   *os.File
	mu     sync.Mutex
	size   int64                        // bytes of file given to ranges
	ranges map[xet.Hash][]*spooledRange // by upstream xorb
	until  time.Time                    // the relay ends then
	timer  *time.Timer
	// readers is the open section readers; an ended spool with readers is
	// closed by the last one.
	readers int
	ended   bool
	// clients is the open readers of clients (Relay, not the pull);
	// lastClient the last time one opened or closed, or a plan was made;
	// clientWake is closed and replaced at each of those (Quiet).
	clients    int
	lastClient time.Time
	clientWake chan struct{}
	// plans is the upstream's plans of the relay's windows, newest last
	// (at most maxSpoolPlans): the pull reads its windows from them, so
	// that a file its client read whole through the relay is stored even
	// if the upstream goes away meanwhile; the last byte of a client's
	// range waits for their check (verify.go).
	plans []*spooledPlan
	// f is the file as the upstream's tree lists it, which the check
	// compares the relayed bytes with; bad is the check's error once a
	// copy did not check out; checking is closed when the check under way
	// ends; checkedSigs is the planSig of every plan that checked out.
	f           mirror.File
	bad         error
	checking    chan struct{}
	checkedSigs []string
}

// spooledPlan is the upstream's reconstruction of bytes [start, end) of a
// relayed file.
type spooledPlan struct {
	start, end int64
	rec        reconstruction
	sig        string // planSig
	checked    bool   // a whole copy through it checked out
}

// maxSpoolPlans bounds the plans a spool keeps (a client asks one per
// window of a large file).
const maxSpoolPlans = 256

// spooledRange is one upstream fetch range of a spool: where it lives in
// the spool file, and the fetch that fills it.
type spooledRange struct {
	entry fetchEntry
	off   int64    // offset in the spool file
	cur   *attempt // the last fetch started; nil before the first
}

func (r *spooledRange) holds(bs, be uint64) bool {
	return r.entry.ByteStart <= bs && be <= r.entry.ByteEnd
}

// attempt is one fetch of a range into the spool; its readers follow it
// as its bytes land. A failed attempt is replaced by the next caller's.
type attempt struct {
	have int64         // bytes of the range in the file so far
	done bool          // have is the whole range
	err  error         // the fetch failed
	wake chan struct{} // closed and replaced at each change
}

// spoolOf returns the spool of the file h, creating it when create is
// set; nil when there is none.
func (c *Client) spoolOf(h xet.Hash, create bool) (*spool, error) {
	c.spoolsMu.Lock()
	defer c.spoolsMu.Unlock()
	if sp := c.spools[h]; sp != nil || !create {
		return sp, nil
	}
	f, err := os.CreateTemp(c.spoolDir, "openxet-relay-*")
	if err != nil {
		return nil, fmt.Errorf("relay spool: %w", err)
	}
	// Unlinked at once: the bytes go when the file is closed, also when
	// the process is killed.
	os.Remove(f.Name())
	sp := &spool{file: f, ranges: map[xet.Hash][]*spooledRange{}, clientWake: make(chan struct{})}
	c.spools[h] = sp
	return sp, nil
}

// extend makes the relay of h last until at least until, arming its end.
func (c *Client) extend(h xet.Hash, sp *spool, until time.Time) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !until.After(sp.until) {
		return
	}
	sp.until = until
	d := until.Sub(c.now())
	if sp.timer == nil {
		sp.timer = time.AfterFunc(d, func() { c.endRelay(h, sp) })
	} else {
		sp.timer.Reset(d)
	}
}

// endRelay drops the spool of h once its time is up (a later plan may
// have moved it), closing its file once no reader has it open.
func (c *Client) endRelay(h xet.Hash, sp *spool) {
	sp.mu.Lock()
	if d := sp.until.Sub(c.now()); d > 0 {
		sp.timer.Reset(d)
		sp.mu.Unlock()
		return
	}
	sp.ended = true
	closeNow := sp.readers == 0
	sp.mu.Unlock()
	c.spoolsMu.Lock()
	if c.spools[h] == sp {
		delete(c.spools, h)
	}
	c.spoolsMu.Unlock()
	if closeNow {
		sp.file.Close()
	}
}

// Close ends every relay and closes their spools.
func (c *Client) Close() error {
	c.spoolsMu.Lock()
	all := c.spools
	c.spools = map[xet.Hash]*spool{}
	c.spoolsMu.Unlock()
	for _, sp := range all {
		sp.mu.Lock()
		if sp.timer != nil {
			sp.timer.Stop()
		}
		sp.ended = true
		closeNow := sp.readers == 0
		sp.mu.Unlock()
		if closeNow {
			sp.file.Close()
		}
	}
	return nil
}

// addPlan keeps the plan rec of bytes [start, end) of f. It refuses one
// when the relay of f failed its check, and one past maxSpoolPlans unless
// an older plan has checked out and can go: a plan a client may still
// complete must stay for the check of its last byte.
func (sp *spool) addPlan(f mirror.File, start, end int64, rec reconstruction) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.bad != nil {
		return sp.bad
	}
	sp.f = f
	if len(sp.plans) == maxSpoolPlans {
		i := slices.IndexFunc(sp.plans, func(p *spooledPlan) bool { return p.checked })
		if i < 0 {
			return errRelayFull
		}
		sp.plans = slices.Delete(sp.plans, i, i+1)
	}
	sig := planSig(start, end, rec)
	sp.plans = append(sp.plans, &spooledPlan{start: start, end: end, rec: rec, sig: sig, checked: slices.Contains(sp.checkedSigs, sig)})
	return nil
}

// relayedPlan is the plan of bytes [start, end) of h cut from a plan the
// relay of h holds, and whether one covers the window.
func (c *Client) relayedPlan(h xet.Hash, start, end int64) (reconstruction, bool) {
	sp, _ := c.spoolOf(h, false)
	if sp == nil {
		return reconstruction{}, false
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for i := len(sp.plans) - 1; i >= 0; i-- {
		p := sp.plans[i]
		if p.start <= start && end <= p.end {
			if rec, ok := p.rec.window(uint64(start-p.start), uint64(end-p.start)); ok {
				return rec, true
			}
		}
	}
	return reconstruction{}, false
}

// add records the fetch range e of upstream xorb x in the spool unless a
// range it holds already has it, and returns the range that has it.
func (sp *spool) add(x xet.Hash, e fetchEntry) *spooledRange {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if r := sp.findLocked(x, e.ByteStart, e.ByteEnd); r != nil {
		return r
	}
	r := &spooledRange{entry: e, off: sp.size}
	sp.size += int64(e.ByteEnd - e.ByteStart + 1)
	sp.ranges[x] = append(sp.ranges[x], r)
	return r
}

func (sp *spool) findLocked(x xet.Hash, bs, be uint64) *spooledRange {
	for _, r := range sp.ranges[x] {
		if r.holds(bs, be) {
			return r
		}
	}
	return nil
}

// Plan asks the upstream for its reconstruction of bytes [start, end) of
// f (a Xet file of the revision sha of repo) and starts, or extends, the
// relay of f: the ranges of the plan can be read with Relay until the
// returned time, and a pull of f (Open) reads them from the same spool.
// The plan is checked as Open checks one; its fetch URLs are the
// upstream's and stay in the Client.
func (c *Client) Plan(ctx context.Context, repo mirror.RepoRef, sha string, f mirror.File, start, end int64) (xet.Reconstruction, time.Time, error) {
	api, err := repoAPIPath(repo)
	if err != nil {
		return xet.Reconstruction{}, time.Time{}, err
	}
	h, err := xet.ParseHash(f.XetHash)
	if err != nil || !isFullSHA(sha) || start < 0 || start >= end || end > f.Size {
		return xet.Reconstruction{}, time.Time{}, fmt.Errorf("plan of %s [%d,%d) at %q: not a Xet file window", f.Path, start, end, sha)
	}
	rec, err := c.reconstructionOf(ctx, tokenKey{api: api, sha: sha}, h, start, end, f.Size)
	if err != nil {
		return xet.Reconstruction{}, time.Time{}, err
	}
	sp, err := c.spoolOf(h, true)
	if err != nil {
		return xet.Reconstruction{}, time.Time{}, err
	}
	if err := sp.addPlan(f, start, end, rec); err != nil {
		return xet.Reconstruction{}, time.Time{}, err
	}
	until := c.now().Add(c.relayTTL)
	c.extend(h, sp, until)
	sp.clientSeen(c.now(), 0) // its client is about to read
	out := xet.Reconstruction{OffsetIntoFirstRange: rec.Offset, Fetch: map[xet.Hash][]xet.FetchRange{}}
	for _, t := range rec.Terms {
		out.Terms = append(out.Terms, xet.ReconTerm{Xorb: t.Xorb, UnpackedLength: uint32(t.Unpacked), ChunkStart: t.Start, ChunkEnd: t.End})
	}
	for x, entries := range rec.Fetch {
		for _, e := range entries {
			sp.add(x, e)
			out.Fetch[x] = append(out.Fetch[x], xet.FetchRange{ChunkStart: e.Start, ChunkEnd: e.End, ByteStart: e.ByteStart, ByteEnd: e.ByteEnd})
		}
		slices.SortFunc(out.Fetch[x], func(a, b xet.FetchRange) int { return int(a.ChunkStart) - int(b.ChunkStart) })
	}
	return out, until, nil
}

// Relay opens bytes [start, end] (end inclusive) of upstream xorb x as a
// plan of the relay of file h named them. Their range is fetched from the
// upstream unless the spool has it or a fetch of it is under way; the
// reader gives the bytes as they land. acquire, when not nil, is called
// before a fetch (which then goes on without ctx, for the others reading
// it) and its release after. mirror.ErrNotFound when the relay has ended
// or none of its plans named the range.
func (c *Client) Relay(ctx context.Context, h, x xet.Hash, start, end uint64, acquire func() (func(), error)) (io.ReadCloser, error) {
	sp, _ := c.spoolOf(h, false)
	var r *spooledRange
	if sp != nil {
		sp.mu.Lock()
		r = sp.findLocked(x, start, end)
		sp.mu.Unlock()
	}
	if r == nil {
		return nil, &Error{Kind: mirror.ErrNotFound, Op: "relay", Message: fmt.Sprintf("no relay of file %s holds bytes %d-%d of xorb %s", h, start, end, x)}
	}
	rc, err := c.readRange(ctx, sp, r, int64(start-r.entry.ByteStart), int64(end-start+1), acquire)
	if err != nil {
		return nil, err
	}
	rr := rc.(*rangeReader)
	rr.client, rr.now, rr.c, rr.h = true, c.now, c, h
	sp.clientSeen(c.now(), +1)
	return rr, nil
}

// clientSeen records a client's activity on the relay at now: a plan
// (delta 0), a reader opened (+1) or closed (-1).
func (sp *spool) clientSeen(now time.Time, delta int) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.clients += delta
	sp.lastClient = now
	close(sp.clientWake)
	sp.clientWake = make(chan struct{})
}

// RelayQuiet is how long a relay's clients must have read nothing before
// its pull starts (Quiet): longer than a client's pause between a plan and
// its fetches, or between two windows.
const RelayQuiet = 250 * time.Millisecond

// Quiet returns once the relay of h has had no client reading it for
// RelayQuiet, or has ended or never was, and at the latest half the
// relay's time after it is called (the pull must read the spool before
// the relay ends). A pull waits for it so that on a small host its
// hashing and writing do not take the CPU from the first download it
// stores (docs/mirror.md, "First downloads"); the file is stored right
// after the clients are done, from the same spool.
func (c *Client) Quiet(ctx context.Context, h xet.Hash) error {
	deadline := c.now().Add(c.relayTTL / 2)
	for {
		sp, _ := c.spoolOf(h, false)
		if sp == nil {
			return nil
		}
		sp.mu.Lock()
		clients, last, wake, ended := sp.clients, sp.lastClient, sp.clientWake, sp.ended
		sp.mu.Unlock()
		now := c.now()
		if ended || !now.Before(deadline) {
			return nil
		}
		wait := deadline.Sub(now)
		if clients == 0 {
			if wait = min(wait, last.Add(RelayQuiet).Sub(now)); wait <= 0 {
				return nil
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// errRelayEnded: the relay's time is up and its spool is closed.
var errRelayEnded = &Error{Kind: mirror.ErrNotFound, Op: "relay", Message: "the relay ended"}

// errRelayFull: the relay holds maxSpoolPlans plans, none checked yet.
var errRelayFull = &Error{Kind: mirror.ErrNoRelay, Op: "relay", Message: "the relay holds as many plans as it may, none of them checked yet"}

// readRange opens n bytes of r from pos, starting r's fetch unless one
// under way or done has them.
func (c *Client) readRange(ctx context.Context, sp *spool, r *spooledRange, pos, n int64, acquire func() (func(), error)) (io.ReadCloser, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.ended && sp.readers == 0 {
		return nil, errRelayEnded
	}
	if r.cur == nil || r.cur.err != nil {
		var release func()
		if acquire != nil {
			sp.mu.Unlock()
			rel, err := acquire()
			sp.mu.Lock()
			if err != nil {
				return nil, err
			}
			release = rel
		}
		if sp.ended && sp.readers == 0 {
			if release != nil {
				release()
			}
			return nil, errRelayEnded
		}
		if r.cur == nil || r.cur.err != nil { // nobody started one meanwhile
			r.cur = &attempt{wake: make(chan struct{})}
			sp.readers++ // the fetch's own hold on the file
			go c.fetchInto(context.WithoutCancel(ctx), sp, r, r.cur, release)
		} else if release != nil {
			release()
		}
	}
	sp.readers++
	return &rangeReader{ctx: ctx, sp: sp, r: r, a: r.cur, pos: pos, end: pos + n}, nil
}

// fetchInto copies r's range from the upstream into its place in the
// spool file, telling a's readers as the bytes land.
func (c *Client) fetchInto(ctx context.Context, sp *spool, r *spooledRange, a *attempt, release func()) {
	err := c.copyRange(ctx, sp, r, a)
	if release != nil {
		release()
	}
	sp.mu.Lock()
	if err != nil {
		a.err = err
	} else {
		a.done = true
	}
	close(a.wake)
	sp.mu.Unlock()
	sp.release()
}

// relayCopyBytes is how much of a fetch lands in the spool before its
// readers are told.
const relayCopyBytes = 256 << 10

func (c *Client) copyRange(ctx context.Context, sp *spool, r *spooledRange, at *attempt) error {
	e := r.entry
	a, err := c.openRange(ctx, e)
	if err != nil {
		return err
	}
	defer a.Close()
	n := int64(e.ByteEnd - e.ByteStart + 1)
	buf := make([]byte, relayCopyBytes)
	var got int64
	for got < n {
		k, err := a.Body.Read(buf[:min(int64(len(buf)), n-got)])
		if k > 0 {
			if _, werr := sp.file.WriteAt(buf[:k], r.off+got); werr != nil {
				return fmt.Errorf("relay spool: %w", werr)
			}
			got += int64(k)
			sp.mu.Lock()
			at.have = got
			close(at.wake)
			at.wake = make(chan struct{})
			sp.mu.Unlock()
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, io.EOF):
			if got < n {
				return badAnswer("fetch", e.URL, a.StatusCode, "the answer ends after %d of %d bytes", got, n)
			}
		default:
			return &Error{Kind: mirror.ErrUnreachable, Op: "fetch", URL: strip(e.URL), Status: a.StatusCode, Message: "answer cut off", Err: err}
		}
	}
	return nil
}

// release drops one hold on the spool file, closing it after the last
// once the relay has ended.
func (sp *spool) release() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.readers--
	if sp.ended && sp.readers == 0 {
		sp.file.Close()
	}
}

// rangeReader reads bytes [pos, end) of a spooled range as its fetch
// lands them.
type rangeReader struct {
	ctx      context.Context
	sp       *spool
	r        *spooledRange
	a        *attempt
	pos, end int64
	closed   bool
	// client: a client's reader (Relay), not the pull's, whose last byte
	// waits for the check of the file h (verify.go); now is its Client's
	// clock.
	client bool
	now    func() time.Time
	c      *Client
	h      xet.Hash
}

func (rr *rangeReader) Read(p []byte) (int, error) {
	k, err := rr.Landed(rr.ctx)
	if err != nil {
		return 0, err
	}
	n, err := rr.sp.file.ReadAt(p[:min(int64(len(p)), k)], rr.r.off+rr.pos)
	rr.pos += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return n, fmt.Errorf("relay spool: %w", err)
	}
	return n, nil
}

// Landed waits until some of the reader's bytes are in the spool (or its
// fetch failed, or ctx ended) and reports how many it can read now without
// waiting; io.EOF once it has read them all. A server copying the reader
// to a client waits here without holding a work slot, so that the slot is
// only held while bytes move, not while the upstream sends them.
func (rr *rangeReader) Landed(ctx context.Context) (int64, error) {
	if rr.pos >= rr.end {
		return 0, io.EOF
	}
	for {
		rr.sp.mu.Lock()
		have, err, wake := rr.a.have, rr.a.err, rr.a.wake
		rr.sp.mu.Unlock()
		if have > rr.pos {
			k := min(have, rr.end) - rr.pos
			if !rr.client || rr.pos+k < rr.end {
				return k, nil
			}
			// A client's last byte leaves once no unchecked whole copy
			// of the file could be completed with it.
			if k > 1 {
				return k - 1, nil
			}
			if err := rr.c.mayFinish(ctx, rr.h, rr.sp); err != nil {
				return 0, err
			}
			return 1, nil
		}
		if err != nil {
			return 0, err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-rr.ctx.Done():
			return 0, rr.ctx.Err()
		}
	}
}

func (rr *rangeReader) Close() error {
	if !rr.closed {
		rr.closed = true
		if rr.client {
			rr.sp.clientSeen(rr.now(), -1)
		}
		rr.sp.release()
	}
	return nil
}

// spooled is how the pull of h reads the fetch range e of xorb x while h
// is relayed: through the spool, fetched at most once. ok is false when h
// is not relayed (or its relay just ended).
func (c *Client) spooled(ctx context.Context, h, x xet.Hash, e fetchEntry) (rc io.ReadCloser, ok bool, err error) {
	sp, _ := c.spoolOf(h, false)
	if sp == nil {
		return nil, false, nil
	}
	r := sp.add(x, e)
	rc, err = c.readRange(ctx, sp, r, int64(e.ByteStart-r.entry.ByteStart), int64(e.ByteEnd-e.ByteStart+1), nil)
	if err == errRelayEnded {
		return nil, false, nil
	}
	return rc, true, err
}
