package store

import "strings"

// The collectable objects of the bucket, by kind: where they live, where
// their owner records live and what of the index goes with them. What a
// pass keeps is package store/keep's rule.

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
