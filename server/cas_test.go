package server

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

func (e *testEnv) postXorb(token string, body []byte, h xet.Hash) response {
	e.t.Helper()
	return e.do("POST", "/v1/xorbs/default/"+h.String(), token, body)
}

func TestXorbUploadRecordsOwnerAndUsageOnce(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	body, info := xet.BuildXorb(randomChunks(1, 4, 50_000), false)
	r := e.postXorb(alice, body, info.Hash)
	if r.Status != 200 || string(r.Body) != "{\"was_inserted\":true}\n" {
		t.Fatalf("first upload: %d %s", r.Status, r.Body)
	}
	before := e.snapshot()
	if got := before.Usage["alice"]; got != info.StreamLen {
		t.Fatalf("usage %d, want %d", got, info.StreamLen)
	}
	r = e.postXorb(alice, body, info.Hash)
	if r.Status != 200 || string(r.Body) != "{\"was_inserted\":false}\n" {
		t.Fatalf("second upload: %d %s", r.Status, r.Body)
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Fatalf("re-upload changed state (-before +after):\n%s", diff)
	}
	// Another tenant uploading the same xorb is charged as if alone.
	bob := e.credential("bob", "write")
	if r := e.postXorb(bob, body, info.Hash); r.Status != 200 || !strings.Contains(string(r.Body), "true") {
		t.Fatalf("bob upload: %d %s", r.Status, r.Body)
	}
	if got := e.snapshot().Usage["bob"]; got != info.StreamLen {
		t.Fatalf("bob usage %d, want %d", got, info.StreamLen)
	}
}

// TestBadXorbChangesNothing is the bad-input table of the CAS issue: each
// refusal has its docs/design.md §7 code and leaves no object, row or counter.
func TestBadXorbChangesNothing(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	good, info := xet.BuildXorb(randomChunks(2, 3, 40_000), false)
	other, otherInfo := xet.BuildXorb(randomChunks(3, 3, 40_000), false)

	badHeader := append([]byte(nil), good...)
	badHeader[0] = 9 // chunk version must be 0
	badScheme := append([]byte(nil), good...)
	badScheme[4] = 7
	bomb := lz4Bomb()

	cases := []struct {
		name    string
		path    string
		body    []byte
		headers []string
		status  int
		code    string
	}{
		{"truncated", "/v1/xorbs/default/" + info.Hash.String(), good[:len(good)-10], nil, 400, "invalid_xorb"},
		{"wrong path hash", "/v1/xorbs/default/" + otherInfo.Hash.String(), good, nil, 400, "hash_mismatch"},
		{"bad chunk version", "/v1/xorbs/default/" + info.Hash.String(), badHeader, nil, 400, "invalid_xorb"},
		{"bad scheme", "/v1/xorbs/default/" + info.Hash.String(), badScheme, nil, 400, "invalid_xorb"},
		{"lz4 bomb", "/v1/xorbs/default/" + xet.ChunkHash(make([]byte, 1000)).String(), bomb, nil, 400, "invalid_xorb"},
		{"empty body", "/v1/xorbs/default/" + info.Hash.String(), []byte{}, nil, 400, "invalid_xorb"},
		{"malformed hash", "/v1/xorbs/default/xyz", good, nil, 400, "bad_request"},
		{"oversize", "/v1/xorbs/default/" + info.Hash.String(), nil, []string{"Content-Length: 70000000"}, 413, "payload_too_large"},
	}
	_ = other
	before := e.snapshot()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r response
			if c.body == nil {
				r = e.rawRequest("POST", c.path, alice, c.headers...)
			} else {
				r = e.do("POST", c.path, alice, c.body, c.headers...)
			}
			wantError(t, r, c.status, c.code)
			if diff := cmp.Diff(before, e.snapshot()); diff != "" {
				t.Fatalf("state changed (-before +after):\n%s", diff)
			}
		})
	}
}

// lz4Bomb is a one-chunk xorb whose LZ4 frame expands far past the size its
// header declares.
func lz4Bomb() []byte {
	// An LZ4 frame: magic, FLG (version 01, block independence), BD (64KiB
	// max block), header checksum; then one block of a literal and a long
	// match (expands to ~64KiB), then the end mark.
	frame := []byte{0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82}
	block := []byte{0x1f, 'a', 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x50, 'a', 'a', 'a', 'a', 'a'}
	frame = binary.LittleEndian.AppendUint32(frame, uint32(len(block)))
	frame = append(frame, block...)
	frame = append(frame, 0, 0, 0, 0)
	hdr := make([]byte, 8)
	hdr[1], hdr[2], hdr[3] = byte(len(frame)), byte(len(frame)>>8), byte(len(frame)>>16)
	hdr[4] = 1                             // LZ4
	hdr[5], hdr[6], hdr[7] = 0xe8, 0x03, 0 // claims 1000 bytes
	return append(hdr, frame...)
}

// rawRequest writes a request by hand (headers only, the body never sent)
// and reads the answer, so a test can see a refusal that comes before the
// body is read.
func (e *testEnv) rawRequest(method, path, token string, headers ...string) response {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	return e.rawRequestOn(conn, bufio.NewReader(conn), method, path, token, headers...)
}

// rawRequestOn is rawRequest on an open connection, whose answers br
// reads, so that a test can send several requests on one connection.
func (e *testEnv) rawRequestOn(conn net.Conn, br *bufio.Reader, method, path, token string, headers ...string) response {
	e.t.Helper()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n", method, path, token)
	for _, h := range headers {
		fmt.Fprintf(conn, "%s\r\n", h)
	}
	fmt.Fprint(conn, "\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := readAll(res)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func TestXorbWithoutContentLengthIs411(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	_, info := xet.BuildXorb(randomChunks(4, 1, 1000), false)
	req, _ := http.NewRequest("POST", e.http.URL+"/v1/xorbs/default/"+info.Hash.String(), strings.NewReader("x"))
	req.ContentLength = -1 // chunked
	req.Header.Set("Authorization", "Bearer "+alice)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := readAll(res)
	wantError(t, response{Status: res.StatusCode, Body: b}, 411, "length_required")
}

// upload stores xorbs and a shard for a file made of them; returns the file.
func (e *testEnv) upload(token string, xorbs ...[]byte) xet.FileInfo {
	e.t.Helper()
	var infos []xet.XorbInfo
	for _, b := range xorbs {
		info, err := xet.ParseXorb(b, hashOf(b))
		if err != nil {
			e.t.Fatal(err)
		}
		if r := e.postXorb(token, b, info.Hash); r.Status != 200 {
			e.t.Fatalf("xorb upload: %d %s", r.Status, r.Body)
		}
		infos = append(infos, info)
	}
	f, cas := fileOf(infos...)
	sh := &xet.Shard{Files: []xet.FileInfo{f}, Xorbs: cas}
	if r := e.do("POST", "/v1/shards", token, sh.MarshalUpload()); r.Status != 200 {
		e.t.Fatalf("shard upload: %d %s", r.Status, r.Body)
	}
	return f
}

// hashOf computes a serialized xorb's hash.
func hashOf(body []byte) xet.Hash {
	chunks, err := xet.DecodeChunks(body)
	if err != nil {
		panic(err)
	}
	leaves := make([]xet.Leaf, len(chunks))
	for i, c := range chunks {
		leaves[i] = xet.Leaf{Hash: xet.ChunkHash(c), Size: uint64(len(c))}
	}
	return xet.AggregatedHash(leaves)
}

func TestShardChecks(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	body, info := xet.BuildXorb(randomChunks(5, 3, 30_000), false)
	f, cas := fileOf(info)

	// Before the xorb is stored the shard references a missing xorb.
	sh := &xet.Shard{Files: []xet.FileInfo{f}, Xorbs: cas}
	before := e.snapshot()
	wantError(t, e.do("POST", "/v1/shards", alice, sh.MarshalUpload()), 400, "invalid_shard")
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Fatalf("state changed:\n%s", diff)
	}
	if r := e.postXorb(alice, body, info.Hash); r.Status != 200 {
		t.Fatal(r.Status)
	}
	cases := map[string]func(f *xet.FileInfo){
		"wrong verification hash": func(f *xet.FileInfo) { f.Verification[0][0] ^= 1 },
		"wrong file hash":         func(f *xet.FileInfo) { f.Hash[0] ^= 1 },
		"term past the xorb":      func(f *xet.FileInfo) { f.Terms[0].ChunkEnd = 9 },
		"wrong term size":         func(f *xet.FileInfo) { f.Terms[0].UnpackedBytes++ },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			bad := f
			bad.Terms = append([]xet.Term(nil), f.Terms...)
			bad.Verification = append([]xet.Hash(nil), f.Verification...)
			mutate(&bad)
			before := e.snapshot()
			sh := &xet.Shard{Files: []xet.FileInfo{bad}, Xorbs: cas}
			wantError(t, e.do("POST", "/v1/shards", alice, sh.MarshalUpload()), 400, "invalid_shard")
			if diff := cmp.Diff(before, e.snapshot()); diff != "" {
				t.Fatalf("state changed:\n%s", diff)
			}
		})
	}
	wantError(t, e.do("POST", "/v1/shards", alice, []byte("not a shard")), 400, "invalid_shard")
	r := e.do("POST", "/v1/shards", alice, sh.MarshalUpload())
	if r.Status != 200 || string(r.Body) != "{\"result\":1}\n" {
		t.Fatalf("good shard: %d %s", r.Status, r.Body)
	}
	if r := e.do("POST", "/v1/shards", alice, sh.MarshalUpload()); string(r.Body) != "{\"result\":0}\n" {
		t.Fatalf("same shard again: %d %s", r.Status, r.Body)
	}
}

type reconJSON struct {
	Offset uint64 `json:"offset_into_first_range"`
	Terms  []struct {
		Hash           string `json:"hash"`
		UnpackedLength uint32 `json:"unpacked_length"`
		Range          struct{ Start, End uint32 }
	}
	FetchInfo map[string][]struct {
		Range    struct{ Start, End uint32 }
		URL      string                      `json:"url"`
		URLRange struct{ Start, End uint64 } `json:"url_range"`
	} `json:"fetch_info"`
}

func TestReconstructionAndFetch(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	chunks := randomChunks(6, 5, 20_000)
	x1, _ := xet.BuildXorb(chunks[:3], false)
	x2, _ := xet.BuildXorb(chunks[3:], true)
	f := e.upload(alice, x1, x2)
	var whole []byte
	for _, c := range chunks {
		whole = append(whole, c...)
	}
	path := "/v1/reconstructions/" + f.Hash.String()

	for _, rng := range [][2]int{{0, len(whole) - 1}, {1, 1}, {19_999, 20_000}, {25_000, 70_000}, {59_999, len(whole) + 1_000_000}} {
		t.Run(fmt.Sprintf("bytes=%d-%d", rng[0], rng[1]), func(t *testing.T) {
			r := e.do("GET", path, alice, nil, fmt.Sprintf("Range: bytes=%d-%d", rng[0], rng[1]))
			if r.Status != 200 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			got := e.assemble(r.Body)
			end := min(rng[1]+1, len(whole))
			if want := whole[rng[0]:end]; string(got[:min(len(got), len(want))]) != string(want) || len(got) < len(want) {
				t.Fatalf("assembled %d bytes that differ from the file's [%d,%d)", len(got), rng[0], end)
			}
		})
	}
	wantError(t, e.do("GET", path, alice, nil, fmt.Sprintf("Range: bytes=%d-", len(whole))), 416, "range_not_satisfiable")
	wantError(t, e.do("GET", path, alice, nil, "Range: bytes=a-b"), 400, "bad_request")
	wantError(t, e.do("GET", "/v1/reconstructions/nothex", alice, nil), 400, "bad_request")

	bob := e.credential("bob", "read")
	wantError(t, e.do("GET", path, bob, nil), 404, "not_found")
	wantError(t, e.do("GET", "/v2/reconstructions/"+f.Hash.String(), bob, nil), 404, "not_found")
	if r := e.do("GET", "/v2/reconstructions/"+f.Hash.String(), alice, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"xorbs"`) {
		t.Fatalf("v2: %d %s", r.Status, r.Body)
	}
}

// assemble downloads every fetch range of a reconstruction answer without
// auth and rebuilds the bytes it describes, as the client does.
func (e *testEnv) assemble(answer []byte) []byte {
	e.t.Helper()
	var rec reconJSON
	if err := json.Unmarshal(answer, &rec); err != nil {
		e.t.Fatal(err)
	}
	var out []byte
	fetched := map[string][][]byte{} // decoded chunks by fetch URL: each range is fetched once
	for _, term := range rec.Terms {
		var data []byte
		for _, fi := range rec.FetchInfo[term.Hash] {
			if fi.Range.Start <= term.Range.Start && term.Range.End <= fi.Range.End {
				chunks, ok := fetched[fi.URL]
				if !ok {
					res := e.fetch(fi.URL, fmt.Sprintf("bytes=%d-%d", fi.URLRange.Start, fi.URLRange.End))
					if res.Status/100 != 2 {
						e.t.Fatalf("fetch: %d %s", res.Status, res.Body)
					}
					chunks = decodeChunks(e.t, res.Body)
					fetched[fi.URL] = chunks
				}
				for _, c := range chunks[term.Range.Start-fi.Range.Start : term.Range.End-fi.Range.Start] {
					data = append(data, c...)
				}
				break
			}
		}
		if uint32(len(data)) != term.UnpackedLength {
			e.t.Fatalf("term %s [%d,%d): %d bytes, answer says %d", term.Hash, term.Range.Start, term.Range.End, len(data), term.UnpackedLength)
		}
		out = append(out, data...)
	}
	return out[rec.Offset:]
}

func (e *testEnv) fetch(url, rng string) response {
	e.t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := readAll(res)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// decodeChunks splits a chunk stream into uncompressed chunks.
func decodeChunks(t testing.TB, stream []byte) [][]byte {
	t.Helper()
	out, err := xet.DecodeChunks(stream)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFetchURLTampering(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	x1, _ := xet.BuildXorb(randomChunks(8, 2, 10_000), false)
	f := e.upload(alice, x1)
	var rec reconJSON
	json.Unmarshal(e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil).Body, &rec)
	var url string
	for _, fi := range rec.FetchInfo {
		url = fi[0].URL
	}
	if r := e.fetch(url, ""); r.Status/100 != 2 {
		t.Fatalf("untouched URL: %d %s", r.Status, r.Body)
	}
	for name, mutate := range map[string]func(string) string{
		"range":      func(u string) string { return strings.Replace(u, "r=0-", "r=1-", 1) },
		"credential": func(u string) string { return strings.Replace(u, "c=", "c=0", 1) },
		"tenant":     func(u string) string { return strings.Replace(u, "t=alice", "t=bob", 1) },
		"expiry":     func(u string) string { return strings.Replace(u, "x=", "x=9", 1) },
		"signature":  func(u string) string { return strings.Replace(u, "s=", "s=0", 1) },
		"xorb":       func(u string) string { return strings.Replace(u, "/v1/fetch/", "/v1/fetch/0", 1) },
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, e.fetch(mutate(url), ""), 403, "forbidden")
		})
	}
	wantError(t, e.fetch(url, "bytes=999999-1999999"), 403, "forbidden")
}

// TestXorbGrantsAre404: the newest xet-core clients first ask for an
// upload grant and fall back to POST /v1/xorbs only on a 404 (a 405 or a
// 501 fails the upload); until grants are served, that route must answer
// exactly 404, with or without a credential, and change nothing.
func TestXorbGrantsAre404(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	_, info := xet.BuildXorb(randomChunks(4, 2, 1000), false)
	before := e.snapshot()
	grant := []byte(`{"length": 2000, "checksum": {"algo": "crc64nvme", "value": "1"}}`)
	for _, tc := range []struct{ method, path, token string }{
		{"POST", "/v1/xorb-grants/default/" + info.Hash.String(), alice},
		{"POST", "/v1/xorb-grants/default/" + info.Hash.String(), ""},
		{"POST", "/v1/xorb-commits/default/" + info.Hash.String() + "/grant/1", alice},
	} {
		if r := e.do(tc.method, tc.path, tc.token, grant); r.Status != 404 {
			t.Errorf("%s %s (token %v): %d %s, want 404", tc.method, tc.path, tc.token != "", r.Status, r.Body)
		}
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Fatalf("a grant request changed state (-before +after):\n%s", diff)
	}
}
