//go:build !amd64

package xet

// bg4Blocks is bg4_amd64.go's SSE2 path; elsewhere it does nothing and
// regroupBG4's portable loop does all the work.
func bg4Blocks(out, g0, g1, g2, g3 []byte, q int) int { return 0 }
