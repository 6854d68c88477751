package limits

// tatTable is an open-addressing hash table (linear probing, backward-shift
// deletion) from a key hash to an int64: a TAT in a Table, a count of
// requests in an InFlight. Entries are 16 bytes inline, so a
// lookup usually touches one cache line, where a Go map touches a control
// word and then a slot. Hash 0 marks an empty entry; callers map a zero
// hash to 1. It grows by doubling to keep the load at most 3/4. Not safe
// for concurrent use: a shard's mutex guards it.
type tatTable struct {
	entries []tatEntry
	shift   uint // 64 - log2(len(entries))
	n       int
}

type tatEntry struct {
	hash uint64
	tat  int64
}

const minTatTable = 16

func (t *tatTable) home(h uint64) int {
	// Fibonacci hashing: the high bits of h·φ pick the home slot, so the
	// low bits that picked the shard do not matter here.
	return int((h * 0x9E3779B97F4A7C15) >> t.shift)
}

// find returns the index of h, or -1. Hash 0 is never found: it marks an
// empty entry, and a probe for it would return one (an Admission of a
// refused request names hash 0, and its Done must change nothing).
func (t *tatTable) find(h uint64) int {
	if t.n == 0 || h == 0 {
		return -1
	}
	mask := len(t.entries) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		switch t.entries[i].hash {
		case h:
			return i
		case 0:
			return -1
		}
	}
}

// insert adds h, which must be absent.
func (t *tatTable) insert(h uint64, tat int64) {
	if 4*(t.n+1) > 3*len(t.entries) {
		t.grow()
	}
	mask := len(t.entries) - 1
	i := t.home(h)
	for t.entries[i].hash != 0 {
		i = (i + 1) & mask
	}
	t.entries[i] = tatEntry{hash: h, tat: tat}
	t.n++
}

// removeAt deletes the entry at index i, shifting later entries of the
// same probe run back so that no tombstones are needed.
func (t *tatTable) removeAt(i int) {
	mask := len(t.entries) - 1
	for j := (i + 1) & mask; t.entries[j].hash != 0; j = (j + 1) & mask {
		k := t.home(t.entries[j].hash)
		// The entry at j may move to i only if its home is not in (i, j].
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		t.entries[i] = t.entries[j]
		i = j
	}
	t.entries[i] = tatEntry{}
	t.n--
}

func (t *tatTable) grow() {
	size := max(2*len(t.entries), minTatTable)
	old := t.entries
	t.entries = make([]tatEntry, size)
	t.shift = uint(64 - log2(size))
	mask := size - 1
	for _, e := range old {
		if e.hash == 0 {
			continue
		}
		i := t.home(e.hash)
		for t.entries[i].hash != 0 {
			i = (i + 1) & mask
		}
		t.entries[i] = e
	}
}

func log2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}
