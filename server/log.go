package server

import (
	"log/slog"
	"runtime/trace"
	"time"

	"github.com/labstack/echo/v4"
)

const refusalKey = "openxet.refusal"

func setRefusal(c echo.Context, ae *apiError) { c.Set(refusalKey, ae) }

// requestLog writes one line per request: method, path, status, bytes in
// and out, duration in milliseconds, client IP, user agent, request id,
// tenant, credential key (never the secret), and the code, message and
// limit of a refusal, and how long the request waited before it arrived when its
// sender said when it sent it (X-Request-Start, queueTime). Probes,
// /metrics and /v1/telemetry log at debug level. An authenticated
// request's answer carries its time so far, that wait and its stage times
// in a Server-Timing header (stageTimes.serverTiming).
func (s *Server) requestLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		queue := queueTime(c.Request().Header.Get(headerRequestStart), start)
		st := new(stageTimes)
		c.Set(stagesKey, st)
		if trace.IsEnabled() {
			// A runtime trace (server.debug_listen's /debug/pprof/trace)
			// shows each request as a task: its goroutine's running,
			// runnable and blocked time, and its tenant (logged by
			// guardRated once it is authenticated).
			ctx, task := trace.NewTask(c.Request().Context(), "request")
			defer task.End()
			c.SetRequest(c.Request().WithContext(ctx))
		}
		c.Response().Before(func() {
			if identityOf(c) != nil {
				c.Response().Header().Set(headerServerTiming, st.serverTiming(time.Since(start), queue))
			}
		})
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		req, res := c.Request(), c.Response()
		s.metrics.requests.WithLabelValues(routeLabel(c), statusClass(res.Status)).Inc()
		s.metrics.duration.WithLabelValues(routeLabel(c)).Observe(time.Since(start).Seconds())
		level := logLevel(req.URL.Path, res.Status)
		if !s.log.Enabled(req.Context(), level) {
			return nil // the record's attributes cost more than the rest of a refusal
		}
		attrs := []slog.Attr{
			slog.String("method", req.Method),
			slog.String("path", req.URL.Path),
			slog.Int("status", res.Status),
			slog.Int64("bytes_in", max(req.ContentLength, 0)),
			slog.Int64("bytes_out", res.Size),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.String("ip", c.RealIP()),
			slog.String("user_agent", req.UserAgent()),
			slog.String("request_id", requestIDOf(c)),
		}
		attrs = st.attrs(attrs)
		if queue != noQueue {
			attrs = append(attrs, slog.Duration("t_queue", queue))
		}
		if id := identityOf(c); id != nil {
			attrs = append(attrs, slog.String("tenant", id.Tenant), slog.String("credential", id.CredentialKey[:16]))
			if id.Account != id.Tenant {
				attrs = append(attrs, slog.String("account", id.Account))
			}
		}
		if ae, ok := c.Get(refusalKey).(*apiError); ok {
			attrs = append(attrs, slog.String("error", ae.Code), slog.String("message", ae.Message))
			if l, ok := ae.Fields["limit"]; ok {
				attrs = append(attrs, slog.Any("limit", l))
			}
		}
		s.log.LogAttrs(req.Context(), level, "request", attrs...)
		return nil
	}
}

// logLevel: paths machines ask often (probes, scrapers, hf_xet's
// telemetry) log their answers at debug level and their refusals at info.
func logLevel(path string, status int) slog.Level {
	switch path {
	case "/healthz", "/readyz", "/metrics", "/v1/telemetry":
		if status < 400 {
			return slog.LevelDebug
		}
	}
	return slog.LevelInfo
}

func routeLabel(c echo.Context) string {
	if p := c.Path(); p != "" {
		return p
	}
	return "unmatched"
}

func statusClass(code int) string {
	switch {
	case code >= 500:
		return "5xx"
	case code >= 400:
		return "4xx"
	case code >= 300:
		return "3xx"
	default:
		return "2xx"
	}
}
