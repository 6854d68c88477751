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
var stageNames = [numStages]string{"t_auth", "t_work_wait", "t_memory_wait", "t_body", "t_validate", "t_index", "t_write", "t_open"}

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

// serverTiming is the Server-Timing value of a request that has run for
// total so far: "total;dur=3.214" then each stage that took any time under
// its log name without the "t_" prefix ("work_wait;dur=0.5"), durations in
// milliseconds as the header's dur parameter wants them.
func (st *stageTimes) serverTiming(total time.Duration) string {
	var buf [192]byte // every stage with a long duration fits: one allocation, the string
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
	if st != nil {
		for i, d := range st {
			if d > 0 {
				add(strings.TrimPrefix(stageNames[i], "t_"), d)
			}
		}
	}
	return string(b)
}
