// Package upstream implements mirror.Upstream over HTTP: it speaks to a
// Hub-compatible server (huggingface.co, another openxet) the way the
// stock clients do, its Hub API for revisions and file lists and its Xet
// CAS (or its resolve route) for file bytes.
package upstream
