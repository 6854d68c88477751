package cli

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"openxet/store"

	"openxet/store/accounts"
)

// storeCredentials lists the credentials of a data directory: the index
// rows and the bucket records (revoked ones included).
func storeCredentials(t *testing.T, dir string) (rows []accounts.Credential, records []string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if rows, err = st.Credentials(ctx, ""); err != nil {
		t.Fatal(err)
	}
	it := st.Bucket().List(nil)
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			break
		}
		if strings.HasPrefix(obj.Key, "credentials/") {
			records = append(records, obj.Key)
		}
	}
	return rows, records
}

// TestServeOnABusyPortCreatesNoCredential: `openxet serve` binds its
// listeners before anything else, so a start that cannot bind (the main
// the metrics or the profiler's address in use) fails without creating or printing the
// first admin credential; a later start on a free port creates it.
func TestServeOnABusyPortCreatesNoCredential(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, flag := range []string{"--listen", "--metrics-listen", "--debug-listen"} {
		t.Run(flag, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"serve", "--data-dir", dir, "--listen", busy.Addr().String()}
			if flag != "--listen" {
				args = []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", flag, busy.Addr().String()}
			}
			code, out, errOut := run(t, nil, args...)
			if code == 0 || !strings.Contains(errOut, "listen on "+busy.Addr().String()) {
				t.Fatalf("serve on a busy port: exit %d, stderr %q", code, errOut)
			}
			if strings.Contains(out, "Token") || strings.Contains(out, "hf_oxt_") {
				t.Fatalf("printed a credential before failing to bind: %q", out)
			}
			if rows, records := storeCredentials(t, dir); len(rows) != 0 || len(records) != 0 {
				t.Fatalf("the store has credentials after a failed start: %d rows, bucket records %v", len(rows), records)
			}
		})
	}
}

// TestFirstAdminCredentialIsCreatedOnce: processes starting on an empty
// store at the same moment create exactly one admin credential, and only
// the one that created it prints its token. Two store instances on one data
// directory stand for the processes; their clocks (read by each bootstrap
// before it writes anything) hold every bootstrap until all have started,
// so all of them have seen the empty store before any creates.
func TestFirstAdminCredentialIsCreatedOnce(t *testing.T) {
	const perStore = 3
	dir := t.TempDir()
	ctx := context.Background()
	var arrived sync.WaitGroup
	arrived.Add(2 * perStore)
	release := make(chan struct{})
	go func() { arrived.Wait(); close(release) }()
	stores := make([]*store.Store, 2)
	var armed atomic.Bool // the clocks hold bootstraps only; opening the stores reads them too
	for i := range stores {
		cfg := store.DirConfig(dir)
		calls := 0
		var mu sync.Mutex
		cfg.Now = func() time.Time {
			if !armed.Load() {
				return time.Now()
			}
			mu.Lock()
			calls++
			first := calls <= perStore
			mu.Unlock()
			if first {
				arrived.Done()
				<-release
			}
			return time.Now()
		}
		st, err := store.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores[i] = st
	}
	armed.Store(true)
	outs := make([]bytes.Buffer, 2*perStore)
	errs := make([]error, 2*perStore)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = bootstrapAdmin(ctx, stores[i%2], &outs[i])
		}()
	}
	wg.Wait()
	var tokens []string
	for i, out := range outs {
		if errs[i] != nil {
			t.Errorf("bootstrap %d: %v", i, errs[i])
		}
		if strings.Contains(out.String(), "Token") {
			tokens = append(tokens, adminToken(t, out.String()))
		} else if out.Len() != 0 {
			t.Errorf("bootstrap %d printed %q without a token", i, out.String())
		}
	}
	if len(tokens) != 1 {
		t.Fatalf("%d bootstraps printed a token, want exactly 1", len(tokens))
	}
	for _, st := range stores {
		st.Close()
	}
	rows, records := storeCredentials(t, dir)
	if len(rows) != 1 || len(records) != 1 {
		t.Fatalf("%d credential rows and bucket records %v, want one of each", len(rows), records)
	}
	id, secret, err := accounts.ParseToken(tokens[0])
	if err != nil || rows[0].ID != id || !rows[0].CheckSecret(secret) || rows[0].IsRevoked() || !rows[0].Has(accounts.ScopeAdmin) {
		t.Fatalf("the stored credential %+v is not the printed token's admin credential", rows[0])
	}
	// A rebuilt index agrees: the bucket holds exactly that credential,
	// not revoked.
	code, out, errOut := run(t, nil, "reindex", "--check", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("reindex --check: exit %d\n%s%s", code, out, errOut)
	}
	if records[0] != "credentials/"+store.HashName(id) {
		t.Fatalf("bucket record %s is not the printed credential's", records[0])
	}
	// A later start prints nothing.
	st, err := store.Open(ctx, store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var later bytes.Buffer
	if err := bootstrapAdmin(ctx, st, &later); err != nil || later.Len() != 0 {
		t.Fatalf("a later start: %v, printed %q", err, later.String())
	}
}
