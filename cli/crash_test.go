package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"openxet/store"
	"openxet/xet"

	"openxet/store/accounts"
)

// TestCrashConsistency is the crash harness of the hardening issue. It runs
// `openxet serve` as a child process, drives concurrent uploaders of several
// tenants against it, kills it with SIGKILL at a random point, restarts it
// and checks, every cycle:
//
//   - before any client retries: every acknowledged xorb is there and every
//     acknowledged file reads back byte for byte; each tenant's usage counter
//     lies between the acknowledged bytes and the acknowledged plus in-flight
//     bytes; `openxet reindex --check` reports differences only for the
//     uploads that were in flight at the kill, and only of the kind "the
//     bucket has it, the index not yet" (the bucket is written first);
//   - after each client re-sent the request it had in flight (as hf_xet does
//     with a failed request): `openxet reindex --check` reports no difference
//     and each tenant's usage equals the sum of the sizes of the xorbs it
//     owns, as the acknowledgements account them.
//
// Every tenth cycle also deletes the index (index.db, -wal, -shm) after the
// kill and rebuilds it from the bucket with `openxet reindex` before the
// restart. OPENXET_CRASH_CYCLES sets the number of cycles (default 20);
// OPENXET_CRASH_SEED replays a run.
func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("crash harness skipped in -short mode")
	}
	cycles := 20
	if v := os.Getenv("OPENXET_CRASH_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("OPENXET_CRASH_CYCLES=%q", v)
		}
		cycles = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("OPENXET_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("OPENXET_CRASH_SEED=%q", v)
		}
		seed = n
	}
	t.Logf("seed %d (replay with OPENXET_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x0c0ffee))

	dir := serverDataDir(t)
	h := &crashHarness{t: t, dir: dir, rng: rng, acked: map[string]map[xet.Hash]int64{}}
	// Credentials are made offline, before the first start, so that no
	// test reads the child's stdout while it runs.
	h.admin = h.offlineCredential("admin", "admin")
	tenants := []string{"alice", "alice", "bob", "carol"}
	pool := crashSharedXorbs(rng, 6)
	for i, tn := range tenants {
		h.uploaders = append(h.uploaders, &crashUploader{
			h: h, tenant: tn, token: h.offlineCredential(tn, "write"),
			rng: rand.New(rand.NewPCG(seed, uint64(i+1))), pool: pool,
		})
	}
	h.secrets = append(h.secrets, h.admin)
	for _, u := range h.uploaders {
		h.secrets = append(h.secrets, u.token)
	}

	h.start()
	for cycle := 1; cycle <= cycles; cycle++ {
		h.cycle = cycle
		target := 1 + rng.IntN(48)
		h.load(target)
		h.kill()
		if cycle%10 == 0 {
			h.rebuildIndex()
		}
		h.start()
		h.checkBeforeRetry()
		h.retry()
		h.checkAfterRetry()
		if t.Failed() {
			t.Fatalf("cycle %d failed (seed %d)", cycle, seed)
		}
	}
	// A last full pass over everything ever acknowledged.
	h.verifyFiles(h.allFiles)
	h.kill()
	t.Logf("%d SIGKILL cycles (%d with the index deleted and rebuilt); %d files and %d xorb uploads acknowledged; "+
		"%d bucket-ahead differences before the retries; %d times an unanswered xorb upload had committed anyway",
		cycles, cycles/10, len(h.allFiles), h.xorbAcks, h.bucketAhead, h.committedEarly)
}

type crashHarness struct {
	t         *testing.T
	dir       string
	rng       *rand.Rand
	admin     string
	p         *proc
	cycle     int
	uploaders []*crashUploader
	secrets   []string // must never appear in a log line

	mu             sync.Mutex
	acked          map[string]map[xet.Hash]int64 // tenant → acknowledged xorbs → stream length
	newFiles       []*crashFile                  // acknowledged since the last check
	newXorbs       []crashXorbAck
	allFiles       []*crashFile
	xorbAcks       int
	bucketAhead    int // differences seen before the retries: a kill between bucket write and index commit
	committedEarly int // in-flight xorb uploads whose owner row committed though no answer came
}

type crashXorbAck struct {
	tenant, token string
	hash          xet.Hash
}

// crashFile is one file an uploader registers: whole xorbs and a shard.
type crashFile struct {
	tenant, token string
	xorbs         [][]byte
	infos         []xet.XorbInfo
	shard         []byte
	info          xet.FileInfo
	data          []byte
}

// crashUploader uploads files one request at a time; cur and step are the
// request it has in flight (or will send next).
type crashUploader struct {
	h             *crashHarness
	tenant, token string
	rng           *rand.Rand
	pool          [][][]byte
	n             int
	cur           *crashFile
	step          int // index of the next xorb; len(cur.xorbs) means the shard
}

// crashSharedXorbs are chunk sets several tenants upload as the same xorb.
func crashSharedXorbs(rng *rand.Rand, n int) [][][]byte {
	out := make([][][]byte, n)
	for i := range out {
		out[i] = crashChunks(rng)
	}
	return out
}

// crashChunks returns 1 to 6 chunks of 1 to 20 KiB, half of them
// compressible text so that the LZ4 path is exercised.
func crashChunks(rng *rand.Rand) [][]byte {
	chunks := make([][]byte, 1+rng.IntN(6))
	for i := range chunks {
		b := make([]byte, 1024+rng.IntN(19*1024))
		if rng.IntN(2) == 0 {
			words := []string{"xet ", "chunk ", "openxet ", "crash ", "tenant ", "bucket "}
			for j := 0; j < len(b); {
				j += copy(b[j:], words[rng.IntN(len(words))])
			}
		} else {
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
		}
		chunks[i] = b
	}
	return chunks
}

func (u *crashUploader) newFile() *crashFile {
	u.n++
	f := &crashFile{tenant: u.tenant, token: u.token}
	for i, n := 0, 1+u.rng.IntN(3); i < n; i++ {
		chunks, compress := crashChunks(u.rng), u.rng.IntN(2) == 0
		if u.rng.IntN(4) == 0 {
			// A shared xorb is always serialized the same way, so that
			// its size (what each owner is charged) is the same for all:
			// see TestCrashLeftoverXorbWithAnotherSerialization for what
			// happens otherwise.
			i := u.rng.IntN(len(u.pool))
			chunks, compress = u.pool[i], i%2 == 0
		}
		body, info := xet.BuildXorb(chunks, compress)
		f.xorbs = append(f.xorbs, body)
		f.infos = append(f.infos, info)
		for _, c := range chunks {
			f.data = append(f.data, c...)
		}
	}
	var cas []xet.CASInfo
	var leaves []xet.Leaf
	for _, x := range f.infos {
		hashes := make([]xet.Hash, len(x.Chunks))
		for i, c := range x.Chunks {
			hashes[i] = c.Hash
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		f.info.Terms = append(f.info.Terms, xet.Term{Xorb: x.Hash, UnpackedBytes: uint32(x.UncompressedSize()), ChunkEnd: uint32(len(x.Chunks))})
		f.info.Verification = append(f.info.Verification, xet.RangeHash(hashes))
		cas = append(cas, xet.CASInfoFromXorb(x))
	}
	f.info.Hash = xet.FileHash(leaves)
	f.info.Flags = xet.FileFlagVerification
	f.shard = (&xet.Shard{Files: []xet.FileInfo{f.info}, Xorbs: cas}).MarshalUpload()
	return f
}

// crashEvents counts requests sent and acknowledged in a cycle; the kill
// comes when the count reaches a random target.
type crashEvents struct {
	n      atomic.Int64
	target int64
	once   sync.Once
	fire   chan struct{}
}

func (ev *crashEvents) tick() {
	if ev != nil && ev.n.Add(1) == ev.target {
		ev.once.Do(func() { close(ev.fire) })
	}
}

// run uploads until a request fails at the transport (the kill) or, with
// finish, until the file in progress is registered. It reports false on an
// HTTP answer other than 200, which no upload here should get.
func (u *crashUploader) run(client *http.Client, url string, ev *crashEvents, finish bool) bool {
	for {
		if u.cur == nil {
			if finish {
				return true
			}
			u.cur, u.step = u.newFile(), 0
		}
		f := u.cur
		var path string
		var body []byte
		if u.step < len(f.xorbs) {
			path, body = "/v1/xorbs/default/"+f.infos[u.step].Hash.String(), f.xorbs[u.step]
		} else {
			path, body = "/v1/shards", f.shard
		}
		ev.tick()
		req, _ := http.NewRequest("POST", url+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+u.token)
		res, err := client.Do(req)
		if err != nil {
			return true // the server is gone; the request stays in flight
		}
		answer, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return true // cut off while the answer was on the wire: not acknowledged
		}
		if res.StatusCode != 200 {
			u.h.t.Errorf("%s %s: %d %s", u.tenant, path, res.StatusCode, answer)
			return false
		}
		u.h.ack(u, f)
		ev.tick()
	}
}

// ack records an acknowledged request and moves the uploader on.
func (h *crashHarness) ack(u *crashUploader, f *crashFile) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u.step < len(f.xorbs) {
		info := f.infos[u.step]
		if h.acked[u.tenant] == nil {
			h.acked[u.tenant] = map[xet.Hash]int64{}
		}
		h.acked[u.tenant][info.Hash] = info.StreamLen
		h.newXorbs = append(h.newXorbs, crashXorbAck{u.tenant, u.token, info.Hash})
		h.xorbAcks++
		u.step++
		return
	}
	h.newFiles = append(h.newFiles, f)
	h.allFiles = append(h.allFiles, f)
	u.cur, u.step = nil, 0
}

// load runs every uploader at once, sends SIGKILL when the requests sent
// and acknowledged reach target, and returns once every uploader has
// stopped on the dead server.
func (h *crashHarness) load(target int) {
	ev := &crashEvents{target: int64(target), fire: make(chan struct{})}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for _, u := range h.uploaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
			defer client.CloseIdleConnections()
			u.run(client, h.p.url, ev, false)
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-ev.fire:
	case <-done: // every uploader stopped on an error (reported)
	}
	h.p.cmd.Process.Kill() // SIGKILL: no shutdown code runs
	<-done
}

// start runs `openxet serve` on the data directory.
func (h *crashHarness) start() {
	h.t.Helper()
	h.p = startServe(h.t, h.dir)
}

// kill sends SIGKILL (when the process still runs), reaps it and checks
// that no secret reached its log.
func (h *crashHarness) kill() {
	h.t.Helper()
	if h.p.cmd.ProcessState == nil {
		h.p.cmd.Process.Kill()
		h.p.cmd.Wait()
	}
	// Wait has returned, so the buffers are no longer written to.
	logs := h.p.stdout.String() + h.p.stderr.String()
	for _, s := range h.secrets {
		_, secret, _ := accounts.ParseToken(s)
		if strings.Contains(logs, s) || strings.Contains(logs, secret) {
			h.t.Errorf("cycle %d: a credential secret appears in the server's output", h.cycle)
		}
	}
	if strings.Contains(logs, "&s=") || bearerInLog.MatchString(logs) {
		h.t.Errorf("cycle %d: a signed URL or bearer token appears in the server's output", h.cycle)
	}
}

// rebuildIndex deletes the index and rebuilds it from the bucket.
func (h *crashHarness) rebuildIndex() {
	h.t.Helper()
	for _, s := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(filepath.Join(h.dir, "index.db"+s)); err != nil && !os.IsNotExist(err) {
			h.t.Fatal(err)
		}
	}
	if code, out, errOut := h.cli("reindex", "--data-dir", h.dir); code != 0 {
		h.t.Fatalf("cycle %d: reindex: exit %d\n%s%s", h.cycle, code, out, errOut)
	}
}

// cli runs the openxet command line as a child process.
func (h *crashHarness) cli(args ...string) (int, string, string) {
	h.t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Args[0] = "openxet"
	// Under -race a process sleeps a second before it exits
	// (atexit_sleep_ms); these short-lived commands need not.
	cmd.Env = append(os.Environ(), "OPENXET_TEST_MAIN=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			h.t.Fatal(err)
		}
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

func (h *crashHarness) offlineCredential(tenant, scope string) string {
	h.t.Helper()
	code, out, errOut := h.cli("credentials", "create", "--data-dir", h.dir, "--tenant", tenant, "--scope", scope, "--json")
	var v struct{ Token string }
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Token == "" {
		h.t.Fatalf("credentials create: exit %d %s %s", code, out, errOut)
	}
	return v.Token
}

// bearerInLog is a bearer token in a log: the scheme and something long
// enough to be a token ("missing Authorization: Bearer token", a 401's
// message, is none).
var bearerInLog = regexp.MustCompile(`Bearer [A-Za-z0-9_.~+/=-]{12,}`)

var crashDiffLine = regexp.MustCompile(`^(leftover )?(\S+) (\S+): index=(".*") bucket=(".*")$`)

// crashDiff is a line of reindex --check; leftover: marked as what an
// interrupted write leaves.
type crashDiff struct {
	table, key, index, bucket string
	leftover                  bool
}

// check runs `openxet reindex --check` against the live data directory.
func (h *crashHarness) check() []crashDiff {
	h.t.Helper()
	code, out, errOut := h.cli("reindex", "--check", "--data-dir", h.dir)
	if code != 0 && code != 1 {
		h.t.Fatalf("cycle %d: reindex --check: exit %d\n%s%s", h.cycle, code, out, errOut)
	}
	var diffs []crashDiff
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := crashDiffLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		idx, err1 := strconv.Unquote(m[4])
		bkt, err2 := strconv.Unquote(m[5])
		if err1 != nil || err2 != nil {
			h.t.Fatalf("cannot read difference %q", line)
		}
		diffs = append(diffs, crashDiff{m[2], m[3], idx, bkt, m[1] != ""})
	}
	mismatch := slices.ContainsFunc(diffs, func(d crashDiff) bool { return !d.leftover })
	if (code == 1) != mismatch {
		h.t.Fatalf("cycle %d: reindex --check exit %d with %d differences:\n%s%s", h.cycle, code, len(diffs), out, errOut)
	}
	return diffs
}

// checkBeforeRetry checks the state right after the restart, before any
// client retried what it had in flight.
func (h *crashHarness) checkBeforeRetry() {
	h.t.Helper()
	// Every acknowledged xorb is stored for its tenant.
	for _, x := range h.newXorbs {
		if code, body := request(h.t, "HEAD", h.p.url+"/v1/xorbs/default/"+x.hash.String(), x.token, nil); code != 200 {
			h.t.Errorf("cycle %d: acknowledged xorb %s of %s: HEAD %d %s", h.cycle, x.hash, x.tenant, code, body)
		}
	}
	h.newXorbs = nil
	// Every file acknowledged since the last check reads back, plus a few
	// older ones.
	files := h.newFiles
	for i := 0; i < 5 && len(h.allFiles) > 0; i++ {
		files = append(files, h.allFiles[h.rng.IntN(len(h.allFiles))])
	}
	h.verifyFiles(files)
	h.newFiles = nil

	// What was in flight at the kill may or may not have been committed.
	inflight := map[string]bool{} // keys of rows an in-flight request may have made
	maybe := map[string]int64{}   // tenant → bytes in flight
	for _, u := range h.uploaders {
		if u.cur == nil {
			continue
		}
		if u.step < len(u.cur.xorbs) {
			x := u.cur.infos[u.step]
			inflight[x.Hash.String()] = true
			inflight[x.Hash.String()+"/"+u.tenant] = true
			if _, ok := h.acked[u.tenant][x.Hash]; !ok {
				maybe[u.tenant] += x.StreamLen
				inflight["tenant:"+u.tenant] = true
			}
			continue
		}
		sh := store.ShardHash(u.cur.shard)
		inflight[sh+"/"+u.tenant] = true
		inflight[u.tenant+"/"+u.cur.info.Hash.String()] = true
		for _, x := range u.cur.infos {
			for _, c := range x.Chunks {
				inflight[c.Hash.String()+"/"+u.tenant] = true
			}
		}
	}
	for tn, usage := range h.usage() {
		lo := h.ackedBytes(tn)
		if usage > lo {
			h.committedEarly++
		}
		if usage < lo || usage > lo+maybe[tn] {
			h.t.Errorf("cycle %d: %s's usage %d is outside [%d, %d] (acknowledged, + in flight)", h.cycle, tn, usage, lo, lo+maybe[tn])
		}
	}
	for _, d := range h.check() {
		ok := false
		switch d.table {
		case "tenants":
			a, _, _ := strings.Cut(d.index, " ")
			b, _, _ := strings.Cut(d.bucket, " ")
			ia, _ := strconv.ParseInt(a, 10, 64)
			ib, _ := strconv.ParseInt(b, 10, 64)
			ok = inflight["tenant:"+d.key] && d.index != "" && ia < ib
		case "xorbs", "xorb_owners", "shard_owners", "files", "dedup":
			ok = inflight[d.key] && d.index == ""
		}
		h.bucketAhead++
		if ok && !d.leftover {
			h.t.Errorf("cycle %d: reindex --check calls a difference a request in flight at the kill explains a mismatch: %+v", h.cycle, d)
		}
		if !ok {
			h.t.Errorf("cycle %d: reindex --check difference not explained by a request in flight at the kill: %+v", h.cycle, d)
		}
	}
}

// retry lets each uploader re-send the request it had in flight and finish
// its file, as a client does after a failed request.
func (h *crashHarness) retry() {
	h.t.Helper()
	client := &http.Client{Timeout: time.Minute}
	defer client.CloseIdleConnections()
	for _, u := range h.uploaders {
		if !u.run(client, h.p.url, nil, true) {
			return
		}
	}
	for _, x := range h.newXorbs {
		if code, _ := request(h.t, "HEAD", h.p.url+"/v1/xorbs/default/"+x.hash.String(), x.token, nil); code != 200 {
			h.t.Errorf("cycle %d: retried xorb %s of %s: HEAD %d", h.cycle, x.hash, x.tenant, code)
		}
	}
	h.newXorbs = nil
	h.verifyFiles(h.newFiles)
	h.newFiles = nil
}

// checkAfterRetry: with nothing in flight, the index matches the bucket and
// each tenant's usage is exactly its acknowledged xorbs.
func (h *crashHarness) checkAfterRetry() {
	h.t.Helper()
	if diffs := h.check(); len(diffs) > 0 {
		h.t.Errorf("cycle %d: reindex --check after the retries reports %d differences, first %+v", h.cycle, len(diffs), diffs[0])
	}
	usage := h.usage()
	for tn := range h.acked {
		if want := h.ackedBytes(tn); usage[tn] != want {
			h.t.Errorf("cycle %d: %s's usage %d, want the sum of its xorbs %d", h.cycle, tn, usage[tn], want)
		}
	}
}

func (h *crashHarness) ackedBytes(tenant string) int64 {
	var n int64
	for _, size := range h.acked[tenant] {
		n += size
	}
	return n
}

// usage reads every uploading tenant's counter through the admin API.
func (h *crashHarness) usage() map[string]int64 {
	h.t.Helper()
	out := map[string]int64{}
	for _, u := range h.uploaders {
		code, body := request(h.t, "GET", h.p.url+"/api/openxet/v1/admin/tenants/"+u.tenant+"/limits", h.admin, nil)
		var v struct {
			UsageBytes int64 `json:"usage_bytes"`
		}
		if code != 200 || json.Unmarshal(body, &v) != nil {
			h.t.Fatalf("limits of %s: %d %s", u.tenant, code, body)
		}
		out[u.tenant] = v.UsageBytes
	}
	return out
}

// verifyFiles downloads each file as the client does (reconstruction, then
// the signed fetch URLs) and compares every byte.
func (h *crashHarness) verifyFiles(files []*crashFile) {
	h.t.Helper()
	for _, f := range files {
		got, err := crashDownload(h.p.url, f.token, f.info.Hash)
		if err != nil {
			h.t.Errorf("cycle %d: acknowledged file %s of %s: %v", h.cycle, f.info.Hash, f.tenant, err)
			continue
		}
		if !bytes.Equal(got, f.data) {
			h.t.Errorf("cycle %d: acknowledged file %s of %s: %d bytes read back differ from the %d uploaded", h.cycle, f.info.Hash, f.tenant, len(got), len(f.data))
		}
	}
}

func crashDownload(base, token string, file xet.Hash) ([]byte, error) {
	return downloadVia(base, "", token, file)
}

// downloadVia downloads a file as the client does, asking base for the
// reconstruction and fetching its signed URLs from fetchBase instead of the
// server they name (unless fetchBase is "").
func downloadVia(base, fetchBase, token string, file xet.Hash) ([]byte, error) {
	req, _ := http.NewRequest("GET", base+"/v1/reconstructions/"+file.String(), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		return nil, fmt.Errorf("reconstruction: %d %s", res.StatusCode, body)
	}
	var rec struct {
		Offset uint64 `json:"offset_into_first_range"`
		Terms  []struct {
			Hash           string `json:"hash"`
			UnpackedLength int    `json:"unpacked_length"`
			Range          struct{ Start, End uint32 }
		}
		FetchInfo map[string][]struct {
			Range    struct{ Start, End uint32 }
			URL      string                      `json:"url"`
			URLRange struct{ Start, End uint64 } `json:"url_range"`
		} `json:"fetch_info"`
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		return nil, err
	}
	var out []byte
	for _, term := range rec.Terms {
		found := false
		for _, fi := range rec.FetchInfo[term.Hash] {
			if fi.Range.Start > term.Range.Start || term.Range.End > fi.Range.End {
				continue
			}
			fetch := fi.URL
			if u, err := url.Parse(fetch); err == nil && fetchBase != "" {
				fetch = fetchBase + u.RequestURI()
			}
			req, _ := http.NewRequest("GET", fetch, nil)
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", fi.URLRange.Start, fi.URLRange.End))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, err
			}
			stream, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != 206 {
				return nil, fmt.Errorf("fetch %s: status %d, %d bytes read, %v", term.Hash, res.StatusCode, len(stream), err)
			}
			chunks, err := xet.DecodeChunks(stream)
			if err != nil {
				return nil, fmt.Errorf("fetch %s: %w", term.Hash, err)
			}
			if int(term.Range.End-fi.Range.Start) > len(chunks) {
				return nil, fmt.Errorf("fetch %s: %d chunks, want %d", term.Hash, len(chunks), term.Range.End-fi.Range.Start)
			}
			n := len(out)
			for _, c := range chunks[term.Range.Start-fi.Range.Start : term.Range.End-fi.Range.Start] {
				out = append(out, c...)
			}
			if len(out)-n != term.UnpackedLength {
				return nil, fmt.Errorf("term %s: %d bytes, answer says %d", term.Hash, len(out)-n, term.UnpackedLength)
			}
			found = true
			break
		}
		if !found {
			return nil, fmt.Errorf("term %s has no fetch range", term.Hash)
		}
	}
	if rec.Offset > uint64(len(out)) {
		return nil, fmt.Errorf("offset %d past %d bytes", rec.Offset, len(out))
	}
	return out[rec.Offset:], nil
}
