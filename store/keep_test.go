package store

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestObjectKinds: a key's kind and name, and back.
func TestObjectKinds(t *testing.T) {
	x, s := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	for _, c := range []struct {
		key    string
		kind   objectKind
		name   string
		owners string
	}{
		{xorbKey(x), kindXorb, x, prefixXorbOwners + x + "/"},
		{shardKey(s), kindShard, s, prefixShardOwners + s + "/"},
		{prefixBlobs + x, kindBlob, x, ""},
	} {
		k, name, ok := objectOf(c.key)
		if !ok || k != c.kind || name != c.name || k.key(name) != c.key || k.ownersPrefix(name) != c.owners {
			t.Errorf("%s: kind %v name %s ok %v owners %q", c.key, k, name, ok, k.ownersPrefix(name))
		}
		if !strings.HasPrefix(xorbOwnerKey(x, "alice"), kindXorb.ownersPrefix(x)) {
			t.Errorf("owner records of %s are not under %s", x, kindXorb.ownersPrefix(x))
		}
	}
	for _, key := range []string{prefixXorbOwners + x + "/t", "repos/x", "xorbs/other/" + x} {
		if _, _, ok := objectOf(key); ok {
			t.Errorf("%s is not a collectable object", key)
		}
	}
}

// TestDryRunIsThePlan: on a store with something of every kind to do (a
// released file's xorb owner, its shard owner and objects, an abandoned
// upload, a stored blob no revision names) and things to keep (a repo's
// files), a dry run reports exactly what the pass then does, item for
// item and in its report.
func TestDryRunIsThePlan(t *testing.T) { onEngines(t, testDryRunIsThePlan) }

func testDryRunIsThePlan(t *testing.T, newLC func(testing.TB) *lc) {
	for _, grace := range []time.Duration{0, time.Hour} {
		t.Run(grace.String(), func(t *testing.T) {
			l := newLC(t)
			ctx := context.Background()
			gone, abandoned := buildFile(chunkSet(80)), buildFile(chunkSet(81))
			l.upload("alice", gone)
			l.putXorbs(l.s, "bob", abandoned)
			r := &repoRace{l: l, id: l.repo("alice", "kept"), xet: map[string]tfile{}}
			if err := r.commitBlob("main", "a.txt", "kept small file"); err != nil {
				t.Fatal(err)
			}
			if err := r.commitXet("main", "b.bin", 82); err != nil {
				t.Fatal(err)
			}
			if err := l.s.PutBlob(ctx, hexSHA("nobody's"), []byte("nobody's")); err != nil {
				t.Fatal(err)
			}
			if err := l.s.ReleaseFile(ctx, "alice", gone.hash()); err != nil {
				t.Fatal(err)
			}
			l.clock.advance(OwnerGrace + 2*grace)

			dry, err := l.s.collect(ctx, GCConfig{Grace: grace, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			real, err := l.s.collect(ctx, GCConfig{Grace: grace})
			if err != nil {
				t.Fatal(err)
			}
			want := planItems(dry.plan)
			if len(want) < 4 {
				t.Fatalf("the dry run plans too little to compare: %v", want)
			}
			if diff := cmp.Diff(want, planItems(real.plan)); diff != "" {
				t.Errorf("the pass planned otherwise than its dry run (-dry +pass):\n%s", diff)
			}
			if diff := cmp.Diff(want, planItems(real.done)); diff != "" {
				t.Errorf("the pass did otherwise than its dry run planned (-dry +done):\n%s", diff)
			}
			d, p := dry.rep, real.rep
			d.DryRun, d.Started, d.Duration, p.Duration, p.Resumed = false, p.Started, 0, 0, 0
			if diff := cmp.Diff(d, p); diff != "" {
				t.Errorf("reports differ (-dry +pass):\n%s", diff)
			}
			if err := r.checkHeads(); err != nil {
				t.Fatal(err)
			}
			if next := l.collect(grace); grace == 0 && next.ReleasedOwners+next.ReleasedShardOwners+next.DeletedXorbs+next.DeletedShards+next.DeletedBlobs != 0 {
				t.Errorf("the pass left work its plan had not seen: %+v", next)
			}
		})
	}
}

// planItems lists a plan's releases and deletions as sorted text.
func planItems(pl gcPlan) []string {
	var out []string
	for _, o := range pl.owners {
		out = append(out, "owner "+o.tenant+" "+o.xorb)
	}
	for _, o := range pl.shardOwners {
		out = append(out, "shard owner "+o.tenant+" "+o.shard)
	}
	for k, objs := range pl.objects {
		for _, c := range objs {
			out = append(out, "delete "+objectKind(k).String()+" "+c.key)
		}
	}
	slices.Sort(out)
	return out
}
