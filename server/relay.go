package server

import (
	"context"
	"io"

	"github.com/labstack/echo/v4"

	"openxet/xet"
)

// The CAS side of the mirror's relays (docs/mirror.md, "First downloads"):
// a reconstruction of a mirrored file not stored yet is answered from the
// upstream's plan, with fetch URLs that read the upstream's ranges through
// the mirror.

// reserveFor is how a mirror's pull for the request of id reserves its
// memory: on id's share, waiting no longer than ctx.
func (s *Server) reserveFor(ctx context.Context, id *identity) func(n int64) ([]byte, func(), error) {
	return func(n int64) ([]byte, func(), error) {
		res, buf, err := s.budget.ReserveBuffer(ctx, budgetKey(id), n)
		if err != nil {
			return nil, nil, err
		}
		return buf, res.Release, nil
	}
}

// relayPlan answers the reconstruction of a mirrored file not stored yet
// from the upstream's plan of it (mirror.RelayPlan): the client reads the
// upstream's ranges through relay grants while the pull stores the file.
// ok is false when the request is answered from the store instead.
func (s *Server) relayPlan(c echo.Context) (rec xet.Reconstruction, release func(), g fetchGrant, ok bool, err error) {
	id := identityOf(c)
	if id.shared == nil || s.cfg.Mirror == nil {
		return rec, nil, g, false, nil
	}
	if _, mirrored := s.cfg.Mirror.PublicRepo(*id.shared); !mirrored {
		return rec, nil, g, false, nil
	}
	h, err := xet.ParseHash(c.Param("file"))
	if err != nil {
		return rec, nil, g, false, nil // reconstruction refuses it
	}
	ctx := c.Request().Context()
	// The pull outlives this request: its memory waits on its own.
	reserve := s.reserveFor(context.WithoutCancel(ctx), id)
	rec, until, ok, err := s.cfg.Mirror.RelayPlan(ctx, id.Tenant, *id.shared, h, c.Request().Header.Get("Range"), reserve)
	if err != nil || !ok {
		return rec, nil, g, false, err
	}
	res, err := s.reserveAnswer(ctx, id, int64(len(rec.Terms)+1)*reconstructionJSONBytesPerTerm)
	if err != nil {
		return rec, nil, g, false, err
	}
	g = fetchGrant{Relay: h.String(), Expiry: min(s.fetchExpiry(), until.Unix())}
	return rec, res.Release, g, true, nil
}

// openFetch opens bytes [start, end] of the xorb x a grant g names: from
// the store, or for a relay grant from the mirror's relay of its file.
func (s *Server) openFetch(ctx context.Context, id *identity, g fetchGrant, x xet.Hash, start, end uint64) (io.ReadCloser, error) {
	if g.Relay == "" {
		return s.store.OpenXorbRange(ctx, x, int64(start), int64(end-start+1))
	}
	fh, err := xet.ParseHash(g.Relay)
	if err != nil || s.cfg.Mirror == nil {
		return nil, refuse(errNotFound, "this fetch URL's relay is over; ask for the file's reconstruction again")
	}
	return s.cfg.Mirror.Relay(ctx, id.Tenant, fh, x, start, end)
}
