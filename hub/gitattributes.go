package hub

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"openxet/store"
)

// Upload modes: preupload answers "lfs" or "regular" for each file as the
// Hub does. A file goes through Xet (lfs) when the .gitattributes
// committed at the revision marks its path filter=lfs, when it is larger
// than regularMaxBytes, or when its sample (the first 512 bytes the client
// sends) is binary: a NUL byte, or not UTF-8. An empty file is always
// regular (the clients commit empty files inline). shouldIgnore is true for
// a path that the .gitignore the request carries (gitIgnore), else the one
// committed at the revision, ignores.

// gitattributesPath and gitignorePath are the files preupload reads at the
// revision.
const (
	gitattributesPath = ".gitattributes"
	gitignorePath     = ".gitignore"
	// maxRuleFileBytes bounds a .gitattributes or .gitignore read for
	// preupload; a larger one is not read (no rules).
	maxRuleFileBytes = 1 << 20
)

// lfsPatterns are the patterns of the .gitattributes the Hub commits to a
// new repo (datasets add audio, image and video formats). Every line reads
// "PATTERN filter=lfs diff=lfs merge=lfs -text".
var (
	lfsPatternsCommon = []string{
		"*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
		"*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
		"*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*",
		"*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
	}
	lfsPatternsDataset = []struct {
		comment  string
		patterns []string
	}{
		{"", []string{"*.lz4", "*.mds"}},
		{"Audio files - uncompressed", []string{"*.pcm", "*.sam", "*.raw"}},
		{"Audio files - compressed", []string{"*.aac", "*.flac", "*.mp3", "*.ogg", "*.wav"}},
		{"Image files - uncompressed", []string{"*.bmp", "*.gif", "*.png", "*.tiff"}},
		{"Image files - compressed", []string{"*.jpg", "*.jpeg", "*.webp"}},
		{"Video files - compressed", []string{"*.mp4", "*.webm"}},
	}
)

// defaultGitattributes is the .gitattributes a new repo of type typ starts
// with.
func defaultGitattributes(typ string) []byte {
	var b bytes.Buffer
	line := func(p string) { b.WriteString(p + " filter=lfs diff=lfs merge=lfs -text\n") }
	for _, p := range lfsPatternsCommon {
		line(p)
		if p == "*.lfs.*" && typ == "dataset" {
			// The dataset template has two more formats in alphabetical
			// place, and media sections at the end.
			for _, q := range lfsPatternsDataset[0].patterns {
				line(q)
			}
		}
	}
	if typ == "dataset" {
		for _, sec := range lfsPatternsDataset[1:] {
			b.WriteString("# " + sec.comment + "\n")
			for _, p := range sec.patterns {
				line(p)
			}
		}
	}
	return b.Bytes()
}

// attrRule is one line of a .gitattributes: a pattern and whether it sets
// (true) or unsets (false) the lfs filter.
type attrRule struct {
	pattern string
	lfs     bool
}

// parseGitattributes reads the lines of a .gitattributes that say
// something of the filter attribute: filter=lfs sets it, filter=OTHER,
// -filter and !filter unset it. Later lines win, as in git.
func parseGitattributes(content []byte) []attrRule {
	var rules []attrRule
	for _, line := range strings.Split(string(content), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], "[attr]") {
			continue
		}
		for _, a := range fields[1:] {
			switch {
			case a == "filter=lfs":
				rules = append(rules, attrRule{fields[0], true})
			case strings.HasPrefix(a, "filter=") || a == "-filter" || a == "!filter":
				rules = append(rules, attrRule{fields[0], false})
			}
		}
	}
	return rules
}

// lfsByAttributes reports whether rules mark p (a file path) filter=lfs.
func lfsByAttributes(rules []attrRule, p string) bool {
	lfs := false
	for _, r := range rules {
		if attrMatch(r.pattern, p) {
			lfs = r.lfs
		}
	}
	return lfs
}

// attrMatch matches a file path against a .gitattributes pattern: a
// pattern without a slash matches the file's name at any depth; one with a
// slash matches the whole path from the repo root; "**" matches any number
// of directories; "*", "?" and "[…]" never match a slash.
func attrMatch(pattern, p string) bool {
	if strings.HasSuffix(pattern, "/") {
		return false // a directory pattern: gitattributes never apply it to files
	}
	if !strings.Contains(pattern, "/") {
		return segMatch(pattern, path.Base(p))
	}
	return segsMatch(strings.Split(strings.TrimPrefix(pattern, "/"), "/"), strings.Split(p, "/"))
}

// segMatch matches one path segment against one pattern segment.
func segMatch(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

// segsMatch matches path segments against pattern segments, "**" standing
// for zero or more segments.
func segsMatch(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if segsMatch(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 || !segMatch(pat[0], segs[0]) {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// ignoreRule is one pattern of a .gitignore.
type ignoreRule struct {
	pattern string
	negate  bool
	dirOnly bool
}

// parseGitignore reads the patterns of a .gitignore.
func parseGitignore(content string) []ignoreRule {
	var rules []ignoreRule
	for _, line := range strings.Split(content, "\n") {
		line = strings.TrimRight(line, " \r\t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var r ignoreRule
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, line[1:]
		} else if strings.HasPrefix(line, `\`) {
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly, line = true, strings.TrimRight(line, "/")
		}
		if line == "" {
			continue
		}
		r.pattern = line
		rules = append(rules, r)
	}
	return rules
}

// ignored reports whether rules ignore the file at p: a pattern that
// matches the file or one of its directories ignores it, a later "!"
// pattern takes it back. Like git, a file whose directory is ignored stays
// ignored.
func ignored(rules []ignoreRule, p string) bool {
	segs := strings.Split(p, "/")
	// The directories first: once one is ignored, the file is.
	for d := 1; d < len(segs); d++ {
		if ignoredAs(rules, segs[:d], true) {
			return true
		}
	}
	return ignoredAs(rules, segs, false)
}

// ignoredAs applies rules to one path (a directory when dir).
func ignoredAs(rules []ignoreRule, segs []string, dir bool) bool {
	out := false
	for _, r := range rules {
		if r.dirOnly && !dir {
			continue
		}
		var ok bool
		if strings.Contains(r.pattern, "/") {
			ok = segsMatch(strings.Split(strings.TrimPrefix(r.pattern, "/"), "/"), segs)
		} else {
			ok = segMatch(r.pattern, segs[len(segs)-1])
		}
		if ok {
			out = !r.negate
		}
	}
	return out
}

// binarySample reports whether the start of a file looks binary, as the
// Hub decides: a NUL byte, or bytes that are not UTF-8. A character cut at
// the end of the sample does not count unless the sample is the whole
// file (whole).
func binarySample(sample []byte, whole bool) bool {
	if bytes.IndexByte(sample, 0) >= 0 {
		return true
	}
	if !whole {
		// Drop an incomplete UTF-8 sequence at the end (at most 3 bytes).
		for i := 1; i <= 3 && i <= len(sample); i++ {
			if utf8.RuneStart(sample[len(sample)-i]) {
				if !utf8.FullRune(sample[len(sample)-i:]) {
					sample = sample[:len(sample)-i]
				}
				break
			}
		}
	}
	return !utf8.Valid(sample)
}

// readRuleFile reads a small regular file of a commit (.gitattributes,
// .gitignore); nil when the commit has none, or it is too large or stored
// through Xet.
func (h *Hub) readRuleFile(ctx context.Context, cm store.Commit, p string) ([]byte, error) {
	e, ok := cm.Entry(p)
	if !ok || e.XetHash != "" || e.SizeBytes > maxRuleFileBytes {
		return nil, nil
	}
	blob, err := h.store.OpenBlob(ctx, e.SHA256)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer blob.Close()
	return io.ReadAll(io.LimitReader(blob, maxRuleFileBytes))
}
