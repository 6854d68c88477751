package keep

import "time"

// Package keep is the collector's keep rule (docs/design.md §9): what a
// collection pass keeps, as pure functions of what the pass knows of one
// owner or object and of one time base, the pass's start T0 (store's
// startTx) and the grace period. A pass plans with them from its mark
// (store/gcplan.go) and applies the same rule again, to what it reads in
// each batch's transaction, before it acts (store/gcexec.go).
//
// Times are unix seconds. A touch is ordered through the index (touched >
// T0 means after the pass started, whatever the clocks); a write, a
// release or the index's epoch only start a grace period.
//
// It imports nothing of openxet and knows nothing of the index or the
// bucket: store gathers the facts and acts on the verdicts.

// OwnerGrace caps how long a xorb owner no retained file of its tenant
// needs is kept after it was created: an upload abandoned before its shard
// stops counting against the quota after a day even when gc.grace is
// longer. (An upload that registers its shard later adopts the xorb again:
// nothing is lost, only charged again.) Owners of xorbs the tenant's
// deleted files referenced are released at the next pass.
const OwnerGrace = 24 * time.Hour

// Time is a pass's time base.
type Time struct {
	T0    int64 // the pass's start (store's startTx)
	Grace int64 // the grace period, in seconds
}

// NewTime is the time base of a pass that started at t0 with grace.
func NewTime(t0 int64, grace time.Duration) Time {
	return Time{T0: t0, Grace: int64(grace / time.Second)}
}

// GraceStart is the earliest time whose grace period is not over at T0:
// anything touched, written or released after it is within its grace.
func (pt Time) GraceStart() int64 { return pt.T0 - pt.Grace }

// OwnerGraceStart is GraceStart for a xorb owner, whose grace is capped at
// OwnerGrace.
func (pt Time) OwnerGraceStart() int64 {
	return pt.T0 - min(pt.Grace, int64(OwnerGrace/time.Second))
}

// Verdict is what a rule says of an owner or an object.
type Verdict int

const (
	// Act: release the owner, or delete the object.
	Act Verdict = iota
	// Needed: something retained needs it (a file, a revision, an
	// owner).
	Needed
	// Grace: its grace period is not over (written, released or
	// registered lately, or the index is younger than the grace).
	Grace
	// Touched: touched too lately: for an owner, after T0; for an
	// object, within the grace period.
	Touched
	// Doomed: an object a pass is deleting already.
	Doomed
)

// OwnerFacts is what decides a xorb owner's release.
type OwnerFacts struct {
	Needed  bool  // a retained file of the tenant references the xorb
	Dropped bool  // a file the tenant released referenced it
	Created int64 // when the owner was created
	Touched int64 // the xorb's last touch
}

// Owner: a xorb owner is released when no retained file of its tenant
// references the xorb, it was not touched since T0, and it is older than
// its grace or a file its tenant released referenced the xorb (deleting a
// repo gives the quota back at the next pass).
func (pt Time) Owner(f OwnerFacts) Verdict {
	switch {
	case f.Needed:
		return Needed
	case f.Created >= pt.OwnerGraceStart() && !f.Dropped:
		return Grace
	case f.Touched > pt.T0:
		return Touched
	}
	return Act
}

// ShardOwnerFacts is what decides a (shard, tenant) owner's release.
type ShardOwnerFacts struct {
	Touched  int64 // the shard's last touch (registration)
	Epoch    int64 // when the index first served
	HasFile  bool  // a retained file of the tenant was registered through the shard
	OwnsXorb bool  // the tenant owns a xorb the shard names
}

// ShardOwner: a shard owner is released when it was not registered again
// within the grace (nor the index made within it), no retained file of the
// tenant came through the shard, and the tenant owns none of its xorbs.
func (pt Time) ShardOwner(f ShardOwnerFacts) Verdict {
	switch {
	case f.Touched > pt.GraceStart() || f.Epoch > pt.GraceStart():
		return Grace
	case f.HasFile || f.OwnsXorb:
		return Needed
	}
	return Act
}

// ObjectFacts is what decides an object's deletion.
type ObjectFacts struct {
	Doomed  bool  // a pass condemned it already
	Needed  bool  // owned, referenced by a retained file, or named by a revision
	Touched int64 // its last touch
	Settled int64 // the latest of its write, its last release and the index's epoch
}

// Object: an object (xorb, shard, blob) is deleted when nobody owns or
// references it, nothing touched it within the grace period (the race
// guard), and its write, last release and the index's epoch are older
// than the grace (they only start it).
func (pt Time) Object(f ObjectFacts) Verdict {
	switch {
	case f.Doomed:
		return Doomed
	case f.Needed:
		return Needed
	case f.Touched > pt.GraceStart():
		return Touched
	case f.Settled > pt.GraceStart():
		return Grace
	}
	return Act
}
