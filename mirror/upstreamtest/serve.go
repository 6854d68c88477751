package upstreamtest

// The answers of the test upstream's hosts: the Hub, its CAS and fetch
// URLs, and the CDN its LFS redirects name (upstreamtest.go builds the
// repos they serve).

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// serve logs r, applies a fault and routes it.
func (s *Server) serve(host string, w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.log = append(s.log, Request{Host: host, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Range: r.Header.Get("Range"), Auth: r.Header.Get("Authorization")})
	var f *Fault
	for i, x := range s.faults {
		if strings.Contains(r.URL.Path, x.Path) {
			c := *x
			f = &c
			if x.Times > 0 {
				if x.Times--; x.Times == 0 {
					s.faults = slices.Delete(s.faults, i, i+1)
				}
			}
			break
		}
	}
	s.mu.Unlock()
	if f != nil {
		if f.Block != nil {
			select {
			case <-f.Block:
			case <-r.Context().Done():
				return
			}
		}
		if f.Status != 0 {
			if f.RetryAfter != "" {
				w.Header().Set("Retry-After", f.RetryAfter)
			}
			hubError(w, f.Status, "", fmt.Sprintf("injected %d", f.Status))
			return
		}
		if f.CutAfter > 0 || f.Garble {
			fw := &faultWriter{ResponseWriter: w, f: f}
			defer fw.finish()
			w = fw
		}
	}
	if host == "hub" {
		s.serveHub(w, r)
	} else {
		s.serveCDN(w, r)
	}
}

// faultWriter cuts or garbles a body. A clean cut sends the body chunked
// (no Content-Length, flushed as written), so the client sees it end
// early rather than a Content-Length that says so.
type faultWriter struct {
	http.ResponseWriter
	f           *Fault
	written     int
	garbled     bool
	wroteHeader bool
}

func (w *faultWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	if w.f.CutAfter > 0 && !w.f.Abort {
		w.Header().Del("Content-Length")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *faultWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	n := len(p)
	if w.f.CutAfter > 0 {
		if w.written >= w.f.CutAfter {
			return n, nil
		}
		p = p[:min(len(p), w.f.CutAfter-w.written)]
	}
	if w.f.Garble && !w.garbled && len(p) > 0 {
		p = slices.Clone(p)
		p[min(w.f.GarbleAt, len(p)-1)] ^= 0xff
		w.garbled = true
	}
	w.written += len(p)
	if _, err := w.ResponseWriter.Write(p); err != nil {
		return 0, err
	}
	if fl, ok := w.ResponseWriter.(http.Flusher); ok && w.f.CutAfter > 0 && !w.f.Abort {
		fl.Flush()
	}
	return n, nil
}

// finish drops the connection of an Abort fault once its bytes are out.
func (w *faultWriter) finish() {
	if w.f.Abort && w.f.CutAfter > 0 && w.written >= w.f.CutAfter {
		if fl, ok := w.ResponseWriter.(http.Flusher); ok {
			fl.Flush()
		}
		panic(http.ErrAbortHandler)
	}
}

// hubError answers as the Hub does: the status, X-Error-Code (when code
// is set), X-Error-Message and {"error": msg}.
func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Write(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// authorized reports whether r carries the Server's Token.
func (s *Server) authorized(r *http.Request) bool {
	return s.Token != "" && r.Header.Get("Authorization") == "Bearer "+s.Token
}

// lookup finds the repo of type typ and id, answering the Hub's error
// when there is none or r may not see it.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, typ, id string) *repo {
	s.mu.Lock()
	rp := s.repos[typ+"/"+id]
	s.mu.Unlock()
	if rp == nil || rp.Private && !s.authorized(r) {
		// The Hub answers 401 to a request without a token, 404 otherwise.
		status := http.StatusNotFound
		if r.Header.Get("Authorization") == "" {
			status = http.StatusUnauthorized
		}
		hubError(w, status, "RepoNotFound", "Repository Not Found for url: "+r.URL.String()+".")
		return nil
	}
	return rp
}

// revision checks rev names rp's commit, or answers RevisionNotFound.
func revisionOK(w http.ResponseWriter, rp *repo, rev string) bool {
	if rev == rp.Branch || rev == rp.sha {
		return true
	}
	hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
	return false
}

// gatedOK checks r may read the files of rp, or answers GatedRepo.
func (s *Server) gatedOK(w http.ResponseWriter, r *http.Request, rp *repo) bool {
	if rp.Gated == "" || s.authorized(r) {
		return true
	}
	status := http.StatusForbidden
	if r.Header.Get("Authorization") == "" {
		status = http.StatusUnauthorized
	}
	hubError(w, status, "GatedRepo", "Access to model "+rp.ID+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
	return false
}

var typeOfPlural = map[string]string{"models": "model", "datasets": "dataset", "spaces": "space"}

// serveHub routes the Hub's requests.
func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hubError(w, http.StatusMethodNotAllowed, "", "method not allowed")
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) >= 4 && parts[0] == "api" && typeOfPlural[parts[1]] != "" {
		typ, id := typeOfPlural[parts[1]], parts[2]+"/"+parts[3]
		rest := parts[4:]
		rp := s.lookup(w, r, typ, id)
		if rp == nil {
			return
		}
		switch {
		case len(rest) == 0:
			s.info(w, r, rp)
		case len(rest) == 2 && rest[0] == "revision":
			if revisionOK(w, rp, rest[1]) {
				s.info(w, r, rp)
			}
		case len(rest) >= 2 && rest[0] == "tree":
			if revisionOK(w, rp, rest[1]) {
				s.tree(w, r, rp, strings.Join(rest[2:], "/"))
			}
		case len(rest) == 2 && rest[0] == "xet-read-token":
			if revisionOK(w, rp, rest[1]) && s.gatedOK(w, r, rp) {
				s.readToken(w)
			}
		default:
			hubError(w, http.StatusNotFound, "", "no such route")
		}
		return
	}
	typ := "model"
	if len(parts) > 0 && (parts[0] == "datasets" || parts[0] == "spaces") {
		typ = typeOfPlural[parts[0]]
		parts = parts[1:]
	}
	if len(parts) >= 5 && parts[2] == "resolve" {
		rp := s.lookup(w, r, typ, parts[0]+"/"+parts[1])
		if rp != nil && revisionOK(w, rp, parts[3]) {
			s.resolve(w, r, rp, strings.Join(parts[4:], "/"))
		}
		return
	}
	hubError(w, http.StatusNotFound, "", "no such route")
}

// info answers model_info / dataset_info / space_info.
func (s *Server) info(w http.ResponseWriter, r *http.Request, rp *repo) {
	ns, _, _ := strings.Cut(rp.ID, "/")
	siblings := []map[string]any{}
	for _, p := range rp.paths() {
		siblings = append(siblings, map[string]any{"rfilename": p})
	}
	var gated any = false
	if rp.Gated != "" {
		gated = rp.Gated
	}
	info := map[string]any{
		"_id": "6" + rp.sha[:23], "id": rp.ID, "author": ns, "sha": rp.sha,
		"lastModified": rp.LastModified.UTC().Format("2006-01-02T15:04:05.000Z"),
		"createdAt":    rp.LastModified.UTC().Format("2006-01-02T15:04:05.000Z"),
		"private":      rp.Private, "gated": gated, "disabled": false, "downloads": 0, "likes": 0,
		"tags": []string{}, "siblings": siblings,
	}
	if rp.Type == "model" {
		info["modelId"] = rp.ID
		info["library_name"] = "transformers"
	}
	writeJSON(w, info)
}

func (rp *repo) paths() []string {
	var ps []string
	for p := range rp.files {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// tree answers list_repo_tree: entries under dir (recursive or one
// level), sorted, PageSize a page with a Link rel="next" to the next.
func (s *Server) tree(w http.ResponseWriter, r *http.Request, rp *repo, dir string) {
	q := r.URL.Query()
	recursive := q.Get("recursive") == "true" || q.Get("recursive") == "1"
	dir = strings.Trim(dir, "/")
	var items []map[string]any
	dirs := map[string]bool{}
	addDir := func(p string) {
		if !dirs[p] {
			dirs[p] = true
			items = append(items, map[string]any{"type": "directory", "oid": gitOID([]byte("tree:" + p)), "size": 0, "path": p})
		}
	}
	for _, p := range rp.paths() {
		rel := p
		if dir != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(p, dir+"/"); !ok {
				continue
			}
		}
		segs := strings.Split(rel, "/")
		if !recursive && len(segs) > 1 {
			addDir(strings.Trim(dir+"/"+segs[0], "/"))
			continue
		}
		for i := 1; recursive && i < len(segs); i++ {
			addDir(strings.Trim(dir+"/"+strings.Join(segs[:i], "/"), "/"))
		}
		items = append(items, s.treeFile(r, rp, rp.files[p]))
	}
	if dir != "" && len(items) == 0 {
		hubError(w, http.StatusNotFound, "EntryNotFound", dir+" does not exist on \""+rp.Branch+"\"")
		return
	}
	slices.SortStableFunc(items, func(a, b map[string]any) int { return strings.Compare(a["path"].(string), b["path"].(string)) })
	start := 0
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 || n > len(items) {
			hubError(w, http.StatusBadRequest, "", "bad cursor")
			return
		}
		start = n
	}
	end := min(start+cmpOr(s.PageSize, DefaultPageSize), len(items))
	if end < len(items) {
		q.Set("cursor", strconv.Itoa(end))
		w.Header().Set("Link", "<"+s.URL()+r.URL.EscapedPath()+"?"+q.Encode()+`>; rel="next"`)
	}
	page := items[start:end]
	if page == nil {
		page = []map[string]any{}
	}
	writeJSON(w, page)
}

func (s *Server) treeFile(r *http.Request, rp *repo, f *file) map[string]any {
	item := map[string]any{"type": "file", "oid": f.gitOID, "size": len(f.Content), "path": f.Path}
	if f.LFS {
		item["lfs"] = map[string]any{"oid": f.sha256, "size": len(f.Content), "pointerSize": f.pointer}
	}
	if f.Xet {
		h := f.xetHash
		if f.XetHash != "" {
			h = f.XetHash
		}
		if rp.Gated != "" && !s.authorized(r) {
			h = Redacted
		}
		item["xetHash"] = h
	}
	return item
}

// readToken answers xet-read-token: a CAS token for the CDN host.
func (s *Server) readToken(w http.ResponseWriter) {
	now := s.now()
	s.mu.Lock()
	exp := now.Add(cmpOr(s.ttl, DefaultTokenTTL))
	tok := fmt.Sprintf("xet_%d_%x", len(s.tokens), sha256.Sum256([]byte(s.secret+strconv.Itoa(len(s.tokens)))))[:40]
	s.tokens[tok] = exp
	s.mu.Unlock()
	writeJSON(w, map[string]any{"accessToken": tok, "exp": exp.Unix(), "casUrl": s.CDNURL()})
}

func (s *Server) now() time.Time {
	s.mu.Lock()
	clock := s.clock
	s.mu.Unlock()
	if clock != nil {
		return clock()
	}
	return time.Now()
}

// resolve answers hf_hub_download's GET or HEAD of a file: a regular
// file's bytes from here, a 302 to the CDN for an LFS or Xet file, with
// the headers huggingface_hub reads (X-Repo-Commit, ETag, X-Linked-Size,
// X-Linked-Etag, X-Xet-Hash and its Link rels).
func (s *Server) resolve(w http.ResponseWriter, r *http.Request, rp *repo, p string) {
	p, _ = url.PathUnescape(p)
	f := rp.files[p]
	h := w.Header()
	h.Set("X-Repo-Commit", rp.sha)
	if f == nil {
		hubError(w, http.StatusNotFound, "EntryNotFound", p+" does not exist on \""+rp.Branch+"\"")
		return
	}
	if !s.gatedOK(w, r, rp) {
		return
	}
	if !f.LFS {
		h.Set("ETag", `"`+f.gitOID+`"`)
		s.serveBytes(w, r, f.Content)
		return
	}
	h.Set("ETag", `"`+f.sha256+`"`)
	h.Set("X-Linked-Etag", `"`+f.sha256+`"`)
	h.Set("X-Linked-Size", strconv.Itoa(len(f.Content)))
	if f.Xet {
		h.Set("X-Xet-Hash", f.xetHash)
		api := s.URL() + "/api/" + rp.Type + "s/" + rp.ID + "/xet-read-token/" + rp.sha
		h.Set("X-Xet-Refresh-Route", api)
		h.Set("Link", "<"+api+`>; rel="xet-auth", <`+s.CDNURL()+"/v1/reconstructions/"+f.xetHash+`>; rel="xet-reconstruction-info"`)
	}
	h.Set("Location", s.CDNURL()+"/lfs/"+f.sha256+"?"+url.Values{"sig": {s.secret}, "repo": {rp.Type + "/" + rp.ID}, "path": {p}}.Encode())
	w.WriteHeader(http.StatusFound)
}

// serveBytes answers content, honouring one Range: bytes=a-b or a-,
// counting the bytes sent as file data.
func (s *Server) serveBytes(w http.ResponseWriter, r *http.Request, content []byte) {
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Type", "application/octet-stream")
	body := content
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		a, b, ok := parseRange(rg, len(content))
		if !ok {
			w.Header().Set("Content-Range", "bytes */"+strconv.Itoa(len(content)))
			hubError(w, http.StatusRequestedRangeNotSatisfiable, "", "range not satisfiable")
			return
		}
		body = content[a : b+1]
		status = http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b, len(content)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	n, _ := w.Write(body)
	s.served.Add(int64(n))
}

// parseRange reads bytes=a-b or bytes=a- against size.
func parseRange(h string, size int) (int, int, bool) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	as, bs, ok := strings.Cut(spec, "-")
	a, err := strconv.Atoi(as)
	if !ok || err != nil || a < 0 || a >= size {
		return 0, 0, false
	}
	b := size - 1
	if bs != "" {
		if b, err = strconv.Atoi(bs); err != nil || b < a {
			return 0, 0, false
		}
		b = min(b, size-1)
	}
	return a, b, true
}

// serveCDN routes the other host: reconstructions (CAS token required),
// fetch URLs and LFS downloads (signed).
func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/reconstructions/"):
		s.reconstruction(w, r, strings.TrimPrefix(r.URL.Path, "/v1/reconstructions/"))
	case strings.HasPrefix(r.URL.Path, "/xorbs/"):
		if r.URL.Query().Get("sig") != s.secret {
			hubError(w, http.StatusForbidden, "", "bad signature")
			return
		}
		s.mu.Lock()
		body := s.xorbs[strings.TrimPrefix(r.URL.Path, "/xorbs/")]
		s.mu.Unlock()
		if body == nil {
			hubError(w, http.StatusNotFound, "", "no such xorb")
			return
		}
		s.serveBytes(w, r, body)
	case strings.HasPrefix(r.URL.Path, "/lfs/"):
		q := r.URL.Query()
		if q.Get("sig") != s.secret {
			hubError(w, http.StatusForbidden, "", "bad signature")
			return
		}
		s.mu.Lock()
		rp := s.repos[q.Get("repo")]
		s.mu.Unlock()
		if rp == nil || rp.files[q.Get("path")] == nil {
			hubError(w, http.StatusNotFound, "", "no such object")
			return
		}
		s.serveBytes(w, r, rp.files[q.Get("path")].Content)
	default:
		hubError(w, http.StatusNotFound, "", "no such route")
	}
}

// reconstruction answers GET /v1/reconstructions/{hash} (v1 shape) for
// the Range asked (the whole file without one): one term per xorb the
// range touches, its fetch_info entry with the term's chunks and their
// url_range, and offset_into_first_range.
func (s *Server) reconstruction(w http.ResponseWriter, r *http.Request, hash string) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	exp, ok := s.tokens[tok]
	var f *file
	for _, rp := range s.repos {
		for _, fl := range rp.files {
			if fl.Xet && fl.xetHash == hash {
				f = fl
			}
		}
	}
	s.mu.Unlock()
	if !ok || !s.now().Before(exp) {
		hubError(w, http.StatusUnauthorized, "", "invalid or expired CAS token")
		return
	}
	if f == nil {
		hubError(w, http.StatusNotFound, "", "no such file")
		return
	}
	size := len(f.Content)
	a, b := 0, size-1
	if rg := r.Header.Get("Range"); rg != "" {
		var ok bool
		if a, b, ok = parseRange(rg, size); !ok {
			hubError(w, http.StatusRequestedRangeNotSatisfiable, "", "range not satisfiable")
			return
		}
	}
	type rng struct {
		Start uint64 `json:"start"`
		End   uint64 `json:"end"`
	}
	type term struct {
		Hash     string `json:"hash"`
		Unpacked uint64 `json:"unpacked_length"`
		Range    rng    `json:"range"`
	}
	type fetch struct {
		Range    rng    `json:"range"`
		URL      string `json:"url"`
		URLRange rng    `json:"url_range"`
	}
	ans := struct {
		Offset    uint64             `json:"offset_into_first_range"`
		Terms     []term             `json:"terms"`
		FetchInfo map[string][]fetch `json:"fetch_info"`
	}{Terms: []term{}, FetchInfo: map[string][]fetch{}}
	first := true
	for _, t := range f.terms {
		lo, hi := -1, -1 // chunk indices touched
		for i, c := range t.chunks {
			cs := t.start + c.UncompressedEnd - uint64(c.Size)
			ce := t.start + c.UncompressedEnd
			if ce > uint64(a) && cs <= uint64(b) {
				if lo < 0 {
					lo = i
					if first {
						ans.Offset = uint64(a) - cs
						first = false
					}
				}
				hi = i
			}
		}
		if lo < 0 {
			continue
		}
		var unpacked uint64
		for _, c := range t.chunks[lo : hi+1] {
			unpacked += uint64(c.Size)
		}
		byteStart := uint64(0)
		if lo > 0 {
			byteStart = uint64(t.chunks[lo-1].SerializedEnd)
		}
		ans.Terms = append(ans.Terms, term{t.xorb, unpacked, rng{uint64(lo), uint64(hi + 1)}})
		ans.FetchInfo[t.xorb] = append(ans.FetchInfo[t.xorb], fetch{
			Range: rng{uint64(lo), uint64(hi + 1)}, URL: s.CDNURL() + "/xorbs/" + t.xorb + "?sig=" + s.secret,
			URLRange: rng{byteStart, uint64(t.chunks[hi].SerializedEnd) - 1}})
	}
	writeJSON(w, ans)
}
