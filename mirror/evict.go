package mirror

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"openxet/store"
	"openxet/xet"
)

// Revision of the mirror, as List shows it.
type Mirrored struct {
	// Repo is the repo id the clients use (the upstream's); Local the repo
	// of the mirror's tenant that holds it.
	Repo, Local store.RepoID
	// SHA is the commit; Names the revision names that point at it (main,
	// a tag), empty for a commit asked for by its sha only.
	SHA   string
	Names []string
	// Files and SizeBytes count the revision's files; PulledFiles and
	// PulledBytes those already stored.
	Files, PulledFiles     int
	SizeBytes, PulledBytes int64
	// LastUsed is when a client last read the revision through this
	// process (zero: not since it started).
	LastUsed time.Time
}

// List returns every mirrored revision, the least recently used first.
func (m *Mirror) List(ctx context.Context) ([]Mirrored, error) {
	var out []Mirrored
	pulled := map[string]int64{} // xet hash → size, or -1 when not stored
	for _, typ := range store.RepoTypes {
		repos, err := m.store.Repos(ctx, m.cfg.Tenant, typ)
		if err != nil {
			return nil, err
		}
		for _, r := range repos {
			pub, ok := m.PublicRepo(r.RepoID)
			if !ok {
				continue
			}
			refs, err := m.store.Refs(ctx, r.RepoID)
			if err != nil {
				return nil, err
			}
			names := map[string][]string{}
			for _, ref := range refs {
				if n, ok := strings.CutPrefix(ref.Name, nameRefPrefix); ok {
					names[ref.Commit] = append(names[ref.Commit], n)
				}
			}
			for _, ref := range refs {
				sha, ok := strings.CutPrefix(ref.Name, pinRefPrefix)
				if !ok {
					continue
				}
				c, err := m.store.Resolve(ctx, r.RepoID, sha)
				if err != nil {
					return nil, err
				}
				mv := Mirrored{Repo: pub, Local: r.RepoID, SHA: sha, Names: names[sha], Files: len(c.Tree)}
				for _, e := range c.Tree {
					mv.SizeBytes += e.SizeBytes
					if e.XetHash == "" {
						mv.PulledFiles++
						mv.PulledBytes += e.SizeBytes
						continue
					}
					size, seen := pulled[e.XetHash]
					if !seen {
						size = -1
						if h, err := xet.ParseHash(e.XetHash); err == nil {
							if f, err := m.store.File(ctx, m.cfg.Tenant, h); err == nil {
								size = int64(f.SizeBytes)
							} else if !errors.Is(err, store.ErrNotFound) {
								return nil, err
							}
						}
						pulled[e.XetHash] = size
					}
					if size >= 0 {
						mv.PulledFiles++
						mv.PulledBytes += size
					}
				}
				m.mu.Lock()
				mv.LastUsed = m.used[r.RepoID.String()+"/"+r.Type+"@"+sha]
				m.mu.Unlock()
				out = append(out, mv)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastUsed.Before(out[j].LastUsed) })
	return out, nil
}

// mirroredBytes is what the quota is checked against: the sizes of the
// distinct pulled files of the revisions in list (regular files included).
// Stored bytes are at most that (chunks shared between files are stored
// once), and unlike the tenant's stored bytes, which the collector gives
// back only after gc.grace, it drops as soon as a revision is evicted.
func mirroredBytes(ctx context.Context, m *Mirror, list []Mirrored) (int64, error) {
	seen := map[string]bool{}
	var n int64
	for _, mv := range list {
		c, err := m.store.Resolve(ctx, mv.Local, mv.SHA)
		if err != nil {
			return 0, err
		}
		for _, e := range c.Tree {
			key := e.XetHash
			if key == "" {
				key = "blob:" + e.SHA256
			} else if h, err := xet.ParseHash(e.XetHash); err != nil {
				continue
			} else if _, err := m.store.File(ctx, m.cfg.Tenant, h); err != nil {
				continue // not pulled
			}
			if !seen[key] {
				seen[key] = true
				n += e.SizeBytes
			}
		}
	}
	return n, nil
}

// enforceQuota evicts the least recently used revisions while the mirrored
// bytes are over Config.QuotaBytes, keeping at least the most recently used
// one. Errors are logged: a pull that stored its file succeeded.
func (m *Mirror) enforceQuota(ctx context.Context) {
	if m.cfg.QuotaBytes <= 0 {
		return
	}
	if _, err := m.EnforceQuota(ctx); err != nil {
		m.log.Error("mirror: quota enforcement failed", "err", err)
	}
}

// EnforceQuota evicts, as enforceQuota does, and returns the revisions it
// evicted.
func (m *Mirror) EnforceQuota(ctx context.Context) ([]Mirrored, error) {
	if m.cfg.QuotaBytes <= 0 {
		return nil, nil
	}
	m.evictMu.Lock()
	defer m.evictMu.Unlock()
	list, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	var evicted []Mirrored
	for len(list) > 1 {
		n, err := mirroredBytes(ctx, m, list)
		if err != nil {
			return evicted, err
		}
		if n <= m.cfg.QuotaBytes {
			break
		}
		if err := m.Evict(ctx, list[0]); err != nil {
			return evicted, err
		}
		m.log.Info("mirror: evicted a revision over mirror.quota", "repo", list[0].Repo.String(), "sha", list[0].SHA,
			"mirrored_bytes", n, "quota_bytes", m.cfg.QuotaBytes)
		evicted = append(evicted, list[0])
		list = list[1:]
	}
	return evicted, nil
}

// Evict drops a mirrored revision through the store's release path: its
// names, then its pin; the files only it held are released for the
// collector (never bytes another tenant's file references: those have
// other owners). The next read of it pulls it again.
func (m *Mirror) Evict(ctx context.Context, mv Mirrored) error {
	for _, n := range mv.Names {
		for _, ref := range []string{nameRefPrefix + n, tagRefPrefix + n} {
			if err := m.store.DeleteRef(ctx, mv.Local, ref); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("evict %s@%s: %w", mv.Repo, mv.SHA, err)
			}
		}
		m.mu.Lock()
		delete(m.checked, mv.Local.Tenant+"/"+mv.Local.Type+"/"+mv.Local.Name+"@"+n)
		m.mu.Unlock()
	}
	if err := m.store.DeleteRef(ctx, mv.Local, pinRefPrefix+mv.SHA); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("evict %s@%s: %w", mv.Repo, mv.SHA, err)
	}
	m.mu.Lock()
	delete(m.used, mv.Local.String()+"/"+mv.Local.Type+"@"+mv.SHA)
	m.mu.Unlock()
	m.evicted.Add(1)
	if m.cfg.Released != nil {
		m.cfg.Released()
	}
	return nil
}

// Pull pre-fetches rev of upstream repo ns/name of type typ: it resolves
// the revision and pulls every file not stored yet, as tenant (the
// operator's, for the admin route and the cli). It returns the revision.
func (m *Mirror) Pull(ctx context.Context, tenant, typ, ns, name, rev string, reserve Reserve) (Mirrored, error) {
	local, err := m.Repo(ctx, typ, ns, name)
	if err != nil {
		return Mirrored{}, err
	}
	c, err := m.Resolve(ctx, local, rev)
	if err != nil {
		return Mirrored{}, err
	}
	for _, e := range c.Tree {
		if e.XetHash == "" {
			continue
		}
		if _, err := m.Fetch(ctx, tenant, local, c.SHA, e, nil, reserve); err != nil {
			return Mirrored{}, err
		}
	}
	list, err := m.List(ctx)
	if err != nil {
		return Mirrored{}, err
	}
	for _, mv := range list {
		if mv.Local == local && mv.SHA == c.SHA {
			return mv, nil
		}
	}
	return Mirrored{}, fmt.Errorf("pull %s/%s@%s: the revision was evicted while it was pulled: %w", ns, name, rev, store.ErrNotFound)
}
