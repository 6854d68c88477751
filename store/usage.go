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
// whole index: an operator's tool, not a hot path.
func (s *Store) UsageReport(ctx context.Context, tenant string) (UsageReport, error) {
	var rep UsageReport
	sizes := map[string]int64{}
	err := eachRow(ctx, s.db, `SELECT hash, stream_len FROM xorbs`, func(r *sql.Rows) error {
		var h string
		var n int64
		if err := r.Scan(&h, &n); err != nil {
			return err
		}
		sizes[h] = n
		rep.StoredXorbBytes += n
		return nil
	})
	if err != nil {
		return rep, err
	}
	owners := map[string]map[string]int64{} // xorb → tenant → size
	err = eachRow(ctx, s.db, `SELECT xorb, tenant, size FROM xorb_owners`, func(r *sql.Rows) error {
		var x, t string
		var n int64
		if err := r.Scan(&x, &t, &n); err != nil {
			return err
		}
		if owners[x] == nil {
			owners[x] = map[string]int64{}
		}
		owners[x][t] = n
		return nil
	})
	if err != nil {
		return rep, err
	}
	type fileRow struct {
		size  int64
		xorbs []string
	}
	files := map[string]map[string]fileRow{} // tenant → file → row
	referenced := map[string]bool{}
	err = eachRow(ctx, s.db, `SELECT tenant, hash, size, terms FROM files`, func(r *sql.Rows) error {
		var t, h string
		var n int64
		var terms []byte
		if err := r.Scan(&t, &h, &n, &terms); err != nil {
			return err
		}
		ts, err := decodeTerms(terms)
		if err != nil {
			return err
		}
		fr := fileRow{size: n}
		for _, term := range ts {
			x := term.Xorb.String()
			fr.xorbs = append(fr.xorbs, x)
			referenced[x] = true
		}
		if files[t] == nil {
			files[t] = map[string]fileRow{}
		}
		files[t][h] = fr
		return nil
	})
	if err != nil {
		return rep, err
	}
	for x, n := range sizes {
		if len(owners[x]) > 0 {
			continue
		}
		if referenced[x] {
			rep.UnownedReferencedXorbs++
			rep.UnownedReferencedBytes += n
		} else {
			rep.UnreferencedXorbs++
			rep.UnreferencedBytes += n
		}
	}

	var names []string
	if tenant != "" {
		names = []string{tenant}
	} else {
		ts, err := s.Tenants(ctx)
		if err != nil {
			return rep, err
		}
		seen := map[string]bool{}
		for _, t := range ts {
			names, seen[t.Name] = append(names, t.Name), true
		}
		for t := range files {
			if !seen[t] {
				names = append(names, t)
			}
		}
		sort.Strings(names)
	}
	for _, t := range names {
		u := TenantUsage{Tenant: t, Repos: []RepoUsage{}}
		if u.UsageBytes, err = s.Usage(ctx, t); err != nil {
			return rep, err
		}
		need := map[string]bool{}
		for _, fr := range files[t] {
			for _, x := range fr.xorbs {
				need[x] = true
			}
		}
		for x, os := range owners {
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
			if len(owners[x]) == 0 {
				u.ReferencedUnownedBytes += sizes[x]
			} else if _, own := owners[x][t]; !own {
				u.DedupBytes += sizes[x]
			}
		}
		u.Files = len(files[t])
		rev, err := loadRevisions(ctx, s.db, t, nil)
		if err != nil {
			return rep, err
		}
		byRepo := map[repoKey]map[string]bool{}
		for f, repos := range rev.files {
			for _, k := range repos {
				if byRepo[k] == nil {
					byRepo[k] = map[string]bool{}
				}
				byRepo[k][f] = true
			}
		}
		for f, fr := range files[t] {
			if len(rev.files[f]) == 0 {
				u.CASOnlyFiles++
				u.CASOnlyFileBytes += fr.size
			}
		}
		repos, err := s.RepoIDs(ctx, t)
		if err != nil {
			return rep, err
		}
		for _, r := range repos {
			ru := RepoUsage{Type: r.Type, Name: r.Name}
			xs := map[string]bool{}
			for f := range byRepo[repoKey{r.Type, r.Name}] {
				fr, ok := files[t][f]
				if !ok {
					continue
				}
				ru.Files++
				ru.FileBytes += fr.size
				for _, x := range fr.xorbs {
					xs[x] = true
				}
			}
			for x := range xs {
				ru.OwnedXorbBytes += owners[x][t]
			}
			u.Repos = append(u.Repos, ru)
		}
		rep.Tenants = append(rep.Tenants, u)
	}
	if rep.Tenants == nil {
		rep.Tenants = []TenantUsage{}
	}
	return rep, nil
}
