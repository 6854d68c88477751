// Package upstreamtest is a small test upstream for the mirror's tests: a
// Hub (revision info, paged trees, resolve, xet-read-token) on one
// listener and, on a second listener standing for another host, what the
// Hub sends off-site: the Xet CAS (reconstructions), its fetch URLs and
// the LFS CDN that resolve redirects to. It answers in the shapes
// huggingface_hub and hf_xet parse from huggingface.co
// (testdata/upstream/README.md says where each comes from), from the
// repos a test adds, and it logs every request and counts the file bytes
// it serves so tests can assert what reached it. Faults (an error status,
// a stalled, cut short or garbled answer) are set per request path.
//
// Only tests import it. A Server is safe for concurrent use.
package upstreamtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"openxet/xet"
)

// Defaults of a Server.
const (
	// DefaultPageSize is the tree entries per page (the Hub gives 1,000
	// without expand; a small default makes tests page).
	DefaultPageSize = 50
	// DefaultXorbChunks is the chunks per xorb of a Xet file (hf_xet cuts
	// at 8,192; a small default gives small files several terms).
	DefaultXorbChunks = 8
	// DefaultTokenTTL is the life of a CAS token.
	DefaultTokenTTL = time.Hour
	// Redacted is the xetHash a gated repo's tree shows a reader without
	// access.
	Redacted = "****************************************************************"
)

// Repo is a repo the Server serves, with one commit on one branch.
type Repo struct {
	// Type is "model", "dataset" or "space".
	Type string
	// ID is "namespace/name".
	ID string
	// Branch names the commit ("main" when "").
	Branch string
	// Gated is "", "auto" or "manual". Files of a gated repo open only
	// with the Server's Token; its tree shows other readers Redacted for
	// each xetHash.
	Gated string
	// Private repos are shown only with the Server's Token (others get
	// 401 RepoNotFound, as from the Hub).
	Private bool
	// LastModified is the commit's date (a fixed date when zero).
	LastModified time.Time
	Files        []File
}

// File is a file of a Repo.
type File struct {
	Path    string
	Content []byte
	// LFS files are redirected to the CDN by resolve; others (kept in
	// git) are served by the Hub itself.
	LFS bool
	// Xet files (LFS implied) are also served through the CAS and listed
	// with their xetHash.
	Xet bool
	// XetHash, when set, is listed instead of the real one (e.g. Redacted,
	// or a wrong hash).
	XetHash string
}

// Request is one request the Server answered.
type Request struct {
	// Host is "hub" or "cdn".
	Host   string
	Method string
	Path   string
	Query  string
	Range  string
	// Auth is the Authorization header.
	Auth string
}

// Fault changes the answers to requests whose path contains Path.
type Fault struct {
	// Path is a substring of the request's path ("" for every request).
	Path string
	// Times is how many requests it applies to (0: until ClearFaults).
	Times int
	// Status, when set, is the answer (with a JSON error body).
	Status int
	// RetryAfter is the answer's Retry-After header, with Status.
	RetryAfter string
	// Block, when set, holds the answer until it is closed or the
	// request's context ends (a slow upstream).
	Block <-chan struct{}
	// CutAfter, when > 0, ends the body after that many bytes: cleanly
	// (no Content-Length, chunked) unless Abort is set, which drops the
	// connection instead.
	CutAfter int
	Abort    bool
	// Garble flips the bits of the body's byte at GarbleAt (clamped to
	// the body's first write): at 0 a JSON answer stops parsing and a xorb
	// chunk's header goes bad.
	Garble   bool
	GarbleAt int
}

// Server is a running test upstream.
type Server struct {
	tb testing.TB
	// Token, when set, is the token with access to private and gated
	// repos. Set it before the first request.
	Token string
	// PageSize and XorbChunks: see the defaults. Set before AddRepo.
	PageSize   int
	XorbChunks int

	hub, cdn *listener

	mu     sync.Mutex
	repos  map[string]*repo // by Type + "/" + ID
	xorbs  map[string][]byte
	log    []Request
	faults []*Fault
	tokens map[string]time.Time // CAS token → expiry
	served atomic.Int64
	secret string
	ttl    time.Duration    // SetTokenTTL
	clock  func() time.Time // SetNow
}

// SetTokenTTL sets the life of the CAS tokens handed out from now on
// (DefaultTokenTTL until called).
func (s *Server) SetTokenTTL(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttl = d
}

// SetNow sets the clock CAS tokens are handed out and checked by
// (time.Now until called; nil restores it).
func (s *Server) SetNow(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = now
}

// repo is a Repo with what its answers need, computed once.
type repo struct {
	Repo
	sha   string
	files map[string]*file
}

type file struct {
	File
	gitOID  string // of the content, or of the LFS pointer
	sha256  string
	pointer int
	xetHash string   // real
	terms   []xterm  // Xet files: one per xorb
	xorbs   []string // hashes
}

type xterm struct {
	xorb   string
	chunks []xet.XorbChunk
	start  uint64 // file offset of the term
}

// New starts a Server on two loopback listeners; tb's cleanup stops it.
func New(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{tb: tb, repos: map[string]*repo{}, xorbs: map[string][]byte{}, tokens: map[string]time.Time{},
		secret: fmt.Sprintf("%x", sha256.Sum256([]byte(tb.Name())))[:16]}
	s.hub = newListener(tb, "hub", s)
	s.cdn = newListener(tb, "cdn", s)
	tb.Cleanup(s.Stop)
	return s
}

// URL is the Hub's base URL (no trailing slash).
func (s *Server) URL() string { return "http://" + s.hub.addr }

// CDNURL is the other host's base URL: the CAS, fetch URLs, LFS CDN.
func (s *Server) CDNURL() string { return "http://" + s.cdn.addr }

// Stop closes both listeners and every connection: requests fail as
// against an upstream that is down. Safe to call twice.
func (s *Server) Stop() {
	s.hub.stop()
	s.cdn.stop()
}

// Start listens again on the same addresses after Stop.
func (s *Server) Start() {
	s.tb.Helper()
	s.hub.start(s.tb)
	s.cdn.start(s.tb)
}

// FileBytesServed is the body bytes of file data sent so far: resolve
// answers of files, CDN answers and fetch-URL answers (xorb bytes).
func (s *Server) FileBytesServed() int64 { return s.served.Load() }

// Requests returns the log of requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Count is how many logged requests have a path containing substr.
func (s *Server) Count(substr string) int {
	n := 0
	for _, r := range s.Requests() {
		if strings.Contains(r.Path, substr) {
			n++
		}
	}
	return n
}

// AddFault adds f; faults are tried in the order added.
func (s *Server) AddFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// AddRepo adds r (replacing a repo of the same type and id) and returns
// its commit sha.
func (s *Server) AddRepo(r Repo) string {
	s.tb.Helper()
	if r.Branch == "" {
		r.Branch = "main"
	}
	if r.LastModified.IsZero() {
		r.LastModified = time.Date(2026, 11, 5, 12, 0, 0, 0, time.UTC)
	}
	rp := &repo{Repo: r, files: map[string]*file{}}
	h := sha1.New()
	fmt.Fprintf(h, "%s/%s\n", r.Type, r.ID)
	xorbs := map[string][]byte{}
	for _, f := range r.Files {
		fl := &file{File: f}
		sum := sha256.Sum256(f.Content)
		fl.sha256 = hex.EncodeToString(sum[:])
		if f.Xet || f.LFS {
			ptr := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", fl.sha256, len(f.Content))
			fl.pointer = len(ptr)
			fl.gitOID = gitOID([]byte(ptr))
		} else {
			fl.gitOID = gitOID(f.Content)
		}
		if f.Xet {
			fl.LFS = true
			s.buildXet(fl, xorbs)
		}
		fmt.Fprintf(h, "%s %s\n", f.Path, fl.gitOID)
		rp.files[f.Path] = fl
	}
	rp.sha = hex.EncodeToString(h.Sum(nil))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repos[r.Type+"/"+r.ID] = rp
	for k, v := range xorbs {
		s.xorbs[k] = v
	}
	return rp.sha
}

func gitOID(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// buildXet chunks f's content as hf_xet does and packs the chunks in
// xorbs of XorbChunks chunks (LZ4 where it helps), one term each.
func (s *Server) buildXet(f *file, xorbs map[string][]byte) {
	per := cmpOr(s.XorbChunks, DefaultXorbChunks)
	var chunks [][]byte
	var leaves []xet.Leaf
	for data := f.Content; len(data) > 0; {
		n := xet.ChunkLen(data)
		chunks = append(chunks, data[:n])
		leaves = append(leaves, xet.Leaf{Hash: xet.ChunkHash(data[:n]), Size: uint64(n)})
		data = data[n:]
	}
	f.xetHash = xet.FileHash(leaves).String()
	var off uint64
	for i := 0; i < len(chunks); i += per {
		body, info := xet.BuildXorb(chunks[i:min(i+per, len(chunks))], true)
		h := info.Hash.String()
		xorbs[h] = body
		f.terms = append(f.terms, xterm{xorb: h, chunks: info.Chunks, start: off})
		f.xorbs = append(f.xorbs, h)
		off += info.UncompressedSize()
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// XetHash is the real Xet hash of a Xet file of a repo added.
func (s *Server) XetHash(typ, id, path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.repos[typ+"/"+id]; r != nil {
		if f := r.files[path]; f != nil {
			return f.xetHash
		}
	}
	return ""
}

// listener serves one host of the Server and can stop and start again on
// its address.
type listener struct {
	name string
	s    *Server
	addr string
	mu   sync.Mutex
	srv  *http.Server
}

func newListener(tb testing.TB, name string, s *Server) *listener {
	l := &listener{name: name, s: s, addr: "127.0.0.1:0"}
	l.start(tb)
	return l
}

func (l *listener) start(tb testing.TB) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.srv != nil {
		return
	}
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		tb.Fatalf("upstreamtest: listen %s: %v", l.addr, err)
	}
	l.addr = ln.Addr().String()
	l.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.s.serve(l.name, w, r) }),
		ReadHeaderTimeout: 10 * time.Second}
	go l.srv.Serve(ln)
}

func (l *listener) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.srv != nil {
		l.srv.Close()
		l.srv = nil
	}
}
