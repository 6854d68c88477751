package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"openxet/hub"
	"openxet/store"
	"openxet/xet"
)

// serveXetFile streams a xet file (or a Range of it) reconstructed on the
// server, for clients without hf_xet. It reserves the memory for the file's
// term list before reading it and for the window's terms while it streams,
// and holds one term's bytes at a time, reserved from the memory budget.
func (s *Server) serveXetFile(c echo.Context, tenant string, e store.TreeEntry) error {
	ctx := c.Request().Context()
	h, err := xet.ParseHash(e.XetHash)
	if err != nil {
		return err
	}
	f, err := s.store.File(ctx, tenant, h)
	if err != nil {
		return err
	}
	size := f.SizeBytes
	start, end, status, err := hub.AnswerRange(c, size)
	if err != nil {
		return err
	}
	if c.Request().Method == http.MethodHead || end == start {
		return c.NoContent(status)
	}
	begin := func() { c.Response().WriteHeader(status) }
	if err := s.writeXetRange(c, tenant, f, start, end, begin, c.Response()); err != nil {
		if errors.Is(err, errAnswerCut) {
			s.log.Warn("file stream aborted", "file", e.XetHash, "err", err)
			return nil // the status is sent; the short body tells the client
		}
		return err
	}
	return nil
}

// errAnswerCut marks an error of writeXetRange after it called begin.
var errAnswerCut = errors.New("answer cut short")

// writeXetRange writes bytes [start, end) of file f of tenant to w,
// reserving the memory for the window's terms and one term's bytes at a
// time. It calls begin once the reconstruction is planned, before the
// first byte. An error before begin carries its refusal; one after it
// wraps errAnswerCut.
func (s *Server) writeXetRange(c echo.Context, tenant string, f store.File, start, end uint64, begin func(), w io.Writer) error {
	ctx := c.Request().Context()
	id := identityOf(c)
	terms, off, err := s.windowTerms(ctx, id, tenant, f, start, end)
	if err != nil {
		return err
	}
	res, err := s.budget.Reserve(ctx, budgetKey(id), int64(len(terms)+1)*reconstructionBytesPerTerm)
	if err != nil {
		return err
	}
	defer res.Release()
	rec, err := xet.Reconstruct(terms, start-off, end-off, func(x xet.Hash) ([]xet.XorbChunk, error) { return s.store.XorbChunks(ctx, x) })
	if err != nil {
		return err
	}
	begin()
	skip, left := rec.OffsetIntoFirstRange, end-start
	for _, t := range rec.Terms {
		if left == 0 {
			break
		}
		data, err := s.termBytes(c, id, t)
		if err != nil {
			return fmt.Errorf("%w: %w", errAnswerCut, err)
		}
		if skip >= uint64(len(data)) {
			skip -= uint64(len(data))
			continue
		}
		data = data[skip:]
		skip = 0
		if uint64(len(data)) > left {
			data = data[:left]
		}
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("%w: %w", errAnswerCut, err)
		}
		left -= uint64(len(data))
	}
	return nil
}

// readXetRange is bytes [start, end) of the Xet file e of tenant, for the
// Hub's reads of file headers (hub.Config.ReadXetRange); the caller
// reserved the memory of the answer.
func (s *Server) readXetRange(c echo.Context, tenant string, e store.TreeEntry, start, end int64) ([]byte, error) {
	h, err := xet.ParseHash(e.XetHash)
	if err != nil {
		return nil, err
	}
	f, err := s.store.File(c.Request().Context(), tenant, h)
	if err != nil {
		return nil, err
	}
	if start < 0 || end < start || uint64(end) > f.SizeBytes {
		return nil, fmt.Errorf("range %d-%d of a file of %d bytes", start, end, f.SizeBytes)
	}
	var b bytes.Buffer
	b.Grow(int(end - start))
	if err := s.writeXetRange(c, tenant, f, uint64(start), uint64(end), func() {}, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// termBytes reads and decodes one term's chunks.
func (s *Server) termBytes(c echo.Context, id *identity, t xet.ReconTerm) ([]byte, error) {
	ctx := c.Request().Context()
	chunks, err := s.store.XorbChunks(ctx, t.Xorb)
	if err != nil {
		return nil, err
	}
	var from int64
	if t.ChunkStart > 0 {
		from = int64(chunks[t.ChunkStart-1].SerializedEnd)
	}
	to := int64(chunks[t.ChunkEnd-1].SerializedEnd)
	res, err := s.budget.Reserve(ctx, budgetKey(id), (to-from)+int64(t.UnpackedLength))
	if err != nil {
		return nil, err
	}
	defer res.Release()
	r, err := s.store.OpenXorbRange(ctx, t.Xorb, from, to-from)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	stream := make([]byte, to-from)
	if _, err := io.ReadFull(r, stream); err != nil {
		return nil, err
	}
	out, _, err := xet.AppendChunks(make([]byte, 0, t.UnpackedLength), stream)
	return out, err
}
