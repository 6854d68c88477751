package accounts

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"openxet/store/objects"
)

// TestCredentials: a credential is made with its token shown once (the
// bucket record and the index hold only the secret's SHA-256), reads back
// by id and by tenant, carries its scopes (write implies read), and is
// revoked once, at the clock's time; refusals say what is wrong and leave
// no record and no row.
func TestCredentials(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		dir := t.TempDir()
		at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
		now := at
		a, _, b := openAt(t, newIndex(), fileBucket(dir), func() time.Time { return now })
		records := func() []string {
			t.Helper()
			keys, err := b.ListKeys(ctx, PrefixCredentials)
			if err != nil {
				t.Fatal(err)
			}
			return keys
		}
		for _, tc := range []struct {
			tenant string
			scopes []string
			want   string
		}{
			{"Bad/Name", []string{ScopeRead}, "invalid tenant name"},
			{"a..b", []string{ScopeRead}, "invalid tenant name"},
			{"alice", nil, "at least one scope"},
			{"alice", []string{"read", "owner"}, `unknown scope "owner"`},
		} {
			if _, _, err := a.CreateCredential(ctx, tc.tenant, tc.scopes); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q %v: %v, want %q", tc.tenant, tc.scopes, err, tc.want)
			}
		}
		if n, err := a.CountCredentials(ctx); err != nil || n != 0 || len(records()) != 0 {
			t.Fatalf("refusals left %d rows (%v), %d records", n, err, len(records()))
		}

		c, token, err := a.CreateCredential(ctx, "alice", []string{"write", "read", "write"})
		if err != nil {
			t.Fatal(err)
		}
		id, secret, err := ParseToken(token)
		if err != nil || id != c.ID || !strings.HasPrefix(token, TokenPrefix) {
			t.Fatalf("token %q: id %q %v, want the credential's id %q", token, id, err, c.ID)
		}
		if !c.CheckSecret(secret) || c.CheckSecret(strings.Repeat("0", 64)) {
			t.Fatal("CheckSecret does not tell the secret from another")
		}
		if !slices.Equal(c.Scopes, []string{ScopeRead, ScopeWrite}) || !c.Has(ScopeRead) || c.Has(ScopeAdmin) || !c.Created.Equal(at) {
			t.Fatalf("credential %+v", c)
		}
		rec, err := b.ReadAll(ctx, CredentialKey(c.ID))
		if err != nil || bytes.Contains(rec, []byte(secret)) || bytes.Contains(rec, []byte(c.ID+"_")) {
			t.Fatalf("record %s (%v): must not hold the secret", rec, err)
		}
		if strings.Contains(CredentialKey(c.ID), c.ID) || strings.Contains(TenantLimitsKey("alice"), "alice") {
			t.Fatal("a key shows a credential id or a tenant name")
		}
		got, err := a.Credential(ctx, c.ID)
		if err != nil || got.ID != c.ID || got.Tenant != "alice" || got.SecretSHA256 != c.SecretSHA256 || got.IsRevoked() {
			t.Fatalf("read back %+v %v", got, err)
		}
		if _, err := a.Credential(ctx, "0123456789abcdef"); !errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("unknown id: %v, want ErrNotFound", err)
		}
		now = at.Add(time.Minute)
		c2, _, err := a.CreateCredential(ctx, "bob", []string{ScopeAdmin})
		if err != nil {
			t.Fatal(err)
		}
		if cs, err := a.Credentials(ctx, "alice"); err != nil || len(cs) != 1 || cs[0].ID != c.ID {
			t.Fatalf("alice's credentials: %+v %v", cs, err)
		}
		if cs, err := a.Credentials(ctx, ""); err != nil || len(cs) != 2 || cs[0].ID != c.ID || cs[1].ID != c2.ID {
			t.Fatalf("every credential: %+v %v", cs, err)
		}
		if ts, err := a.Tenants(ctx); err != nil || len(ts) != 2 || ts[0].Name != "alice" || ts[1].Name != "bob" {
			t.Fatalf("tenants %+v %v", ts, err)
		}

		now = at.Add(time.Hour)
		r, err := a.RevokeCredential(ctx, c.ID)
		if err != nil || !r.Revoked.Equal(now) {
			t.Fatalf("revoke: %+v %v", r, err)
		}
		now = at.Add(2 * time.Hour)
		if r, err := a.RevokeCredential(ctx, c.ID); err != nil || !r.Revoked.Equal(at.Add(time.Hour)) {
			t.Fatalf("second revoke: %+v %v, want the first revocation kept", r, err)
		}
		if got, err := a.Credential(ctx, c.ID); err != nil || !got.IsRevoked() {
			t.Fatalf("after revoke: %+v %v", got, err)
		}
		if _, err := a.RevokeCredential(ctx, "0123456789abcdef"); !errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("revoke an unknown id: %v", err)
		}

	})
}

// TestRestoreCredential: reindex's restore makes the same rows from the
// credential records alone, a revoked one included; a damaged record is
// refused.
func TestRestoreCredential(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		dir := t.TempDir()
		a, _, b := openAt(t, newIndex(), fileBucket(dir), nil)
		for _, tenant := range []string{"alice", "bob"} {
			c, _, err := a.CreateCredential(ctx, tenant, []string{ScopeWrite})
			if err != nil {
				t.Fatal(err)
			}
			if tenant == "bob" {
				if _, err := a.RevokeCredential(ctx, c.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		records, err := b.ListKeys(ctx, PrefixCredentials)
		if err != nil {
			t.Fatal(err)
		}
		fresh, fidx, _ := openAt(t, newIndex(), fileBucket(dir), nil)
		for _, key := range records {
			data, err := b.ReadAll(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := fidx.Tx(ctx, func(tx *sql.Tx) error { return RestoreCredential(ctx, tx, data) }); err != nil {
				t.Fatal(err)
			}
		}
		want, _ := a.Credentials(ctx, "")
		if got, err := fresh.Credentials(ctx, ""); err != nil || len(got) != 2 || !slices.EqualFunc(got, want, sameCredential) {
			t.Fatalf("restored %+v %v\nwant %+v", got, err, want)
		}
		if err := fidx.Tx(ctx, func(tx *sql.Tx) error { return RestoreCredential(ctx, tx, []byte("{")) }); err == nil {
			t.Fatal("a damaged record was restored")
		}
	})
}

func sameCredential(a, b Credential) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && slices.Equal(a.Scopes, b.Scopes) && a.SecretSHA256 == b.SecretSHA256 &&
		a.Created.Equal(b.Created) && a.Revoked.Equal(b.Revoked)
}

// TestCreateFirstCredentialOnce: processes starting at once on an empty
// index and bucket each try to make the first credential; exactly one
// does, and the bucket keeps exactly its record, unrevoked. Later calls
// make none.
func TestCreateFirstCredentialOnce(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		dir, loc := t.TempDir(), newIndex()
		const n = 6
		nodes := make([]*Accounts, n)
		for i := range nodes {
			nodes[i], _, _ = openAt(t, loc, fileBucket(dir), nil)
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []Credential
		)
		for _, a := range nodes {
			wg.Go(func() {
				c, token, created, err := a.CreateFirstCredential(ctx, "admin", []string{ScopeAdmin})
				if err != nil {
					t.Error(err)
					return
				}
				if created != (token != "") {
					t.Errorf("created %v with token %q", created, token)
				}
				if created {
					mu.Lock()
					winners = append(winners, c)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("%d first credentials, want 1", len(winners))
		}
		_, _, b := openAt(t, newIndex(), fileBucket(dir), nil)
		keys, err := b.ListKeys(ctx, PrefixCredentials)
		if err != nil || len(keys) != 1 || keys[0] != CredentialKey(winners[0].ID) {
			t.Fatalf("records %v %v, want only the winner's", keys, err)
		}
		if c, err := nodes[0].Credential(ctx, winners[0].ID); err != nil || c.IsRevoked() {
			t.Fatalf("the winner's credential: %+v %v", c, err)
		}
		if _, _, created, err := nodes[1].CreateFirstCredential(ctx, "admin", []string{ScopeAdmin}); err != nil || created {
			t.Fatalf("a later first credential: created %v %v", created, err)
		}
	})
}

// FuzzParseToken: any string either parses to a 16-hex id and a 64-hex
// secret that make the token again, or is ErrBadToken; nothing panics.
func FuzzParseToken(f *testing.F) {
	f.Add(TokenPrefix + strings.Repeat("a", 16) + "_" + strings.Repeat("b", 64))
	f.Add(TokenPrefix + "_")
	f.Add("hf_abc")
	f.Add(TokenPrefix + strings.Repeat("g", 16) + "_" + strings.Repeat("b", 64))
	f.Fuzz(func(t *testing.T, token string) {
		id, secret, err := ParseToken(token)
		if err != nil {
			if !errors.Is(err, ErrBadToken) || id != "" || secret != "" {
				t.Fatalf("%q: %q %q %v", token, id, secret, err)
			}
			return
		}
		if len(id) != 16 || len(secret) != 64 || TokenPrefix+id+"_"+secret != token {
			t.Fatalf("%q parsed to %q %q", token, id, secret)
		}
	})
}
