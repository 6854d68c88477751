package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"openxet/xet"
)

// A relay checks the bytes its clients read before the last of them
// leaves (docs/mirror.md, "First downloads"; SECURITY.md). A byte range of
// a xorb cannot be checked alone, so the check is of the whole file: its
// size, Xet hash and SHA-256, computed from the spool through the plans
// the relay's clients were given. The rule that makes it enough: each
// range a client reads through the relay is given whole but its last
// byte, which waits while any landed plan is unchecked and could be part
// of a whole copy of the file (a chain of landed plans that covers it).
// A client can only hold the whole file once every range of the plans it
// read has landed, so it never completes an unchecked copy: the last byte
// of the range that completes it waits for the check, and a copy that
// does not check out is cut there, so that its download fails. A plan
// that fails its check ends the relay's use for the file: every waiting
// range is cut, and later plans are refused (the pull refuses to store
// the file too).
//
// A client that reads only part of a file (a window it never completes)
// is given its ranges when no whole copy can be assembled yet: those bytes
// are not checked before they reach it (SECURITY.md says so).

// planSegment is bytes [from, to) of the file as plan p gives them.
type planSegment struct {
	p        *spooledPlan
	from, to int64
}

// landedLocked reports whether every fetch range plan p's terms read is
// in the spool.
func (sp *spool) landedLocked(p *spooledPlan) bool {
	for _, t := range p.rec.Terms {
		e, ok := p.rec.entryFor(t)
		if !ok {
			return false
		}
		r := sp.findLocked(t.Xorb, e.ByteStart, e.ByteEnd)
		if r == nil || r.cur == nil || r.cur.have < int64(r.entry.ByteEnd-r.entry.ByteStart+1) {
			return false
		}
	}
	return true
}

// coverLocked returns segments of the landed plans that give bytes
// [from, to) of the file in order, or ok false when they do not.
func (sp *spool) coverLocked(landed []bool, from, to int64) (segs []planSegment, ok bool) {
	for pos := from; pos < to; {
		var best *spooledPlan
		for i, p := range sp.plans {
			if landed[i] && p.start <= pos && pos < p.end && (best == nil || p.end > best.end) {
				best = p
			}
		}
		if best == nil {
			return nil, false
		}
		end := min(best.end, to)
		segs = append(segs, planSegment{best, pos, end})
		pos = end
	}
	return segs, true
}

// uncheckedLocked returns a chain of landed plans that gives the whole
// file and includes a plan not checked yet, or nil when there is none:
// then no client can hold an unchecked whole copy.
func (sp *spool) uncheckedLocked() []planSegment {
	landed := make([]bool, len(sp.plans))
	for i, p := range sp.plans {
		landed[i] = sp.landedLocked(p)
	}
	for i, p := range sp.plans {
		if !landed[i] || p.checked {
			continue
		}
		before, ok1 := sp.coverLocked(landed, 0, p.start)
		after, ok2 := sp.coverLocked(landed, p.end, sp.f.Size)
		if ok1 && ok2 {
			chain := append(before, planSegment{p, p.start, p.end})
			return append(chain, after...)
		}
	}
	return nil
}

// mayFinish returns nil once the last byte of a range a client reads
// through the relay of h may leave: no landed plan is unchecked that
// could be part of a whole copy of the file. It runs the check (one at a
// time) and waits for it; the check's error when a copy did not check
// out.
func (c *Client) mayFinish(ctx context.Context, h xet.Hash, sp *spool) error {
	for {
		sp.mu.Lock()
		if sp.bad != nil {
			sp.mu.Unlock()
			return sp.bad
		}
		chain := sp.uncheckedLocked()
		if chain == nil {
			sp.mu.Unlock()
			return nil
		}
		wait := sp.checking
		if wait == nil {
			wait = make(chan struct{})
			sp.checking = wait
			sp.readers++ // the check's own hold on the file
			go c.check(h, sp, chain, wait)
		}
		sp.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// check assembles the file h from the spool through chain and compares
// its size, Xet hash and SHA-256 with what the upstream's tree lists,
// marking the plans it read whole as checked, or the relay bad.
func (c *Client) check(h xet.Hash, sp *spool, chain []planSegment, done chan struct{}) {
	err := c.checkChain(h, sp, chain)
	sp.mu.Lock()
	if err != nil {
		sp.bad = err
	} else {
		for _, s := range chain {
			if p := s.p; p.start == s.from && p.end == s.to {
				p.checked = true
				sp.checkedSigs = append(sp.checkedSigs, p.sig)
			}
		}
	}
	sp.checking = nil
	close(done)
	sp.mu.Unlock()
	sp.release()
}

func (c *Client) checkChain(h xet.Hash, sp *spool, chain []planSegment) error {
	sp.mu.Lock()
	f := sp.f
	segs := make([]spooledSegment, len(chain))
	for i, s := range chain {
		p := s.p
		segs[i] = spooledSegment{from: s.from, to: s.to, start: p.start, rec: p.rec}
	}
	sp.mu.Unlock()
	s := &xetStream{c: c, ctx: context.Background(), hash: h, path: f.Path, size: f.Size, spool: sp, segs: segs}
	defer s.Close()
	sum := sha256.New()
	var agg xet.AggregatedHasher
	cr := xet.NewChunkReader(io.TeeReader(s, sum), nil)
	var n int64
	for {
		chunk, err := cr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		agg.Add(xet.Leaf{Hash: xet.ChunkHash(chunk), Size: uint64(len(chunk))})
		n += int64(len(chunk))
	}
	what := fmt.Sprintf("the relayed %s (Xet hash %s)", f.Path, h)
	if n != f.Size {
		return badAnswer("fetch", c.base, 0, "%s: the plans give %d bytes, the tree lists %d", what, n, f.Size)
	}
	if got := agg.FileHash(); got != h {
		return badAnswer("fetch", c.base, 0, "%s: the plans' bytes have Xet hash %s", what, got)
	}
	if f.SHA256 != "" {
		if want, err := hex.DecodeString(f.SHA256); err != nil || !bytes.Equal(sum.Sum(nil), want) {
			return badAnswer("fetch", c.base, 0, "%s: the plans' bytes have SHA-256 %x, the tree lists %s", what, sum.Sum(nil), f.SHA256)
		}
	}
	return nil
}

// spooledSegment is bytes [from, to) of a file given by the plan rec of
// the window that starts at start.
type spooledSegment struct {
	from, to, start int64
	rec             reconstruction
}

// planSig is what makes two plans give the same bytes from a spool: the
// window, the terms and the fetch ranges they read (not the URLs, which
// are signed anew for each plan).
func planSig(start, end int64, rec reconstruction) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d-%d+%d", start, end, rec.Offset)
	for _, t := range rec.Terms {
		e, _ := rec.entryFor(t)
		fmt.Fprintf(&b, "|%s:%d-%d:%d@%d-%d:%d-%d", t.Xorb, t.Start, t.End, t.Unpacked, e.Start, e.End, e.ByteStart, e.ByteEnd)
	}
	return b.String()
}

// landed opens the fetch range e of xorb x from the spool sp, for the
// check: every range of a landed plan is there, so it is never fetched.
func (c *Client) landed(ctx context.Context, sp *spool, x xet.Hash, e fetchEntry) (io.ReadCloser, error) {
	sp.mu.Lock()
	r := sp.findLocked(x, e.ByteStart, e.ByteEnd)
	sp.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("relay check: bytes %d-%d of xorb %s are not in the spool", e.ByteStart, e.ByteEnd, x)
	}
	return c.readRange(ctx, sp, r, int64(e.ByteStart-r.entry.ByteStart), int64(e.ByteEnd-e.ByteStart+1), func() (func(), error) {
		return nil, fmt.Errorf("relay check: bytes %d-%d of xorb %s have not landed", e.ByteStart, e.ByteEnd, x)
	})
}
