#!/usr/bin/env python3
"""Capture the xorbs and shards that the stock hf_xet client uploads.

Runs a tiny stub CAS server on 127.0.0.1 and drives hf_xet.upload_files
against it for a few small, seeded inputs. Everything the client POSTs is
saved under testdata/<case>/:

    xorbs/<hash>        body of POST /v1/xorbs/default/<hash>
    shards/<n>.shard    body of POST /v1/shards (n counts from 0 in arrival order)
    files.json          every input: name, size, sha256, xet file hash
    requests.txt        method, path and status of every request, sorted

The stub answers {"was_inserted":true} and {"result":1}, 404 to /v2/* and
/v1/chunks/* (so the client falls back to v1 and finds no global dedup), and
404 to anything else (hf_xet 1.8.0 first tries POST /v1/xorb-grants/... and
falls back to POST /v1/xorbs/... on 404).

Usage (from the repository root, with hf_xet installed in the venv):

    .venv/bin/python testdata/capture/capture.py            # all cases
    .venv/bin/python testdata/capture/capture.py small      # one case

With --out NAME, one case is written to testdata/NAME/ instead: that is how
the captures of older clients were made, each from its own venv, e.g.

    python3 -m venv /tmp/hfx116 && /tmp/hfx116/bin/pip install hf_xet==1.1.6
    /tmp/hfx116/bin/python testdata/capture/capture.py --out small-hf_xet-1.1.6 small

Each case runs in a fresh subprocess with its own empty HF_XET_CACHE, so
no local shard cache leaks dedup information between cases. Inputs are
generated from fixed seeds and file hashes are deterministic, but the
client hashes the files of one upload call in parallel, so the order of
their chunks inside a xorb (and with it the xorb hash and file name) can
change between runs. Re-capture only when needed and review the diff.
"""

import hashlib
import http.server
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.dirname(HERE)

KIB = 1024


def random_bytes(seed, n):
    return random.Random(seed).randbytes(n)


def text_bytes(seed, n):
    """Compressible, log-like text: LZ4 shrinks it a lot."""
    rng = random.Random(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
             "hotel", "india", "juliet", "kilo", "lima", "mike", "november"]
    out = []
    size = 0
    line_no = 0
    while size < n:
        line = "%08d level=%s msg=\"%s\" value=%d\n" % (
            line_no,
            rng.choice(["info", "debug", "warn"]),
            " ".join(rng.choice(words) for _ in range(rng.randint(3, 9))),
            rng.randint(0, 99999),
        )
        line_no += 1
        out.append(line)
        size += len(line)
    return "".join(out).encode()[:n]


def float_bytes(seed, n):
    """Little-endian float32 samples of a smooth noisy signal. Byte grouping
    (BG4) compresses this better than plain LZ4, so the client picks scheme 2."""
    import struct
    rng = random.Random(seed)
    count = n // 4
    vals = [math.sin(i / 50.0) * 3.0 + rng.gauss(0, 0.01) for i in range(count)]
    return struct.pack("<%df" % count, *vals)


def shared_with(seed, base, n_edits):
    """A copy of base with a few small edits: most chunks dedup against base."""
    rng = random.Random(seed)
    b = bytearray(base)
    for _ in range(n_edits):
        pos = rng.randrange(0, len(b) - 64)
        b[pos:pos + 64] = rng.randbytes(64)
    return bytes(b)


def case_inputs(case):
    """Returns the upload batches of a case: a list of lists of (name, bytes).
    Batches are uploaded one after another by separate upload_files calls in
    the same process and cache, so later batches dedup against earlier ones
    through the client's local shard cache (files within one call are
    processed in parallel and do not dedup against each other)."""
    if case == "small":
        return [[
            ("empty.bin", b""),
            ("one_byte.bin", b"\x2a"),
            ("random_100k.bin", random_bytes(1001, 100 * KIB)),
        ]]
    if case == "multi":
        base = random_bytes(2001, 600 * KIB)
        text = text_bytes(2002, 300 * KIB)
        block = random_bytes(2005, 200 * KIB)
        return [
            [
                ("random_600k.bin", base),
                ("text_300k.log", text),
                ("floats_256k.f32", float_bytes(2003, 256 * KIB)),
                # The same 200 KiB three times: dedups inside the file.
                ("repeated_600k.bin", block * 3),
            ],
            [
                # Dedups against the first batch: terms in several xorbs.
                ("random_600k_edited.bin", shared_with(2004, base, 2)),
                ("spliced_450k.bin", text[:150 * KIB] + base[100 * KIB:400 * KIB]),
            ],
        ]
    raise SystemExit("unknown case %r" % case)


CASES = ["small", "multi"]


class Recorder:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.lock = threading.Lock()
        self.shard_n = 0
        self.requests = []


def make_handler(rec):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # keep stdout quiet
            pass

        def read_body(self):
            te = self.headers.get("Transfer-Encoding", "")
            if "chunked" in te.lower():
                parts = []
                while True:
                    line = self.rfile.readline().strip()
                    size = int(line.split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline().strip():
                            pass
                        break
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                return b"".join(parts)
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def reply(self, status, obj=None):
            body = b"" if obj is None else json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if obj is not None else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def note(self, status):
            with rec.lock:
                rec.requests.append("%s %s %d" % (self.command, self.path.split("?")[0], status))

        def do_GET(self):
            # /v2/* (v2 reconstructions), /v1/chunks/* (dedup) and everything else: 404.
            self.note(404)
            self.reply(404)

        def do_HEAD(self):
            self.note(404)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self):
            body = self.read_body()
            path = self.path.split("?")[0]
            # hf_xet 1.8.0 posts to /v1/xorbs/... and /v1/shards; 1.1.x and
            # 1.2.0 to /xorb/... and /shard/<prefix>/<hash>.
            m = re.fullmatch(r"/(?:v1/xorbs|xorbs|xorb)/([^/]+)/([0-9a-fA-F]{64})", path)
            if m:
                d = os.path.join(rec.out_dir, "xorbs")
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, m.group(2).lower()), "wb") as f:
                    f.write(body)
                self.note(200)
                self.reply(200, {"was_inserted": True})
                return
            if path in ("/v1/shards", "/shards") or re.fullmatch(r"/shard/[^/]+/[0-9a-fA-F]{64}", path):
                d = os.path.join(rec.out_dir, "shards")
                os.makedirs(d, exist_ok=True)
                with rec.lock:
                    n = rec.shard_n
                    rec.shard_n += 1
                with open(os.path.join(d, "%d.shard" % n), "wb") as f:
                    f.write(body)
                self.note(200)
                self.reply(200, {"result": 1})
                return
            self.note(404)
            self.reply(404)

    return Handler


def run_case(case, out_name):
    import hf_xet

    out_dir = os.path.join(TESTDATA, out_name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    rec = Recorder(out_dir)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(rec))
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    endpoint = "http://127.0.0.1:%d" % srv.server_address[1]

    batches = case_inputs(case)
    results = []
    with tempfile.TemporaryDirectory(prefix="xetcap-in-") as tmp:
        for batch in batches:
            paths = []
            for name, data in batch:
                p = os.path.join(tmp, name)
                with open(p, "wb") as f:
                    f.write(data)
                paths.append(p)
            infos = hf_xet.upload_files(paths, endpoint, ("tok", 4102444800), None, None, None)
            results.extend(zip(batch, infos))

    srv.shutdown()
    srv.server_close()

    files = []
    for (name, data), info in results:
        files.append({
            "path": name,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "xet_hash": info.hash,
            "client_sha256": getattr(info, "sha256", None),
        })
    with open(os.path.join(out_dir, "files.json"), "w") as f:
        json.dump({"client": "hf_xet " + getattr(hf_xet, "__version__", _hf_xet_version()),
                   "files": files}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "requests.txt"), "w") as f:
        for line in sorted(rec.requests):
            f.write(line + "\n")


def _hf_xet_version():
    try:
        from importlib.metadata import version
        return version("hf_xet")
    except Exception:
        return "unknown"


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--run-case":
        run_case(sys.argv[2], sys.argv[3])
        return
    args = sys.argv[1:]
    out_name = None
    if args[:1] == ["--out"]:
        if len(args) != 3:
            raise SystemExit("usage: capture.py --out NAME CASE")
        out_name, args = args[1], args[2:]
    cases = args or CASES
    for case in cases:
        if case not in CASES:
            raise SystemExit("unknown case %r (have %s)" % (case, ", ".join(CASES)))
        with tempfile.TemporaryDirectory(prefix="xetcap-cache-") as cache:
            env = dict(os.environ)
            env["HF_XET_CACHE"] = os.path.join(cache, "xet")
            env["HF_HOME"] = os.path.join(cache, "hf")
            env["HF_XET_TELEMETRY_ENABLED"] = "false"
            env["HF_HUB_DISABLE_TELEMETRY"] = "1"
            subprocess.run([sys.executable, os.path.abspath(__file__), "--run-case", case,
                            out_name or case], env=env, check=True, timeout=300)
        print("captured", case, "->", os.path.join(TESTDATA, out_name or case))


if __name__ == "__main__":
    main()
