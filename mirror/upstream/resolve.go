package upstream

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"openxet/mirror"
)

// resolvePath is the escaped path of a file's resolve route:
// /{prefix}{id}/resolve/{sha}/{path}, prefix "" for models, "datasets/"
// and "spaces/" otherwise, as huggingface_hub's hf_hub_url builds it.
func resolvePath(repo mirror.RepoRef, sha, file string) string {
	prefix := ""
	switch repo.Type {
	case "dataset":
		prefix = "datasets/"
	case "space":
		prefix = "spaces/"
	}
	ns, name, _ := strings.Cut(repo.ID, "/")
	segs := strings.Split(file, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/" + prefix + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/resolve/" + sha + "/" + strings.Join(segs, "/")
}

// openResolve streams f from GET {base}/{prefix}{id}/resolve/{sha}/{path},
// following redirects (Token only to the upstream's own host), with
// Range: bytes=offset- when offset > 0 (206 and its Content-Range
// required).
func (c *Client) openResolve(ctx context.Context, repo mirror.RepoRef, sha string, f mirror.File, offset int64) (io.ReadCloser, error) {
	u := c.urlOf(resolvePath(repo, sha, f.Path), "")
	h := http.Header{"Accept-Encoding": {"identity"}}
	if offset > 0 {
		h.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	a, err := c.get(ctx, request{op: "resolve", url: u, bearer: c.token, follow: true, header: h,
		accept: func(s int) bool { return s == http.StatusOK && offset == 0 || s == http.StatusPartialContent }})
	if err != nil {
		return nil, err
	}
	final := a.Request.URL
	want := f.Size - offset
	if offset > 0 {
		cr := a.Header.Get("Content-Range")
		if cr != fmt.Sprintf("bytes %d-%d/%d", offset, f.Size-1, f.Size) {
			a.Close()
			return nil, badAnswer("resolve", final, a.StatusCode, "Content-Range %q for bytes %d- of %d", cr, offset, f.Size)
		}
	}
	if a.ContentLength >= 0 && a.ContentLength != want {
		a.Close()
		return nil, badAnswer("resolve", final, a.StatusCode, "Content-Length %d, want %d", a.ContentLength, want)
	}
	return &sizedBody{a: a, left: want, url: final}, nil
}

// sizedBody yields exactly left bytes of an answer or fails with
// ErrBadAnswer (too few or too many) or ErrUnreachable (connection lost).
type sizedBody struct {
	a    *answer
	left int64
	url  *url.URL
	err  error
}

func (b *sizedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		// One more byte would be too many.
		var one [1]byte
		n, err := b.a.Body.Read(one[:])
		if n > 0 {
			b.err = badAnswer("resolve", b.url, b.a.StatusCode, "more bytes than the file's size")
			return 0, b.err
		}
		if err == nil {
			return 0, nil
		}
		if err != io.EOF {
			b.err = b.cut(err)
			return 0, b.err
		}
		b.err = io.EOF
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.a.Body.Read(p)
	b.left -= int64(n)
	switch {
	case err == nil || err == io.EOF && b.left == 0:
		return n, nil
	case err == io.EOF:
		b.err = badAnswer("resolve", b.url, b.a.StatusCode, "the answer ends %d bytes short", b.left)
	default:
		b.err = b.cut(err)
	}
	return n, b.err
}

func (b *sizedBody) cut(err error) error {
	return &Error{Kind: mirror.ErrUnreachable, Op: "resolve", URL: strip(b.url), Status: b.a.StatusCode, Message: "answer cut off", Err: err}
}

// Close gives back the connection slot.
func (b *sizedBody) Close() error {
	if b.err == nil {
		b.err = errClosed
	}
	return b.a.Close()
}
