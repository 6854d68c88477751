// Package upstream implements mirror.Upstream over HTTP: it speaks to a
// Hub-compatible server (huggingface.co, another openxet) the way the
// stock clients do, its Hub API for revisions and file lists and its Xet
// CAS (or its resolve route) for file bytes.
//
// What it sends, as huggingface_hub and hf_xet do:
//
//   - Revision: GET /api/{type}s/{id}/revision/{rev} for the commit sha,
//     gated and lastModified, then GET /api/{type}s/{id}/tree/{sha}?recursive=true
//     page by page (Link: <…>; rel="next", on the upstream's host only) for
//     every file's size, git oid, LFS sha256 and xetHash. A xetHash that is
//     not 64 hex digits (a gated repo redacts it as 64 '*') is treated as
//     absent. Every sibling of the revision answer must be in the tree.
//   - Open of a file with a Xet hash: GET /api/{type}s/{id}/xet-read-token/{sha}
//     ({casUrl, accessToken, exp}, cached per repo and commit and asked for
//     again 30 s before exp or after a 401), then
//     GET {casUrl}/v1/reconstructions/{hash} with Range: bytes=S-E for
//     windows of ReconstructionWindow bytes, then each term's fetch_info URL
//     with Range: bytes={url_range}. The chunks are decoded (xet.DecodeChunks)
//     and cut to the terms and to offset_into_first_range. Fetch and CAS
//     requests follow no redirect.
//   - Open of any other file: GET /{prefix}{id}/resolve/{sha}/{path}
//     (prefix "", "datasets/" or "spaces/"), following redirects to other
//     hosts (the Hub sends LFS files to a CDN), Range: bytes=offset- with a
//     206 and its Content-Range required when offset > 0.
//
// Trust: Options.Token goes as "Authorization: Bearer" to the upstream's
// own scheme and host only (a redirect elsewhere, even to a subdomain,
// drops it; the CAS gets the access token of the token answer, a fetch URL
// nothing). Every answer is bounded (MaxJSONBytes, MaxFiles, the lengths a
// reconstruction and a Content-Length promise) and checked before its
// bytes are given out; the bytes themselves are not hashed here, the
// caller checks them against the File.
//
// Errors wrap exactly one of mirror.ErrNotFound (404, 401, 403, with the
// X-Error-Code in the *Error), mirror.ErrUnreachable (connection errors,
// timeouts, 5xx and 429 left after Retries, each retry after a doubling
// backoff or the answer's Retry-After) and mirror.ErrBadAnswer (a body that
// does not parse or add up, an unexpected status), in an *Error that says
// which request and why; a done context ends a call with the context's
// error. Open's own argument checks return plain errors.
//
// Resources: MaxConns caps the HTTP requests open to the upstream, all its
// hosts together. A JSON answer holds its slot while it is read; a stream
// of Open holds one slot while one of its requests is open (the stream
// closes one before it sends the next) and gives it back on Close, so
// MaxConns streams open at once use them all. A stream's memory is bounded
// whatever the file's size: one reconstruction window's answer (a few KiB
// per GiB of file) and about 4 MiB of chunk data (a batch of at most
// 2 MiB of whole chunks read, and its decoded copy). The Client is safe for
// concurrent use and keeps no global state; its only state is the CAS
// token cache (at most 1024 entries) and the connection slots.
package upstream
