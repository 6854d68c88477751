package gitserve

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"openxet/testgit"
)

// rawObject is one entry of a hand-made pack.
type rawObject struct {
	typ      byte   // 1 commit, 2 tree, 3 blob, 7 REF delta
	size     int64  // declared size
	base     []byte // a REF delta's base id (20 bytes)
	inflated []byte // what the zlib stream holds
}

// pack makes a pack of objs, with its trailer.
func pack(objs ...rawObject) []byte {
	var b bytes.Buffer
	b.WriteString("PACK")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(objs)))
	for _, o := range objs {
		size := o.size
		c := o.typ<<4 | byte(size&0x0f)
		size >>= 4
		for size > 0 {
			b.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		b.WriteByte(c)
		b.Write(o.base)
		zw := zlib.NewWriter(&b)
		zw.Write(o.inflated)
		zw.Close()
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

func blobObject(content []byte) rawObject {
	return rawObject{typ: 3, size: int64(len(content)), inflated: content}
}

// delta is a REF delta on base that says it makes target bytes.
func delta(base []byte, baseSize, target uint64) rawObject {
	var d []byte
	d = binary.AppendUvarint(d, baseSize)
	d = binary.AppendUvarint(d, target)
	d = append(d, 0x80|0x10, 0xff) // copy 255 bytes from offset 0 (never applied here)
	return rawObject{typ: 7, size: int64(len(d)), base: base, inflated: d}
}

var testLimits = Limits{Objects: 10, Object: 1 << 20, Total: 2 << 20, Commits: 10, PackBytes: 4 << 20, HistoryReads: 10}

// TestCheckPack: a pack git makes passes; a pack over a limit (too many
// objects, one too large, a delta that makes too large an object, all
// too large together) is a Refusal that says which; a pack that is no
// pack, is cut short, or whose object inflates past its declared size is
// an error; nothing is inflated past a limit to find out.
func TestCheckPack(t *testing.T) {
	base := bytes.Repeat([]byte{1}, 20)
	var refusals []string
	for name, c := range map[string]struct {
		pack    []byte
		refusal string // "" for an error that is not a Refusal
	}{
		"too many objects":      {pack(blobObject([]byte("a")), blobObject([]byte("b")), blobObject([]byte("c")), blobObject(nil), blobObject(nil), blobObject(nil), blobObject(nil), blobObject(nil), blobObject(nil), blobObject(nil), blobObject(nil)), "objects, over the 10"},
		"object too large":      {pack(rawObject{typ: 3, size: 2 << 20, inflated: make([]byte, 10)}), "an object of 2097152 bytes"},
		"delta bomb":            {pack(blobObject([]byte("x")), delta(base, 1, 1<<40)), "makes an object of 1099511627776 bytes"},
		"too large together":    {pack(blobObject(make([]byte, 900<<10)), blobObject(make([]byte, 900<<10)), blobObject(make([]byte, 900<<10))), "come to over 2097152 bytes"},
		"zlib bomb":             {pack(rawObject{typ: 3, size: 10, inflated: make([]byte, 1<<20)}), ""},
		"not a pack":            {[]byte("PACX\x00\x00\x00\x02\x00\x00\x00\x00"), ""},
		"truncated":             {pack(blobObject(bytes.Repeat([]byte("abc"), 1000)))[:40], ""},
		"bad type":              {pack(rawObject{typ: 5, size: 1, inflated: []byte("a")}), ""},
		"size varint overflows": {append([]byte("PACK\x00\x00\x00\x02\x00\x00\x00\x01"), bytes.Repeat([]byte{0xff}, 12)...), ""},
	} {
		err := checkPack(c.pack, testLimits)
		var ref *Refusal
		switch {
		case err == nil:
			t.Errorf("%s: passed", name)
		case c.refusal != "" && (!errors.As(err, &ref) || !strings.Contains(err.Error(), c.refusal)):
			t.Errorf("%s: %v, want a refusal saying %q", name, err, c.refusal)
		case c.refusal == "" && errors.As(err, &ref):
			t.Errorf("%s: a refusal (%v), want an error of the pack", name, err)
		}
		if ref != nil {
			refusals = append(refusals, ref.Reason)
		}
	}
	if len(refusals) != 4 {
		t.Errorf("refusals %q", refusals)
	}
	testgit.Need(t, false)
	dir := t.TempDir()
	testgit.Must(t, dir, nil, "init", "-q", "r")
	repo := dir + "/r"
	os.WriteFile(repo+"/a.txt", bytes.Repeat([]byte("line\n"), 1000), 0o644)
	os.WriteFile(repo+"/b.txt", append(bytes.Repeat([]byte("line\n"), 1000), "more\n"...), 0o644)
	testgit.Must(t, repo, testgit.Env(dir), "add", "-A")
	testgit.Must(t, repo, testgit.Env(dir), "commit", "-q", "-m", "x")
	cmd := exec.Command("git", "pack-objects", "--stdout", "--revs")
	cmd.Dir, cmd.Env, cmd.Stdin = repo, testgit.Env(dir), strings.NewReader("HEAD\n")
	gitPack, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPack(gitPack, testLimits); err != nil {
		t.Errorf("git's own pack: %v", err)
	}
}

func FuzzCheckPack(f *testing.F) {
	f.Add(pack(blobObject([]byte("hello"))))
	f.Add(pack(blobObject([]byte("x")), delta(bytes.Repeat([]byte{1}, 20), 1, 5)))
	f.Add(pack(rawObject{typ: 1, size: 3, inflated: []byte("abc")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Bounded whatever b is: an error or a refusal, never a panic,
		// never more than the limits inflated.
		checkPack(b, testLimits)
	})
}
