package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"openxet/mirror"
)

// The mirror's admin routes (docs/mirror.md): what is mirrored, and a
// pre-fetch of a revision for air-gapped use. Without a mirror both are
// 404 not_found with a sentence.

// MirroredView is a mirrored revision as the admin API shows it.
type MirroredView struct {
	Repo        string   `json:"repo"`
	Type        string   `json:"type"`
	SHA         string   `json:"sha"`
	Names       []string `json:"names"`
	Files       int      `json:"files"`
	PulledFiles int      `json:"pulled_files"`
	SizeBytes   int64    `json:"size_bytes"`
	PulledBytes int64    `json:"pulled_bytes"`
	// LastUsed is RFC 3339, "" when not read since the server started.
	LastUsed string `json:"last_used"`
}

// ViewMirrored is the admin API's view of a mirrored revision.
func ViewMirrored(mv mirror.Mirrored) MirroredView {
	v := MirroredView{Repo: mv.Repo.String(), Type: mv.Repo.Type, SHA: mv.SHA, Names: mv.Names, Files: mv.Files,
		PulledFiles: mv.PulledFiles, SizeBytes: mv.SizeBytes, PulledBytes: mv.PulledBytes}
	if v.Names == nil {
		v.Names = []string{}
	}
	if !mv.LastUsed.IsZero() {
		v.LastUsed = mv.LastUsed.UTC().Format("2006-01-02T15:04:05Z")
	}
	return v
}

func (s *Server) noMirror() error {
	return refuse(errNotFound, "this server mirrors no upstream (mirror.upstream is off)")
}

func (s *Server) listMirrored(c echo.Context) error {
	if s.cfg.Mirror == nil {
		return s.noMirror()
	}
	list, err := s.cfg.Mirror.List(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]MirroredView, 0, len(list))
	for _, mv := range list {
		out = append(out, ViewMirrored(mv))
	}
	return c.JSON(http.StatusOK, map[string]any{"revisions": out})
}

// PullRequest is the body of POST /api/openxet/v1/admin/mirror/pull.
type PullRequest struct {
	// Repo is "ns/name" as the upstream spells it; Type model (""),
	// dataset or space; Revision a branch, tag or sha ("" is main).
	Repo     string `json:"repo"`
	Type     string `json:"type"`
	Revision string `json:"revision"`
}

func (s *Server) pullMirrored(c echo.Context) error {
	if s.cfg.Mirror == nil {
		return s.noMirror()
	}
	var req PullRequest
	if err := json.NewDecoder(io.LimitReader(c.Request().Body, 64<<10)).Decode(&req); err != nil {
		return refuse(errBadRequest, "the body is not a pull request like {\"repo\": \"ns/name\", \"revision\": \"main\"}: %v", err)
	}
	ns, name, ok := strings.Cut(req.Repo, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return refuse(errBadRequest, "repo %q is not ns/name", req.Repo)
	}
	if req.Type == "" {
		req.Type = "model"
	}
	if req.Type != "model" && req.Type != "dataset" && req.Type != "space" {
		return refuse(errBadRequest, "type %q is not model, dataset or space", req.Type)
	}
	if req.Revision == "" {
		req.Revision = "main"
	}
	id := identityOf(c)
	reserve := func(n int64) ([]byte, func(), error) { return s.reserveBuffer(c, n) }
	mv, err := s.cfg.Mirror.Pull(c.Request().Context(), id.Tenant, req.Type, ns, name, req.Revision, reserve)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ViewMirrored(mv))
}

// registerMirrorMetrics exports the mirror's counters (docs/mirror.md).
func registerMirrorMetrics(reg *prometheus.Registry, m Mirror) {
	counter := func(name, help string, v func(mirror.Stats) int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(m.Stats())) }))
	}
	counter("openxet_mirror_upstream_bytes_total", "File bytes the mirror read from its upstream.", func(s mirror.Stats) int64 { return s.UpstreamBytes })
	counter("openxet_mirror_upstream_files_total", "Files the mirror pulled from its upstream (one per coalesced pull).", func(s mirror.Stats) int64 { return s.UpstreamFiles })
	counter("openxet_mirror_upstream_revisions_total", "Revisions the mirror resolved against its upstream.", func(s mirror.Stats) int64 { return s.Revisions })
	counter("openxet_mirror_hits_total", "File reads the mirror answered from what it had stored.", func(s mirror.Stats) int64 { return s.Hits })
	counter("openxet_mirror_stale_total", "Reads the mirror answered from a revision it could not re-resolve (upstream unreachable).", func(s mirror.Stats) int64 { return s.Stale })
	counter("openxet_mirror_refused_total", "Upstream answers the mirror refused as invalid.", func(s mirror.Stats) int64 { return s.Refused })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "openxet_mirror_upstream_waiting", Help: "Upstream streams waiting for one of mirror.max_upstream_connections."},
		func() float64 { return float64(m.UpstreamWaiting()) }))
	counter("openxet_mirror_relay_plans_total", "Reconstructions of files not mirrored yet answered from the upstream's plan (relays).", func(s mirror.Stats) int64 { return s.RelayPlans })
	counter("openxet_mirror_relay_bytes_total", "Bytes of upstream xorbs served to clients through relays.", func(s mirror.Stats) int64 { return s.RelayBytes })
	counter("openxet_mirror_evicted_total", "Mirrored revisions evicted over mirror.quota.", func(s mirror.Stats) int64 { return s.Evicted })
}
