package hub

import (
	"strings"
	"testing"
)

// TestAttrMatchFollowsGitattributesGlobs: a pattern without a slash names
// a file at any depth; with one, the path from the root; "**" any number of
// directories; "*" never crosses a slash.
func TestAttrMatchFollowsGitattributesGlobs(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"*.parquet", "train.parquet", true},
		{"*.parquet", "data/train-00000-of-00002.parquet", true},
		{"*.parquet", "data/train.parquet.txt", false},
		{"*.tar.*", "a/b.tar.gz", true},
		{"*tfevents*", "runs/x/events.out.tfevents.1.host", true},
		{"saved_model/**/*", "saved_model/variables/v.index", true},
		{"saved_model/**/*", "saved_model/x.pb", true},
		{"saved_model/**/*", "other/saved_model/x.pb", false},
		{"/data/*.csv", "data/a.csv", true},
		{"data/*.csv", "data/sub/a.csv", false},
		{"data/**/*.csv", "data/sub/a.csv", true},
		{"data/", "data", false},
		{"*.[ch]", "src/x.c", true},
		{"[", "x", false}, // a bad pattern matches nothing
	} {
		if got := attrMatch(c.pattern, c.path); got != c.want {
			t.Errorf("attrMatch(%q, %q) = %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

// TestGitattributesRulesLaterLinesWin: filter=lfs sets the filter;
// -filter, !filter and another filter unset it; the last matching line wins;
// comments and macro lines say nothing.
func TestGitattributesRulesLaterLinesWin(t *testing.T) {
	rules := parseGitattributes([]byte(strings.Join([]string{
		"# comment *.txt filter=lfs",
		"*.bin filter=lfs diff=lfs merge=lfs -text",
		"small.bin -filter",
		"*.dat filter=lfs",
		"keep/*.dat filter=other",
		"[attr]big filter=lfs",
		"*.csv   text",
		"*.weights\tfilter=lfs",
	}, "\n")))
	for p, want := range map[string]bool{
		"a.bin": true, "x/small.bin": false, "a.dat": true, "keep/a.dat": false,
		"a.csv": false, "comment": false, "a.txt": false, "m.weights": true,
	} {
		if got := lfsByAttributes(rules, p); got != want {
			t.Errorf("%s: lfs %v, want %v", p, got, want)
		}
	}
}

// TestDefaultGitattributesMarksTheHubsFormats: the .gitattributes of a new
// repo marks the formats the Hub's does (datasets also media formats), and
// leaves text and configs regular.
func TestDefaultGitattributesMarksTheHubsFormats(t *testing.T) {
	model, dataset := parseGitattributes(defaultGitattributes("model")), parseGitattributes(defaultGitattributes("dataset"))
	for _, p := range []string{"model.safetensors", "pytorch_model.bin", "data/train.parquet", "a.zip", "b.tar.gz", "c.tgz",
		"x.7z", "tokenizer.model", "weights.h5", "m.onnx", "e/events.out.tfevents.1", "saved_model/variables/v.data"} {
		if !lfsByAttributes(model, p) || !lfsByAttributes(dataset, p) {
			t.Errorf("%s is not lfs in the default .gitattributes", p)
		}
	}
	for _, p := range []string{"images/a.png", "a.jpg", "s.wav", "v.mp4", "x.lz4"} {
		if lfsByAttributes(model, p) || !lfsByAttributes(dataset, p) {
			t.Errorf("%s: model lfs %v, dataset lfs %v; want false, true", p, lfsByAttributes(model, p), lfsByAttributes(dataset, p))
		}
	}
	for _, p := range []string{"config.json", "README.md", "tokenizer.json", "data/train.csv", ".gitattributes"} {
		if lfsByAttributes(model, p) || lfsByAttributes(dataset, p) {
			t.Errorf("%s is lfs in the default .gitattributes", p)
		}
	}
	for _, typ := range []string{"model", "dataset", "space"} {
		for _, line := range strings.Split(strings.TrimSpace(string(defaultGitattributes(typ))), "\n") {
			if !strings.HasPrefix(line, "# ") && !strings.HasSuffix(line, " filter=lfs diff=lfs merge=lfs -text") {
				t.Errorf("%s: line %q", typ, line)
			}
		}
	}
}

// TestGitignoreRules: a pattern ignores a file or any directory above it;
// "!" takes a file back; a trailing slash names directories only.
func TestGitignoreRules(t *testing.T) {
	rules := parseGitignore("# c\n*.log\n!keep.log\nbuild/\n/top.txt\ncache\n\\#hash\n")
	for p, want := range map[string]bool{
		"a.log": true, "d/a.log": true, "keep.log": false, "build/x.bin": true, "build": false,
		"top.txt": true, "d/top.txt": false, "cache/a": true, "d/cache": true, "#hash": true, "a.txt": false,
	} {
		if got := ignored(rules, p); got != want {
			t.Errorf("%s: ignored %v, want %v", p, got, want)
		}
	}
}

// TestBinarySample: a NUL byte or bytes that are not UTF-8 make a sample
// binary; a multi-byte character cut at the end of a partial sample does
// not.
func TestBinarySample(t *testing.T) {
	euro := "€" // 3 bytes
	for _, c := range []struct {
		name   string
		sample string
		whole  bool
		want   bool
	}{
		{"text", "hello\nworld", true, false},
		{"nul", "a\x00b", true, true},
		{"latin1", "caf\xe9", true, true},
		{"cut rune", strings.Repeat("a", 510) + euro[:2], false, false},
		{"cut rune, whole file", "a" + euro[:2], true, true},
		{"bad rune then more", "\xff" + strings.Repeat("a", 511), false, true},
		{"utf-8", "ünïcode " + euro, true, false},
		{"empty", "", true, false},
	} {
		if got := binarySample([]byte(c.sample), c.whole); got != c.want {
			t.Errorf("%s: binary %v, want %v", c.name, got, c.want)
		}
	}
}
