package load

import (
	"fmt"
	"sync"
	"time"

	"openxet/load/report"
)

// Request classes: who sent a request.
const (
	classHonest = report.ClassHonest
	classAbuser = report.ClassAbuser
)

// Routes of honest requests, and of the abuser's attacks.
const (
	routeXorb           = "xorb"
	routeShard          = "shard"
	routeReconstruction = "reconstruction"
	routeFetch          = "fetch"
	routeDedup          = "dedup"

	routeFlood = "flood"
	routeHold  = "hold"
	routeQuota = "quota_upload"
	routeSpray = "bad_token"
)

// honestRoutes is the order routes are shown in.
var honestRoutes = report.HonestRoutes // routeXorb, routeShard, routeReconstruction, routeFetch, routeDedup (TestHonestRoutes)
var abuserRoutes = []string{routeFlood, routeHold, routeQuota, routeSpray}

// reqRecord is one HTTP request as the load saw it.
type reqRecord struct {
	start, dur time.Duration // since the run began
	bytes      int64         // payload bytes sent or received
	tenant     int32         // honest tenant index; -1 for the abuser
	node       int16         // index of the node it went to (Config.Servers); -1: none of them
	status     int16         // 0: no answer (transport error)
	class      string
	route      string
	code       string // error code of a refusal, "rate_limited/credential" etc.
	// timing is the answer's Server-Timing header: the server's own time
	// and its stages (parseServerTiming); "" when it sent none.
	timing string
}

// opRecord is one honest operation (an upload, a download or a dedup
// query), which may take several requests.
type opRecord struct {
	start, dur time.Duration
	bytes      int64
	tenant     int32
	kind       string
	ok         bool
}

// Failure kinds: each one makes a run fail.
const (
	failRefused    = "honest request refused"
	failStatus     = "honest request answered with an unexpected status"
	failTransport  = "honest request failed in transport"
	failMismatch   = "downloaded bytes differ from the uploaded ones"
	failProtocol   = "answer breaks the protocol"
	failUnfinished = "operation unfinished after the drain timeout"
	failEnvelope   = "a limit let more through than it allows"
	failMemory     = "server memory over budget plus overhead"
	failCheck      = "a check could not be made"
	failRemote     = "a fetch URL points away from loopback"
	failAccounting = "a tenant's stored bytes differ from what it uploaded"
	failOverride   = "a limits override did not reach a node in time"
	failInFlight   = "a node refused in-flight requests below its cap"
)

// maxFailureMessages bounds the failure messages kept (all are counted).
const maxFailureMessages = 50

// recorder collects requests, operations and failures from every worker.
// It is safe for concurrent use.
type recorder struct {
	t0 time.Time

	mu       sync.Mutex
	reqs     []reqRecord
	ops      []opRecord
	failures map[string]int
	messages []string

	// wake gets a token (never blocking) whenever something is recorded,
	// for a caller waiting on what the run has done (Config.holdPhase).
	wake chan struct{}
}

func newRecorder(t0 time.Time) *recorder {
	return &recorder{t0: t0, failures: map[string]int{}, wake: make(chan struct{}, 1)}
}

// poke wakes whoever waits on r.wake.
func (r *recorder) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *recorder) since(t time.Time) time.Duration { return t.Sub(r.t0) }

func (r *recorder) request(rec reqRecord) {
	r.mu.Lock()
	r.reqs = append(r.reqs, rec)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) op(rec opRecord) {
	r.mu.Lock()
	r.ops = append(r.ops, rec)
	r.mu.Unlock()
	r.poke()
}

// fail records a correctness failure.
func (r *recorder) fail(kind, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.failures[kind]++
	if len(r.messages) < maxFailureMessages {
		r.messages = append(r.messages, kind+": "+msg)
	}
	r.mu.Unlock()
	r.poke()
}

// snapshot returns copies of everything recorded so far.
func (r *recorder) snapshot() ([]reqRecord, []opRecord, map[string]int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := make(map[string]int, len(r.failures))
	for k, v := range r.failures {
		f[k] = v
	}
	return append([]reqRecord(nil), r.reqs...), append([]opRecord(nil), r.ops...), f, append([]string(nil), r.messages...)
}
