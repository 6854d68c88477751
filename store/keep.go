package store

import (
	"strings"
	"time"
)

// What a collection pass keeps (docs/design.md §9): the rules, as pure
// functions of what the pass knows of one owner or object and of one time
// base, the pass's start T0 (startTx) and the grace period. A pass plans
// with them from its mark (gcplan.go) and applies the same rule again, to
// what it reads in each batch's transaction, before it acts (gc.go).
//
// Times are unix seconds. A touch is ordered through the index (touched >
// T0 means after the pass started, whatever the clocks); a write, a
// release or the index's epoch only start a grace period.

// passTime is a pass's time base.
type passTime struct {
	t0    int64 // the pass's start (startTx)
	grace int64 // the grace period, in seconds
}

func newPassTime(t0 int64, grace time.Duration) passTime {
	return passTime{t0: t0, grace: int64(grace / time.Second)}
}

// graceStart is the earliest time whose grace period is not over at T0:
// anything touched, written or released after it is within its grace.
func (pt passTime) graceStart() int64 { return pt.t0 - pt.grace }

// ownerGraceStart is graceStart for a xorb owner, whose grace is capped at
// OwnerGrace.
func (pt passTime) ownerGraceStart() int64 {
	return pt.t0 - min(pt.grace, int64(OwnerGrace/time.Second))
}

// verdict is what a rule says of an owner or an object.
type verdict int

const (
	// act: release the owner, or delete the object.
	act verdict = iota
	// keepNeeded: something retained needs it (a file, a revision, an
	// owner).
	keepNeeded
	// keepGrace: its grace period is not over (written, released or
	// registered lately, or the index is younger than the grace).
	keepGrace
	// keepTouched: touched too lately: for an owner, after T0; for an
	// object, within the grace period.
	keepTouched
	// keepDoomed: an object a pass is deleting already.
	keepDoomed
)

// ownerFacts is what decides a xorb owner's release.
type ownerFacts struct {
	needed  bool  // a retained file of the tenant references the xorb
	dropped bool  // a file the tenant released referenced it
	created int64 // when the owner was created
	touched int64 // the xorb's last touch
}

// owner: a xorb owner is released when no retained file of its tenant
// references the xorb, it was not touched since T0, and it is older than
// its grace or a file its tenant released referenced the xorb (deleting a
// repo gives the quota back at the next pass).
func (pt passTime) owner(f ownerFacts) verdict {
	switch {
	case f.needed:
		return keepNeeded
	case f.created >= pt.ownerGraceStart() && !f.dropped:
		return keepGrace
	case f.touched > pt.t0:
		return keepTouched
	}
	return act
}

// shardOwnerFacts is what decides a (shard, tenant) owner's release.
type shardOwnerFacts struct {
	touched  int64 // the shard's last touch (registration)
	epoch    int64 // when the index first served
	hasFile  bool  // a retained file of the tenant was registered through the shard
	ownsXorb bool  // the tenant owns a xorb the shard names
}

// shardOwner: a shard owner is released when it was not registered again
// within the grace (nor the index made within it), no retained file of the
// tenant came through the shard, and the tenant owns none of its xorbs.
func (pt passTime) shardOwner(f shardOwnerFacts) verdict {
	switch {
	case f.touched > pt.graceStart() || f.epoch > pt.graceStart():
		return keepGrace
	case f.hasFile || f.ownsXorb:
		return keepNeeded
	}
	return act
}

// objectFacts is what decides an object's deletion.
type objectFacts struct {
	doomed  bool  // a pass condemned it already
	needed  bool  // owned, referenced by a retained file, or named by a revision
	touched int64 // its last touch
	settled int64 // the latest of its write, its last release and the index's epoch
}

// object: an object (xorb, shard, blob) is deleted when nobody owns or
// references it, nothing touched it within the grace period (the race
// guard), and its write, last release and the index's epoch are older
// than the grace (they only start it).
func (pt passTime) object(f objectFacts) verdict {
	switch {
	case f.doomed:
		return keepDoomed
	case f.needed:
		return keepNeeded
	case f.touched > pt.graceStart():
		return keepTouched
	case f.settled > pt.graceStart():
		return keepGrace
	}
	return act
}

// objectKind is what a collectable object of the bucket is.
type objectKind int

const (
	kindXorb objectKind = iota
	kindShard
	kindBlob
)

// objectKinds in the order a sweep lists them.
var objectKinds = [...]objectKind{kindXorb, kindShard, kindBlob}

const prefixBlobs = "blobs/"

// kindInfo is what differs between the kinds: where they live, where their
// owner records live, how the index knows of an owner, and what of the
// index goes with an object.
var kindInfo = [...]struct {
	name         string   // as progress stages name it
	prefix       string   // the objects' key prefix
	ownersPrefix string   // their owner records' prefix ("" for none)
	ownedQuery   string   // a row when the object has an owner ("" for none)
	forget       []string // the index rows of an object that go with it (argument: its name)
}{
	kindXorb: {"xorbs", prefixXorbs, prefixXorbOwners, `SELECT 1 FROM xorb_owners WHERE xorb = ? LIMIT 1`,
		// Dedup rows that offered it go; the chunks they were for are
		// recomputed from their tenants' shards (another xorb may hold
		// them), as reindex would build them.
		[]string{`INSERT INTO gc_dedup_gaps(tenant, chunk) SELECT tenant, chunk FROM dedup WHERE xorb = ? ON CONFLICT DO NOTHING`,
			`DELETE FROM dedup WHERE xorb = ?`, `DELETE FROM shard_xorbs WHERE xorb = ?`, `DELETE FROM gc_dropped WHERE xorb = ?`,
			`DELETE FROM xorbs WHERE hash = ?`}},
	kindShard: {"shards", prefixShards, prefixShardOwners, `SELECT 1 FROM shard_owners WHERE shard = ? LIMIT 1`,
		[]string{`DELETE FROM shards WHERE hash = ?`, `DELETE FROM shard_xorbs WHERE shard = ?`}},
	kindBlob: {"blobs", prefixBlobs, "", "", nil},
}

func (k objectKind) String() string         { return kindInfo[k].name }
func (k objectKind) prefix() string         { return kindInfo[k].prefix }
func (k objectKind) key(name string) string { return kindInfo[k].prefix + name }

// ownersPrefix is the prefix of the owner records of the object name ("" for
// a kind without owners).
func (k objectKind) ownersPrefix(name string) string {
	if kindInfo[k].ownersPrefix == "" {
		return ""
	}
	return kindInfo[k].ownersPrefix + name + "/"
}

// objectOf splits an object's key into its kind and name; false for a key
// that is not a collectable object's.
func objectOf(key string) (objectKind, string, bool) {
	for _, k := range objectKinds {
		if name, ok := strings.CutPrefix(key, k.prefix()); ok {
			return k, name, true
		}
	}
	return 0, "", false
}
