package upstream_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"openxet/mirror/upstream"
)

// BenchmarkOpen reads a 32 MiB Xet file of a real openxet upstream through
// Open (token, reconstructions, fetch URLs, chunks decoded) and, for
// comparison, with a plain GET of its resolve route (the server
// reconstructs it), the same bytes either way.
func BenchmarkOpen(b *testing.B) {
	u := newRealUpstream(b, 32<<20, 3)
	c := newClient(b, upstream.Options{BaseURL: u.env.URL, Token: u.token})
	ctx := context.Background()
	rev, err := c.Revision(ctx, u.repo, "main")
	if err != nil {
		b.Fatal(err)
	}
	f := rev.Files[2]
	b.Run("open", func(b *testing.B) {
		b.SetBytes(f.Size)
		b.ReportAllocs()
		for b.Loop() {
			rc, err := c.Open(ctx, u.repo, rev.SHA, f, 0)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.Copy(io.Discard, rc); err != nil || n != f.Size {
				b.Fatalf("%d bytes, %v", n, err)
			}
			rc.Close()
		}
	})
	b.Run("plain-get", func(b *testing.B) {
		b.SetBytes(f.Size)
		b.ReportAllocs()
		for b.Loop() {
			req, _ := http.NewRequest("GET", u.env.URL+"/alice/m/resolve/"+rev.SHA+"/model.bin", nil)
			req.Header.Set("Authorization", "Bearer "+u.token)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.Copy(io.Discard, res.Body); err != nil || n != f.Size {
				b.Fatalf("%d bytes, %v", n, err)
			}
			res.Body.Close()
		}
	})
}
