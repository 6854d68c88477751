package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/labstack/echo/v4"

	"openxet/budget"
	"openxet/hub"
	"openxet/limits"
	"openxet/refusal"
	"openxet/store"
	"openxet/work"
	"openxet/xet"

	"openxet/store/accounts"
)

// apiError is a refusal as the client sees it (docs/design.md §7); the type is
// package refusal's, which the Hub routes (package hub) return too.
type apiError = refusal.Error

// Sentinels for refusals the server itself decides. Bad request, not found
// and forbidden are package refusal's, since the Hub routes decide them too.
var (
	errUnauthorized    = errors.New("unauthorized")
	errForbidden       = refusal.ErrForbidden
	errLengthRequired  = refusal.ErrLengthRequired
	errBodyTooLarge    = errors.New("body too large")
	errAnswerTooLarge  = errors.New("answer too large")
	errTermsTooLarge   = errors.New("term list too large") // a file's term list alone is over the share
	errBadRequest      = refusal.ErrBadRequest
	errNotFound        = refusal.ErrNotFound
	errFetchURLInvalid = errors.New("fetch URL invalid")
)

// adminPathPrefix starts openxet's own API (the admin API), whose refusals
// keep the CAS shape even though it lives under /api/.
const adminPathPrefix = "/api/openxet/"

// scopeError refuses a credential that lacks the scope a route needs.
type scopeError struct {
	Tenant string
	Have   []string // the credential's scopes
	Need   string
}

func (e *scopeError) Error() string {
	return fmt.Sprintf("credential of tenant %s has scopes %v, the route needs %s", e.Tenant, e.Have, e.Need)
}

func (e *scopeError) Unwrap() error { return errForbidden }

// refuse wraps a sentinel with a message for the client (refusal.Wrap).
func refuse(kind error, format string, args ...any) error {
	return refusal.Wrap(kind, format, args...)
}

// message is the text after the sentinel's own prefix (refusal.Message).
func message(err error, kind error) string { return refusal.Message(err, kind) }

// toAPIError maps any error to what the client sees; the one table of
// docs/design.md §7. A refusal already shaped (*apiError) is itself; every
// other error goes through errorTable, whose parts each map one package's
// errors. Unknown errors are 500 internal.
func toAPIError(err error) *apiError {
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae
	}
	for _, meaning := range errorTable {
		if ae := meaning(err); ae != nil {
			return ae
		}
	}
	return &apiError{Status: 500, Code: "internal", Message: "internal error", Hint: "the server logged the cause; retry, or tell the operator", Cause: err}
}

// errorTable is the table, one part per package whose errors it maps,
// searched in this order: the first part that knows an error in err's
// chain decides. The order matters where one error wraps another's: a
// Hub refusal wraps the store's error it refuses, and limits' ErrLimitsUnavailable
// wraps the store's ErrUnavailable, whose answer wins.
var errorTable = [...]func(error) *apiError{
	echoMeaning,
	hubMeaning,
	budgetMeaning,
	workMeaning,
	serverMeaning,
	xetMeaning,
	storeMeaning,
	limitsMeaning,
}

// echoMeaning maps echo's own refusals (no route, a method the route does
// not take, its body limit).
func echoMeaning(err error) *apiError {
	he, ok := errors.AsType[*echo.HTTPError](err)
	if !ok {
		return nil
	}
	switch he.Code {
	case http.StatusNotFound:
		return &apiError{Status: 404, Code: "not_found", Message: "no such route", Hint: "check the URL against the API reference (docs/api.md)", Cause: err}
	case http.StatusMethodNotAllowed:
		return &apiError{Status: 405, Code: "method_not_allowed", Message: "this route does not take that method", Hint: "check the method against the API reference (docs/api.md)", Cause: err}
	case http.StatusRequestEntityTooLarge:
		return &apiError{Status: 413, Code: "payload_too_large", Message: fmt.Sprint(he.Message), Hint: "send a smaller body", Cause: err}
	}
	return &apiError{Status: he.Code, Code: strings.ToLower(strings.ReplaceAll(http.StatusText(he.Code), " ", "_")), Message: fmt.Sprint(he.Message), Cause: err}
}

// hubMeaning maps the refusals the Hub routes decide (hub/errors.go). A
// 404 carries the X-Error-Code huggingface_hub maps to its exceptions.
func hubMeaning(err error) *apiError {
	if e, ok := errors.AsType[*hub.TooLargeError](err); ok {
		return &apiError{Status: 413, Code: "payload_too_large", Message: e.Message, Hint: e.Hint, Cause: err}
	}
	if e, ok := errors.AsType[*hub.NotFoundError](err); ok {
		hint := "check the repo id, revision and path"
		if e.MovedTo != "" {
			hint = "use the new name, " + e.MovedTo
		}
		return &apiError{Status: 404, Code: "not_found", Message: e.Message, Hint: hint, Headers: map[string]string{"X-Error-Code": e.Kind}, Cause: err}
	}
	if e, ok := errors.AsType[*hub.NamespaceError](err); ok {
		return &apiError{Status: 403, Code: "forbidden", Message: e.Message, Hint: e.Hint, Cause: err}
	}
	if e, ok := errors.AsType[*hub.ExistsError](err); ok {
		return &apiError{Status: 409, Code: "conflict", Message: e.Message, Hint: e.Hint, Fields: e.Fields, Cause: err}
	}
	if e, ok := errors.AsType[*hub.NotServedError](err); ok {
		return &apiError{Status: 501, Code: "not_served", Message: e.Error(), Hint: e.Hint, Cause: err}
	}
	if e, ok := errors.AsType[*hub.AnonymousError](err); ok {
		return &apiError{Status: 401, Code: "unauthorized", Message: e.Error(), Hint: "send Authorization: Bearer <token> with a valid openxet credential or CAS token",
			Headers: map[string]string{"X-Error-Code": hub.RepoNotFound}, Cause: err}
	}
	if e, ok := errors.AsType[*hub.CardError](err); ok {
		// huggingface_hub prints each of errors' messages (HfApi's
		// _validate_yaml), or the whole body (RepoCard.validate).
		return &apiError{Status: 400, Code: "bad_request", Message: e.Message, Hint: "fix the YAML between the --- lines at the top of README.md: it must be a mapping of keys to values", Cause: err,
			Fields: map[string]any{"errors": []map[string]string{{"message": e.Message}}, "warnings": []any{}}}
	}
	if e, ok := errors.AsType[*hub.StaleParentError](err); ok {
		return &apiError{Status: 412, Code: "precondition_failed", Message: e.Error(), Cause: err,
			// The Hub's sentence, which huggingface_hub's tests look for.
			Hint: "the branch was updated since you opened this page. Please refresh and try again. Pull the new head and commit again"}
	}
	return nil
}

// budgetMeaning maps the memory budget's refusals: a share that stayed
// full, and a reservation no share can hold (an answer or a term list the
// server decided is too large, else a body).
func budgetMeaning(err error) *apiError {
	if busy, ok := errors.AsType[*budget.BusyError](err); ok {
		secs := limits.RetryAfterSeconds(busy.RetryAfter)
		msg := "the server's memory for request work is taken by other requests"
		switch busy.Share {
		case budget.ShareCredential:
			msg = "this credential's share of the server's memory for request work is taken by its other requests"
		case budget.ShareTenant:
			msg = "this tenant's share of the server's memory for request work is taken by its other requests"
		}
		return &apiError{Status: 503, Code: "memory_busy", RetryAfter: secs, Cause: err, Message: msg,
			Hint:   fmt.Sprintf("retry in %d s (Retry-After); fewer concurrent requests help", secs),
			Fields: map[string]any{"share": busy.Share}}
	}
	tooLarge, ok := errors.AsType[*budget.TooLargeError](err)
	if !ok {
		return nil
	}
	if errors.Is(err, errTermsTooLarge) {
		return &apiError{Status: 413, Code: "answer_too_large", Cause: err,
			Message: fmt.Sprintf("the file's term list needs %d bytes, more than the %d a credential may hold, whatever the Range", tooLarge.N, tooLarge.Limit),
			Hint:    "ask the operator to raise server.memory_budget or server.credential_memory_share"}
	}
	if errors.Is(err, errAnswerTooLarge) {
		return &apiError{Status: 413, Code: "answer_too_large", Cause: err,
			Message: fmt.Sprintf("the answer needs %d bytes, more than the %d a credential may hold", tooLarge.N, tooLarge.Limit),
			Hint:    "ask for a smaller Range"}
	}
	return &apiError{Status: 413, Code: "payload_too_large", Cause: err,
		Message: fmt.Sprintf("the body needs %d bytes, more than the %d a credential may hold", tooLarge.N, tooLarge.Limit),
		Hint:    "send a smaller body"}
}

// workMeaning maps a work slot that stayed busy.
func workMeaning(err error) *apiError {
	workBusy, ok := errors.AsType[*work.BusyError](err)
	if !ok {
		return nil
	}
	return &apiError{Status: 503, Code: "unavailable", RetryAfter: limits.RetryAfterSeconds(workBusy.RetryAfter), Cause: err,
		Message: "the server's work slots stayed busy: " + workBusy.Error(),
		Hint:    "retry after the delay in Retry-After; fewer concurrent requests help"}
}

// serverMeaning maps the refusals the server decides (and those of package
// refusal, which the Hub routes decide too).
func serverMeaning(err error) *apiError {
	if se, ok := errors.AsType[*scopeError](err); ok {
		have := "no scope"
		if len(se.Have) > 0 {
			have = "scope " + strings.Join(se.Have, ", ")
		}
		return &apiError{Status: 403, Code: "forbidden", Cause: err,
			Message: fmt.Sprintf("this credential of tenant %s has %s; this route needs %s", se.Tenant, have, se.Need),
			Hint:    fmt.Sprintf("use a credential with the %s scope: openxet credentials create --tenant %s --scope %s", se.Need, se.Tenant, se.Need),
			Fields:  map[string]any{"scope": se.Need}}
	}
	switch {
	case errors.Is(err, errUnauthorized):
		return &apiError{Status: 401, Code: "unauthorized", Message: message(err, errUnauthorized), Hint: "send Authorization: Bearer <token> with a valid openxet credential or CAS token", Cause: err}
	case errors.Is(err, errForbidden):
		return &apiError{Status: 403, Code: "forbidden", Message: message(err, errForbidden), Hint: "use a credential with the scope this route needs", Cause: err}
	case errors.Is(err, errFetchURLInvalid):
		return &apiError{Status: 403, Code: "forbidden", Message: message(err, errFetchURLInvalid), Hint: "ask for the reconstruction again to get fresh fetch URLs", Cause: err}
	case errors.Is(err, errLengthRequired):
		return &apiError{Status: 411, Code: "length_required", Message: message(err, errLengthRequired), Hint: "send the body with a Content-Length header", Cause: err}
	case errors.Is(err, errBodyTooLarge):
		return bodyTooLarge(err)
	case errors.Is(err, errBadRequest):
		return &apiError{Status: 400, Code: "bad_request", Message: message(err, errBadRequest), Cause: err}
	case errors.Is(err, refusal.ErrUpstreamUnreachable):
		return &apiError{Status: 503, Code: "upstream_unreachable", RetryAfter: upstreamRetryAfterSeconds, Message: message(err, refusal.ErrUpstreamUnreachable),
			Hint: "what is mirrored is still served; retry when the upstream answers again, or ask the operator to pull it (openxet mirror pull)", Cause: err}
	case errors.Is(err, refusal.ErrUpstreamBadAnswer):
		return &apiError{Status: 502, Code: "upstream_bad_answer", Message: message(err, refusal.ErrUpstreamBadAnswer),
			Hint: "the mirror refused what the upstream sent and stored nothing of it; the operator's log names it", Cause: err}
	case errors.Is(err, errNotFound):
		return notFound(err)
	}
	return nil
}

// bodyTooLarge is the 413 of a xorb or shard body over the cap, whether the
// server (errBodyTooLarge) or the xorb's parser (xet.ErrTooLarge) found it.
func bodyTooLarge(err error) *apiError {
	return &apiError{Status: 413, Code: "payload_too_large", Message: errText(err), Hint: "xorbs and shards are at most 65MiB", Cause: err}
}

// xetMeaning maps the protocol's parse and verification errors.
func xetMeaning(err error) *apiError {
	switch {
	case errors.Is(err, xet.ErrTooLarge):
		return bodyTooLarge(err)
	case errors.Is(err, xet.ErrRangeNotSatisfiable):
		return &apiError{Status: 416, Code: "range_not_satisfiable", Message: errText(err), Hint: "the range starts at or after the end of the file", Cause: err}
	case errors.Is(err, xet.ErrBadRange):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "send Range: bytes=START-END", Cause: err}
	case errors.Is(err, xet.ErrHashMismatch):
		return &apiError{Status: 400, Code: "hash_mismatch", Message: errText(err), Hint: "the body does not hash to the hash in the path", Cause: err}
	case errors.Is(err, xet.ErrInvalidXorb):
		return &apiError{Status: 400, Code: "invalid_xorb", Message: errText(err), Hint: "the body is not a valid serialized xorb", Cause: err}
	case errors.Is(err, xet.ErrInvalidShard):
		return invalidShard(err)
	case errors.Is(err, xet.ErrBadHash):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "hashes are 64 lowercase hex digits", Cause: err}
	}
	return nil
}

// invalidShard is the 400 of a shard that is not one, or disagrees with the
// stored xorbs (xet.ErrInvalidShard, store.ErrInvalidShard).
func invalidShard(err error) *apiError {
	return &apiError{Status: 400, Code: "invalid_shard", Message: errText(err), Hint: "upload every xorb a shard references before the shard, and send the shard the client built", Cause: err}
}

// storeMeaning maps the index's and the bucket's errors.
func storeMeaning(err error) *apiError {
	if oq, ok := errors.AsType[*store.OverQuotaError](err); ok {
		return quotaExceeded(oq.Tenant, oq.QuotaBytes, oq.UsageBytes, oq.SizeBytes, err)
	}
	switch {
	case errors.Is(err, store.ErrMissingXorb):
		return &apiError{Status: 400, Code: "invalid_shard", Message: errText(err), Hint: "upload every xorb a shard references before the shard; a client whose local cache (HF_XET_CACHE) remembers xorbs the server has since collected must clear that cache and upload again", Cause: err}
	case errors.Is(err, store.ErrInvalidShard):
		return invalidShard(err)
	case errors.Is(err, accounts.ErrBadTenant):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "tenant names match [a-z0-9][a-z0-9._-]{0,62}", Cause: err}
	case errors.Is(err, accounts.ErrReservedName), errors.Is(err, accounts.ErrNotOrg), errors.Is(err, accounts.ErrBadRole):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "docs/people.md says which names, roles and owners are allowed", Cause: err}
	case errors.Is(err, accounts.ErrNameTaken), errors.Is(err, accounts.ErrLastAdmin), errors.Is(err, accounts.ErrUserInactive):
		return &apiError{Status: 409, Code: "conflict", Message: errText(err), Hint: "the change conflicts with the users and organizations as they are; nothing was changed", Cause: err}
	case errors.Is(err, store.ErrRepoExists), errors.Is(err, store.ErrRefMoved):
		return &apiError{Status: 409, Code: "conflict", Message: errText(err), Hint: "another change got there first; read the current state and retry", Cause: err}
	case errors.Is(err, store.ErrNoSpace), errors.Is(err, syscall.ENOSPC):
		return &apiError{Status: http.StatusInsufficientStorage, Code: "insufficient_storage", Cause: err,
			Message: "the server's storage is full: it could not store what this request sent",
			Hint:    "the request changed nothing; tell the operator (the server logged the cause), and retry once room is freed"}
	case errors.Is(err, store.ErrIndexInUse):
		return &apiError{Status: 503, Code: "unavailable", RetryAfter: 1, Message: errText(err), Hint: "the index is being rebuilt; retry shortly", Cause: err}
	case errors.Is(err, store.ErrIndexLockLost):
		return &apiError{Status: 503, Code: "unavailable", RetryAfter: storeRetryAfterSeconds, Cause: err,
			Message: "this node lost its shared lock on the index (its PostgreSQL session ended) and refuses writes until it holds it again",
			Hint:    "retry after the delay in Retry-After, or on another node; the request changed nothing"}
	case errors.Is(err, store.ErrUnavailable):
		return &apiError{Status: 503, Code: "unavailable", RetryAfter: storeRetryAfterSeconds, Cause: err,
			Message: "the server's storage (index or bucket) is busy or cannot be reached",
			Hint:    "retry after the delay in Retry-After; the request did not complete"}
	case errors.Is(err, store.ErrCollecting):
		return &apiError{Status: 503, Code: "unavailable", RetryAfter: 1, Message: errText(err), Hint: "the collector is deleting an object this request names; retry in a moment", Cause: err}
	case errors.Is(err, store.ErrFileInRepo):
		return &apiError{Status: 409, Code: "conflict", Message: errText(err), Hint: "remove the file from every revision that has it (commit, then super-squash the history, or delete the branch or repo)", Cause: err}
	case errors.Is(err, store.ErrRefExists):
		return &apiError{Status: 409, Code: "conflict", Message: errText(err), Hint: "pick another name, or delete the existing one first", Cause: err}
	case errors.Is(err, store.ErrCollectorBusy):
		return &apiError{Status: 409, Code: "conflict", Message: errText(err), Hint: "another process is collecting; try again when its pass is done", Cause: err}
	case errors.Is(err, store.ErrNotBranch):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "commit to, squash or delete a branch (main cannot be deleted); a tag can only be created or deleted", Cause: err}
	case errors.Is(err, store.ErrBadTree):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "every path must be one git can hold: no empty, \".\", \"..\" or \".git\" component, no control character", Cause: err}
	case errors.Is(err, store.ErrPathClash):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "a path is a file or a folder, not both: delete the file before adding files under its name, or the folder before adding a file of its name", Cause: err}
	case errors.Is(err, store.ErrBadRefName):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "branch and tag names follow git check-ref-format: at most 200 bytes, no space, control character, ~ ^ : ? * [ \\, '..', '@{' or '//', no component starting with '.' or ending in '.lock', no refs/ prefix, not 40 hex digits", Cause: err}
	case errors.Is(err, store.ErrBadSetting):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "visibility is private, public, internal or protected; gated is auto, manual or false", Cause: err}
	case errors.Is(err, store.ErrBadRepoName):
		return &apiError{Status: 400, Code: "bad_request", Message: errText(err), Hint: "repo names match [A-Za-z0-9][A-Za-z0-9._-]{0,95}", Cause: err}
	case errors.Is(err, store.ErrNotFound):
		return notFound(err)
	}
	return nil
}

// limitsMeaning maps the tenant limits' refusals: a rate, the quota, a
// suspended tenant, limits that cannot be read.
func limitsMeaning(err error) *apiError {
	if rl, ok := errors.AsType[*limits.RateError](err); ok {
		return rateLimited(rl)
	}
	if qe, ok := errors.AsType[*limits.QuotaError](err); ok {
		if errors.Is(err, limits.ErrQuotaPending) {
			return &apiError{Status: 503, Code: "quota_pending", RetryAfter: 1, Cause: err,
				Message: fmt.Sprintf("tenant %s: this upload fits its quota only if uploads still in progress fail", qe.Tenant),
				Hint:    "retry shortly; uploads in progress are being committed",
				Fields:  map[string]any{"quota": qe.Quota, "usage": qe.Usage, "pending": qe.Pending}}
		}
		return quotaExceeded(qe.Tenant, qe.Quota, qe.Usage, qe.Size, err)
	}
	switch {
	case errors.Is(err, limits.ErrTenantSuspended):
		return &apiError{Status: 403, Code: "tenant_suspended", Message: message(err, limits.ErrTenantSuspended), Hint: "ask an operator to resume the tenant (openxet limits set --tenant <tenant> --resume)", Cause: err}
	case errors.Is(err, limits.ErrLimitsUnavailable):
		return &apiError{Status: 503, Code: "unavailable", RetryAfter: 1, Message: errText(err), Hint: "the server cannot read this tenant's limits right now; retry shortly", Cause: err}
	}
	return nil
}

func errText(err error) string { return err.Error() }

// upstreamRetryAfterSeconds is the Retry-After of upstream_unreachable.
const upstreamRetryAfterSeconds = 30

// notFound is the 404 of a name or hash the index does not have for the
// tenant (errNotFound, store.ErrNotFound). A route whose miss is its most
// frequent answer (a dedup query) returns it directly, without the search
// of toAPIError.
func notFound(err error) *apiError {
	return &apiError{Status: 404, Code: "not_found", Message: errText(err), Hint: "check the hash or name; a tenant sees only what it registered", Cause: err}
}

// storeRetryAfterSeconds is the Retry-After of store.ErrUnavailable: long
// enough for a held write lock or a bucket hiccup to pass, short enough
// that a client's retry loop keeps going.
const storeRetryAfterSeconds = 2

func quotaExceeded(tenant string, quota, usage, size int64, cause error) *apiError {
	return &apiError{Status: 403, Code: "quota_exceeded", Cause: cause,
		Message: fmt.Sprintf("tenant %s: this upload of %s would pass the storage quota of %s (%s stored)", tenant, limits.HumanBytes(size), limits.HumanBytes(quota), limits.HumanBytes(usage)),
		Hint:    fmt.Sprintf("Delete files or repos you no longer need, or ask an operator to raise the quota: openxet limits set --tenant %s --quota <size>", tenant),
		Fields:  map[string]any{"quota": quota, "usage": usage, "size": size}}
}

func rateLimited(rl *limits.RateError) *apiError {
	// Strings joined without fmt: a flood's refusals are this server's
	// most frequent answer (BenchmarkRefusedRequest).
	d := rl.Decision
	secs := limits.RetryAfterSeconds(d.RetryAfter)
	quota, window := d.Limit.Policy()
	s := strconv.Itoa(secs)
	policy := `"` + rl.Limit + `";q=` + strconv.Itoa(max(quota, 1)) + ";w=" + strconv.Itoa(limits.RetryAfterSeconds(window))
	hint := "slow down and retry in " + s + " s (Retry-After)"
	switch {
	case inFlightLimit(rl.Limit):
		policy = `"` + rl.Limit + `";q=` + strconv.Itoa(max(d.Limit.Burst, 1)) + `;qu="concurrent-requests"`
		hint = "wait for requests in progress to finish before sending more; retry in " + s + " s"
	case rl.Limit == limits.LimitAuthFailures:
		hint = "too many failed authentications from this address; check the token and retry in " + s + " s"
	}
	return &apiError{Status: 429, Code: "rate_limited", RetryAfter: secs, Cause: rl,
		Message: strings.ReplaceAll(rl.Limit, "_", " ") + " rate limit reached",
		Hint:    hint,
		Fields:  map[string]any{"limit": rl.Limit},
		Headers: map[string]string{
			"RateLimit-Policy": policy,
			"RateLimit":        `"` + rl.Limit + `";r=` + strconv.Itoa(max(d.Remaining, 0)) + ";t=" + s,
		}}
}

// errorHandler is echo's HTTPErrorHandler: it renders every error through
// toAPIError, once, unless the response is already committed.
func (s *Server) errorHandler(err error, c echo.Context) {
	if errors.Is(err, echo.ErrNotFound) {
		// No route took it: a repo id without a namespace is a repo
		// that does not exist (hub.Unrouted).
		if nf := s.hub.Unrouted(c.Request().Method, c.Request().URL.Path); nf != nil {
			err = nf
		}
	}
	ae := toAPIError(err)
	// Unimplemented v2 routes must answer 404 (hf_xet falls back to v1 on 404/501 only).
	if ae.Status == http.StatusMethodNotAllowed && strings.HasPrefix(c.Request().URL.Path, "/v2/") {
		ae = &apiError{Status: 404, Code: "not_found", Message: "no such route", Cause: err}
	}
	setRefusal(c, ae)
	s.metrics.refusalCodes.WithLabelValues(ae.Code).Inc()
	switch {
	case ae.Code == "insufficient_storage":
		s.log.Error("storage full", "method", c.Request().Method, "path", c.Request().URL.Path, "request_id", requestIDOf(c), "err", err)
	case ae.Status == http.StatusServiceUnavailable && errors.Is(err, store.ErrUnavailable):
		// Its cause in the log: which store failed, and how.
		s.log.Warn("storage unavailable", "method", c.Request().Method, "path", c.Request().URL.Path, "request_id", requestIDOf(c), "err", err)
	}
	if ae.Status >= 500 && ae.Code == "internal" {
		if gone := c.Request().Context().Err(); gone != nil && errors.Is(err, gone) {
			// The client went away (cancelled, disconnected) before its
			// answer ended: nothing failed on the server's side.
			s.log.Debug("request ended by the client", "method", c.Request().Method, "path", c.Request().URL.Path, "request_id", requestIDOf(c), "err", err)
		} else {
			s.log.Error("internal error", "method", c.Request().Method, "path", c.Request().URL.Path, "request_id", requestIDOf(c), "err", err)
		}
	}
	if c.Response().Committed {
		return
	}
	h := c.Response().Header()
	defer s.answerBeforeBody(c, true)()
	if ae.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(ae.RetryAfter))
	}
	hub := s.isHubPath(c.Request().URL.Path)
	if hub {
		// The Hub's convention: the sentence in X-Error-Message, the
		// machine code in X-Error-Code (unless the refusal names the code
		// huggingface_hub maps to an exception, e.g. RepoNotFound).
		h.Set("X-Error-Message", ae.HubText())
		h.Set("X-Error-Code", ae.Code)
	}
	for k, v := range ae.Headers {
		h.Set(k, v)
	}
	// A refusal is JSON whatever a handler had set for the answer it
	// meant to give (a user file's type and disposition): echo's Blob
	// keeps a Content-Type already set.
	h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	h.Del("Content-Disposition")
	if c.Request().Method == http.MethodHead {
		c.NoContent(ae.Status)
		return
	}
	b := append(ae.AppendJSON(make([]byte, 0, 512), requestIDOf(c), hub), '\n')
	h.Set(echo.HeaderContentLength, strconv.Itoa(len(b)))
	c.Blob(ae.Status, echo.MIMEApplicationJSON, b)
}

// isHubPath reports whether a path belongs to the Hub API, where refusals
// follow the Hub's convention (docs/design.md §7): every path the Hub owns
// (hub.Owns: everything under /api/, the file routes, the LFS batch route
// and the repo pages) but the admin API.
func (s *Server) isHubPath(p string) bool {
	return !strings.HasPrefix(p, adminPathPrefix) && s.hub.Owns(p)
}

// writeJSON writes a complete JSON answer with its Content-Length, so that
// the answer is whole on the wire once flushed, even while the handler goes
// on (answerBeforeBody drains the request body after it).
func writeJSON(c echo.Context, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeJSONBytes(c, status, b)
}

// writeJSONBytes is writeJSON for a value already encoded as b, which it
// may append to.
func writeJSONBytes(c echo.Context, status int, b []byte) error {
	b = append(b, '\n')
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(b)))
	return c.Blob(status, echo.MIMEApplicationJSON, b)
}
