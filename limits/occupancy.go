package limits

import "sync/atomic"

// occupancyBits sizes an occupancy: 2^16 counters. Keys share a counter
// when their hashes' top bits agree: of 100 keys busy at once, about one
// in 660 shares its counter with another.
const occupancyBits = 16

// occupancy counts requests in progress per key, approximately: each key
// hashes to one of 65,536 counters, and keys that share a counter share
// its count. It has no cap and no lock (an atomic add to count a request
// in, another to count it out), so it costs a few nanoseconds where an
// exact count (InFlight) costs two lock round trips and a table insert.
// It serves decisions in which a count that is now and then too high is
// harmless, such as which requests take turns; never a refusal. The zero
// value is ready; it is safe for concurrent use.
type occupancy struct {
	slots [1 << occupancyBits]atomic.Int32
}

// slot is the counter of the key whose hash is h.
func (o *occupancy) slot(h uint64) *atomic.Int32 {
	return &o.slots[index(h)]
}

// index is the number of h's counter: the top bits of h times the golden
// ratio, as tatTable finds a home, so that every bit of h counts.
func index(h uint64) uint64 {
	return (h * 0x9E3779B97F4A7C15) >> (64 - occupancyBits)
}

// enter counts one more request of the key whose hash is h and returns
// its counter's value, this request included.
func (o *occupancy) enter(h uint64) int {
	return int(o.slot(h).Add(1))
}

// leave ends one request that enter counted for h.
func (o *occupancy) leave(h uint64) {
	o.slot(h).Add(-1)
}

// count is the value of h's counter.
func (o *occupancy) count(h uint64) int {
	return int(o.slot(h).Load())
}

// total is the sum of every counter: all requests in progress.
func (o *occupancy) total() int {
	n := 0
	for i := range o.slots {
		n += int(o.slots[i].Load())
	}
	return n
}
