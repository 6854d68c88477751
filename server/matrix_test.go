package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// newLiveEnv is newTestEnv served through Server.Serve on a real listener,
// so the http.Server settings (ReadHeaderTimeout, IdleTimeout,
// MaxHeaderBytes) and BodyReadTimeout apply as in production. Every helper
// of testEnv (do, rawRequest, upload, fetch, snapshot) then talks to it.
func newLiveEnv(t *testing.T, mutate ...func(*Config)) *testEnv {
	t.Helper()
	e := newTestEnv(t, mutate...)
	e.serveLive(t)
	return e
}

// serveLive starts Server.Serve for an env; anything set on e.srv must be
// set before.
func (e *testEnv) serveLive(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.srv.echo.Pre(e.handlers.middleware)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	// Only URL and Listener are read by the helpers; newTestEnv's own
	// cleanup closes the httptest server it started, not this value.
	e.http = &httptest.Server{URL: "http://" + ln.Addr().String(), Listener: ln}
}

// exchange writes a request by hand (writing in the background, so that a
// server that answers before reading everything is seen) and reads the
// answer.
func (e *testEnv) exchange(req []byte, closeWrite bool) response {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		conn.Write(req)
		if closeWrite {
			conn.(*net.TCPConn).CloseWrite()
		}
	}()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		e.t.Fatalf("no answer: %v", err)
	}
	b, _ := readAll(res)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// partialBody sends headers declaring n bytes of body, then only body, then
// closes its side: a body that ends early.
func (e *testEnv) partialBody(method, path, token string, n int, body []byte) response {
	e.t.Helper()
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", method, path, token, n)
	return e.exchange(append([]byte(head), body...), true)
}

type matrixCase struct {
	name   string
	send   func() response
	status int
	code   string // the JSON error code; "" where net/http answers before the application
}

// TestBadInputMatrix is the bad-input table of the hardening issue, against
// a live server: every hostile request gets its documented status and code
// (server/errors.go, SECURITY.md) and leaves the bucket objects, the index
// rows and the usage counters exactly as they were.
func TestBadInputMatrix(t *testing.T) {
	m := newBadInput(t)
	e := m.e
	cases := slices.Concat(m.xorbCases(), m.shardCases(), m.upperCaseHashCases(), m.rangeCases(),
		m.credentialCases(), m.fetchCases(), m.tenantCases(), m.headerCases(), m.routeCases())
	if len(cases) < 40 {
		t.Fatalf("%d cases; the issue asks for at least 40", len(cases))
	}
	before := e.snapshot()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.send()
			wantError(t, r, c.status, c.code)
			if strings.HasPrefix(c.name, "upper-case hash") && c.code == "bad_request" && !strings.Contains(r.json(t)["message"].(string), "lowercase hex") {
				t.Fatalf("the refusal does not name the rule (64 lowercase hex digits): %s", r.Body)
			}
			if diff := cmp.Diff(before, e.snapshot()); diff != "" {
				t.Fatalf("state changed (-before +after):\n%s", diff)
			}
		})
	}
	t.Logf("%d bad-input cases", len(cases))
	// The server still serves the good requests afterwards.
	if r := e.postXorb(m.alice, m.good, m.info.Hash); r.Status != 200 {
		t.Fatalf("good xorb after the matrix: %d %s", r.Status, r.Body)
	}
	if r := e.do("POST", "/v1/shards", m.alice, m.goodShard); r.Status != 200 {
		t.Fatalf("good shard after the matrix: %d %s", r.Status, r.Body)
	}
}

// badInput is the live server of TestBadInputMatrix with the credentials,
// stored data and good requests its bad-input cases are variants of.
type badInput struct {
	e                              *testEnv
	alice, aliceRead, bob, revoked string
	aliceID, revokedID             string
	storedBody                     []byte
	stored                         xet.XorbInfo // alice's stored xorb
	file                           xet.FileInfo // alice's stored file
	recon                          string       // the file's reconstruction path
	fetchURL                       string       // a signed URL of the stored xorb
	good                           []byte       // a valid xorb not stored yet
	info                           xet.XorbInfo // of good
	goodShard                      []byte       // a valid shard of the stored file
}

// newBadInput starts the live server and stores what the cases need,
// checking that the good reconstruction, fetch and repo creation succeed.
func newBadInput(t *testing.T) *badInput {
	t.Helper()
	e := newLiveEnv(t, func(c *Config) {
		c.MaxHeaderBytes = 16 << 10
		c.ReadHeaderTimeout = 10 * time.Second
		c.BodyReadTimeout = 10 * time.Second
		c.AuthFailuresPerMinute = 1 << 20 // the limiter has its own tests; here every refusal must be its own
	})
	m := &badInput{e: e}
	ctx := context.Background()
	m.alice = e.credential("alice", "write")
	m.aliceRead = e.credential("alice", "read")
	m.bob = e.credential("bob", "write")
	m.revoked = e.credential("alice", "write")
	m.revokedID, _, _ = parseTok(m.revoked)
	if _, err := e.st.RevokeCredential(ctx, m.revokedID); err != nil {
		t.Fatal(err)
	}
	m.aliceID, _, _ = parseTok(m.alice)

	// Alice's stored file and xorb.
	m.storedBody, m.stored = xet.BuildXorb(randomChunks(40, 3, 30_000), true)
	m.file = e.upload(m.alice, m.storedBody)
	m.recon = "/v1/reconstructions/" + m.file.Hash.String()
	var rec reconJSON
	if r := e.do("GET", m.recon, m.alice, nil); r.Status != 200 || json.Unmarshal(r.Body, &rec) != nil {
		t.Fatalf("reconstruction: %d %s", r.Status, r.Body)
	}
	m.fetchURL = rec.FetchInfo[m.stored.Hash.String()][0].URL
	if r := e.fetch(m.fetchURL, ""); r.Status != 206 {
		t.Fatalf("fetch: %d %s", r.Status, r.Body)
	}

	// A xorb not stored yet, and a good shard of the stored one.
	m.good, m.info = xet.BuildXorb(randomChunks(41, 3, 20_000), false)
	m.goodShard = m.shardOf(func(*xet.FileInfo, *xet.CASInfo) {})
	// The repo the commit and LFS cases write to.
	if r := e.do("POST", "/api/repos/create", m.alice, []byte(`{"name":"m"}`)); r.Status != 200 {
		t.Fatalf("create repo: %d %s", r.Status, r.Body)
	}
	return m
}

// shardOf is the shard of alice's stored file and xorb, changed by mut.
func (m *badInput) shardOf(mut func(f *xet.FileInfo, c *xet.CASInfo)) []byte {
	f, cas := fileOf(m.stored)
	g := f
	g.Terms = append([]xet.Term(nil), f.Terms...)
	g.Verification = append([]xet.Hash(nil), f.Verification...)
	c := cas[0]
	c.Chunks = append([]xet.CASChunk(nil), c.Chunks...)
	mut(&g, &c)
	return (&xet.Shard{Files: []xet.FileInfo{g}, Xorbs: []xet.CASInfo{c}}).MarshalUpload()
}

// get sends a GET with the token and headers.
func (m *badInput) get(path, tok string, headers ...string) func() response {
	return func() response { return m.e.do("GET", path, tok, nil, headers...) }
}

// send sends a request with the token, body and headers.
func (m *badInput) send(method, path, tok string, body []byte, headers ...string) func() response {
	return func() response { return m.e.do(method, path, tok, body, headers...) }
}

// headersOnly sends the request line and headers, and no body.
func (m *badInput) headersOnly(method, path, tok string, headers ...string) func() response {
	return func() response { return m.e.rawRequest(method, path, tok, headers...) }
}

// raw writes req on a connection as it is.
func (m *badInput) raw(req string) func() response {
	return func() response { return m.e.exchange([]byte(req), false) }
}

// noLength posts alice's upload with neither a Content-Length nor a body.
func (m *badInput) noLength(path string) func() response {
	return m.raw("POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + m.alice + "\r\n\r\n")
}

// chunked posts alice's upload as a chunked body (empty, or all of body).
func (m *badInput) chunked(path string, body []byte) func() response {
	req := "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + m.alice + "\r\nTransfer-Encoding: chunked\r\n\r\n"
	if len(body) > 0 {
		req += fmt.Sprintf("%x\r\n%s\r\n", len(body), body)
	}
	return m.raw(req + "0\r\n\r\n")
}

// xorbCases are broken xorb uploads: bodies, lengths, hashes, chunk headers.
func (m *badInput) xorbCases() []matrixCase {
	e, alice, good, info := m.e, m.alice, m.good, m.info
	send, headersOnly, raw, noLength, chunked := m.send, m.headersOnly, m.raw, m.noLength, m.chunked
	_, otherInfo := xet.BuildXorb(randomChunks(42, 2, 20_000), false)
	xorbPath := "/v1/xorbs/default/" + info.Hash.String()
	mutated := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	put24 := func(b []byte, n int) { b[0], b[1], b[2] = byte(n), byte(n>>8), byte(n>>16) }
	badVersion := mutated(func(b []byte) { b[0] = 9 })
	badScheme := mutated(func(b []byte) { b[4] = 7 })
	pastEnd := mutated(func(b []byte) { put24(b[1:], 0xfffff) })
	overChunk := mutated(func(b []byte) { put24(b[5:], 200_000) })
	sizeDisagrees := mutated(func(b []byte) { put24(b[5:], 20_001) })
	flipped := mutated(func(b []byte) { b[100] ^= 0xff })
	// Chunk data claiming to be LZ4 that is not an LZ4 frame.
	notLZ4 := mutated(func(b []byte) { b[4] = xet.SchemeLZ4 })
	bomb := lz4Bomb()
	bombPath := "/v1/xorbs/default/" + xet.ChunkHash(make([]byte, 1000)).String()
	bg4Bomb := append([]byte(nil), bomb...)
	bg4Bomb[4] = xet.SchemeBG4LZ4
	// A xorb of empty chunks past the per-xorb chunk cap.
	var empties [][]byte
	for range xet.MaxXorbChunks + 1 {
		empties = append(empties, []byte{})
	}
	tooManyChunks, tooManyInfo := xet.BuildXorb(empties, false)
	return []matrixCase{
		{"xorb truncated", send("POST", xorbPath, alice, good[:len(good)-10]), 400, "invalid_xorb"},
		{"xorb body shorter than its Content-Length", func() response { return e.partialBody("POST", xorbPath, alice, len(good), good[:len(good)/2]) }, 400, "bad_request"},
		{"xorb Content-Length over 65MiB", headersOnly("POST", xorbPath, alice, "Content-Length: 70000000"), 413, "payload_too_large"},
		{"xorb Content-Length near 2^63", headersOnly("POST", xorbPath, alice, "Content-Length: 9223372036854775807"), 413, "payload_too_large"},
		{"xorb without Content-Length", headersOnly("POST", xorbPath, alice, "Transfer-Encoding: chunked"), 411, "length_required"},
		{"xorb without Content-Length or body", noLength(xorbPath), 411, "length_required"},
		{"xorb chunked, empty", chunked(xorbPath, nil), 411, "length_required"},
		{"xorb chunked", chunked(xorbPath, good), 411, "length_required"},
		{"xorb empty body", send("POST", xorbPath, alice, []byte{}), 400, "invalid_xorb"},
		{"xorb Content-Length: 0", raw("POST " + xorbPath + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + alice + "\r\nContent-Length: 0\r\n\r\n"), 400, "invalid_xorb"},
		{"xorb garbage body", send("POST", xorbPath, alice, bytes.Repeat([]byte("garbage!"), 100)), 400, "invalid_xorb"},
		{"xorb with trailing bytes", send("POST", xorbPath, alice, append(append([]byte(nil), good...), "trailing"...)), 400, "invalid_xorb"},
		{"xorb under another xorb's hash", send("POST", "/v1/xorbs/default/"+otherInfo.Hash.String(), alice, good), 400, "hash_mismatch"},
		{"xorb data flipped", send("POST", xorbPath, alice, flipped), 400, "hash_mismatch"},
		{"xorb hash not hex", send("POST", "/v1/xorbs/default/"+strings.Repeat("zz", 32), alice, good), 400, "bad_request"},
		{"xorb hash of 63 digits", send("POST", xorbPath[:len(xorbPath)-1], alice, good), 400, "bad_request"},
		{"xorb hash of 65 digits", send("POST", xorbPath+"0", alice, good), 400, "bad_request"},
		{"chunk header version 9", send("POST", xorbPath, alice, badVersion), 400, "invalid_xorb"},
		{"chunk header scheme 7", send("POST", xorbPath, alice, badScheme), 400, "invalid_xorb"},
		{"chunk header size past the body", send("POST", xorbPath, alice, pastEnd), 400, "invalid_xorb"},
		{"chunk header size over 128KiB", send("POST", xorbPath, alice, overChunk), 400, "invalid_xorb"},
		{"chunk header sizes disagree", send("POST", xorbPath, alice, sizeDisagrees), 400, "invalid_xorb"},
		{"chunk claims LZ4 but is not", send("POST", xorbPath, alice, notLZ4), 400, "invalid_xorb"},
		{"LZ4 bomb", send("POST", bombPath, alice, bomb), 400, "invalid_xorb"},
		{"BG4 LZ4 bomb", send("POST", bombPath, alice, bg4Bomb), 400, "invalid_xorb"},
		{"xorb of 65537 empty chunks", send("POST", "/v1/xorbs/default/"+tooManyInfo.Hash.String(), alice, tooManyChunks), 400, "invalid_xorb"},
	}
}

// shardCases are broken shard uploads: contents, footers and lengths.
func (m *badInput) shardCases() []matrixCase {
	e, alice, stored, goodShard, shardOf := m.e, m.alice, m.stored, m.goodShard, m.shardOf
	send, headersOnly, noLength, chunked := m.send, m.headersOnly, m.noLength, m.chunked
	_, cas := fileOf(stored)
	_, missingInfo := xet.BuildXorb(randomChunks(43, 2, 10_000), false)
	missingFile, missingCAS := fileOf(missingInfo)
	missingShard := (&xet.Shard{Files: []xet.FileInfo{missingFile}, Xorbs: missingCAS}).MarshalUpload()
	// A shard with a footer (as old clients send), and broken footers.
	footed := xet.BuildDedupShard(cas, [32]byte{}, time.Unix(1_800_000_000, 0), time.Unix(1_900_000_000, 0))
	footer := len(footed) - xet.ShardFooterBytes
	footedWith := func(off int, v uint64) []byte {
		b := append([]byte(nil), footed...)
		binary.LittleEndian.PutUint64(b[footer+off:], v)
		return b
	}
	entryCount := append([]byte(nil), goodShard...)
	binary.LittleEndian.PutUint32(entryCount[xet.ShardEntryBytes+36:], 1<<30) // the file's term count
	return []matrixCase{
		{"shard garbage", send("POST", "/v1/shards", alice, []byte("not a shard")), 400, "invalid_shard"},
		{"shard truncated", send("POST", "/v1/shards", alice, goodShard[:len(goodShard)-20]), 400, "invalid_shard"},
		{"shard of a missing xorb", send("POST", "/v1/shards", alice, missingShard), 400, "invalid_shard"},
		{"shard wrong verification hash", send("POST", "/v1/shards", alice, shardOf(func(f *xet.FileInfo, _ *xet.CASInfo) { f.Verification[0][0] ^= 1 })), 400, "invalid_shard"},
		{"shard wrong file hash", send("POST", "/v1/shards", alice, shardOf(func(f *xet.FileInfo, _ *xet.CASInfo) { f.Hash[0] ^= 1 })), 400, "invalid_shard"},
		{"shard term past the xorb", send("POST", "/v1/shards", alice, shardOf(func(f *xet.FileInfo, _ *xet.CASInfo) { f.Terms[0].ChunkEnd = 9 })), 400, "invalid_shard"},
		{"shard empty term", send("POST", "/v1/shards", alice, shardOf(func(f *xet.FileInfo, _ *xet.CASInfo) { f.Terms[0].ChunkStart = f.Terms[0].ChunkEnd })), 400, "invalid_shard"},
		{"shard wrong term size", send("POST", "/v1/shards", alice, shardOf(func(f *xet.FileInfo, _ *xet.CASInfo) { f.Terms[0].UnpackedBytes++ })), 400, "invalid_shard"},
		{"shard CAS block disagrees with the xorb", send("POST", "/v1/shards", alice, shardOf(func(_ *xet.FileInfo, c *xet.CASInfo) { c.Chunks[1].UnpackedBytes++ })), 400, "invalid_shard"},
		{"shard term count past the end", send("POST", "/v1/shards", alice, entryCount), 400, "invalid_shard"},
		{"shard footer offset wrong", send("POST", "/v1/shards", alice, footedWith(192, 7)), 400, "invalid_shard"},
		{"shard CAS offset wrong", send("POST", "/v1/shards", alice, footedWith(16, 9999)), 400, "invalid_shard"},
		{"shard lookup table past the footer", send("POST", "/v1/shards", alice, footedWith(56, uint64(len(footed)))), 400, "invalid_shard"},
		{"shard lookup entries overflow", send("POST", "/v1/shards", alice, footedWith(64, 1<<62)), 400, "invalid_shard"},
		{"shard footer version 2", send("POST", "/v1/shards", alice, footedWith(0, 2)), 400, "invalid_shard"},
		{"shard Content-Length over 65MiB", headersOnly("POST", "/v1/shards", alice, "Content-Length: 70000000"), 413, "payload_too_large"},
		{"shard without Content-Length", headersOnly("POST", "/v1/shards", alice, "Transfer-Encoding: chunked"), 411, "length_required"},
		{"shard without Content-Length or body", noLength("/v1/shards"), 411, "length_required"},
		{"shard chunked, empty", chunked("/v1/shards", nil), 411, "length_required"},
		{"shard chunked", chunked("/v1/shards", goodShard), 411, "length_required"},
		{"v2 shard without Content-Length or body", noLength("/v2/shards"), 411, "length_required"},
		{"v2 shard chunked", chunked("/v2/shards", goodShard), 411, "length_required"},
		{"legacy shard PUT without Content-Length or body", func() response {
			return e.exchange([]byte("PUT /shard/default/"+stored.Hash.String()+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+alice+"\r\n\r\n"), false)
		}, 411, "length_required"},
		{"shard body shorter than its Content-Length", func() response { return e.partialBody("POST", "/v1/shards", alice, len(goodShard), goodShard[:100]) }, 400, "bad_request"},
		{"v2 shard garbage", send("POST", "/v2/shards", alice, []byte("not a shard")), 400, "invalid_shard"},
	}
}

// upperCaseHashCases: hashes are 64 lowercase hex digits on every route
// that takes one (docs/api.md).
func (m *badInput) upperCaseHashCases() []matrixCase {
	e, alice, good, info, stored, storedBody, file, fetchURL, goodShard := m.e, m.alice, m.good, m.info, m.stored, m.storedBody, m.file, m.fetchURL, m.goodShard
	get, send := m.get, m.send
	upper := func(h xet.Hash) string { return strings.ToUpper(h.String()) }
	sha := strings.Repeat("ab", 32)
	commitLFS := func(oid string) func() response {
		return send("POST", "/api/models/alice/m/commit/main", alice, []byte(`{"key":"header","value":{"summary":"s"}}`+"\n"+
			`{"key":"lfsFile","value":{"path":"a.bin","algo":"sha256","oid":"`+oid+`","size":5}}`+"\n"))
	}
	lfsBatch := func(oid string) func() response {
		return send("POST", "/alice/m.git/info/lfs/objects/batch", alice, []byte(`{"operation":"upload","objects":[{"oid":"`+oid+`","size":5}],"hash_algo":"sha256"}`))
	}
	return []matrixCase{
		{"upper-case hash: xorb upload", send("POST", "/v1/xorbs/default/"+upper(info.Hash), alice, good), 400, "bad_request"},
		{"upper-case hash: legacy xorb upload", send("POST", "/xorb/default/"+upper(info.Hash), alice, good), 400, "bad_request"},
		{"upper-case hash: xorb upload of a stored xorb", send("POST", "/v1/xorbs/default/"+upper(stored.Hash), alice, storedBody), 400, "bad_request"},
		{"upper-case hash: xorb HEAD", func() response { return e.do("HEAD", "/v1/xorbs/default/"+upper(stored.Hash), alice, nil) }, 400, ""},
		{"upper-case hash: legacy shard PUT", send("PUT", "/shard/default/"+upper(stored.Hash), alice, goodShard), 400, "bad_request"},
		{"upper-case hash: reconstruction", get("/v1/reconstructions/"+upper(file.Hash), alice), 400, "bad_request"},
		{"upper-case hash: v2 reconstruction", get("/v2/reconstructions/"+upper(file.Hash), alice), 400, "bad_request"},
		{"upper-case hash: legacy reconstruction", get("/reconstruction/"+upper(file.Hash), alice), 400, "bad_request"},
		{"upper-case hash: dedup query", get("/v1/chunks/default/"+upper(stored.Chunks[0].Hash), alice), 400, "bad_request"},
		{"upper-case hash: fetch URL (signed, so tampering)", func() response {
			return e.fetch(strings.Replace(fetchURL, stored.Hash.String(), upper(stored.Hash), 1), "")
		}, 403, "forbidden"},
		{"upper-case hash: commit lfsFile oid", commitLFS(strings.ToUpper(sha)), 400, "bad_request"},
		{"upper-case hash: LFS batch oid", lfsBatch(strings.ToUpper(sha)), 400, "bad_request"},
		{"commit lfsFile oid not hex", commitLFS("xyz"), 400, "bad_request"},
		{"LFS batch oid not hex", lfsBatch(strings.Repeat("g", 64)), 400, "bad_request"},
	}
}

// rangeCases are bad reconstruction ranges and reconstructions of files
// that are not there or not alice's.
func (m *badInput) rangeCases() []matrixCase {
	alice, bob, recon, fileSize, get := m.alice, m.bob, m.recon, m.file.Size(), m.get
	return []matrixCase{
		{"range not bytes", get(recon, alice, "Range: items=0-1"), 400, "bad_request"},
		{"range letters", get(recon, alice, "Range: bytes=a-b"), 400, "bad_request"},
		{"range end before start", get(recon, alice, "Range: bytes=10-5"), 400, "bad_request"},
		{"range several", get(recon, alice, "Range: bytes=0-1,5-6"), 400, "bad_request"},
		{"range only a dash", get(recon, alice, "Range: bytes=-"), 400, "bad_request"},
		{"range hex number", get(recon, alice, "Range: bytes=0x10-0x20"), 400, "bad_request"},
		{"range negative start", get(recon, alice, "Range: bytes=-5-10"), 400, "bad_request"},
		{"range at the end", get(recon, alice, fmt.Sprintf("Range: bytes=%d-", fileSize)), 416, "range_not_satisfiable"},
		{"range start overflows u64", get(recon, alice, "Range: bytes=99999999999999999999999999-"), 416, "range_not_satisfiable"},
		{"range start at 2^64-1", get(recon, alice, "Range: bytes=18446744073709551615-18446744073709551615"), 416, "range_not_satisfiable"},
		{"reconstruction hash malformed", get("/v1/reconstructions/nothex", alice), 400, "bad_request"},
		{"reconstruction of an unknown file", get("/v1/reconstructions/"+strings.Repeat("ab", 32), alice), 404, "not_found"},
		{"reconstruction of another tenant's file", get(recon, bob), 404, "not_found"},
	}
}

// credentialCases are bad credentials and CAS tokens on a write route.
func (m *badInput) credentialCases() []matrixCase {
	e, alice, aliceRead, aliceID, revoked, good, send := m.e, m.alice, m.aliceRead, m.aliceID, m.revoked, m.good, m.send
	xorbPath := "/v1/xorbs/default/" + m.info.Hash.String()
	aliceClaims := casClaims{CredentialID: aliceID, Tenant: "alice", Scopes: []string{"write"}, Expiry: e.srv.now().Add(time.Hour).Unix()}
	expired := aliceClaims
	expired.Expiry = e.srv.now().Add(-time.Second).Unix()
	forged := signer{key: bytes.Repeat([]byte{8}, 32)}.casToken(aliceClaims)
	realTok := e.srv.signer.casToken(aliceClaims)
	p, sig, _ := strings.Cut(strings.TrimPrefix(realTok, casTokenPrefix), ".")
	payload, _ := base64.RawURLEncoding.DecodeString(p)
	swapped := casTokenPrefix + base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte(`"alice"`), []byte(`"bob"`), 1)) + "." + sig
	ghost := e.srv.signer.casToken(casClaims{CredentialID: "0123456789abcdef", Tenant: "alice", Scopes: []string{"write"}, Expiry: aliceClaims.Expiry})
	readCAS := e.srv.signer.casToken(casClaims{CredentialID: aliceID, Tenant: "alice", Scopes: []string{"read"}, Expiry: aliceClaims.Expiry})
	return []matrixCase{
		{"no token", send("POST", xorbPath, "", good), 401, "unauthorized"},
		{"empty bearer", send("POST", xorbPath, "", good, "Authorization: Bearer "), 401, "unauthorized"},
		{"basic auth", send("POST", xorbPath, "", good, "Authorization: Basic YWxpY2U6c2VjcmV0"), 401, "unauthorized"},
		{"malformed token", send("POST", xorbPath, "hf_nope", good), 401, "unauthorized"},
		{"token with a 12KiB secret", send("POST", xorbPath, "hf_oxt_0123456789abcdef_"+strings.Repeat("a", 12<<10), good), 401, "unauthorized"},
		{"unknown credential id", send("POST", xorbPath, "hf_oxt_0123456789abcdef_"+strings.Repeat("a", 64), good), 401, "unauthorized"},
		{"wrong secret", send("POST", xorbPath, alice[:len(alice)-4]+"0000", good), 401, "unauthorized"},
		{"secret in upper case", send("POST", xorbPath, alice[:len(alice)-64]+strings.ToUpper(alice[len(alice)-64:]), good), 401, "unauthorized"},
		{"revoked credential", send("POST", xorbPath, revoked, good), 401, "unauthorized"},
		{"read credential on a write route", send("POST", xorbPath, aliceRead, good), 403, "forbidden"},
		{"expired CAS token", send("POST", xorbPath, e.srv.signer.casToken(expired), good), 401, "unauthorized"},
		{"CAS token of another key", send("POST", xorbPath, forged, good), 401, "unauthorized"},
		{"CAS token with its tenant changed", send("POST", xorbPath, swapped, good), 401, "unauthorized"},
		{"CAS token without signature", send("POST", xorbPath, casTokenPrefix+p, good), 401, "unauthorized"},
		{"CAS token of an unknown credential", send("POST", xorbPath, ghost, good), 401, "unauthorized"},
		{"read CAS token on a write route", send("POST", xorbPath, readCAS, good), 403, "forbidden"},
	}
}

// fetchCases are tampered, expired and misused signed fetch URLs.
func (m *badInput) fetchCases() []matrixCase {
	e, stored, info, fetchURL, revokedID := m.e, m.stored, m.info, m.fetchURL, m.revokedID
	u, _ := url.Parse(fetchURL)
	fetchPath := u.Path
	query := u.Query()
	withQuery := func(mut func(q url.Values)) func() response {
		return func() response {
			q := url.Values{}
			for k, v := range query {
				q[k] = append([]string(nil), v...)
			}
			mut(q)
			return e.fetch(e.http.URL+fetchPath+"?"+q.Encode(), "")
		}
	}
	grant := fetchGrant{Xorb: stored.Hash.String(), Start: 0, End: uint64(stored.StreamLen - 1), CredentialID: m.aliceID, Tenant: "alice", Expiry: e.srv.now().Add(time.Hour).Unix()}
	signed := func(g fetchGrant) func() response {
		return func() response { return e.fetch(e.srv.signer.fetchURL(e.http.URL, g), "") }
	}
	return []matrixCase{
		{"fetch signature altered", withQuery(func(q url.Values) { q.Set("s", strings.Repeat("0", 64)) }), 403, "forbidden"},
		{"fetch signature in upper case", withQuery(func(q url.Values) { q.Set("s", strings.ToUpper(q.Get("s"))) }), 403, "forbidden"},
		{"fetch signature missing", withQuery(func(q url.Values) { q.Del("s") }), 403, "forbidden"},
		{"fetch signature given twice", withQuery(func(q url.Values) { q.Add("s", q.Get("s")) }), 403, "forbidden"},
		{"fetch range given twice", withQuery(func(q url.Values) { q.Add("r", "0-0") }), 403, "forbidden"},
		{"fetch tenant given twice", withQuery(func(q url.Values) { q.Add("t", "bob") }), 403, "forbidden"},
		{"fetch range widened", withQuery(func(q url.Values) { q.Set("r", "0-99999999") }), 403, "forbidden"},
		{"fetch range malformed", withQuery(func(q url.Values) { q.Set("r", "abc") }), 403, "forbidden"},
		{"fetch range overflowing", withQuery(func(q url.Values) { q.Set("r", "0-99999999999999999999999") }), 403, "forbidden"},
		{"fetch tenant changed", withQuery(func(q url.Values) { q.Set("t", "bob") }), 403, "forbidden"},
		{"fetch credential changed", withQuery(func(q url.Values) { q.Set("c", "0123456789abcdef") }), 403, "forbidden"},
		{"fetch expiry extended", withQuery(func(q url.Values) { q.Set("x", "99999999999") }), 403, "forbidden"},
		{"fetch expired", signed(func() fetchGrant { g := grant; g.Expiry = e.srv.now().Add(-time.Second).Unix(); return g }()), 403, "forbidden"},
		{"fetch start after end (signed)", signed(func() fetchGrant { g := grant; g.Start, g.End = 10, 5; return g }()), 403, "forbidden"},
		{"fetch of a revoked credential", signed(func() fetchGrant { g := grant; g.CredentialID = revokedID; return g }()), 403, "forbidden"},
		{"fetch of another xorb", func() response {
			return e.fetch(strings.Replace(fetchURL, stored.Hash.String(), info.Hash.String(), 1), "")
		}, 403, "forbidden"},
		{"fetch Range outside the grant", func() response { return e.fetch(fetchURL, "bytes=999999-1999999") }, 403, "forbidden"},
		{"fetch Range malformed", func() response { return e.fetch(fetchURL, "bytes=x-y") }, 403, "forbidden"},
	}
}

// badInputAdmin is the admin API's prefix.
const badInputAdmin = "/api/openxet/v1/admin"

// putLimits sets a tenant's limits as the admin.
func (m *badInput) putLimits(tenant, body string) func() response {
	return m.send("PUT", badInputAdmin+"/tenants/"+tenant+"/limits", m.e.admin, []byte(body))
}

// tenantCases are tenant names with path tricks and bad admin bodies.
func (m *badInput) tenantCases() []matrixCase {
	e, alice, admin, send, putLimits := m.e, m.alice, badInputAdmin, m.send, m.putLimits
	return []matrixCase{
		{"tenant ..", putLimits("..", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant %2e%2e", putLimits("%2e%2e", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant ..%2f..%2fetc", putLimits("..%2f..%2fetc", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant a%2fb", putLimits("a%2fb", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant a..b", putLimits("a..b", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant .hidden", putLimits(".hidden", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant -flag", putLimits("-flag", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant in upper case", putLimits("Alice", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant with NUL", putLimits("a%00b", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant of 64 characters", putLimits(strings.Repeat("a", 64), `{"tenant_burst": 5}`), 400, "bad_request"},
		{"tenant with a space", putLimits("a%20b", `{"tenant_burst": 5}`), 400, "bad_request"},
		{"credential for tenant ../x", send("POST", admin+"/credentials", e.admin, []byte(`{"tenant":"../x","scopes":["read"]}`)), 400, "bad_request"},
		{"credential for tenant a/b", send("POST", admin+"/credentials", e.admin, []byte(`{"tenant":"a/b","scopes":["read"]}`)), 400, "bad_request"},
		{"credential with scope root", send("POST", admin+"/credentials", e.admin, []byte(`{"tenant":"carol","scopes":["root"]}`)), 400, "bad_request"},
		{"credential without scope", send("POST", admin+"/credentials", e.admin, []byte(`{"tenant":"carol","scopes":[]}`)), 400, "bad_request"},
		{"credential body not JSON", send("POST", admin+"/credentials", e.admin, []byte(`{"tenant":`)), 400, "bad_request"},
		{"limits body not JSON", putLimits("alice", `nope`), 400, "bad_request"},
		{"limits unknown field", putLimits("alice", `{"quota": 5}`), 400, "bad_request"},
		{"limits negative burst", putLimits("alice", `{"tenant_burst": -1}`), 400, "bad_request"},
		{"repo in another tenant's namespace", send("POST", "/api/repos/create", alice, []byte(`{"name":"bob/model"}`)), 403, "forbidden"},
		{"repo in namespace ../bob", send("POST", "/api/repos/create", alice, []byte(`{"name":"m","organization":"../bob"}`)), 403, "forbidden"},
	}
}

// headerCases are huge header blocks and broken Content-Lengths, which
// net/http answers before the application.
func (m *badInput) headerCases() []matrixCase {
	xorbPath, raw := "/v1/xorbs/default/"+m.info.Hash.String(), m.raw
	return []matrixCase{
		{"header block over MaxHeaderBytes", raw("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n"), 431, ""},
		{"thousands of headers", raw("GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Many: 0123456789\r\n", 3000) + "\r\n"), 431, ""},
		{"Content-Length not a number", raw("POST " + xorbPath + " HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"), 400, ""},
		{"two Content-Lengths", raw("POST " + xorbPath + " HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello"), 400, ""},
	}
}

// routeCases are wrong methods and unknown routes.
func (m *badInput) routeCases() []matrixCase {
	e, alice, info, recon, fetchURL, admin, get, send := m.e, m.alice, m.info, m.recon, m.fetchURL, badInputAdmin, m.get, m.send
	xorbPath := "/v1/xorbs/default/" + info.Hash.String()
	return []matrixCase{
		{"DELETE a xorb", send("DELETE", xorbPath, alice, nil), 405, "method_not_allowed"},
		{"GET the shard route", get("/v1/shards", alice), 405, "method_not_allowed"},
		{"PUT a reconstruction", send("PUT", recon, alice, []byte("x")), 405, "method_not_allowed"},
		{"POST a fetch URL", func() response { return e.do("POST", strings.TrimPrefix(fetchURL, e.http.URL), "", []byte("x")) }, 405, "method_not_allowed"},
		// Inside the admin group echo answers an unknown method as an
		// unknown route (the group's not-found route runs the admin guard
		// first, so nothing is revealed to non-admins).
		{"PATCH admin tenants", send("PATCH", admin+"/tenants", e.admin, []byte("{}")), 404, "not_found"},
		{"PATCH admin tenants without a token", send("PATCH", admin+"/tenants", "", []byte("{}")), 401, "unauthorized"},
		{"PATCH admin tenants as a tenant", send("PATCH", admin+"/tenants", alice, []byte("{}")), 403, "forbidden"},
		{"unknown v2 route", get("/v2/xorbs/default/"+info.Hash.String(), alice), 404, "not_found"},
		{"unknown route", get("/v1/everything", alice), 404, "not_found"},
	}
}
