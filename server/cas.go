package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/budget"
	"openxet/limits"
	"openxet/store"
	"openxet/work"
	"openxet/xet"

	"openxet/store/accounts"
)

// maxBodyBytes caps xorb and shard bodies (a 64MiB xorb of incompressible
// chunks serializes slightly larger).
const maxBodyBytes = xet.MaxXorbBytes

func budgetKey(id *identity) budget.Key {
	return budget.Key{Credential: id.CredentialKey, Tenant: id.Account}
}

// contentLength returns the declared body length, refusing a body without
// one (411) or over max (413) before any byte of it is read. A request
// without Content-Length and without a body is a 411 too (net/http gives it
// length 0; only an explicit "Content-Length: 0" is an empty upload).
func contentLength(c echo.Context, max int64) (int64, error) {
	req := c.Request()
	n := req.ContentLength
	if n < 0 || (n == 0 && len(req.Header.Values(echo.HeaderContentLength)) == 0) {
		return 0, refuse(errLengthRequired, "this upload needs a Content-Length header")
	}
	if n > max {
		return 0, refuse(errBodyTooLarge, "the body of %d bytes is over the %d-byte limit", n, max)
	}
	return n, nil
}

// answerBeforeBody prepares the answer to a request whose body may not
// have been read (a refusal, or a xorb the tenant already owns) and returns
// what to do once the answer is written. The answer goes out before any
// more of the body is read.
//
// A refusal carries Connection: close (api.md, "Errors"): the body it
// did not consume is never parsed as the next request. A client that sent
// Expect: 100-continue never sends the body, and a body over the upload
// cap is not worth reading: the connection closes at once. Any other
// client may still be sending: the rest of the body is read and dropped
// after the answer, so that the client sees the answer instead of a reset
// connection (and does not retry a transport error). That drain keeps the
// read deadline the request already has (the request's body_read_timeout,
// or the one readBody set): a body that timed out is not waited for again.
func (s *Server) answerBeforeBody(c echo.Context, refusal bool) (after func()) {
	req := c.Request()
	if req.ContentLength == 0 || req.Method == http.MethodGet || req.Method == http.MethodHead {
		return func() {}
	}
	if refusal {
		c.Response().Header().Set("Connection", "close")
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") || req.ContentLength > maxBodyBytes {
		c.Response().Header().Set("Connection", "close")
		return func() {}
	}
	rc := http.NewResponseController(c.Response().Writer)
	if rc.EnableFullDuplex() != nil {
		return func() {}
	}
	return func() {
		rc.Flush()
		io.Copy(io.Discard, io.LimitReader(req.Body, maxBodyBytes))
	}
}

// readBody reads exactly len(buf) bytes of the request body into buf, memory
// the caller has reserved (budget.ReserveBuffer), and returns buf.
func (s *Server) readBody(c echo.Context, buf []byte) ([]byte, error) {
	if s.cfg.BodyReadTimeout > 0 {
		http.NewResponseController(c.Response().Writer).SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout))
	}
	defer stagesOf(c).since(stageBody, time.Now())
	if _, err := io.ReadFull(c.Request().Body, buf); err != nil {
		return nil, refuse(errBadRequest, "the body ended after fewer bytes than its Content-Length (%v)", err)
	}
	return buf, nil
}

// postXorb stores a xorb: POST /v1/xorbs/{prefix}/{hash}. Everything that can
// refuse it without the body (auth, limits, ownership, quota, memory) is
// decided before the body is read.
func (s *Server) postXorb(c echo.Context) error {
	id := identityOf(c)
	ctx := c.Request().Context()
	h, err := xet.ParseHash(c.Param("hash"))
	if err != nil {
		return err
	}
	n, err := contentLength(c, maxBodyBytes)
	if err != nil {
		return err
	}
	slot, err := s.workSlot(c)
	if err != nil {
		return err
	}
	defer slot.Release()
	st, t := stagesOf(c), time.Now()
	owned, err := s.store.OwnsXorb(ctx, id.Tenant, h)
	st.since(stageIndex, t)
	if err != nil {
		return err
	}
	if owned {
		slot.Release()
		defer s.answerBeforeBody(c, false)()
		return writeJSON(c, http.StatusOK, map[string]bool{"was_inserted": false})
	}
	lim, err := s.limitsFor(c, id.Tenant)
	if err != nil {
		return err
	}
	if lim.QuotaBytes >= 0 {
		t = time.Now()
		usage, err := s.store.Usage(ctx, id.Tenant)
		st.since(stageIndex, t)
		if err != nil {
			return err
		}
		pendingBefore := s.pending.Add(id.Tenant, n) - n
		defer s.pending.Done(id.Tenant, n)
		v := limits.CheckQuota(lim.QuotaBytes, usage, pendingBefore, n)
		if err := limits.NewQuotaError(v, id.Tenant, lim.QuotaBytes, usage, pendingBefore, n); err != nil {
			return err
		}
	}
	slot.Release()
	// The body is read into a pooled buffer that goes back to the pool when
	// the handler returns: nothing may keep a slice of it.
	t = time.Now()
	res, buf, err := s.budget.ReserveBuffer(ctx, budgetKey(id), n)
	st.since(stageMemory, t)
	if err != nil {
		return err
	}
	defer res.Release()
	body, err := s.readBody(c, buf)
	if err != nil {
		return err
	}
	// Validation holds a slot; storing does not: writes queue for the
	// index's one write connection, and a slot held while waiting there
	// would keep other tenants' reads from running.
	validating, err := s.workSlot(c)
	if err != nil {
		return err
	}
	defer validating.Release()
	t = time.Now()
	info, err := xet.ParseXorb(body, h)
	st.since(stageValidate, t)
	validating.Release()
	if err != nil {
		return err
	}
	t = time.Now()
	inserted, err := s.store.PutXorb(ctx, id.Tenant, info, body[:info.StreamLen], s.cfg.Limits.QuotaBytes)
	st.since(stageWrite, t)
	if err != nil {
		return err
	}
	if inserted {
		s.metrics.uploadedBytes.Add(float64(info.StreamLen))
	}
	return c.JSON(http.StatusOK, map[string]bool{"was_inserted": inserted})
}

// headXorb answers whether a xorb is stored: 200 or 404, no body.
func (s *Server) headXorb(c echo.Context) error {
	id := identityOf(c)
	h, err := xet.ParseHash(c.Param("hash"))
	if err != nil {
		return err
	}
	slot, err := s.workSlot(c)
	if err != nil {
		return err
	}
	ok, err := s.store.OwnsXorb(c.Request().Context(), id.Tenant, h)
	if err == nil && !ok && s.cfg.DedupScope == "global" {
		ok, err = s.store.HasXorb(c.Request().Context(), h)
	}
	slot.Release()
	if err != nil {
		return err
	}
	if !ok {
		return c.NoContent(http.StatusNotFound)
	}
	return c.NoContent(http.StatusOK)
}

// receiveShard reads and parses a shard body. It returns the work slot that
// parsing holds, for the caller to verify the shard under and release
// before storing it, and a release that gives back the body's memory and
// the slot if still held. The body is in a pooled buffer: it must not be
// used after release.
func (s *Server) receiveShard(c echo.Context) ([]byte, *xet.Shard, work.Slot, func(), error) {
	id := identityOf(c)
	n, err := contentLength(c, xet.MaxShardBytes)
	if err != nil {
		return nil, nil, work.Slot{}, nil, err
	}
	st, t := stagesOf(c), time.Now()
	res, buf, err := s.budget.ReserveBuffer(c.Request().Context(), budgetKey(id), n)
	st.since(stageMemory, t)
	if err != nil {
		return nil, nil, work.Slot{}, nil, err
	}
	body, err := s.readBody(c, buf)
	if err != nil {
		res.Release()
		return nil, nil, work.Slot{}, nil, err
	}
	slot, err := s.workSlot(c)
	if err != nil {
		res.Release()
		return nil, nil, work.Slot{}, nil, err
	}
	release := func() {
		slot.Release()
		res.Release()
	}
	t = time.Now()
	sh, err := xet.ParseShard(body)
	st.since(stageValidate, t)
	if err != nil {
		release()
		return nil, nil, work.Slot{}, nil, err
	}
	return body, sh, slot, release, nil
}

// postShard registers a shard: POST /v1/shards → {"result": 0|1}. The hash
// in the legacy /shard/{prefix}/{hash} path is not used, but must be one.
func (s *Server) postShard(c echo.Context) error {
	id := identityOf(c)
	if p := c.Param("hash"); p != "" {
		if _, err := xet.ParseHash(p); err != nil {
			return err
		}
	}
	body, sh, slot, release, err := s.receiveShard(c)
	if err != nil {
		return err
	}
	defer release()
	ctx := c.Request().Context()
	st, t := stagesOf(c), time.Now()
	err = s.verifyShard(ctx, id, sh)
	st.since(stageIndex, t)
	slot.Release()
	if err != nil {
		return err
	}
	t = time.Now()
	inserted, err := s.store.PutShard(ctx, id.Tenant, body, sh)
	st.since(stageWrite, t)
	if err != nil {
		return err
	}
	result := 0
	if inserted {
		result = 1
	}
	return c.JSON(http.StatusOK, map[string]int{"result": result})
}

// verifyShard checks an uploaded shard: store.VerifyUpload, which holds
// the possession rule and server.dedup_scope.
func (s *Server) verifyShard(ctx context.Context, id *identity, sh *xet.Shard) error {
	if id.forRepo != nil {
		// A token whose grant reaches one repo of a namespace acts in
		// the namespace's CAS, whose other repos it may not read: each
		// file it registers proves that its uploader holds every chunk
		// it names, as one naming another namespace's xorbs does.
		for _, f := range sh.Files {
			if len(f.Terms) > 0 && f.Verification == nil {
				return fmt.Errorf("%w: file %s carries no verification entries: a token that reaches one repo of %s registers only files that prove the chunks they name (docs/protocol.md §6.7); every stock client sends them",
					store.ErrInvalidShard, f.Hash, id.Tenant)
			}
		}
	}
	return s.store.VerifyUpload(ctx, id.Tenant, sh, s.cfg.DedupScope == "global")
}

// postShardV2 registers a shard answering with NDJSON progress frames; a
// failure found after the body was accepted is an error frame, the one way
// a message reaches an hf_xet user.
func (s *Server) postShardV2(c echo.Context) error {
	id := identityOf(c)
	body, sh, slot, release, err := s.receiveShard(c)
	if err != nil {
		return err
	}
	defer release()
	ctx := c.Request().Context()
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	frame := func(v any) {
		enc.Encode(v)
		w.Flush()
	}
	frame(map[string]any{"type": "validating", "verified": 0, "total": len(sh.Files)})
	st, t := stagesOf(c), time.Now()
	err = s.verifyShard(ctx, id, sh)
	st.since(stageIndex, t)
	slot.Release()
	if err != nil {
		ae := toAPIError(err)
		setRefusal(c, ae)
		frame(map[string]any{"type": "error", "message": ae.Message + " (" + ae.Code + "). " + ae.Hint, "retryable": ae.Status >= 500, "request_id": requestIDOf(c)})
		return nil
	}
	frame(map[string]any{"type": "validating", "verified": len(sh.Files), "total": len(sh.Files)})
	frame(map[string]any{"type": "committing", "stage": "syncing"})
	t = time.Now()
	_, err = s.store.PutShard(ctx, id.Tenant, body, sh)
	st.since(stageWrite, t)
	if err != nil {
		ae := toAPIError(err)
		setRefusal(c, ae)
		if ae.Code == "internal" {
			s.log.Error("shard commit failed", "request_id", requestIDOf(c), "err", err)
		}
		frame(map[string]any{"type": "error", "message": ae.Message, "retryable": ae.Status >= 500, "request_id": requestIDOf(c)})
		return nil
	}
	frame(map[string]any{"type": "result"})
	return nil
}

// reconstructionJSONBytesPerTerm bounds the JSON one term adds to an
// answer (the term, and at most one fetch entry with its signed URL).
const reconstructionJSONBytesPerTerm = 768

// reconstructionBytesPerTerm bounds what one term of a window holds in
// memory without JSON: the decoded term, its answer term and a fetch range.
const reconstructionBytesPerTerm = 160

// windowTerms reads the terms of f that overlap [start, end) and the file
// offset of the first. It reserves the memory reading f's whole term list
// takes, from the term count the index stores, before it reads a byte of
// it, and releases it once the window is decoded: the caller reserves for
// the window's terms itself. A list that can never fit the credential's
// share is refused with errTermsTooLarge.
func (s *Server) windowTerms(ctx context.Context, id *identity, owner string, f store.File, start, end uint64) ([]xet.Term, uint64, error) {
	res, err := s.budget.Reserve(ctx, budgetKey(id), store.FileTermListBytes(f.TermCount))
	if err != nil {
		var tl *budget.TooLargeError
		if errors.As(err, &tl) {
			return nil, 0, fmt.Errorf("%w: %w", errTermsTooLarge, err)
		}
		return nil, 0, err
	}
	defer res.Release()
	return s.readTerms(ctx, owner, f, start, end)
}

// fileOf finds the file whose hash is h for a request, and the tenant
// that registered it: the caller's own file, or for a CAS token minted for
// another tenant's Shared repo a file that repo references, checked
// against the index now (store.SharedFile: the repo is still Shared and
// one of its revisions names h). Either miss is ErrNotFound, alike.
// mirrored is true when the file is one the mirror had stored already.
func (s *Server) fileOf(ctx context.Context, id *identity, h xet.Hash) (f store.File, owner string, mirrored bool, err error) {
	if id.shared != nil {
		f, err := s.store.SharedFile(ctx, *id.shared, h)
		if s.cfg.Mirror == nil {
			return f, id.shared.Tenant, false, err
		}
		_, isMirror := s.cfg.Mirror.PublicRepo(*id.shared)
		if err == nil {
			return f, id.shared.Tenant, isMirror, nil
		}
		if errors.Is(err, store.ErrNotFound) {
			if isMirror {
				// A file of a mirrored revision not pulled yet: pulled now
				// (coalesced with every other request for it), then read.
				if err := s.cfg.Mirror.PullFile(ctx, id.Tenant, *id.shared, h, s.reserveFor(ctx, id)); err != nil {
					return store.File{}, id.shared.Tenant, false, err
				}
				f, err = s.store.SharedFile(ctx, *id.shared, h)
			}
		}
		return f, id.shared.Tenant, false, err
	}
	if id.forRepo != nil {
		// A token bound to one repo reads the files that repo's
		// revisions name, and no other file of its namespace.
		ok, err := s.store.References(ctx, *id.forRepo, h)
		if err != nil || !ok {
			return store.File{}, id.Tenant, false, cmp.Or(err, fmt.Errorf("file %s is not in repo %s: %w", h, *id.forRepo, store.ErrNotFound))
		}
	}
	f, err = s.store.File(ctx, id.Tenant, h)
	return f, id.Tenant, false, err
}

// reconstruction resolves a file and a Range into an answer. Nothing is
// decoded before memory is reserved for it: the term list (windowTerms),
// then the answer for the terms of the range.
func (s *Server) reconstruction(c echo.Context) (xet.Reconstruction, func(), error) {
	id := identityOf(c)
	ctx := c.Request().Context()
	h, err := xet.ParseHash(c.Param("file"))
	if err != nil {
		return xet.Reconstruction{}, nil, err
	}
	slot, err := s.workSlot(c)
	if err != nil {
		return xet.Reconstruction{}, nil, err
	}
	st, t := stagesOf(c), time.Now()
	f, owner, mirrored, err := s.fileOf(ctx, id, h)
	st.since(stageIndex, t)
	slot.Release()
	if err != nil {
		return xet.Reconstruction{}, nil, err
	}
	start, end, err := xet.ParseRange(c.Request().Header.Get("Range"), f.SizeBytes)
	if err != nil {
		return xet.Reconstruction{}, nil, err
	}
	if mirrored && start == 0 {
		// A Xet download of a file the mirror stored: counted once, at the
		// reconstruction of its first byte (a client asks for later
		// windows of a large file separately).
		s.cfg.Mirror.Served()
	}
	if start >= end { // an empty file: nothing to read
		rec, err := xet.Reconstruct(nil, 0, 0, nil)
		return rec, func() {}, err
	}
	terms, off, err := s.windowTerms(ctx, id, owner, f, start, end)
	if err != nil {
		return xet.Reconstruction{}, nil, err
	}
	start, end = start-off, end-off
	need := int64(xet.TermsInRange(terms, start, end)+1) * reconstructionJSONBytesPerTerm
	t = time.Now()
	res, err := s.reserveAnswer(ctx, id, need)
	st.since(stageMemory, t)
	if err != nil {
		return xet.Reconstruction{}, nil, err
	}
	if slot, err = s.workSlot(c); err != nil {
		res.Release()
		return xet.Reconstruction{}, nil, err
	}
	t = time.Now()
	rec, err := xet.Reconstruct(terms, start, end, func(x xet.Hash) ([]xet.XorbChunk, error) { return s.store.XorbChunks(ctx, x) })
	st.since(stageIndex, t)
	slot.Release()
	if err != nil {
		res.Release()
		return xet.Reconstruction{}, nil, err
	}
	return rec, res.Release, nil
}

// grant signs the fetch URL of range fr of xorb for id; relay is "" or
// the file whose relay serves it.
// reserveAnswer reserves need bytes of id's share for a reconstruction
// answer; one that can never fit is errAnswerTooLarge.
func (s *Server) reserveAnswer(ctx context.Context, id *identity, need int64) (budget.Reservation, error) {
	res, err := s.budget.Reserve(ctx, budgetKey(id), need)
	if err != nil {
		var tl *budget.TooLargeError
		if errors.As(err, &tl) {
			return res, fmt.Errorf("%w: %w", errAnswerTooLarge, err)
		}
		return res, err
	}
	return res, nil
}

func (s *Server) grant(id *identity, xorb string, fr xet.FetchRange, exp int64, relay, base string) string {
	g := fetchGrant{Xorb: xorb, Start: fr.ByteStart, End: fr.ByteEnd, CredentialID: id.CredentialID, Tenant: id.Tenant, Expiry: exp, Relay: relay}
	if id.shared != nil {
		g.Repo = sharedRepoKey(*id.shared)
	}
	return s.signer.fetchURL(base, g)
}

// fetchExpiry rounds the expiry down to a minute so answers for the same
// range stay stable while they are valid.
func (s *Server) fetchExpiry() int64 {
	return s.now().Add(s.cfg.FetchURLTTL).Truncate(time.Minute).Unix()
}

// answerReconstruction writes a reconstruction answer: the terms, and
// under key one entry per fetch range of each xorb, which entry appends
// (reconjson.go).
func (s *Server) answerReconstruction(c echo.Context, key string, entry fetchEntry) error {
	rec, release, relay, ok, err := s.relayPlan(c)
	if err == nil && !ok {
		rec, release, err = s.reconstruction(c)
	}
	if err != nil {
		return err
	}
	defer release()
	id, base, exp := identityOf(c), s.base(c), s.fetchExpiry()
	if ok {
		exp = relay.Expiry
	}
	b := appendReconstruction(make([]byte, 0, 256*(len(rec.Terms)+1)), rec, key, entry, func(xorb string, fr xet.FetchRange) string {
		return s.grant(id, xorb, fr, exp, relay.Relay, base)
	})
	return writeJSONBytes(c, http.StatusOK, b)
}

// getReconstruction answers GET /v1/reconstructions/{file}.
func (s *Server) getReconstruction(c echo.Context) error {
	return s.answerReconstruction(c, "fetch_info", appendFetchV1)
}

// getReconstructionV2 answers GET /v2/reconstructions/{file}: one URL per
// fetch range.
func (s *Server) getReconstructionV2(c echo.Context) error {
	return s.answerReconstruction(c, "xorbs", appendFetchV2)
}

// getFetch serves a byte range of a xorb through a signed fetch URL. The URL
// is the authorisation; the request counts against the credential and tenant
// it was signed for.
func (s *Server) getFetch(c echo.Context) error {
	attempt, err := s.gate.BeginAuth(c.RealIP(), s.now())
	if err != nil {
		return err
	}
	g, err := s.signer.parseFetchURL(c.Param("xorb"), c.QueryParams(), s.now())
	if err != nil {
		return s.authFailed(attempt, err)
	}
	attempt.Refund()
	e, err := s.creds.get(c.Request().Context(), g.CredentialID)
	if err != nil || e.cred.IsRevoked() {
		return refuse(errFetchURLInvalid, "the credential this URL was signed for is gone or revoked")
	}
	if e.cred.Personal() {
		// Signed for a personal token: its owner still active, and still
		// a member of the namespace the URL reads (unless it reads a
		// Shared repo of another).
		p, err := s.owner(c.Request().Context(), e.cred)
		if err != nil || (g.Repo == "" && p.Level(g.Tenant) < accounts.ReadAccess) {
			return refuse(errFetchURLInvalid, "the token this URL was signed for may no longer read it")
		}
	}
	id := &identity{CredentialID: g.CredentialID, CredentialKey: e.key, Tenant: g.Tenant, Account: e.cred.Tenant, Scopes: []string{"read"}}
	c.Set(identityKey, id)
	adm, err := s.admit(c, id, false)
	if err != nil {
		return err
	}
	defer s.gate.Done(adm)
	if err := s.takeTurn(c, adm); err != nil {
		return err
	}
	if g.Repo != "" {
		// A range of another tenant's file, granted through a Shared
		// repo: served while the repo is still Shared (docs/sharing.md),
		// checked once the request is admitted on the reader's limits.
		// Once it is not, the URL answers as a file that is not there.
		r, ok := parseSharedRepoKey(g.Repo)
		repo, err := s.store.Repo(c.Request().Context(), r)
		if !ok || errors.Is(err, store.ErrNotFound) || err == nil && !repo.Shared() {
			return refuse(errNotFound, "this fetch URL's repository is not shared any more")
		}
		if err != nil {
			return err
		}
	}

	start, end := g.Start, g.End
	if rh := c.Request().Header.Get("Range"); rh != "" {
		rs, re, err := xet.ParseRange(rh, g.End+1)
		if err != nil {
			return refuse(errFetchURLInvalid, "the Range %q is not inside the range this URL grants", rh)
		}
		start, end = rs, re-1
		if start < g.Start {
			return refuse(errFetchURLInvalid, "the Range %q is not inside the range this URL grants", rh)
		}
	}
	x, err := xet.ParseHash(g.Xorb)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	st, t := stagesOf(c), time.Now()
	res, buf, err := s.budget.ReserveBuffer(ctx, budgetKey(id), fetchBufferBytes)
	st.since(stageMemory, t)
	if err != nil {
		return err
	}
	defer res.Release()
	length := int64(end - start + 1)
	t = time.Now()
	r, err := s.openFetch(ctx, id, g, x, start, end)
	st.since(stageOpen, t)
	if err != nil {
		return err
	}
	defer r.Close()
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/octet-stream")
	h.Set(echo.HeaderContentLength, fmt.Sprint(length))
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/*", start, end))
	c.Response().WriteHeader(http.StatusPartialContent)
	written, err := s.sendShared(c, r, buf)
	s.metrics.servedBytes.Add(float64(written))
	if err != nil {
		s.log.Warn("fetch aborted", "xorb", g.Xorb, "written", written, "err", err)
	}
	return nil
}

// getChunk answers a global dedup query with a shard holding the CAS blocks
// of the xorbs that contain the chunk, chunk hashes keyed with a fresh key.
func (s *Server) getChunk(c echo.Context) error {
	id := identityOf(c)
	switch c.Param("prefix") {
	case "default", "default-merkledb":
	default:
		return refuse(errNotFound, "unknown prefix %q", c.Param("prefix"))
	}
	h, err := xet.ParseHash(c.Param("hash"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	slot, err := s.workSlot(c)
	if err != nil {
		return err
	}
	st, t := stagesOf(c), time.Now()
	xorbs, err := s.store.DedupAnswer(ctx, id.Tenant, h, s.cfg.DedupScope == "global", dedupAnswerXorbs)
	st.since(stageIndex, t)
	slot.Release()
	if errors.Is(err, store.ErrNotFound) {
		return notFound(err) // most queries of new data miss
	}
	if err != nil {
		return err
	}
	var need int64 = 400
	for _, x := range xorbs {
		need += 48 + int64(len(x.Chunks))*(48+16)
	}
	t = time.Now()
	res, err := s.budget.Reserve(ctx, budgetKey(id), need)
	st.since(stageMemory, t)
	if err != nil {
		return err
	}
	defer res.Release()
	var key [32]byte
	rand.Read(key[:])
	now := s.now()
	body := xet.BuildDedupShard(xorbs, key, now, now.Add(7*24*time.Hour))
	return c.Blob(http.StatusOK, "application/octet-stream", body)
}

// postTelemetry accepts the client's telemetry and drops it.
func (s *Server) postTelemetry(c echo.Context) error {
	io.Copy(io.Discard, io.LimitReader(c.Request().Body, 1<<20))
	return c.NoContent(http.StatusNoContent)
}

// limitsFor returns a tenant's effective limits.
func (s *Server) limitsFor(c echo.Context, tenant string) (limits.Limits, error) {
	lim, _, err := s.effective.For(c.Request().Context(), tenant)
	return lim, err
}
