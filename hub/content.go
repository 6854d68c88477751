package hub

import (
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// userContentPolicy is the Content-Security-Policy of every answer that
// carries a repo's bytes: nothing it holds may load, run or submit
// anything, and a browser that renders it anyway renders it in a sandbox
// of its own origin, never as a page of this server.
const userContentPolicy = "default-src 'none'; sandbox"

// inlineTypes are the media types a browser may show in place: none of
// them runs script or loads anything. Every other repo file (HTML, SVG,
// XML, JavaScript, PDF, and what has no known type) is sent as
// application/octet-stream and an attachment, so that a committed
// evil.html is downloaded, never rendered as a page of the server
// (SECURITY.md, "User content").
var inlineTypes = map[string]bool{
	"text/plain": true, "text/csv": true, "text/markdown": true,
	"application/json": true,
	"image/png":        true, "image/jpeg": true, "image/gif": true, "image/webp": true, "image/avif": true,
	"audio/mpeg": true, "audio/wav": true, "audio/ogg": true, "audio/flac": true,
	"video/mp4": true, "video/webm": true,
}

// contentType is the Content-Type a repo file named name is sent with, and
// whether a browser may show it in place. It comes from the name alone,
// never from the bytes (the answers carry nosniff), and a type that may
// run is never named: it is application/octet-stream.
func contentType(name string) (ct string, inline bool) {
	ext := strings.ToLower(path.Ext(name))
	switch ext {
	case ".md", ".markdown":
		return "text/markdown; charset=utf-8", true
	case ".txt", ".py", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".sh", ".jsonl", ".gitattributes", ".gitignore":
		return "text/plain; charset=utf-8", true
	case "":
		if base := path.Base(name); base == "LICENSE" || base == "README" || strings.HasPrefix(base, ".git") {
			return "text/plain; charset=utf-8", true
		}
	}
	ct = mime.TypeByExtension(ext)
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || !inlineTypes[mt] {
		return "application/octet-stream", false
	}
	return ct, true
}

// userContent sets the headers every answer carrying the bytes of the repo
// file name gets, on resolve and raw, to every reader: its Content-Type
// from its name, nosniff, the sandboxing policy, and a
// Content-Disposition naming the file, attachment unless the type is one
// a browser may show in place. The answer's status and body are the
// caller's.
func userContent(hdr http.Header, name string) {
	ct, inline := contentType(name)
	hdr.Set("Content-Type", ct)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Security-Policy", userContentPolicy)
	disposition := "attachment"
	if inline {
		disposition = "inline"
	}
	base := path.Base(name)
	hdr.Set("Content-Disposition", disposition+`; filename="`+asciiName(base)+`"; filename*=UTF-8''`+url.PathEscape(base))
}

// asciiName is name with every byte a quoted-string cannot hold safely
// (non-ASCII, control, quote, backslash) replaced by '_'.
func asciiName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b[i] = '_'
		}
	}
	return string(b)
}
