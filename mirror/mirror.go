package mirror

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"openxet/refusal"
	"openxet/store"
	"openxet/work"
	"openxet/xet"

	"openxet/store/accounts"
)

// Defaults of Config (docs/configuration.md, [mirror]).
const (
	DefaultTenant     = "mirror"
	DefaultVisibility = "internal"
	DefaultRefresh    = 10 * time.Minute
	DefaultStaleAfter = 5 * time.Second
	// DefaultDownFor is how long the mirror takes the upstream for down
	// after it did not answer: meanwhile a branch or tag mirrored before
	// is served at once as it was, and what is not mirrored is refused at
	// once, instead of every request waiting out the upstream again.
	DefaultDownFor = 30 * time.Second
	// DefaultFirstWait bounds how long a request waits for a revision
	// that is not mirrored yet; past it the request is refused (503,
	// retry) while the resolution goes on, so that a retry finds it.
	DefaultFirstWait              = 20 * time.Second
	DefaultMaxUpstreamConnections = 8
	// DefaultSegmentBytes is how much of a file one upstream stream pulls
	// before it gives its connection back and queues again, so that one
	// tenant's long pull cannot hold the connections from the others.
	DefaultSegmentBytes = 64 << 20
	// MaxRegularFileBytes caps a regular (non-LFS) file of an upstream
	// revision, which is read whole into memory and stored as a blob: the
	// Hub's own cap for a regular file (10 MB).
	MaxRegularFileBytes = 10 << 20
)

// Local refs of a mirrored repo. Every recorded commit is pinned by a ref
// of its own, so that it stays a revision of the repo (and reindex keeps
// it) until eviction deletes it; the revision names the clients asked for
// (main, a tag, refs/pr/1) point at the commit the upstream last gave.
const (
	pinRefPrefix  = "refs/mirror/commits/"
	nameRefPrefix = "refs/mirror/names/"
	// tagRefPrefix marks a name the upstream lists as a tag: the refs
	// route shows it among the tags (it resolves through its name ref).
	tagRefPrefix = "refs/mirror/tags/"
)

// Config is what a Mirror needs. Store and Upstream are required; every
// zero field but QuotaBytes takes its default.
type Config struct {
	Store    *store.Store
	Upstream Upstream
	// UpstreamName names the upstream in sentences and logs (its URL).
	UpstreamName string
	// Tenant owns every mirrored repo and the bytes pulled for them.
	Tenant string
	// Visibility of the mirrored repos: private, internal or public
	// (docs/sharing.md).
	Visibility string
	// Refresh is how long a branch or tag resolved against the upstream is
	// taken as it was; a full commit sha never expires.
	Refresh time.Duration
	// QuotaBytes caps the tenant's stored bytes; over it the least
	// recently read revisions are evicted. 0 or less: no cap.
	QuotaBytes int64
	// MaxUpstreamConnections is how many upstream streams may be open at
	// once, granted fairly between the tenants waiting.
	MaxUpstreamConnections int
	// SegmentBytes is how much of a file one stream pulls before it
	// queues again.
	SegmentBytes int64
	// DedupGlobal lets pulled files reference any tenant's chunks
	// (server.dedup_scope = "global").
	DedupGlobal bool
	// Released tells the collector revisions were dropped (may be nil).
	Released func()
	Logger   *slog.Logger
	// StaleAfter is how long a read waits for a branch or tag due to be
	// resolved again when a revision of it is stored; past it the stored
	// one is served (stale) while the resolution goes on.
	StaleAfter time.Duration
	// DownFor is how long the upstream is taken for down after it did
	// not answer (DefaultDownFor when 0).
	DownFor time.Duration
	// FirstWait bounds the wait for a revision not mirrored yet
	// (DefaultFirstWait when 0).
	FirstWait time.Duration
	// Now is the clock (time.Now when nil); After the timer (time.After
	// when nil).
	Now   func() time.Time
	After func(d time.Duration) <-chan time.Time
}

// Stats counts what the mirror did since it started.
type Stats struct {
	// UpstreamBytes is the file bytes read from the upstream.
	UpstreamBytes int64
	// UpstreamFiles is the files pulled (one per coalesced pull).
	UpstreamFiles int64
	// Revisions is the revisions resolved against the upstream.
	Revisions int64
	// Hits is the reads answered from what was mirrored already.
	Hits int64
	// Stale is the reads answered from the mirror because the upstream
	// was unreachable when a branch or tag was due to be resolved again.
	Stale int64
	// Refused is the upstream answers refused as invalid (ErrBadAnswer).
	Refused int64
	// Evicted is the revisions evicted over the quota.
	Evicted int64
	// RelayPlans is the reconstructions answered from the upstream's plan
	// while the file was not stored yet (RelayPlan).
	RelayPlans int64
	// RelayBytes is the bytes of upstream xorbs served through relays.
	RelayBytes int64
}

// Mirror serves the repos of an upstream Hub from the local store
// (docs/design.md §12). It is safe for concurrent use.
type Mirror struct {
	cfg   Config
	store *store.Store
	up    Upstream
	log   *slog.Logger
	conns *work.Pool

	mu      sync.Mutex
	checked map[string]time.Time // local repo + "@" + rev → when resolved upstream
	// downUntil is when the upstream, which did not answer (in time), is
	// asked again; zero once it answered.
	downUntil time.Time
	answers   uint64               // resolutions the upstream answered, for markDown
	used      map[string]time.Time // local repo + "@" + sha → last read
	flights   map[string]*flight   // what is being pulled, by key
	// relayPulls is the files whose pull under a relay is waiting for
	// the relay's clients or under way (RelayPlan), by flight key.
	relayPulls map[string]struct{}
	// recording serializes the recording of revisions per local repo, so
	// that two revisions recorded at once do not both create the repo.
	recording map[store.RepoID]*sync.Mutex
	evictMu   sync.Mutex

	upstreamBytes, upstreamFiles, revisions, hits, stale, refused, evicted, relayPlans, relayBytes atomic.Int64
}

// flight is one pull under way; its waiters wait on done.
type flight struct {
	done chan struct{}
	err  error
}

// New checks cfg and builds the Mirror; it does no I/O.
func New(cfg Config) (*Mirror, error) {
	if cfg.Store == nil || cfg.Upstream == nil {
		return nil, errors.New("mirror.New: Store and Upstream are required")
	}
	if cfg.Tenant == "" {
		cfg.Tenant = DefaultTenant
	}
	if err := accounts.ValidTenant(cfg.Tenant); err != nil {
		return nil, fmt.Errorf("mirror.New: tenant: %w", err)
	}
	if cfg.Visibility == "" {
		cfg.Visibility = DefaultVisibility
	}
	switch cfg.Visibility {
	case "private", "internal", "public":
	default:
		return nil, fmt.Errorf("mirror.New: visibility %q is not private, internal or public", cfg.Visibility)
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.MaxUpstreamConnections <= 0 {
		cfg.MaxUpstreamConnections = DefaultMaxUpstreamConnections
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = DefaultSegmentBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.DownFor <= 0 {
		cfg.DownFor = DefaultDownFor
	}
	if cfg.FirstWait <= 0 {
		cfg.FirstWait = DefaultFirstWait
	}
	if cfg.UpstreamName == "" {
		cfg.UpstreamName = "the upstream"
	}
	conns := work.New(work.Config{Slots: cfg.MaxUpstreamConnections, TenantShare: 1, Wait: time.Hour})
	return &Mirror{cfg: cfg, store: cfg.Store, up: cfg.Upstream, log: cfg.Logger, conns: conns,
		checked: map[string]time.Time{}, used: map[string]time.Time{}, flights: map[string]*flight{},
		relayPulls: map[string]struct{}{},
		recording:  map[store.RepoID]*sync.Mutex{}}, nil
}

// Served counts a file read answered from what the mirror had stored
// that did not go through Fetch (which counts its own): the
// reconstruction of a Xet download, in Stats.Hits.
func (m *Mirror) Served() { m.hits.Add(1) }

// UpstreamWaiting is how many upstream streams wait for a connection now.
func (m *Mirror) UpstreamWaiting() int { return m.conns.Stats().Waiting }

// Tenant is the tenant that owns the mirrored repos.
func (m *Mirror) Tenant() string { return m.cfg.Tenant }

// Visibility is the visibility of every mirrored repo.
func (m *Mirror) Visibility() string { return m.cfg.Visibility }

// Stats returns the counters.
func (m *Mirror) Stats() Stats {
	return Stats{UpstreamBytes: m.upstreamBytes.Load(), UpstreamFiles: m.upstreamFiles.Load(), Revisions: m.revisions.Load(),
		Hits: m.hits.Load(), Stale: m.stale.Load(), Refused: m.refused.Load(), Evicted: m.evicted.Load(),
		RelayPlans: m.relayPlans.Load(), RelayBytes: m.relayBytes.Load()}
}

// Names. The local repo of upstream repo ns/name is a repo of the mirror's
// tenant named escape(ns) + "__" + name, where escape writes each "_" of
// ns as "_x": an escaped namespace has no "__", so the first "__" of a
// local name is the separator and the name maps back.

// LocalRepo is the local repo that mirrors upstream repo ns/name of type
// typ. ErrNotFound (a store.ErrNotFound) when ns/name cannot be a mirrored
// repo (a name too long for a local one, or not a repo name).
func (m *Mirror) LocalRepo(typ, ns, name string) (store.RepoID, error) {
	local := store.RepoID{Tenant: m.cfg.Tenant, Type: typ, Name: strings.ReplaceAll(ns, "_", "_x") + "__" + name}
	if ns == "" || strings.Contains(ns, "/") || store.ValidRepoName(name) != nil || store.ValidRepoName(local.Name) != nil {
		return store.RepoID{}, fmt.Errorf("%s/%s cannot be mirrored (not a repo id, or namespace and name together over 94 characters): %w", ns, name, store.ErrNotFound)
	}
	return local, nil
}

// PublicRepo is the repo id the clients name for local, a repo of the
// mirror's tenant: ns/name as the upstream spells it. ok is false for a
// repo that is not a mirrored one.
func (m *Mirror) PublicRepo(local store.RepoID) (store.RepoID, bool) {
	if local.Tenant != m.cfg.Tenant {
		return local, false
	}
	ns, name, ok := strings.Cut(local.Name, "__")
	if !ok || ns == "" || name == "" {
		return local, false
	}
	return store.RepoID{Tenant: strings.ReplaceAll(ns, "_x", "_"), Type: local.Type, Name: name}, true
}

func (m *Mirror) ref(local store.RepoID) RepoRef {
	pub, _ := m.PublicRepo(local)
	return RepoRef{Type: local.Type, ID: pub.String()}
}

// Repo returns the local repo that serves upstream repo ns/name of type
// typ, recording it (with its main revision) the first time it is asked
// for. ErrNotFound when ns is a local tenant (its repos are not mirrored),
// or the upstream does not have the repo; a refusal of kind
// refusal.ErrUpstreamUnreachable when it is not mirrored and the upstream
// does not answer.
func (m *Mirror) Repo(ctx context.Context, typ, ns, name string) (store.RepoID, error) {
	local, err := m.LocalRepo(typ, ns, name)
	if err != nil {
		return local, err
	}
	if ns == m.cfg.Tenant {
		return local, fmt.Errorf("%s is the mirror's tenant: %w", ns, store.ErrNotFound)
	}
	if _, err := m.store.Repo(ctx, local); err == nil {
		return local, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return local, err
	}
	if isTenant, err := m.store.HasTenant(ctx, ns); err != nil {
		return local, err
	} else if isTenant {
		return local, fmt.Errorf("%s is a local tenant: %w", ns, store.ErrNotFound)
	}
	if _, err := m.Resolve(ctx, local, "main"); err != nil {
		return local, err
	}
	return local, nil
}

// isSHA reports whether rev is a full commit id (40 lowercase hex).
func isSHA(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for _, c := range rev {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Resolve returns the commit rev (a branch, a tag, a ref under refs/ or a
// full sha; HEAD is main) names in local, a mirrored repo. A full sha
// recorded once is served forever; a name is resolved against the upstream
// at most every Config.Refresh. When the upstream does not answer, a name
// resolved before is served as it was (counted and logged as stale); one
// never resolved is a refusal of kind refusal.ErrUpstreamUnreachable.
// ErrNotFound (store's) when the upstream does not have it.
func (m *Mirror) Resolve(ctx context.Context, local store.RepoID, rev string) (store.Commit, error) {
	if rev == "HEAD" || rev == "" {
		rev = "main"
	}
	key := local.Tenant + "/" + local.Type + "/" + local.Name + "@" + rev
	localRef := nameRefPrefix + rev
	if isSHA(rev) {
		localRef = rev
	}
	stored, serr := m.store.Resolve(ctx, local, localRef)
	if serr != nil && !errors.Is(serr, store.ErrNotFound) {
		return store.Commit{}, serr
	}
	m.mu.Lock()
	now := m.cfg.Now()
	fresh := serr == nil && (isSHA(rev) || now.Sub(m.checked[key]) < m.cfg.Refresh)
	down := now.Before(m.downUntil)
	answers := m.answers
	m.mu.Unlock()
	switch {
	case fresh:
		m.touch(local, stored.SHA)
		return stored, nil
	case down && serr == nil:
		m.stale.Add(1)
		m.touch(local, stored.SHA)
		return stored, nil
	case down:
		return store.Commit{}, m.unreachable(fmt.Sprintf("revision %s of %s", rev, m.ref(local).ID),
			fmt.Errorf("%w: it did not answer in time, and is asked again after %s", ErrUnreachable, m.cfg.DownFor))
	}
	type result struct {
		c   store.Commit
		err error
	}
	done := make(chan result, 1)
	resolve := func(ctx context.Context) {
		c, err := m.ask(ctx, local, rev, key, localRef)
		done <- result{c, err}
	}
	var r result
	if serr != nil {
		// Nothing stored: wait for the upstream at most Config.FirstWait;
		// the resolution goes on for a retry to find.
		go resolve(context.WithoutCancel(ctx))
		select {
		case r = <-done:
		case <-m.cfg.After(m.cfg.FirstWait):
			m.markDown(answers)
			return store.Commit{}, m.unreachable(fmt.Sprintf("revision %s of %s", rev, m.ref(local).ID),
				fmt.Errorf("%w: no answer within %s; the mirror goes on asking", ErrUnreachable, m.cfg.FirstWait))
		case <-ctx.Done():
			return store.Commit{}, ctx.Err()
		}
	} else {
		// A revision is stored: a slow upstream gets Config.StaleAfter,
		// then the stored one is served while the resolution goes on.
		go resolve(context.WithoutCancel(ctx))
		select {
		case r = <-done:
		case <-m.cfg.After(m.cfg.StaleAfter):
			m.markDown(answers)
			m.stale.Add(1)
			m.log.Warn("mirror: upstream slow, serving the revision mirrored before", "repo", m.ref(local).ID, "rev", rev, "sha", stored.SHA, "after", m.cfg.StaleAfter)
			m.touch(local, stored.SHA)
			return stored, nil
		case <-ctx.Done():
			return store.Commit{}, ctx.Err()
		}
	}
	c, err := r.c, r.err
	switch {
	case err == nil:
		m.touch(local, c.SHA)
		return c, nil
	case errors.Is(err, ErrUnreachable) && serr == nil:
		m.stale.Add(1)
		m.log.Warn("mirror: upstream unreachable, serving the revision mirrored before", "repo", m.ref(local).ID, "rev", rev, "sha", stored.SHA, "err", err)
		m.touch(local, stored.SHA)
		return stored, nil
	case errors.Is(err, ErrUnreachable):
		return store.Commit{}, m.unreachable(fmt.Sprintf("revision %s of %s", rev, m.ref(local).ID), err)
	case errors.Is(err, ErrNotFound):
		return store.Commit{}, fmt.Errorf("%s of %s: %w: %w", rev, m.ref(local).ID, store.ErrNotFound, err)
	}
	return store.Commit{}, err
}

// ask resolves rev against the upstream (one request per key at a time)
// and records what the answer says about the upstream: it answered, or it
// is down for Config.DownFor.
func (m *Mirror) ask(ctx context.Context, local store.RepoID, rev, key, localRef string) (store.Commit, error) {
	var c store.Commit
	err := m.coalesce(ctx, "rev:"+key, func(ctx context.Context) error {
		var err error
		c, err = m.record(ctx, local, rev)
		return err
	})
	if err == nil && c.SHA == "" {
		// Another request recorded it while this one waited.
		c, err = m.store.Resolve(ctx, local, localRef)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err == nil:
		m.checked[key] = m.cfg.Now()
		m.downUntil = time.Time{}
		m.answers++
	case errors.Is(err, ErrUnreachable):
		m.downUntil = m.cfg.Now().Add(m.cfg.DownFor)
	}
	return c, err
}

// markDown takes the upstream for down for Config.DownFor, unless it
// answered a resolution since answers were counted.
func (m *Mirror) markDown(answers uint64) {
	m.mu.Lock()
	if m.answers == answers {
		m.downUntil = m.cfg.Now().Add(m.cfg.DownFor)
	}
	m.mu.Unlock()
}

// unreachable is the refusal of what is not mirrored while the upstream
// does not answer.
func (m *Mirror) unreachable(what string, err error) error {
	return fmt.Errorf("%w: %w", refusal.Wrap(refusal.ErrUpstreamUnreachable,
		"the upstream %s is unreachable and %s is not mirrored yet", m.cfg.UpstreamName, what), err)
}

// badAnswer counts, logs and refuses an answer of the upstream that does
// not check out.
func (m *Mirror) badAnswer(what string, err error) error {
	m.refused.Add(1)
	m.log.Error("mirror: refused an invalid answer of the upstream", "what", what, "err", err)
	return fmt.Errorf("%w: %w: %w", refusal.Wrap(refusal.ErrUpstreamBadAnswer,
		"the upstream %s answered %s with something that does not check out; nothing of it was kept", m.cfg.UpstreamName, what), ErrBadAnswer, err)
}

// record resolves rev against the upstream and records the commit it
// names in local, with its regular files, and points the local refs at it.
func (m *Mirror) record(ctx context.Context, local store.RepoID, rev string) (store.Commit, error) {
	m.mu.Lock()
	mu := m.recording[local]
	if mu == nil {
		mu = &sync.Mutex{}
		m.recording[local] = mu
	}
	m.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	ref := m.ref(local)
	up, err := m.up.Revision(ctx, ref, rev)
	if err != nil {
		if errors.Is(err, ErrBadAnswer) {
			return store.Commit{}, m.badAnswer(fmt.Sprintf("revision %s of %s", rev, ref.ID), err)
		}
		return store.Commit{}, err
	}
	m.revisions.Add(1)
	if !isSHA(up.SHA) || isSHA(rev) && up.SHA != rev {
		return store.Commit{}, m.badAnswer(fmt.Sprintf("revision %s of %s", rev, ref.ID), fmt.Errorf("commit id %q", up.SHA))
	}
	refs := []string{pinRefPrefix + up.SHA}
	if !isSHA(rev) {
		refs = append(refs, nameRefPrefix+rev)
	}
	if up.Tag {
		refs = append(refs, tagRefPrefix+rev)
	}
	if c, err := m.store.Resolve(ctx, local, up.SHA); err == nil {
		// Known already: only the names move.
		if err := m.store.RecordCommit(ctx, local, m.cfg.Visibility, c, refs...); err != nil {
			return store.Commit{}, err
		}
		return c, nil
	}
	for _, f := range up.Files {
		// The rules of openxet's own commits: a path with a ".git" or ".."
		// component would write into a client's git work tree, or out of
		// the folder it downloads into.
		if why := store.PathProblem(f.Path); why != "" {
			return store.Commit{}, m.badAnswer(fmt.Sprintf("revision %s of %s", rev, ref.ID), fmt.Errorf("file %q: %s", f.Path, why))
		}
	}
	tree := make([]store.TreeEntry, 0, len(up.Files))
	for _, f := range up.Files {
		e, err := m.entry(ctx, ref, up.SHA, f)
		if err != nil {
			return store.Commit{}, err
		}
		tree = append(tree, e)
	}
	created := up.LastModified
	if created.IsZero() {
		created = m.cfg.Now()
	}
	// The upstream's own title and message; a placeholder that does not
	// name the upstream (an internal address is no reader's business)
	// when it listed none.
	summary := up.Title
	if summary == "" {
		summary = "Mirrored commit " + up.SHA[:12]
	}
	c := store.Commit{SHA: up.SHA, Summary: summary, Description: up.Message, Created: created, Tree: tree}
	if err := m.store.RecordCommit(ctx, local, m.cfg.Visibility, c, refs...); err != nil {
		return store.Commit{}, err
	}
	return m.store.Resolve(ctx, local, up.SHA)
}

// entry is the local tree entry of f, an upstream file of commit sha: a
// Xet file as the upstream named it (pulled when first read); a regular
// file read now, checked against its git blob id and stored as a blob. An
// LFS file without a Xet hash is refused (not mirrored).
func (m *Mirror) entry(ctx context.Context, ref RepoRef, sha string, f File) (store.TreeEntry, error) {
	what := fmt.Sprintf("file %s of %s@%s", f.Path, ref.ID, sha)
	if f.Path == "" || f.Size < 0 {
		return store.TreeEntry{}, m.badAnswer(what, fmt.Errorf("path %q size %d", f.Path, f.Size))
	}
	if f.XetHash != "" {
		e := store.TreeEntry{Path: f.Path, SizeBytes: f.Size, XetHash: f.XetHash, SHA256: f.SHA256, GitOID: f.GitOID}
		if h, err := xet.ParseHash(f.XetHash); err == nil {
			if held, err := m.store.File(ctx, m.cfg.Tenant, h); err == nil {
				if err := m.sameFile(what, e, held); err != nil {
					return store.TreeEntry{}, err
				}
			}
		}
		return e, nil
	}
	if f.SHA256 != "" {
		return store.TreeEntry{}, m.badAnswer(what, errors.New("an LFS file without a Xet hash, which this mirror does not serve"))
	}
	if f.Size > MaxRegularFileBytes {
		return store.TreeEntry{}, m.badAnswer(what, fmt.Errorf("a regular file of %d bytes, over the %d a regular file may have", f.Size, MaxRegularFileBytes))
	}
	var data []byte
	err := m.withConn(ctx, "", func() error {
		rc, err := m.up.Open(ctx, ref, sha, f, 0)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = io.ReadAll(io.LimitReader(rc, f.Size+1))
		return err
	})
	if err != nil {
		if errors.Is(err, ErrBadAnswer) {
			return store.TreeEntry{}, m.badAnswer(what, err)
		}
		if errors.Is(err, ErrNotFound) {
			// The upstream lists the file and will not serve it: a wrong
			// answer about the revision, not a repo that does not exist.
			return store.TreeEntry{}, m.badAnswer(what, fmt.Errorf("listed in the tree, not served: %v", err))
		}
		return store.TreeEntry{}, err
	}
	m.upstreamBytes.Add(int64(len(data)))
	if int64(len(data)) != f.Size {
		return store.TreeEntry{}, m.badAnswer(what, fmt.Errorf("%d bytes, want %d", len(data), f.Size))
	}
	oid := gitBlobOID(data)
	if f.GitOID != "" && oid != f.GitOID {
		return store.TreeEntry{}, m.badAnswer(what, fmt.Errorf("git blob id %s, want %s", oid, f.GitOID))
	}
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	if err := m.store.PutBlob(ctx, h, data); err != nil {
		return store.TreeEntry{}, err
	}
	return store.TreeEntry{Path: f.Path, SizeBytes: f.Size, SHA256: h, GitOID: oid}, nil
}

// gitBlobOID is git's blob id of content.
func gitBlobOID(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// touch notes that a revision was read now (eviction takes the least
// recently read first).
func (m *Mirror) touch(local store.RepoID, sha string) {
	m.mu.Lock()
	m.used[local.String()+"/"+local.Type+"@"+sha] = m.cfg.Now()
	m.mu.Unlock()
}

// coalesce runs fn once for every caller that asks for key while it runs:
// the first caller runs it (with a context that outlives the caller's
// cancellation, since others wait on it), the others wait and get its
// error. A waiter returns nil without fn's result: it reads what fn
// stored.
func (m *Mirror) coalesce(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	m.mu.Lock()
	if f, ok := m.flights[key]; ok {
		m.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	m.flights[key] = f
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.flights, key)
		m.mu.Unlock()
		close(f.done)
	}()
	f.err = fn(context.WithoutCancel(ctx))
	return f.err
}
