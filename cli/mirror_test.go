package cli

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"openxet/store"
	"openxet/xet"

	"openxet/store/accounts"
	"openxet/store/ingest"
)

// TestMirrorKilledMidPull runs two `openxet serve` processes, an upstream
// and a mirror of it, starts a download through the mirror of a file it
// has not pulled yet, reads the first bytes of the answer (which stream
// while the file is stored), kills the mirror with SIGKILL, and checks
// that nothing was registered, that the restarted mirror's next download
// resumes and serves the file whole, that `reindex --check` is clean, and
// that `openxet mirror pull` and `openxet mirror ls` work through the
// admin API.
func TestMirrorKilledMidPull(t *testing.T) {
	if testing.Short() {
		t.Skip("process test skipped in -short mode")
	}
	upDir, mirDir := t.TempDir(), t.TempDir()
	data := make([]byte, 48<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	upTok, hash := mirrorUpstreamRepo(t, upDir, data)
	readTok, adminTok := mirrorReaders(t, mirDir)

	up := startServe(t, upDir)
	env := []string{"OPENXET_MIRROR_UPSTREAM=" + up.url, "OPENXET_MIRROR_UPSTREAM_TOKEN=" + upTok}
	mir := startServeEnv(t, mirDir, env)
	killMidPull(t, mir, readTok, data)
	checkNothingPulled(t, mirDir, hash)

	mir = startServeEnv(t, mirDir, env)
	code, body := request(t, "GET", mir.url+"/alice/m/resolve/main/w.bin", readTok, nil)
	if code != 200 || !bytes.Equal(body, data) {
		t.Fatalf("download after the restart: %d, %d bytes, equal %v", code, len(body), bytes.Equal(body, data))
	}
	checkMirrorCommands(t, env, mir.url, adminTok, int64(len(data)))
	mir.stop()
	if code, out, errOut := mirrorCLI(nil, "reindex", "--check", "--data-dir", mirDir); code != 0 {
		t.Errorf("reindex --check after the resumed pull: exit %d\n%s%s", code, out, errOut)
	}
}

// mirrorUpstreamRepo makes, in the data directory dir of an upstream not
// started yet, repo alice/m holding data as w.bin and a read credential;
// it returns the credential's token and the file's Xet hash.
func mirrorUpstreamRepo(t *testing.T, dir string, data []byte) (string, xet.Hash) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	_, upTok, err := st.CreateCredential(ctx, "mirrorbot", []string{"read"})
	if err != nil {
		t.Fatal(err)
	}
	id := store.RepoID{Tenant: "alice", Type: "model", Name: "m"}
	if _, err := st.CreateRepoWith(ctx, id, "internal"); err != nil {
		t.Fatal(err)
	}
	f, err := ingest.File(ctx, st, "alice", bytes.NewReader(data), ingest.Options{SizeBytes: int64(len(data)), DedupGlobal: true, DefaultQuotaBytes: store.Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	sha := hex.EncodeToString(f.SHA256[:])
	pointer := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha, len(data))
	oid := sha1.Sum([]byte(fmt.Sprintf("blob %d\x00%s", len(pointer), pointer)))
	if _, err := st.Commit(ctx, id, "main", store.NewCommit{Summary: "weights", Changes: []store.Change{{Op: store.PutFile, Path: "w.bin",
		Entry: store.TreeEntry{SizeBytes: int64(len(data)), XetHash: f.Hash.String(), SHA256: sha, GitOID: hex.EncodeToString(oid[:])}}}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	return upTok, f.Hash
}

// mirrorReaders makes, in the data directory dir of a mirror not started
// yet, a read and an admin credential, and returns their tokens.
func mirrorReaders(t *testing.T, dir string) (readTok, adminTok string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	_, readTok, err = st.CreateCredential(ctx, "ci", []string{"read"})
	if err != nil {
		t.Fatal(err)
	}
	_, adminTok, err = st.CreateCredential(ctx, "admin", []string{accounts.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	return readTok, adminTok
}

// killMidPull starts a download of w.bin through mir, reads the first MiB
// of the answer (which streams while the file is stored), and kills mir
// with SIGKILL.
func killMidPull(t *testing.T, mir *proc, readTok string, data []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", mir.url+"/alice/m/resolve/main/w.bin", nil)
	req.Header.Set("Authorization", "Bearer "+readTok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		t.Fatalf("first download: %d", res.StatusCode)
	}
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(res.Body, first); err != nil {
		t.Fatalf("the first MiB did not stream: %v", err)
	}
	if !bytes.Equal(first, data[:len(first)]) {
		t.Fatal("the streamed bytes are not the file's")
	}
	mir.cmd.Process.Kill()
	mir.cmd.Wait()
	res.Body.Close()
}

// checkNothingPulled checks that the killed mirror of data directory dir
// registered no file of the hash and that `reindex --check` finds at most
// what the bucket got before the index.
func checkNothingPulled(t *testing.T, dir string, hash xet.Hash) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.File(ctx, "mirror", hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after SIGKILL mid-pull the file is registered: %v", err)
	}
	st.Close()

	// At most what the bucket got before the index (a xorb of the pull):
	// never a registered file or a row the bucket lacks.
	_, check, _ := mirrorCLI(nil, "reindex", "--check", "--data-dir", dir)
	for _, line := range strings.Split(strings.TrimSpace(check), "\n") {
		if m := crashDiffLine.FindStringSubmatch(line); m != nil && (m[3] != `""` || m[1] == "files") {
			t.Errorf("reindex --check after SIGKILL mid-pull: %s", line)
		}
	}
}

// checkMirrorCommands checks that `openxet mirror pull` and `openxet mirror
// ls` work through the admin API of the mirror at url, which has pulled
// one file of size bytes.
func checkMirrorCommands(t *testing.T, env []string, url, adminTok string, size int64) {
	t.Helper()
	if code, out, errOut := mirrorCLI(env, "mirror", "pull", "--server", url, "--token", adminTok, "--json", "alice/m@main"); code != 0 || !strings.Contains(out, `"pulled_files": 1`) {
		t.Errorf("mirror pull: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := mirrorCLI(env, "mirror", "ls", "--server", url, "--token", adminTok, "--json")
	var ls struct {
		Revisions []struct {
			Repo        string `json:"repo"`
			LastUsed    string `json:"last_used"`
			PulledBytes int64  `json:"pulled_bytes"`
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &ls) != nil || len(ls.Revisions) != 1 || ls.Revisions[0].PulledBytes != size {
		t.Errorf("mirror ls: exit %d %+v\n%s%s", code, ls, out, errOut)
	}
}

// mirrorCLI runs the openxet command line in this process with env (NAME=value)
// as its whole environment.
func mirrorCLI(env []string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	lookup := func(name string) (string, bool) {
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				return v, true
			}
		}
		return "", false
	}
	code := Run(context.Background(), append([]string{"openxet"}, args...), &out, &errOut, lookup)
	return code, out.String(), errOut.String()
}
