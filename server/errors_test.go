package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/budget"
	"openxet/hub"
	"openxet/limits"
	"openxet/mirror"
	"openxet/refusal"
	"openxet/store"
	"openxet/work"
	"openxet/xet"

	"openxet/store/accounts"
)

// TestEveryErrorHasItsMeaning pushes every exported error of xet, store,
// limits and budget (and the server's own) through the one mapping table.
func TestEveryErrorHasItsMeaning(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("context: %w", err) }
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{xet.ErrBadHash, 400, "bad_request"},
		{xet.ErrInvalidXorb, 400, "invalid_xorb"},
		{xet.ErrInvalidShard, 400, "invalid_shard"},
		{xet.ErrHashMismatch, 400, "hash_mismatch"},
		{xet.ErrTooLarge, 413, "payload_too_large"},
		{xet.ErrBadRange, 400, "bad_request"},
		{xet.ErrRangeNotSatisfiable, 416, "range_not_satisfiable"},
		{store.ErrNotFound, 404, "not_found"},
		{store.ErrMissingXorb, 400, "invalid_shard"},
		{store.ErrInvalidShard, 400, "invalid_shard"},
		{accounts.ErrBadTenant, 400, "bad_request"},
		{accounts.ErrReservedName, 400, "bad_request"},
		{accounts.ErrNotOrg, 400, "bad_request"},
		{accounts.ErrBadRole, 400, "bad_request"},
		{accounts.ErrNameTaken, 409, "conflict"},
		{accounts.ErrLastAdmin, 409, "conflict"},
		{accounts.ErrUserInactive, 409, "conflict"},
		{store.ErrBadRepoName, 400, "bad_request"},
		{store.ErrBadSetting, 400, "bad_request"},
		{store.ErrRepoExists, 409, "conflict"},
		{store.ErrRefMoved, 409, "conflict"},
		{store.ErrIndexInUse, 503, "unavailable"},
		{fmt.Errorf("%w (%w): refusing writes", store.ErrIndexLockLost, store.ErrUnavailable), 503, "unavailable"},
		{fmt.Errorf("%w: index: %w", store.ErrUnavailable, errors.New("database is locked (5) (SQLITE_BUSY)")), 503, "unavailable"},
		{store.ErrCollecting, 503, "unavailable"},
		{store.ErrFileInRepo, 409, "conflict"},
		{store.ErrRefExists, 409, "conflict"},
		{store.ErrCollectorBusy, 409, "conflict"},
		{store.ErrNotBranch, 400, "bad_request"},
		{store.ErrBadRefName, 400, "bad_request"},
		{store.ErrEntryNotFound, 404, "not_found"},
		{store.ErrNoBranch, 404, "not_found"},
		{&store.OverQuotaError{Tenant: "a", QuotaBytes: 10, UsageBytes: 9, SizeBytes: 2}, 403, "quota_exceeded"},
		{&store.CopyRefusedError{From: store.RepoID{Tenant: "a", Type: "model", Name: "m"}, Refused: []store.CopyRefusal{{Reason: "no revision of a/m has a Xet file of hash 00"}}}, 404, "not_found"},
		{&limits.QuotaError{Tenant: "a", Quota: 10, Usage: 9, Size: 2, Verdict: limits.QuotaExceeded}, 403, "quota_exceeded"},
		{&limits.QuotaError{Tenant: "a", Quota: 10, Usage: 1, Pending: 8, Size: 2, Verdict: limits.QuotaPending}, 503, "quota_pending"},
		{&limits.RateError{Limit: "tenant", Decision: limits.Decision{RetryAfter: 1500 * time.Millisecond}}, 429, "rate_limited"},
		{limits.ErrLimitsUnavailable, 503, "unavailable"},
		{limits.ErrTenantSuspended, 403, "tenant_suspended"},
		{&budget.BusyError{RetryAfter: time.Second, Share: "budget"}, 503, "memory_busy"},
		{&budget.TooLargeError{N: 10, Limit: 5, Share: "credential"}, 413, "payload_too_large"},
		{&work.BusyError{RetryAfter: time.Second, AtShare: true, Waited: 10 * time.Second}, 503, "unavailable"},
		{fmt.Errorf("%w: %w", errAnswerTooLarge, &budget.TooLargeError{N: 10, Limit: 5}), 413, "answer_too_large"},
		{fmt.Errorf("%w: %w", errTermsTooLarge, &budget.TooLargeError{N: 10, Limit: 5}), 413, "answer_too_large"},
		{errUnauthorized, 401, "unauthorized"},
		{errForbidden, 403, "forbidden"},
		{errFetchURLInvalid, 403, "forbidden"},
		{errLengthRequired, 411, "length_required"},
		{errBodyTooLarge, 413, "payload_too_large"},
		{errBadRequest, 400, "bad_request"},
		{errNotFound, 404, "not_found"},
		{&hub.TooLargeError{Message: "the body is over the limit", Hint: "send less"}, 413, "payload_too_large"},
		{&hub.NotFoundError{Kind: hub.EntryNotFound, Message: "no such file"}, 404, "not_found"},
		{&hub.NamespaceError{Message: "another namespace"}, 403, "forbidden"},
		{&hub.ExistsError{Message: "repository a/b already exists", Cause: store.ErrRepoExists}, 409, "conflict"},
		{&hub.NotServedError{What: "likes"}, 501, "not_served"},
		{&hub.StaleParentError{Parent: "p", Branch: "main", Cause: store.ErrRefMoved}, 412, "precondition_failed"},
		{&hub.AnonymousError{}, 401, "unauthorized"},
		{&hub.CardError{Message: "the metadata of the card is a YAML list, not a mapping"}, 400, "bad_request"},
		{fmt.Errorf("%w: %w", refusal.Wrap(refusal.ErrUpstreamUnreachable, "the upstream u is unreachable"), mirror.ErrUnreachable), 503, "upstream_unreachable"},
		{fmt.Errorf("%w: %w", refusal.Wrap(refusal.ErrUpstreamBadAnswer, "the upstream u answered f wrongly"), mirror.ErrBadAnswer), 502, "upstream_bad_answer"},
		{errors.New("disk on fire"), 500, "internal"},
	}
	for _, c := range cases {
		for _, err := range []error{c.err, wrap(c.err)} {
			ae := toAPIError(err)
			if ae.Status != c.status || ae.Code != c.code {
				t.Errorf("%v: got %d %s, want %d %s", err, ae.Status, ae.Code, c.status, c.code)
			}
			if ae.Message == "" {
				t.Errorf("%v: no message", err)
			}
			if (ae.Status == 429 || ae.Status == 503) && ae.RetryAfter < 1 {
				t.Errorf("%v: no Retry-After", err)
			}
		}
	}
	if ae := toAPIError(errors.New("secret-token-hf_oxt_x")); ae.Message != "internal error" {
		t.Errorf("internal errors must not show their text: %q", ae.Message)
	}
}

// TestErrorTableOrder: where one error wraps another's, the part of the
// table searched first decides: a Hub refusal over the store error it
// refuses, the store's unavailable over limits' (whose read it failed).
func TestErrorTableOrder(t *testing.T) {
	body := map[string]any{"url": "http://x/a/b"}
	for _, c := range []struct {
		name string
		err  error
		want apiError
	}{
		{"repo exists", &hub.ExistsError{Message: "You already created this model repo", Fields: body, Cause: store.ErrRepoExists},
			apiError{Status: 409, Code: "conflict", Message: "You already created this model repo", Fields: body}},
		{"stale parent", &hub.StaleParentError{Parent: "abc", Branch: "main", Cause: fmt.Errorf("commit: %w", store.ErrRefMoved)},
			apiError{Status: 412, Code: "precondition_failed", Message: "parent commit abc is not the head of main", Hint: "the branch was updated since you opened this page. Please refresh and try again. Pull the new head and commit again"}},
		{"entry not found", &hub.NotFoundError{Kind: hub.EntryNotFound, Message: "no file a.txt"},
			apiError{Status: 404, Code: "not_found", Message: "no file a.txt", Hint: "check the repo id, revision and path", Headers: map[string]string{"X-Error-Code": "EntryNotFound"}}},
		{"moved repo", &hub.NotFoundError{Kind: hub.RepoNotFound, Message: "repository a/b was moved to a/c", MovedTo: "a/c"},
			apiError{Status: 404, Code: "not_found", Message: "repository a/b was moved to a/c", Hint: "use the new name, a/c", Headers: map[string]string{"X-Error-Code": "RepoNotFound"}}},
		{"limits unreadable", fmt.Errorf("limits for tenant %q: %w: %w", "a", limits.ErrLimitsUnavailable, fmt.Errorf("%w: index: %w", store.ErrUnavailable, errors.New("locked"))),
			apiError{Status: 503, Code: "unavailable", RetryAfter: storeRetryAfterSeconds, Message: "the server's storage (index or bucket) is busy or cannot be reached", Hint: "retry after the delay in Retry-After; the request did not complete"}},
	} {
		got := *toAPIError(c.err)
		got.Cause = nil
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s:\n%s", c.name, diff)
		}
	}
}

// TestDedupMissShortcut: a dedup query that misses answers through
// notFound, without toAPIError's search; the answer must be the one the
// table gives for the same error, status, code, message and hint alike.
func TestDedupMissShortcut(t *testing.T) {
	miss := fmt.Errorf("chunk %s: %w", xet.Hash{9}, store.ErrNotFound)
	got, want := notFound(miss), toAPIError(miss)
	if got.Status != want.Status || got.Code != want.Code || got.Message != want.Message || got.Hint != want.Hint || got.Cause != want.Cause {
		t.Fatalf("shortcut %+v, table %+v", got, want)
	}

	e := newTestEnv(t)
	tok := e.credential("alice", "write")
	r := e.do("GET", "/v1/chunks/default/"+xet.Hash{9}.String(), tok, nil)
	wantError(t, r, 404, "not_found")
	m := r.json(t)
	if m["message"] != miss.Error() || m["hint"] != want.Hint {
		t.Fatalf("body %s, want message %q and hint %q", r.Body, miss.Error(), want.Hint)
	}
}
