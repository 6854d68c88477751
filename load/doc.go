// Package load drives load scenarios against a running openxet server over
// HTTP, the way the stock client does, and reports what the server's tenants
// got: per-route latency percentiles, per-tenant throughput and Jain's
// fairness index, refusals by code, and the server's memory against its
// budget. It is what `openxet load` runs.
//
// It owns:
//
//   - the scenarios (Run): ManyTenants, honest tenants at moderate rates
//     within the default limits; Abuse, the same tenants alone and then beside
//     one abusive tenant (a flooding credential, hundreds of slow reads held
//     open, uploads over a small quota) and a client address spraying bad
//     tokens;
//   - the honest workload: generated xorbs (a pure function of a seed, so
//     nothing is kept to check downloads against), shard uploads,
//     reconstructions with Range, fetch-URL range reads, decoding and
//     comparing every downloaded byte, dedup queries;
//   - the correctness checks that fail a run: an honest request refused
//     (403, 429, 503) or answered wrongly, a wrong byte, a limit's envelope
//     exceeded (the flooding credential's rate, the auth-failure rate, the
//     quota), server RSS over its budget plus Config.RSSOverheadBytes, an
//     operation still running after Config.DrainTimeout. Timings never fail
//     a run;
//   - the report (Report): text tables, JSON, and one self-contained HTML
//     page with inline SVG plots.
//
// It does not own the server (it is a client: it imports no server package
// and knows the server only through its HTTP API, admin API and /metrics),
// flags or environment (cli fills Config), or process exit codes.
//
// Safety: Run refuses a server that is not on loopback unless
// Config.AllowRemote; every loop ends by itself after the phases; the
// credentials a run makes are revoked before it returns.
package load
