// Package hub is openxet's Hugging Face Hub API: the routes that
// huggingface_hub, the hf CLI and @huggingface/hub call at HF_ENDPOINT
// (repo creation and deletion, repo info, trees, paths-info, preupload,
// commits and their history, copies between a tenant's repos, the git-lfs
// batch route and the LFS basic transfer (objects PUT without Xet, stored
// as Xet files through ingest.File), the xet token endpoints that
// hand out CAS tokens,
// resolve and raw downloads, branches, tags and super-squash, listings,
// whoami, auth-check (authcheck.go: may this caller read, or change, the
// repo), the card check POST /api/validate-yaml, which needs no token
// (validate.go), the safetensors metadata of a sharded checkpoint
// (safetensors.go),
// repo settings, moves and duplicates), the answers for the Hub
// features it does not serve (notserved.go), and the pages a browser
// reaches (the landing page at / and the repo pages behind the URLs the hf
// CLI prints).
//
// A repo id whose namespace is not a local tenant may be a mirrored repo
// of an upstream Hub (Config.Mirror, mirror.go, docs/mirror.md): it is read
// from a repo of the mirror's tenant, shown under the upstream's id, and
// never written.
//
// Repos live under a namespace equal to the tenant; a credential writes
// only its own tenant's repos, and reads those and the repos other tenants
// shared (visibility internal or public, docs/sharing.md). Another
// tenant's repo that is not shared is reported as not found; a write to
// one that is, as forbidden (repoID).
//
// The package owns the Hub's routes and answers, nothing of the request
// pipeline around them. The server that mounts it (package server, through
// New and Mount) passes in, as the func fields of Config, what it owns:
// the guard (auth, scopes, rate limits, in-flight cap; GuardURLToken for
// the LFS upload URL) and who a request acts as, upload settings, memory reservations, tenant limits, CAS tokens, the
// reconstructed file stream, the collector, readiness. Handlers return
// errors, never write refusals: the ones hub decides are its own typed
// errors (errors.go) or wrap refusal's sentinels; the server's one table
// gives them their status and code and renders every error,
// on the paths Owns reports in the Hub's convention (docs/design.md §7). hub never
// imports server.
package hub
