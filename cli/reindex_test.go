package cli

import (
	"context"
	"strings"
	"testing"

	"openxet/store"
	"openxet/xet"
)

// TestReindexWithQuotaBelowUsage: `openxet reindex --check` and `openxet
// reindex` restore what the bucket says even when an operator lowered a
// tenant's quota below its usage; neither enforces the quota.
func TestReindexWithQuotaBelowUsage(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		body, info := xet.BuildXorb([][]byte{[]byte(strings.Repeat("quota below usage ", 100+i))}, false)
		if _, err := st.PutXorb(ctx, "alice", info, body[:info.StreamLen], store.Unlimited); err != nil {
			t.Fatal(err)
		}
	}
	usage, _ := st.Usage(ctx, "alice")
	if err := st.PutTenantLimits(ctx, "alice", []byte(`{"quota_bytes":1}`), new(int64(1))); err != nil {
		t.Fatal(err)
	}
	st.Close()

	for _, args := range [][]string{{"reindex", "--check"}, {"reindex"}, {"reindex", "--check"}} {
		code, out, errOut := run(t, nil, append(args, "--data-dir", dir)...)
		if code != 0 {
			t.Fatalf("%v with alice's quota (1 byte) below her usage (%d bytes): exit %d\n%s%s", args, usage, code, out, errOut)
		}
	}
	st, err = store.Open(ctx, store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got, _ := st.Usage(ctx, "alice"); got != usage {
		t.Fatalf("usage after reindex %d, want %d", got, usage)
	}
}
