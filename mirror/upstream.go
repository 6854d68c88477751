package mirror

import (
	"context"
	"errors"
	"io"
	"time"

	"openxet/xet"
)

// Upstream is the Hub-compatible server a mirror pulls from
// (docs/design.md §12), as the mirror uses it. mirror/upstream implements
// it over HTTP for huggingface.co and for another openxet.
type Upstream interface {
	// Revision resolves rev (a branch, a tag or a full commit sha) of repo
	// and returns the commit it names with its whole file list.
	Revision(ctx context.Context, repo RepoRef, rev string) (Revision, error)
	// Open streams the bytes of f, a file of the revision sha of repo,
	// from offset to its end. The stream is what the upstream sent: the
	// caller checks it against f (its size and Xet hash) before it keeps
	// any of it.
	Open(ctx context.Context, repo RepoRef, sha string, f File, offset int64) (io.ReadCloser, error)
}

// RepoRef names a repo of the upstream.
type RepoRef struct {
	// Type is "model", "dataset" or "space".
	Type string
	// ID is "namespace/name" as the upstream spells it.
	ID string
}

// Revision is one commit of an upstream repo.
type Revision struct {
	// SHA is the full commit id (40 lowercase hex).
	SHA string
	// Files is every file of the commit, sorted by Path.
	Files []File
	// LastModified is the commit's date as the upstream gave it (zero if
	// it gave none).
	LastModified time.Time
	// Gated is true when the upstream said the repo is gated ("auto" or
	// "manual"); its files open only with an upstream token that has
	// access.
	Gated bool
	// Title and Message are the commit's as the upstream lists it (its
	// commits route); both "" when it gave none.
	Title, Message string
	// Tag is true when the revision asked for is a name the upstream lists
	// among its tags (its refs route), not a branch.
	Tag bool
}

// File is one file of an upstream revision.
type File struct {
	Path string
	Size int64
	// XetHash is the file's Xet hash, lowercase hex; "" when the upstream
	// gave none or one that is not 64 hex digits (a gated repo's redacted
	// hash is 64 '*').
	XetHash string
	// SHA256 is the LFS object id (lowercase hex) of an LFS or Xet file;
	// "" for a regular file kept in git.
	SHA256 string
	// GitOID is the git blob id: of the file itself for a regular file, of
	// its LFS pointer otherwise.
	GitOID string
}

// Errors of an Upstream, wrapped with the detail.
var (
	// ErrNotFound: the upstream does not have the repo, revision or file,
	// or will not show it to the mirror's token (private, gated without
	// access).
	ErrNotFound = errors.New("not found upstream")
	// ErrUnreachable: the upstream did not answer (connection refused,
	// timeout, 5xx after retries).
	ErrUnreachable = errors.New("upstream unreachable")
	// ErrBadAnswer: the upstream answered something that is not what the
	// Hub answers (a shape, size or hash that does not check out); such an
	// answer is refused and logged, never served.
	ErrBadAnswer = errors.New("upstream answered something invalid")
	// ErrNoRelay is a Relayer's refusal to relay a window now (Plan): the
	// caller answers from the store, after the pull.
	ErrNoRelay = errors.New("no relay of this window")
)

// Relayer is what an Upstream offers for the first download of a file not
// mirrored yet to overlap its pull (docs/mirror.md, "First downloads"):
// the client reads the upstream's own plan of the file through the
// mirror while the pull stores it, each upstream range fetched once for
// both. mirror/upstream implements it.
type Relayer interface {
	// Plan is the upstream's reconstruction of bytes [start, end) of f, a
	// Xet file of the revision sha of repo; its ranges can be read with
	// Relay until the time returned, and a pull of f meanwhile reads them
	// from the same place.
	Plan(ctx context.Context, repo RepoRef, sha string, f File, start, end int64) (xet.Reconstruction, time.Time, error)
	// Relay opens bytes [start, end] (end inclusive) of the upstream xorb
	// x, as a plan of the file h named them, calling acquire before it
	// fetches them from the upstream (not when they were fetched already).
	// ErrNotFound when no plan of h under way names them.
	Relay(ctx context.Context, h, x xet.Hash, start, end uint64, acquire func() (release func(), err error)) (io.ReadCloser, error)
	// Quiet returns once no client has read the relay of h for a moment
	// (or it has none), and at the latest well before the relay ends: the
	// pull under a relay waits for it, so that it takes no CPU from the
	// download it stores.
	Quiet(ctx context.Context, h xet.Hash) error
}
