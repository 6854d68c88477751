package upstream

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"openxet/mirror"
)

// The parsers of upstream answers never panic, refuse with an error, and
// what they accept is consistent and survives a round trip through the
// shape they parse. Seeds: the fixtures of testdata/upstream.

func seed(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "upstream", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "null", "[]", "{}", "[null]", `{"sha":null}`, "[1]", `"x"`, "{} {}"} {
		f.Add([]byte(s))
	}
}

func FuzzTreePage(f *testing.F) {
	seed(f, "tree-page.json", "tree-gated.json")
	f.Fuzz(func(t *testing.T, body []byte) {
		files, err := parseTreePage(body)
		if err != nil {
			return
		}
		var again []map[string]any
		for _, fl := range files {
			if checkPath(fl.Path) != nil || fl.Size < 0 || fl.GitOID == "" {
				t.Fatalf("accepted %+v", fl)
			}
			if fl.XetHash != "" && (len(fl.XetHash) != 64 || strings.ToLower(fl.XetHash) != fl.XetHash || !isHex(fl.XetHash)) {
				t.Fatalf("accepted xet hash %q", fl.XetHash)
			}
			e := map[string]any{"type": "file", "path": fl.Path, "size": fl.Size, "oid": fl.GitOID}
			if fl.SHA256 != "" {
				e["lfs"] = map[string]any{"oid": fl.SHA256, "size": fl.Size}
			}
			if fl.XetHash != "" {
				e["xetHash"] = fl.XetHash
			}
			again = append(again, e)
		}
		b, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if len(again) == 0 {
			b = []byte("[]")
		}
		files2, err := parseTreePage(b)
		if err != nil || !reflect.DeepEqual(nonNil(files), nonNil(files2)) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, files, files2)
		}
	})
}

func nonNil(f []mirror.File) []mirror.File {
	if f == nil {
		return []mirror.File{}
	}
	return f
}

func FuzzRevisionInfo(f *testing.F) {
	seed(f, "model-info.json", "model-info-gated.json")
	f.Fuzz(func(t *testing.T, body []byte) {
		info, err := parseRevisionInfo(body)
		if err != nil {
			return
		}
		if !isFullSHA(info.SHA) || strings.ToLower(info.SHA) != info.SHA {
			t.Fatalf("accepted sha %q", info.SHA)
		}
		sibs := []map[string]string{}
		for _, s := range info.Siblings {
			sibs = append(sibs, map[string]string{"rfilename": s})
		}
		m := map[string]any{"sha": info.SHA, "gated": info.Gated, "siblings": sibs}
		if !info.LastModified.IsZero() {
			m["lastModified"] = info.LastModified.Format("2006-01-02T15:04:05.999999999Z07:00")
		}
		b, _ := json.Marshal(m)
		info2, err := parseRevisionInfo(b)
		if err != nil || info2.SHA != info.SHA || info2.Gated != info.Gated || !info2.LastModified.Equal(info.LastModified) || !reflect.DeepEqual(info.Siblings, info2.Siblings) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, info, info2)
		}
	})
}

func FuzzReconstruction(f *testing.F) {
	seed(f, "reconstruction.json")
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, err := parseReconstruction(body)
		if err != nil {
			return
		}
		type rng struct {
			Start uint64 `json:"start"`
			End   uint64 `json:"end"`
		}
		terms := []map[string]any{}
		for _, term := range rec.Terms {
			if _, ok := rec.entryFor(term); !ok || term.Start >= term.End || term.Unpacked == 0 {
				t.Fatalf("accepted term %+v", term)
			}
			terms = append(terms, map[string]any{"hash": term.Xorb.String(), "unpacked_length": term.Unpacked, "range": rng{uint64(term.Start), uint64(term.End)}})
		}
		fetch := map[string][]map[string]any{}
		for h, es := range rec.Fetch {
			for _, e := range es {
				if e.Start >= e.End || e.ByteStart > e.ByteEnd {
					t.Fatalf("accepted entry %+v", e)
				}
				fetch[h.String()] = append(fetch[h.String()], map[string]any{"range": rng{uint64(e.Start), uint64(e.End)}, "url": e.URL.String(), "url_range": rng{e.ByteStart, e.ByteEnd}})
			}
		}
		b, _ := json.Marshal(map[string]any{"offset_into_first_range": rec.Offset, "terms": terms, "fetch_info": fetch})
		rec2, err := parseReconstruction(b)
		if err != nil || rec2.Offset != rec.Offset || !reflect.DeepEqual(rec.Terms, rec2.Terms) || len(rec.Fetch) != len(rec2.Fetch) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, rec, rec2)
		}
		for h, es := range rec.Fetch {
			for i, e := range es {
				e2 := rec2.Fetch[h][i]
				if e.Start != e2.Start || e.End != e2.End || e.ByteStart != e2.ByteStart || e.ByteEnd != e2.ByteEnd || e.URL.String() != e2.URL.String() {
					t.Fatalf("round trip of %s[%d]: %+v, %+v", h, i, e, e2)
				}
			}
		}
	})
}

func FuzzCASToken(f *testing.F) {
	seed(f, "xet-read-token.json")
	f.Fuzz(func(t *testing.T, body []byte) {
		tok, err := parseCASToken(body)
		if err != nil {
			return
		}
		if tok.casURL == nil || tok.casURL.Host == "" || strings.ContainsAny(tok.token, "\r\n") {
			t.Fatalf("accepted %+v", tok)
		}
	})
}

func FuzzNextLink(f *testing.F) {
	for _, s := range []string{`<https://h/api?cursor=1>; rel="next"`, `<a>; rel="prev", <b>; rel="next"`, `<a,b>; rel=next`, `<>`, `;;;`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := nextLink([]string{v})
		if got != "" && !strings.Contains(v, "<"+got+">") {
			t.Fatalf("next %q is not a <target> of %q", got, v)
		}
	})
}

// TestReconstructionRefusals: a reconstruction that does not add up is
// refused by the parser.
func TestReconstructionRefusals(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("..", "..", "testdata", "upstream", "reconstruction.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseReconstruction(good); err != nil {
		t.Fatalf("the fixture: %v", err)
	}
	x1 := strings.Repeat("1", 64)
	for name, edit := range map[string][2]string{
		"term outside its entry":      {`"range": {"start": 5, "end": 6}}`, `"range": {"start": 5, "end": 7}}`},
		"xorb without fetch_info":     {`{"hash": "2222`, `{"hash": "3333`},
		"offset past the first term":  {`"offset_into_first_range": 1000`, `"offset_into_first_range": 200000`},
		"empty chunk range":           {`"range": {"start": 0, "end": 1}}`, `"range": {"start": 1, "end": 1}}`},
		"fetch key not a hash":        {`"` + x1 + `": [`, `"xyz": [`},
		"relative url":                {`"url": "https://transfer.example.invalid/xorbs/default/2222?X-Signature=def"`, `"url": "/xorbs/2222"`},
		"url_range backwards":         {`"url_range": {"start": 0, "end": 65543}`, `"url_range": {"start": 65543, "end": 0}`},
		"url_range short for chunks":  {`"url_range": {"start": 131088, "end": 401119}`, `"url_range": {"start": 131088, "end": 131090}`},
		"unpacked longer than chunks": {`"unpacked_length": 65536`, `"unpacked_length": 131073`},
		"no unpacked_length":          {`"unpacked_length": 65536,`, ``},
		"negative offset":             {`"offset_into_first_range": 1000`, `"offset_into_first_range": -1`},
		"trailing data":               {"\n}\n", "\n} {}\n"},
	} {
		body := strings.Replace(string(good), edit[0], edit[1], 1)
		if body == string(good) {
			t.Fatalf("%s: the edit changes nothing", name)
		}
		if _, err := parseReconstruction([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
