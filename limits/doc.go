// Package limits decides whether a request or an upload may proceed: the
// per-node request limits and the quota arithmetic of docs/design.md §4 and docs/design.md §5.
//
// It owns:
//
//   - Table: keyed GCRA rate limiters with a hard key cap, used per tenant,
//     per credential (keyed by sha256 of the credential id, never the
//     secret) and, inside AuthFailures, per client IP;
//   - InFlight: requests in progress per credential, with a cap, and per
//     tenant for a tenant whose Limits set MaxInFlightPerTenant (the
//     server's anonymous pool, whose limits are Anonymous);
//   - each tenant's requests in progress, approximately and without a
//     lock (Admission.TenantInFlight), which the server's turns read: no
//     limit refuses on it;
//   - AuthFailures: the failed-authentication limit per client IP;
//   - Gate: the three request limits applied in design order, with refunds
//     so that one limit's refusal does not spend another's allowance;
//   - Effective: each tenant's limits, defaults plus overrides, through a
//     cache of at most TTL (10 s) that fails closed;
//   - CheckQuota and Pending: the byte-quota decision, counting uploads
//     still in flight;
//   - the errors callers map to answers: *RateError (ErrRateLimited),
//     *QuotaError (ErrQuotaExceeded, ErrQuotaPending),
//     ErrLimitsUnavailable, ErrInvalidOverrides.
//
// It does not own HTTP (status codes, headers and bodies are chosen by
// server), storage (the overrides and usage come from an OverrideSource and
// from the caller), metrics registration (types expose Stats methods and
// Refusals counters that server publishes) or configuration parsing.
//
// Rate limits and in-flight caps are per node: every process keeps its own
// counters, so a client spreading requests over N nodes gets up to N times
// the configured rate (deployment-wide rate = per-node rate × nodes).
// Quotas are deployment-wide: CheckQuota only decides from the usage the
// caller read, and the store enforces the quota again at commit.
//
// Time is an input. Everything that decides takes now time.Time; pass
// time.Now() read once per request (keeping its monotonic reading), not a
// value from UTC(), Round or a parsed header. Effective, which must read
// the clock for its cache, has a Now field.
package limits
