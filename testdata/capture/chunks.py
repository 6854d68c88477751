#!/usr/bin/env python3
"""Capture hf_xet's chunk boundaries, chunk hashes and file hashes.

For each input below (generated from a seed by a rule the Go test repeats:
see gen()), this uploads the file alone with hf_xet.upload_files to the
stub CAS of capture.py, reads the chunk sequence back from the shard the
client sent (the file's terms, resolved through the CAS blocks to chunk
sizes and hashes) and asks hf_xet.hash_files for the file hash. The result
is testdata/vectors/chunks.json:

    {"client": "hf_xet 1.8.0",
     "cases": [{"name", "kind", "seed", "size", "file_hash",
                "chunks": [[size, hash], ...]}]}

Usage (from the repository root):

    .venv/bin/python testdata/capture/chunks.py

Each upload runs in a fresh subprocess with its own empty HF_XET_CACHE, so
no local shard cache dedups one case against another.
"""

import hashlib
import http.server
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import capture  # noqa: E402  (the stub CAS)

KIB, MIB = 1024, 1024 * 1024

# name, kind, seed, size
CASES = [
    ("empty", "random", "a", 0),
    ("one_byte", "random", "b", 1),
    ("below_min", "random", "c", 8 * KIB - 1),
    ("at_min", "random", "d", 8 * KIB),
    ("above_min", "random", "e", 8 * KIB + 1),
    ("random_100k", "random", "f", 100 * KIB),
    ("random_3m", "random", "g", 3 * MIB + 17),
    ("random_9m", "random", "h", 9 * MIB),
    ("zeros_1m", "zeros", "", MIB + 5),
    ("low_entropy_2m", "lowentropy", "i", 2 * MIB),
    ("text_2m", "text", "j", 2 * MIB + 3),
]


def gen(kind, seed, size):
    """The input bytes; the Go test (xet/chunker_test.go) has the same rule.

    random:     SHA-256(seed + ":" + decimal block index) blocks, concatenated
    zeros:      zero bytes
    lowentropy: each random byte b becomes ord("a") + b % 4
    text:       lines "%08d the quick brown fox\\n" for 0, 1, 2, ...
    """
    if kind == "zeros":
        return bytes(size)
    if kind == "text":
        out, i, n = [], 0, 0
        while n < size:
            line = b"%08d the quick brown fox\n" % i
            out.append(line)
            n += len(line)
            i += 1
        return b"".join(out)[:size]
    blocks, n, i = [], 0, 0
    while n < size:
        blocks.append(hashlib.sha256(("%s:%d" % (seed, i)).encode()).digest())
        n += 32
        i += 1
    data = b"".join(blocks)[:size]
    if kind == "lowentropy":
        data = bytes(ord("a") + b % 4 for b in data)
    return data


def hash_str(raw):
    """The docs/protocol.md §2 string form: each 8-byte group as a little-endian u64 in hex."""
    return "".join("%016x" % struct.unpack_from("<Q", raw, 8 * i)[0] for i in range(4))


def shard_chunks(body):
    """The chunk sequence of the one file of an upload shard (hf_xet >= 1.3:
    header, file section, bookend, CAS section, bookend)."""
    off = 48
    files = []
    while body[off:off + 32] != b"\xff" * 32:
        flags, n = struct.unpack_from("<II", body, off + 32)
        off += 48
        terms = []
        for _ in range(n):
            xorb = body[off:off + 32]
            _, _, start, end = struct.unpack_from("<IIII", body, off + 32)
            terms.append((xorb, start, end))
            off += 48
        if flags & (1 << 31):
            off += 48 * n
        if flags & (1 << 30):
            off += 48
        files.append(terms)
    off += 48
    xorbs = {}
    while body[off:off + 32] != b"\xff" * 32:
        xorb = body[off:off + 32]
        _, n = struct.unpack_from("<II", body, off + 32)
        off += 48
        chunks = []
        for _ in range(n):
            h = body[off:off + 32]
            _, size = struct.unpack_from("<II", body, off + 32)
            chunks.append([size, hash_str(h)])
            off += 48
        xorbs[xorb] = chunks
        off += 0
    assert len(files) == 1, files
    out = []
    for xorb, start, end in files[0]:
        out.extend(xorbs[xorb][start:end])
    return out


def run_one(name, kind, seed, size, out_path):
    import hf_xet

    with tempfile.TemporaryDirectory(prefix="xetchunks-") as tmp:
        rec = capture.Recorder(tmp)
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), capture.make_handler(rec))
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        endpoint = "http://127.0.0.1:%d" % srv.server_address[1]
        path = os.path.join(tmp, name + ".bin")
        data = gen(kind, seed, size)
        with open(path, "wb") as f:
            f.write(data)
        [info] = hf_xet.upload_files([path], endpoint, ("tok", 4102444800), None, None, None)
        [hashed] = hf_xet.hash_files([path])
        srv.shutdown()
        chunks = []
        shard_dir = os.path.join(tmp, "shards")
        if size > 0:
            with open(os.path.join(shard_dir, "0.shard"), "rb") as f:
                chunks = shard_chunks(f.read())
        hashed_hash = hashed.hash if hasattr(hashed, "hash") else hashed
        assert info.hash == hashed_hash, (info.hash, hashed_hash)
        assert sum(c[0] for c in chunks) == size
        with open(out_path, "w") as f:
            json.dump({"name": name, "kind": kind, "seed": seed, "size": size,
                       "sha256": hashlib.sha256(data).hexdigest(),
                       "file_hash": info.hash, "chunks": chunks}, f)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--run":
        name, kind, seed, size = json.loads(sys.argv[2])[:4]
        run_one(name, kind, seed, size, json.loads(sys.argv[2])[4])
        return
    cases = []
    with tempfile.TemporaryDirectory(prefix="xetchunks-cache-") as cache:
        for i, case in enumerate(CASES):
            env = dict(os.environ)
            env["HF_XET_CACHE"] = os.path.join(cache, "xet%d" % i)
            env["HF_HOME"] = os.path.join(cache, "hf")
            env["HF_XET_TELEMETRY_ENABLED"] = "false"
            out = os.path.join(cache, "case%d.json" % i)
            subprocess.run([sys.executable, os.path.abspath(__file__), "--run", json.dumps(list(case) + [out])],
                           env=env, check=True, timeout=300)
            with open(out) as f:
                cases.append(json.load(f))
            print("captured", case[0], len(cases[-1]["chunks"]), "chunks")
    os.makedirs(os.path.join(TESTDATA, "vectors"), exist_ok=True)
    with open(os.path.join(TESTDATA, "vectors", "chunks.json"), "w") as f:
        json.dump({"client": "hf_xet " + capture._hf_xet_version(), "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
