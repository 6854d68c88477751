// Command manyterms uploads, through the CAS API, a file made of very many
// one-chunk terms (alternating between two xorbs), so that a whole-file
// reconstruction answer is larger than a credential's memory share while
// any ranged window of it is not. compat/test_budget.py uses it to check
// that hf_xet, which asks in ranges, still downloads the file.
//
//	go run ./compat/tools/manyterms -server URL -token TOKEN [-terms 100000]
//
// It prints {"hash", "size", "sha256", "terms"} as JSON.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"openxet/xet"
)

func main() {
	server := flag.String("server", "", "openxet base URL")
	token := flag.String("token", "", "write credential")
	terms := flag.Int("terms", 100_000, "number of one-chunk terms (split over two xorbs)")
	flag.Parse()
	if err := run(*server, *token, *terms); err != nil {
		fmt.Fprintln(os.Stderr, "manyterms:", err)
		os.Exit(1)
	}
}

func post(url, token string, body []byte) error {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return fmt.Errorf("POST %s: %d %s", url, res.StatusCode, b)
	}
	return nil
}

func run(server, token string, terms int) error {
	per := terms / 2
	var infos [2]xet.XorbInfo
	var chunks [2][][]byte
	for x := range chunks {
		chunks[x] = make([][]byte, per)
		for i := range chunks[x] {
			chunks[x][i] = []byte(fmt.Sprintf("xorb %d chunk %07d of a many-terms file\n", x, i))
		}
		body, info := xet.BuildXorb(chunks[x], false)
		if err := post(server+"/v1/xorbs/default/"+info.Hash.String(), token, body); err != nil {
			return err
		}
		infos[x] = info
	}
	var f xet.FileInfo
	var leaves []xet.Leaf
	sum := sha256.New()
	var size int
	for i := 0; i < per; i++ {
		for x := range infos {
			c := infos[x].Chunks[i]
			f.Terms = append(f.Terms, xet.Term{Xorb: infos[x].Hash, UnpackedBytes: c.Size, ChunkStart: uint32(i), ChunkEnd: uint32(i + 1)})
			f.Verification = append(f.Verification, xet.RangeHash([]xet.Hash{c.Hash}))
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
			sum.Write(chunks[x][i])
			size += len(chunks[x][i])
		}
	}
	f.Hash, f.Flags = xet.FileHash(leaves), xet.FileFlagVerification
	sh := &xet.Shard{Files: []xet.FileInfo{f}}
	if err := post(server+"/v1/shards", token, sh.MarshalUpload()); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"hash": f.Hash.String(), "size": size, "sha256": hex.EncodeToString(sum.Sum(nil)), "terms": len(f.Terms)})
}
