// Package server is openxet's HTTP face: the echo v4 application with the
// Xet CAS API, the admin API, probes and metrics, and the Hub API of
// package hub, which it mounts (hubmount.go) and lends its auth, memory budget,
// limits, CAS tokens and file stream.
//
// Request order (docs/design.md §4): probes are exempt; then the client IP (the TCP
// peer unless it is a trusted proxy); then auth (an IP over its
// auth-failure rate is refused before its token is looked at); then the
// credential limiter, the tenant limiter and the in-flight cap; then the
// handler, which takes memory from the budget for the bytes it holds.
//
// HTTP meaning is attached to errors in one place, errors.go: every
// refusal is JSON {"error", "message", "hint", ...}, in the Hub's
// convention on the paths the Hub owns; the shape is package refusal's.
package server
