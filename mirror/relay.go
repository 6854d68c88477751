package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"openxet/store"
	"openxet/xet"
)

// RelayPlan answers the reconstruction of the window rangeHeader names
// (an HTTP Range, "" for the whole file) of the Xet file h of local while
// it is not mirrored yet: with the upstream's own plan of it, whose
// ranges the caller grants through Relay until the time returned, and the
// pull of the file started (coalesced with any other) so that it is
// stored meanwhile from the same upstream bytes (docs/mirror.md, "First
// downloads"). ok is false when the caller answers from the store
// instead: the file is stored, the upstream offers no relay, or the
// window is empty. store.ErrNotFound unless a revision of local has h.
func (m *Mirror) RelayPlan(ctx context.Context, tenant string, local store.RepoID, h xet.Hash, rangeHeader string, reserve Reserve) (rec xet.Reconstruction, until time.Time, ok bool, err error) {
	r, relays := m.up.(Relayer)
	if !relays {
		return rec, until, false, nil
	}
	if _, err := m.store.File(ctx, m.cfg.Tenant, h); err == nil {
		return rec, until, false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return rec, until, false, err
	}
	sha, e, err := m.store.EntryByHash(ctx, local, h.String())
	if err != nil {
		return rec, until, false, err
	}
	start, end, err := xet.ParseRange(rangeHeader, uint64(e.SizeBytes))
	if err != nil || start >= end {
		// The store's answer says what is wrong with the window, once the
		// file is there.
		return rec, until, false, nil
	}
	ref := m.ref(local)
	what := fmt.Sprintf("file %s of %s@%s", e.Path, ref.ID, sha)
	if err := m.claimsAgree(ctx, what, e); err != nil {
		return rec, until, false, err
	}
	f := File{Path: e.Path, Size: e.SizeBytes, XetHash: e.XetHash, SHA256: e.SHA256, GitOID: e.GitOID}
	err = m.withConn(ctx, tenant, func() error {
		rec, until, err = r.Plan(ctx, ref, sha, f, int64(start), int64(end))
		return err
	})
	if errors.Is(err, ErrNoRelay) {
		return rec, until, false, nil
	}
	if err != nil {
		return rec, until, false, m.upstreamErr(what, err)
	}
	// The plan is made first, so that the pull finds the relay and reads
	// the ranges the client is about to read from the same spool. The
	// pull waits until the relay's clients are done (Quiet), and one pull
	// waits per file.
	key := "file:" + e.XetHash
	if m.claimRelayPull(key) {
		go func() {
			defer m.dropRelayPull(key)
			ctx := context.WithoutCancel(ctx)
			if err := r.Quiet(ctx, h); err != nil {
				m.log.Warn("mirror: waiting for a relay's clients", "what", what, "err", err)
			}
			if _, err := m.Fetch(ctx, tenant, local, sha, e, nil, reserve); err != nil {
				m.log.Warn("mirror: the pull under a relay failed; the next request pulls again", "what", what, "err", err)
			}
		}()
	}
	m.touch(local, sha)
	m.relayPlans.Add(1)
	return rec, until, true, nil
}

// Relay opens bytes [start, end] (inclusive) of the upstream xorb x, as a
// plan of RelayPlan for the file h named them, for a request of tenant:
// an upstream fetch of them waits for a connection in tenant's fair queue,
// and happens once for the client and the pull. store.ErrNotFound when
// the relay has ended (its plan's URLs expired with it).
func (m *Mirror) Relay(ctx context.Context, tenant string, h, x xet.Hash, start, end uint64) (io.ReadCloser, error) {
	r, relays := m.up.(Relayer)
	if !relays {
		return nil, fmt.Errorf("no relay of file %s: %w", h, store.ErrNotFound)
	}
	rc, err := r.Relay(ctx, h, x, start, end, func() (func(), error) {
		slot, err := m.conns.AcquireUntilDone(ctx, tenant)
		if err != nil {
			return nil, err
		}
		return slot.Release, nil
	})
	if err != nil {
		return nil, m.upstreamErr(fmt.Sprintf("bytes %d-%d of xorb %s of file %s", start, end, x, h), err)
	}
	m.relayBytes.Add(int64(end - start + 1))
	return rc, nil
}

// upstreamErr turns an upstream's error about what into the refusal the
// client gets.
func (m *Mirror) upstreamErr(what string, err error) error {
	switch {
	case errors.Is(err, ErrBadAnswer):
		return m.badAnswer(what, err)
	case errors.Is(err, ErrUnreachable):
		return m.unreachable(what, err)
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%s: %w: %w", what, store.ErrNotFound, err)
	}
	return err
}

// claimRelayPull reports whether the caller is to start the pull of key
// under a relay: false when a flight of key is under way, or another
// relay's pull of it is waiting to start (dropRelayPull ends the claim).
func (m *Mirror) claimRelayPull(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.flights[key]; ok {
		return false
	}
	if _, ok := m.relayPulls[key]; ok {
		return false
	}
	m.relayPulls[key] = struct{}{}
	return true
}

func (m *Mirror) dropRelayPull(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.relayPulls, key)
}
