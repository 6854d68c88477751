package hub_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"openxet/server/servertest"
	"openxet/store"
)

// TestDiskFull runs a server whose index and bucket sit on a 4 MiB tmpfs
// and commits files until the disk is full: the commit that does not fit
// answers 507 insufficient_storage with a sentence, the server logs the
// cause (ENOSPC) at ERROR, and every commit acknowledged before it still
// reads back byte for byte. It needs to mount a tmpfs (root, as in CI);
// elsewhere it says so and skips.
func TestDiskFull(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (%v): run as root to test a full disk", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	st, err := store.Open(context.Background(), store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	e := env{servertest.Serve(t, st)}
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	acked := map[string][]byte{}
	var full response
	for i := 0; i < 64; i++ {
		name := fmt.Sprintf("f%02d.bin", i)
		content := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, 100_000) // 300 kB, different each time
		r := e.commitLines(alice, "alice/m", regularFileLine(name, content))
		if r.Status == 200 {
			acked[name] = content
			continue
		}
		full = r
		break
	}
	if full.Status != 507 {
		t.Fatalf("after %d commits the disk is not full: last answer %d %s", len(acked), full.Status, full.Body)
	}
	body := full.JSON(t)
	if body["code"] != "insufficient_storage" || !strings.Contains(fmt.Sprint(body["error"]), "storage is full") {
		t.Errorf("the full disk's refusal: %s", full.Body)
	}
	if logs := e.Logs.String(); !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "storage full") || !strings.Contains(logs, "no space left on device") {
		t.Errorf("the server did not log the cause at ERROR:\n%s", logs)
	}
	if len(acked) < 3 {
		t.Fatalf("only %d commits fit in 4 MiB", len(acked))
	}
	for name, want := range acked {
		if r := e.Do("GET", "/alice/m/resolve/main/"+name, alice, nil); r.Status != 200 || !bytes.Equal(r.Body, want) {
			t.Errorf("acknowledged %s after the disk filled: %d, %d bytes (want %d)", name, r.Status, len(r.Body), len(want))
		}
	}
}
