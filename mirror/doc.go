// Package mirror serves the repos of an upstream Hub (huggingface.co or
// another openxet) through this server, read-only: docs/design.md §12,
// docs/mirror.md. It owns what is pulled from the upstream, when, and how
// it is stored; it does not speak HTTP to the upstream itself (Upstream,
// implemented by mirror/upstream).
package mirror
