package accounts

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/store/objects"
)

// TestNamespaces: users and organizations share one name space with the
// tenants; a name that is reserved, another's, a legacy tenant's or a
// deleted user's is refused, leaving no record and no row; a robot
// credential of a user's namespace is refused the same way.
func TestNamespaces(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
		a, _, b := openAt(t, newIndex(), fileBucket(t.TempDir()), func() time.Time { return at })
		if _, _, err := a.CreateCredential(ctx, "legacy", []string{ScopeWrite}); err != nil {
			t.Fatal(err)
		}
		alice, err := a.CreateUser(ctx, "alice", "alice@example.com", true)
		if err != nil || !alice.Active() || !alice.Admin || !alice.Created.Equal(at) {
			t.Fatalf("create alice: %+v %v", alice, err)
		}
		if _, err := a.CreateOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.CreateUser(ctx, "gone", "gone@example.com", false); err != nil {
			t.Fatal(err)
		}
		if _, err := a.DeleteUser(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, a, b)
		for _, tc := range []struct {
			name string
			user bool
			want error
		}{
			{"acme", true, ErrNameTaken},
			{"alice", false, ErrNameTaken},
			{"alice", true, ErrNameTaken},
			{"legacy", true, ErrNameTaken},
			{"legacy", false, ErrNameTaken},
			{"gone", true, ErrNameTaken},
			{"gone", false, ErrNameTaken},
			{"api", true, ErrReservedName},
			{"datasets", false, ErrReservedName},
			{"settings", true, ErrReservedName},
			{"new", false, ErrReservedName},
			{"Bad/Name", true, ErrBadTenant},
		} {
			var err error
			if tc.user {
				_, err = a.CreateUser(ctx, tc.name, "x@example.com", false)
			} else {
				_, err = a.CreateOrg(ctx, tc.name)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("create %q (user %v): %v, want %v", tc.name, tc.user, err, tc.want)
			}
		}
		if _, _, err := a.CreateCredential(ctx, "alice", []string{ScopeRead}); !errors.Is(err, ErrNotOrg) {
			t.Errorf("robot credential of user alice: %v, want ErrNotOrg", err)
		}
		if diff := cmp.Diff(before, snapshot(t, a, b)); diff != "" {
			t.Fatalf("refusals changed state (-before +after):\n%s", diff)
		}
		for name, want := range map[string]string{"alice": KindUser, "gone": KindUser, "acme": KindOrg, "legacy": KindOrg} {
			if kind, err := a.NamespaceKind(ctx, name); err != nil || kind != want {
				t.Errorf("kind of %s: %q %v, want %q", name, kind, err, want)
			}
		}
		if _, err := a.NamespaceKind(ctx, "nobody"); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("kind of nobody: %v, want ErrNotFound", err)
		}
		if _, err := a.Org(ctx, "alice"); !errors.Is(err, ErrNotOrg) {
			t.Errorf("Org(alice): %v, want ErrNotOrg", err)
		}
		orgs, err := a.Orgs(ctx)
		if want := []Org{{Name: "acme", Created: at}, {Name: "legacy"}}; err != nil || !cmp.Equal(orgs, want) {
			t.Fatalf("orgs %+v %v, want %+v", orgs, err, want)
		}
		if !slices.IsSorted(reservedNames) {
			t.Fatal("reservedNames must be sorted (ValidNamespace searches it)")
		}
	})
}

// state is what a refusal must leave alone: every record and row of the
// accounts.
type state struct {
	Keys        []string
	Users       []User
	Orgs        []Org
	Memberships []Membership
	Credentials []Credential
}

func snapshot(t *testing.T, a *Accounts, b *objects.Bucket) state {
	t.Helper()
	ctx := context.Background()
	var s state
	var err error
	for _, p := range []string{PrefixUsers, PrefixOrgs, PrefixMemberships, PrefixCredentials} {
		keys, err := b.ListKeys(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		s.Keys = append(s.Keys, keys...)
	}
	if s.Users, err = a.Users(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Orgs, err = a.Orgs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.idx.Reads().QueryRowContext(ctx, `SELECT COUNT(*) FROM memberships`).Scan(new(int)); err != nil {
		t.Fatal(err)
	}
	for _, o := range s.Orgs {
		ms, err := a.Members(ctx, o.Name)
		if err != nil {
			t.Fatal(err)
		}
		s.Memberships = append(s.Memberships, ms...)
	}
	if s.Credentials, err = a.Credentials(ctx, ""); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMemberships: roles are set and changed; the last admin of an
// organization cannot be demoted, removed or deleted; a membership of a
// user's namespace, of nothing, or of a deleted user is refused; each
// refusal leaves every record and row as it was.
func TestMemberships(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		a, _, b := openAt(t, newIndex(), fileBucket(t.TempDir()), nil)
		for _, u := range []string{"alice", "bob", "carol"} {
			if _, err := a.CreateUser(ctx, u, u+"@example.com", false); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.CreateOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.DeleteUser(ctx, "carol"); err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct{ user, role string }{{"alice", RoleAdmin}, {"bob", RoleRead}, {"bob", RoleWrite}} {
			if m, err := a.SetMember(ctx, "acme", step.user, step.role); err != nil || m.Role != step.role {
				t.Fatalf("set %s %s: %+v %v", step.user, step.role, m, err)
			}
		}
		before := snapshot(t, a, b)
		for _, tc := range []struct {
			name string
			do   func() error
			want error
		}{
			{"demote the last admin", func() error { _, err := a.SetMember(ctx, "acme", "alice", RoleWrite); return err }, ErrLastAdmin},
			{"remove the last admin", func() error { return a.RemoveMember(ctx, "acme", "alice") }, ErrLastAdmin},
			{"delete the last admin", func() error { _, err := a.DeleteUser(ctx, "alice"); return err }, ErrLastAdmin},
			{"a bad role", func() error { _, err := a.SetMember(ctx, "acme", "bob", "owner"); return err }, ErrBadRole},
			{"a user's namespace", func() error { _, err := a.SetMember(ctx, "alice", "bob", RoleRead); return err }, ErrNotOrg},
			{"no such organization", func() error { _, err := a.SetMember(ctx, "nowhere", "bob", RoleRead); return err }, objects.ErrNotFound},
			{"no such user", func() error { _, err := a.SetMember(ctx, "acme", "dave", RoleRead); return err }, objects.ErrNotFound},
			{"a deleted user", func() error { _, err := a.SetMember(ctx, "acme", "carol", RoleRead); return err }, ErrUserInactive},
			{"remove a non-member", func() error { return a.RemoveMember(ctx, "acme", "carol") }, objects.ErrNotFound},
		} {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		}
		if diff := cmp.Diff(before, snapshot(t, a, b)); diff != "" {
			t.Fatalf("refusals changed state (-before +after):\n%s", diff)
		}
		// With a second admin, the first may step down; then bob is the last.
		if _, err := a.SetMember(ctx, "acme", "bob", RoleAdmin); err != nil {
			t.Fatal(err)
		}
		if err := a.RemoveMember(ctx, "acme", "alice"); err != nil {
			t.Fatal(err)
		}
		if ms, err := a.Members(ctx, "acme"); err != nil || len(ms) != 1 || ms[0].User != "bob" || ms[0].Role != RoleAdmin {
			t.Fatalf("members %+v %v", ms, err)
		}
		if keys, _ := b.ListKeys(ctx, PrefixMemberships); len(keys) != 1 || keys[0] != MembershipKey("acme", "bob") {
			t.Fatalf("membership records %v", keys)
		}
		if _, err := a.SetMember(ctx, "acme", "bob", RoleRead); !errors.Is(err, ErrLastAdmin) {
			t.Fatalf("demote bob, now the last admin: %v", err)
		}
	})
}

// TestRestorePeople: reindex's restores make the same rows from the user,
// organization, membership and credential records alone.
func TestRestorePeople(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		dir := t.TempDir()
		a, _, b := openAt(t, newIndex(), fileBucket(dir), nil)
		mustPeople(t, a)
		fresh, fidx, _ := openAt(t, newIndex(), fileBucket(dir), nil)
		for prefix, restore := range map[string]func(context.Context, *sql.Tx, []byte) error{
			PrefixUsers: RestoreUser, PrefixOrgs: RestoreOrg, PrefixMemberships: RestoreMembership, PrefixCredentials: RestoreCredential,
		} {
			keys, err := b.ListKeys(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				data, err := b.ReadAll(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				if err := fidx.Tx(ctx, func(tx *sql.Tx) error { return restore(ctx, tx, data) }); err != nil {
					t.Fatalf("restore %s: %v", k, err)
				}
			}
		}
		if diff := cmp.Diff(snapshot(t, a, b), snapshot(t, fresh, b)); diff != "" {
			t.Fatalf("restored state differs (-live +restored):\n%s", diff)
		}
		for _, restore := range []func(context.Context, *sql.Tx, []byte) error{RestoreUser, RestoreOrg, RestoreMembership} {
			if err := fidx.Tx(ctx, func(tx *sql.Tx) error { return restore(ctx, tx, []byte(`{"name":"../x"}`)) }); err == nil {
				t.Error("a damaged record was restored")
			}
		}
	})
}

// mustPeople makes a deployment with users alice (admin of acme) and bob
// (a reader of acme, suspended), a deleted user carol, organization acme,
// a robot credential of acme and personal tokens of alice.
func mustPeople(t *testing.T, a *Accounts) {
	t.Helper()
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"alice", "bob", "carol"} {
		must(a.CreateUser(ctx, u, u+"@example.com", u == "alice"))
	}
	must(a.CreateOrg(ctx, "acme"))
	must(a.SetMember(ctx, "acme", "alice", RoleAdmin))
	must(a.SetMember(ctx, "acme", "bob", RoleRead))
	must(a.SetMember(ctx, "acme", "carol", RoleWrite))
	must(a.DeleteUser(ctx, "carol"))
	must(a.SuspendUser(ctx, "bob"))
	c, _, err := a.CreateCredential(ctx, "acme", []string{ScopeWrite})
	must(c, err)
	_, _, err = a.CreateToken(ctx, "alice", TokenSpec{Name: "laptop", Role: RoleWrite, Expires: a.now().Add(time.Hour)})
	must(nil, err)
	_, _, err = a.CreateToken(ctx, "alice", TokenSpec{Name: "ci", Grants: []Grant{{Namespace: "acme", Type: "model", Name: "bert", Role: RoleWrite}}})
	must(nil, err)
}

// TestClaimRace: processes taking one name at once, as a user or as an
// organization, on one index and bucket: exactly one wins, and the bucket
// keeps exactly its record.
func TestClaimRace(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		dir, loc := t.TempDir(), newIndex()
		const n = 6
		nodes := make([]*Accounts, n)
		for i := range nodes {
			nodes[i], _, _ = openAt(t, loc, fileBucket(dir), nil)
		}
		var wg sync.WaitGroup
		won := make([]bool, n)
		for i, a := range nodes {
			wg.Go(func() {
				var err error
				if i%2 == 0 {
					_, err = a.CreateUser(ctx, "x", "x@example.com", false)
				} else {
					_, err = a.CreateOrg(ctx, "x")
				}
				switch {
				case err == nil:
					won[i] = true
				case !errors.Is(err, ErrNameTaken):
					t.Errorf("node %d: %v, want ErrNameTaken or success", i, err)
				}
			})
		}
		wg.Wait()
		winners := slices.Index(won, true)
		if winners < 0 || slices.Index(won[winners+1:], true) >= 0 {
			t.Fatalf("winners %v, want exactly one", won)
		}
		_, _, b := openAt(t, newIndex(), fileBucket(dir), nil)
		users, _ := b.ListKeys(ctx, PrefixUsers)
		orgs, _ := b.ListKeys(ctx, PrefixOrgs)
		kind, err := nodes[0].NamespaceKind(ctx, "x")
		if err != nil || len(users)+len(orgs) != 1 || (kind == KindUser) != (len(users) == 1) || (winners%2 == 0) != (kind == KindUser) {
			t.Fatalf("kind %q %v; records users %v orgs %v; winner node %d", kind, err, users, orgs, winners)
		}
	})
}
