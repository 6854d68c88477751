package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readReport decodes testdata/name.json.
func readReport(t *testing.T, name string) *Report {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestGolden renders each report of testdata/*.json as text and HTML and
// compares them with testdata/*.txt and *.html, byte for byte. The golden
// files were written by the renderers that preceded this package (fmt
// into a strings.Builder: load/report.go and load/html.go at 1db1234), from the
// same reports: the text and the page are unchanged by the move to
// html/template. The reports cover one node and several, both scenarios,
// failures, notes, an interrupted run, unmeasured memory and the memory
// plot's off-scale budget notes.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no reports in testdata: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			r := readReport(t, name)
			for _, out := range []struct {
				ext   string
				write func(*Report, *bytes.Buffer) error
			}{
				{".txt", func(r *Report, b *bytes.Buffer) error { return r.WriteText(b) }},
				{".html", func(r *Report, b *bytes.Buffer) error { return r.WriteHTML(b) }},
			} {
				want, err := os.ReadFile(filepath.Join("testdata", name+out.ext))
				if err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				if err := out.write(r, &b); err != nil {
					t.Fatal(err)
				}
				if got := b.String(); got != string(want) {
					t.Errorf("%s%s differs from the golden file at byte %d:\n got: %q\nwant: %q", name, out.ext, firstDiff(got, string(want)),
						around(got, firstDiff(got, string(want))), around(string(want), firstDiff(got, string(want))))
				}
			}
		})
	}
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func around(s string, i int) string {
	return s[max(i-80, 0):min(i+80, len(s))]
}
