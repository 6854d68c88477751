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
//     quota), a node refusing held reads for its in-flight cap while the
//     run never had enough readers there to reach it, server RSS over its
//     budget plus Config.RSSOverheadBytes, an honest tenant's usage that is
//     not what it stored, a limits override not enforced by a node within
//     the documented 10 s, an operation still running after
//     Config.DrainTimeout. Timings never fail a run;
//   - several nodes of one deployment (Config.Servers): admin calls go to
//     the first; each honest credential's worker takes the nodes in turn,
//     request by request (an upload's xorb and shard go to different
//     nodes, so each tenant's usage is built through all of them and read
//     back through one that may not have stored it), and so do the
//     abuser's attacks. Rate limits, in-flight caps and memory are per
//     node: each node's admitted requests, held reads and RSS are checked
//     against that node's own limits (N nodes may admit N times one
//     node's rate). Quotas are global: the abuser's usage over all nodes
//     against its quota (within the uploads in flight at once when there
//     are several nodes), and every honest tenant's usage against what it
//     stored through all of them;
//   - the measuring that fills the report in: requests and operations
//     recorded, summarized by phase, class, route and tenant.
//
// It does not own the report's shape or its rendering (package
// load/report owns Report and the types under it, aliased here, and writes
// them as text and HTML), the measurement programs for BENCHMARKS.md
// (load/cmd/...), the server (it is a client: it imports no server package
// and knows the server only through its HTTP API, admin API and /metrics),
// flags or environment (cli fills Config), or process exit codes.
//
// Safety: Run refuses a server that is not on loopback unless
// Config.AllowRemote; every loop ends by itself after the phases; the
// credentials a run makes are revoked before it returns.
package load
