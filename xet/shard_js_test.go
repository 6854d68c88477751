package xet

import (
	"encoding/binary"
	"testing"
	"time"
)

// TestEmptyLookupTablesAnywhere: @huggingface/hub uploads shards with a
// footer whose lookup-table offsets and counts are all zero; empty tables
// are valid wherever they claim to be.
func TestEmptyLookupTablesAnywhere(t *testing.T) {
	_, info := BuildXorb([][]byte{[]byte("hello, shard")}, false)
	body := BuildDedupShard([]CASInfo{CASInfoFromXorb(info)}, [32]byte{}, time.Unix(1, 0), time.Unix(2, 0))
	fo := len(body) - ShardFooterBytes
	for _, at := range []int{24, 32, 40, 48, 56, 64} { // offsets and counts of the three tables
		binary.LittleEndian.PutUint64(body[fo+at:], 0)
	}
	sh, err := ParseShard(body)
	if err != nil {
		t.Fatalf("shard with zeroed empty tables: %v", err)
	}
	if len(sh.Xorbs) != 1 || sh.Xorbs[0].Xorb != info.Hash {
		t.Fatalf("parsed %+v", sh)
	}
}
