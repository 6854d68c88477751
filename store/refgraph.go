package store

import (
	"context"
	"database/sql"
	"fmt"

	"openxet/xet"
)

// The reference graph (docs/design.md §9): revisions → files → xorbs, and
// who owns what. It is the one answer to "what is kept, and why" that the
// collector's mark (gcplan.go), the usage report (usage.go) and reindex
// (reindex_lifecycle.go, reindex.go) read, so usage and collection cannot
// disagree.
//
// Its reads agree with each other only when they run in one transaction:
// a pass reads it in one snapshot of the index (Store.inSnapshot, gc.go);
// read statement by statement, a commit landing between two reads leaves a
// ref naming a commit the graph has not read (issue 34).

// refGraph is the index's reference graph as of one snapshot.
type refGraph struct {
	// owners is every xorb owner row; owned the same by xorb (xorb →
	// tenant → the size it is charged).
	owners []ownerRow
	owned  map[string]map[string]int64
	// files is every retained file (tenant → xet hash → file).
	files map[string]map[string]graphFile
	// need is the xorbs each tenant's retained files reference (tenant →
	// xorb); referenced those any retained file references.
	need       map[string]map[string]bool
	referenced map[string]bool
	// shardFiles is the (tenant, shard) pairs some retained file of the
	// tenant was registered through.
	shardFiles map[[2]string]bool
	// shardOwners is every (shard, tenant) owner row; shardOwned counts
	// them by shard.
	shardOwners []shardOwnerRow
	shardOwned  map[string]int
	// revisions is what each tenant's refs reach (tenants with repos);
	// blobs the blobs any revision names.
	revisions map[string]*revisions
	blobs     map[string]bool
}

// graphFile is a retained file as the graph sees it.
type graphFile struct {
	size  int64
	shard string     // the shard that registered it
	xorbs []xet.Hash // the xorbs its terms name, in term order
}

type ownerRow struct {
	xorb, tenant string
	size         int64
	created      int64
}

type shardOwnerRow struct{ shard, tenant string }

func newRefGraph() *refGraph {
	return &refGraph{owned: map[string]map[string]int64{}, files: map[string]map[string]graphFile{},
		need: map[string]map[string]bool{}, referenced: map[string]bool{}, shardFiles: map[[2]string]bool{},
		shardOwned: map[string]int{}, revisions: map[string]*revisions{}, blobs: map[string]bool{}}
}

// loadRefGraph reads the whole graph through q, which must be one
// transaction for the reads to agree (see above). hook, when set, is
// called after each read with its name ("mark: owners read", ...: a
// pass's test hook); its error stops the load.
func loadRefGraph(ctx context.Context, q queryer, hook func(step string) error) (*refGraph, error) {
	if hook == nil {
		hook = func(string) error { return nil }
	}
	g := newRefGraph()
	steps := []struct {
		read func(context.Context, queryer, func(string) error) error
		done string
	}{
		{func(ctx context.Context, q queryer, _ func(string) error) error { return g.readOwners(ctx, q) }, "mark: owners read"},
		{func(ctx context.Context, q queryer, _ func(string) error) error { return g.readFiles(ctx, q) }, "mark: files read"},
		{func(ctx context.Context, q queryer, _ func(string) error) error { return g.readShardOwners(ctx, q) }, "mark: shard owners read"},
		{g.readRevisions, "mark: revisions read"},
	}
	for _, st := range steps {
		if err := st.read(ctx, q, hook); err != nil {
			return nil, err
		}
		if err := hook(st.done); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// readOwners reads the xorb owner rows.
func (g *refGraph) readOwners(ctx context.Context, q queryer) error {
	return eachRow(ctx, q, `SELECT xorb, tenant, size, created FROM xorb_owners`, func(r *sql.Rows) error {
		var o ownerRow
		if err := r.Scan(&o.xorb, &o.tenant, &o.size, &o.created); err != nil {
			return err
		}
		g.owners = append(g.owners, o)
		if g.owned[o.xorb] == nil {
			g.owned[o.xorb] = map[string]int64{}
		}
		g.owned[o.xorb][o.tenant] = o.size
		return nil
	})
}

// readFiles reads the retained files and the xorbs they reference.
func (g *refGraph) readFiles(ctx context.Context, q queryer) error {
	return eachRow(ctx, q, `SELECT tenant, hash, size, shard, terms FROM files`, func(r *sql.Rows) error {
		var tenant, hash string
		var f graphFile
		var terms []byte
		if err := r.Scan(&tenant, &hash, &f.size, &f.shard, &terms); err != nil {
			return err
		}
		ts, err := decodeTerms(terms)
		if err != nil {
			return fmt.Errorf("file %s of %s: %w", hash, tenant, err)
		}
		need := g.need[tenant]
		if need == nil {
			need = map[string]bool{}
			g.need[tenant] = need
			g.files[tenant] = map[string]graphFile{}
		}
		f.xorbs = make([]xet.Hash, len(ts))
		for i, t := range ts {
			f.xorbs[i] = t.Xorb
			x := t.Xorb.String()
			need[x] = true
			g.referenced[x] = true
		}
		g.files[tenant][hash] = f
		g.shardFiles[[2]string{tenant, f.shard}] = true
		return nil
	})
}

// readShardOwners reads the shard owner rows.
func (g *refGraph) readShardOwners(ctx context.Context, q queryer) error {
	return eachRow(ctx, q, `SELECT shard, tenant FROM shard_owners`, func(r *sql.Rows) error {
		var o shardOwnerRow
		if err := r.Scan(&o.shard, &o.tenant); err != nil {
			return err
		}
		g.shardOwners = append(g.shardOwners, o)
		g.shardOwned[o.shard]++
		return nil
	})
}

// readRevisions reads what the refs of every tenant's repos reach.
func (g *refGraph) readRevisions(ctx context.Context, q queryer, hook func(string) error) error {
	tenants, err := queryStrings(ctx, q, `SELECT DISTINCT tenant FROM repos ORDER BY tenant`)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		rev, err := loadRevisions(ctx, q, t, hook)
		if err != nil {
			return err
		}
		g.revisions[t] = rev
		for b := range rev.blobs {
			g.blobs[b] = true
		}
	}
	return nil
}

// revisionsOf is what tenant's refs reach (nothing for a tenant without
// repos).
func (g *refGraph) revisionsOf(tenant string) *revisions {
	if rev := g.revisions[tenant]; rev != nil {
		return rev
	}
	return &revisions{commits: map[repoKey]map[string]bool{}, files: map[string][]repoKey{}, blobs: map[string]bool{}}
}

// owns reports whether tenant owns xorb.
func (g *refGraph) owns(tenant, xorb string) bool {
	_, ok := g.owned[xorb][tenant]
	return ok
}

// queryer is what both *sql.DB and *sql.Tx offer for reads.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type repoKey struct{ Type, Name string }

// revisions is what the refs of one tenant's repos reach.
type revisions struct {
	commits map[repoKey]map[string]bool // reachable commit shas per repo
	files   map[string][]repoKey        // xet hash → repos whose revisions reference it
	blobs   map[string]bool             // sha256 of regular files
}

// loadRevisions walks every ref of tenant's repos through the parent chain
// and collects the files and blobs the reachable commits name. Its reads
// agree with each other only when q is a transaction (inTx, or a pass's
// snapshot): read on the pool, a commit landing between the read of the
// commits and that of the refs leaves a ref naming a commit it did not
// read, and the repo's revisions look empty. hook, when set, is called
// after each read (a pass's test hook, gc.go).
func loadRevisions(ctx context.Context, q queryer, tenant string, hook func(step string) error) (*revisions, error) {
	if hook == nil {
		hook = func(string) error { return nil }
	}
	rev := &revisions{commits: map[repoKey]map[string]bool{}, files: map[string][]repoKey{}, blobs: map[string]bool{}}
	parents := map[repoKey]map[string]string{}
	err := eachRow(ctx, q, `SELECT type, name, sha, parent FROM commits WHERE tenant = ?`, func(r *sql.Rows) error {
		var k repoKey
		var sha, parent string
		if err := r.Scan(&k.Type, &k.Name, &sha, &parent); err != nil {
			return err
		}
		if parents[k] == nil {
			parents[k] = map[string]string{}
		}
		parents[k][sha] = parent
		return nil
	}, tenant)
	if err != nil {
		return nil, fmt.Errorf("commits of %s: %w", tenant, err)
	}
	if err := hook("mark: commits read"); err != nil {
		return nil, err
	}
	type head struct {
		k   repoKey
		sha string
	}
	var heads []head
	err = eachRow(ctx, q, `SELECT type, name, commit_sha FROM refs WHERE tenant = ?`, func(r *sql.Rows) error {
		var h head
		if err := r.Scan(&h.k.Type, &h.k.Name, &h.sha); err != nil {
			return err
		}
		heads = append(heads, h)
		return nil
	}, tenant)
	if err != nil {
		return nil, fmt.Errorf("refs of %s: %w", tenant, err)
	}
	if err := hook("mark: refs read"); err != nil {
		return nil, err
	}
	for _, h := range heads {
		seen := rev.commits[h.k]
		if seen == nil {
			seen = map[string]bool{}
			rev.commits[h.k] = seen
		}
		for sha := h.sha; sha != "" && !seen[sha]; {
			parent, ok := parents[h.k][sha]
			if !ok {
				break // a ref to a commit the index does not have
			}
			seen[sha] = true
			sha = parent
		}
	}
	for k, shas := range rev.commits {
		for sha := range shas {
			if err := rev.addTree(ctx, q, tenant, k, sha); err != nil {
				return nil, err
			}
		}
	}
	return rev, nil
}

// addTree adds the files and blobs one reachable commit names.
func (rev *revisions) addTree(ctx context.Context, q queryer, tenant string, k repoKey, sha string) error {
	var tree []byte
	if err := q.QueryRowContext(ctx, `SELECT tree FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, tenant, k.Type, k.Name, sha).Scan(&tree); err != nil {
		return fmt.Errorf("tree of %s: %w", sha, err)
	}
	var entries []TreeEntry
	if err := decodeTree(tree, &entries); err != nil {
		return fmt.Errorf("tree of %s: %w", sha, err)
	}
	for _, e := range entries {
		if e.XetHash != "" {
			if !containsRepo(rev.files[e.XetHash], k) {
				rev.files[e.XetHash] = append(rev.files[e.XetHash], k)
			}
		} else if e.SHA256 != "" {
			rev.blobs[e.SHA256] = true
		}
	}
	return nil
}

func containsRepo(ks []repoKey, k repoKey) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}
