package server

import (
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// stage is a part of a request's time that the request log reports on its
// own, so that an operator can tell where a slow request waited.
type stage uint8

const (
	stageAuth     stage = iota // token check and rate limits (the guard)
	stageTurn                  // waiting for a turn (see turns.go)
	stageWork                  // waiting for a work slot (see work.go)
	stageMemory                // waiting for memory from the budget
	stageBody                  // reading the request body
	stageValidate              // parsing and hashing a xorb or shard
	stageIndex                 // index reads
	stageWrite                 // storing: object write and index transaction
	stageOpen                  // opening a byte range of a stored object
	numStages
)

// stageNames are the request log's attribute names, in stage order.
var stageNames = [numStages]string{"t_auth", "t_turn_wait", "t_work_wait", "t_memory_wait", "t_body", "t_validate", "t_index", "t_write", "t_open"}

// stageTimes adds up the time one request spent in each stage. A request
// is served by one goroutine, so it needs no lock.
type stageTimes [numStages]time.Duration

const stagesKey = "openxet.stages"

// stagesOf returns the request's stage times; nil (which every method
// accepts) when the request log did not set them up.
func stagesOf(c echo.Context) *stageTimes {
	st, _ := c.Get(stagesKey).(*stageTimes)
	return st
}

// since adds the time from start to now to stage s.
func (st *stageTimes) since(s stage, start time.Time) {
	if st != nil {
		st[s] += time.Since(start)
	}
}

// attrs appends one attribute per stage that took any time.
func (st *stageTimes) attrs(a []slog.Attr) []slog.Attr {
	if st == nil {
		return a
	}
	for i, d := range st {
		if d > 0 {
			a = append(a, slog.Duration(stageNames[i], d))
		}
	}
	return a
}

// headerServerTiming is the W3C Server-Timing response header.
const headerServerTiming = "Server-Timing"

// headerRequestStart is the request header in which a proxy (nginx's
// "t=${msec}", Apache's "t=%t") or a client says when it sent the
// request.
const headerRequestStart = "X-Request-Start"

// noQueue is queueTime's answer for a request that did not say when it was
// sent, or said something it cannot have meant.
const noQueue = time.Duration(-1)

// maxQueue bounds a believable queue time: an X-Request-Start further back
// than this is someone else's clock or a made-up value.
const maxQueue = time.Hour

// queueTime is how long the request waited between its sender and its
// arrival in the server, from its X-Request-Start value v: the time it was
// sent as "t=" (optional) and a Unix time in seconds with an optional
// fraction (nginx), milliseconds, microseconds (Apache) or nanoseconds,
// told apart by size. It is noQueue when v is missing or malformed, in the
// future (the sender's clock is ahead of ours) or more than maxQueue ago.
// Only the request log and the Server-Timing header use it: the sender's
// claim changes nothing else.
func queueTime(v string, arrival time.Time) time.Duration {
	sent, ok := requestStart(v)
	if !ok {
		return noQueue
	}
	q := arrival.Sub(sent)
	if q < 0 || q > maxQueue {
		return noQueue
	}
	return q
}

// requestStart parses an X-Request-Start value (queueTime). Whole numbers
// are read exactly; a fraction counts to the nanosecond.
func requestStart(v string) (time.Time, bool) {
	whole, frac, hasFrac := strings.Cut(strings.TrimPrefix(v, "t="), ".")
	if !allDigits(whole) || (hasFrac && !allDigits(frac)) {
		return time.Time{}, false
	}
	n, err := strconv.ParseUint(whole, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}, false
	}
	// Unix seconds stay under 1e11 until the year 5138, so each unit has
	// a range of its own.
	var unit uint64 // nanoseconds
	switch {
	case n < 1e11:
		unit = 1e9
	case n < 1e14:
		unit = 1e6
	case n < 1e17:
		unit = 1e3
	default:
		unit = 1
	}
	perSecond := 1e9 / unit
	// The fraction's first nine digits, in billionths of the unit.
	frac = (frac + "000000000")[:9]
	billionths, _ := strconv.ParseUint(frac, 10, 64)
	ns := (n%perSecond)*unit + billionths*unit/1e9
	return time.Unix(int64(n/perSecond), int64(ns)), true
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// serverTiming is the Server-Timing value of a request that has run for
// total so far: "total;dur=3.214", then the time it waited before it
// arrived when its sender said (queue not noQueue: "queue;dur=1.2"), then
// each stage that took any time under its log name without the "t_" prefix
// ("work_wait;dur=0.5"), durations in milliseconds as the header's dur
// parameter wants them.
func (st *stageTimes) serverTiming(total, queue time.Duration) string {
	var buf [256]byte // every stage at a minute and an hour's queue and total fit: one allocation, the string
	b := buf[:0]
	add := func(name string, d time.Duration) {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, name...)
		b = append(b, ";dur="...)
		b = strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', -1, 64)
	}
	add("total", total)
	if queue != noQueue {
		add("queue", queue)
	}
	if st != nil {
		for i, d := range st {
			if d > 0 {
				add(strings.TrimPrefix(stageNames[i], "t_"), d)
			}
		}
	}
	return string(b)
}
