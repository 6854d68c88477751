package store

import (
	"context"
	"database/sql"
	"sort"
)

// UsageReport is what the lifecycle knows of stored bytes: per tenant, what
// it owns and why, and for the deployment, the bytes nobody pays for.
type UsageReport struct {
	Tenants []TenantUsage `json:"tenants"`
	// UnownedReferencedBytes are xorbs no tenant owns that a retained file
	// references (another tenant's file registered by dedup against a
	// xorb whose owner released it): kept, paid by nobody.
	UnownedReferencedXorbs int   `json:"unowned_referenced_xorbs"`
	UnownedReferencedBytes int64 `json:"unowned_referenced_bytes"`
	// UnreferencedBytes are xorbs nobody owns or references: the collector
	// deletes them once their grace period is over.
	UnreferencedXorbs int   `json:"unreferenced_xorbs"`
	UnreferencedBytes int64 `json:"unreferenced_bytes"`
	// StoredXorbBytes is every indexed xorb's size.
	StoredXorbBytes int64 `json:"stored_xorb_bytes"`
}

// TenantUsage is one tenant's share.
type TenantUsage struct {
	Tenant string `json:"tenant"`
	// UsageBytes is the tenant's counter (what quotas compare), equal to
	// OwnedBytes, the sum of the sizes of the xorbs it owns, in a
	// consistent index.
	UsageBytes int64 `json:"usage_bytes"`
	OwnedBytes int64 `json:"owned_bytes"`
	OwnedXorbs int   `json:"owned_xorbs"`
	// RetainedBytes: owned xorbs a retained file of the tenant references.
	RetainedBytes int64 `json:"retained_bytes"`
	// ReleasableBytes: owned xorbs no retained file of the tenant
	// references; collection passes release them (at once for those of
	// files the tenant deleted, else after the grace period).
	ReleasableBytes int64 `json:"releasable_bytes"`
	// ReferencedUnownedBytes: xorbs its files reference that nobody owns.
	ReferencedUnownedBytes int64 `json:"referenced_unowned_bytes"`
	// DedupBytes: xorbs its files reference that only other tenants own.
	DedupBytes int64 `json:"dedup_bytes"`
	Files      int   `json:"files"`
	// CASOnlyFiles are retained files no revision references (kept by the
	// CAS-only rule until deleted), with their logical size.
	CASOnlyFiles     int         `json:"cas_only_files"`
	CASOnlyFileBytes int64       `json:"cas_only_file_bytes"`
	Repos            []RepoUsage `json:"repos"`
}

// RepoUsage is what one repo's revisions hold.
type RepoUsage struct {
	Type  string `json:"type"`
	Name  string `json:"name"`
	Files int    `json:"files"`
	// FileBytes is the logical size of the distinct xet files its
	// revisions reference; OwnedXorbBytes the tenant's owned xorbs they
	// reference (shared with other repos of the tenant when files are).
	FileBytes      int64 `json:"file_bytes"`
	OwnedXorbBytes int64 `json:"owned_xorb_bytes"`
}

// UsageReport computes the report, for one tenant or ("") all. It reads the
// whole index, the reference graph (refgraph.go) in one snapshot: an
// operator's tool, not a hot path.
func (s *Store) UsageReport(ctx context.Context, tenant string) (UsageReport, error) {
	var rep UsageReport
	var g usageGraph
	err := s.inSnapshot(ctx, func(tx *sql.Tx) error {
		var err error
		g, err = loadUsageGraph(ctx, tx)
		return err
	})
	if err != nil {
		return rep, err
	}
	g.countUnowned(&rep)
	names, err := s.usageTenants(ctx, tenant, g)
	if err != nil {
		return rep, err
	}
	for _, t := range names {
		u, err := s.tenantUsage(ctx, t, g)
		if err != nil {
			return rep, err
		}
		rep.Tenants = append(rep.Tenants, u)
	}
	if rep.Tenants == nil {
		rep.Tenants = []TenantUsage{}
	}
	return rep, nil
}

// usageGraph is the reference graph with every xorb's size.
type usageGraph struct {
	*refGraph
	sizes  map[string]int64 // xorb → size
	stored int64            // the sum of sizes
}

// loadUsageGraph reads the reference graph and the xorbs' sizes through q
// (one transaction).
func loadUsageGraph(ctx context.Context, q queryer) (usageGraph, error) {
	g := usageGraph{sizes: map[string]int64{}}
	var err error
	if g.refGraph, err = loadRefGraph(ctx, q, nil); err != nil {
		return g, err
	}
	err = eachRow(ctx, q, `SELECT hash, stream_len FROM xorbs`, func(r *sql.Rows) error {
		var h string
		var n int64
		if err := r.Scan(&h, &n); err != nil {
			return err
		}
		g.sizes[h] = n
		g.stored += n
		return nil
	})
	return g, err
}

// countUnowned adds to rep the stored bytes and the xorbs nobody owns,
// referenced by a file or not.
func (g usageGraph) countUnowned(rep *UsageReport) {
	rep.StoredXorbBytes = g.stored
	for x, n := range g.sizes {
		if len(g.owned[x]) > 0 {
			continue
		}
		if g.referenced[x] {
			rep.UnownedReferencedXorbs++
			rep.UnownedReferencedBytes += n
		} else {
			rep.UnreferencedXorbs++
			rep.UnreferencedBytes += n
		}
	}
}

// usageTenants is the tenants the report covers, sorted: tenant alone, or
// ("") every tenant the index names or that has files.
func (s *Store) usageTenants(ctx context.Context, tenant string, g usageGraph) ([]string, error) {
	if tenant != "" {
		return []string{tenant}, nil
	}
	ts, err := s.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, t := range ts {
		names, seen[t.Name] = append(names, t.Name), true
	}
	for t := range g.files {
		if !seen[t] {
			names = append(names, t)
		}
	}
	sort.Strings(names)
	return names, nil
}

// tenantUsage is tenant t's share: its counter, what it owns and why, its
// files and what each of its repos holds.
func (s *Store) tenantUsage(ctx context.Context, t string, g usageGraph) (TenantUsage, error) {
	u := TenantUsage{Tenant: t, Repos: []RepoUsage{}}
	var err error
	if u.UsageBytes, err = s.Usage(ctx, t); err != nil {
		return u, err
	}
	need := g.need[t]
	for x, os := range g.owned {
		if n, ok := os[t]; ok {
			u.OwnedXorbs++
			u.OwnedBytes += n
			if need[x] {
				u.RetainedBytes += n
			} else {
				u.ReleasableBytes += n
			}
		}
	}
	for x := range need {
		if len(g.owned[x]) == 0 {
			u.ReferencedUnownedBytes += g.sizes[x]
		} else if !g.owns(t, x) {
			u.DedupBytes += g.sizes[x]
		}
	}
	u.Files = len(g.files[t])
	rev := g.revisionsOf(t)
	for f, file := range g.files[t] {
		if len(rev.files[f]) == 0 {
			u.CASOnlyFiles++
			u.CASOnlyFileBytes += file.size
		}
	}
	repos, err := s.RepoIDs(ctx, t)
	if err != nil {
		return u, err
	}
	byRepo := map[repoKey]map[string]bool{} // repo → the files its revisions reference
	for f, rs := range rev.files {
		for _, k := range rs {
			if byRepo[k] == nil {
				byRepo[k] = map[string]bool{}
			}
			byRepo[k][f] = true
		}
	}
	for _, r := range repos {
		u.Repos = append(u.Repos, g.repoUsage(t, r, byRepo[repoKey{r.Type, r.Name}]))
	}
	return u, nil
}

// repoUsage is what repo r of tenant t holds: the files its revisions
// reference (files) that t has, and t's owned xorbs they reference.
func (g usageGraph) repoUsage(t string, r RepoID, files map[string]bool) RepoUsage {
	ru := RepoUsage{Type: r.Type, Name: r.Name}
	xs := map[string]bool{}
	for f := range files {
		file, ok := g.files[t][f]
		if !ok {
			continue
		}
		ru.Files++
		ru.FileBytes += file.size
		for _, x := range file.xorbs {
			xs[x.String()] = true
		}
	}
	for x := range xs {
		ru.OwnedXorbBytes += g.owned[x][t]
	}
	return ru
}
