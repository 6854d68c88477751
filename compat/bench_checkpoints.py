"""SQLite checkpoints beside a real upload run (issue 34 item 4,
docs/operations.md "SQLite checkpoints"): one `openxet serve` (SQLite +
file:// on the disk, not tmpfs: a checkpoint's fsync is the point), loaded
by `openxet load --scenario many_tenants` for --duration, its log at DEBUG so
that every background checkpoint of 5 ms or more is logged with its start.

Prints, from the server's own log: the checkpoints (how many were logged,
the longest, how many took 100 ms or more), the xorb uploads' server time
(p50, p99, max), and the slowest upload that ran while a checkpoint did
against the slowest of the others, in all and in the index stage. A
background checkpoint runs on a connection of its own and neither waits for
nor blocks a commit, so what it can cost an upload is disk or CPU time while
it runs: at most its own length, unless the log reached the backstop (16,384
pages), where a commit checkpoints itself.

    .venv/bin/python compat/bench_checkpoints.py [--duration 600s] [--binary PATH]
        [--index-checkpoint 100ms]

The load generator and the server share the machine's cores; nothing here is
asserted, these are the figures of one run on its host.
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import OpenxetServer, bench_binary, parse_log_line  # noqa: E402


def when(s):
    return datetime.datetime.fromisoformat(s).timestamp()


_UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1000.0}


def go_ms(d):
    """A Go duration as the request log writes it ("231.4µs", "1.2ms",
    "1m2.5s"), in milliseconds."""
    total, num = 0.0, ""
    i = 0
    while i < len(d):
        if d[i].isdigit() or d[i] == ".":
            num += d[i]
            i += 1
            continue
        for u in ("ns", "µs", "us", "ms", "m", "h", "s"):
            if d.startswith(u, i):
                total += float(num) * {"m": 60000.0, "h": 3600000.0}.get(u, _UNITS.get(u, 0))
                num, i = "", i + len(u)
                break
        else:
            raise ValueError(f"duration {d!r}")
    return total


def spans(log_path):
    """The xorb uploads (start, end, ms, index stage ms) and the logged
    checkpoints (start, end, ms, log pages) of a server log."""
    ups, ckpts = [], []
    for line in log_path.read_text(errors="replace").splitlines():
        if 'msg="index checkpoint"' in line:
            d = parse_log_line(line)
            if "start" in d and "ms" in d:
                s, ms = when(d["start"]), float(d["ms"])
                ckpts.append((s, s + ms / 1000, ms, int(d.get("log_pages", 0))))
        elif "msg=request" in line:
            d = parse_log_line(line)
            if d.get("method") == "POST" and "/xorbs/" in d.get("path", "") and d.get("status", "").startswith("2"):
                end, ms = when(d["time"]), float(d["duration_ms"])
                ups.append((end - ms / 1000, end, ms, go_ms(d.get("t_index", "0s"))))
    return sorted(ups), sorted(ckpts)


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(int(q * len(xs)), len(xs) - 1)] if xs else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", default="600s")
    ap.add_argument("--binary")
    ap.add_argument("--index-checkpoint", default="100ms")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    binary = bench_binary(a.binary, work)
    server = OpenxetServer(binary, work / "server", ["--log-level", "debug",
                                                     "--index-checkpoint", a.index_checkpoint]).start()
    try:
        env = dict(os.environ, OPENXET_TOKEN=server.admin_token)
        r = subprocess.run([binary, "load", "--scenario", "many_tenants", "--server", server.url,
                            "--duration", a.duration, "--json"], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:], file=sys.stderr)
        server.sync_log()
        ups, ckpts = spans(server.log_path)
    finally:
        server.stop()
    try:
        if not ups:
            sys.exit("no xorb uploads in the server's log")
        overlap, other, k = [0.0, 0.0], [0.0, 0.0], 0
        for s, e, ms, index_ms in ups:  # both in start order
            while k < len(ckpts) and ckpts[k][1] <= s:
                k += 1
            hit = any(c[0] < e and c[1] > s for c in ckpts[k:k + 64])
            worst = overlap if hit else other
            worst[0], worst[1] = max(worst[0], ms), max(worst[1], index_ms)
        ms = [u[2] for u in ups]
        out = {
            "duration": a.duration, "index_checkpoint": a.index_checkpoint,
            "uploads": len(ups), "upload_ms": {"p50": quantile(ms, 0.5), "p99": quantile(ms, 0.99), "max": max(ms)},
            "checkpoints_logged": len(ckpts), "checkpoint_max_ms": max((c[2] for c in ckpts), default=0.0),
            "checkpoints_over_100ms": sum(1 for c in ckpts if c[2] >= 100),
            "checkpoint_log_max_pages": max((c[3] for c in ckpts), default=0),
            "during_checkpoint_max_ms": {"upload": overlap[0], "index_stage": overlap[1]},
            "otherwise_max_ms": {"upload": other[0], "index_stage": other[1]},
        }
        print(f"{len(ups)} xorb uploads: server ms p50 {out['upload_ms']['p50']:.1f}, p99 {out['upload_ms']['p99']:.1f}, max {out['upload_ms']['max']:.1f}")
        print(f"{len(ckpts)} checkpoints of 5 ms or more, longest {out['checkpoint_max_ms']:.1f} ms, "
              f"{out['checkpoints_over_100ms']} of 100 ms or more, longest log {out['checkpoint_log_max_pages']} pages "
              f"(a commit checkpoints itself only at 16384)")
        print(f"uploads during a checkpoint: slowest {overlap[0]:.1f} ms, slowest index stage {overlap[1]:.1f} ms; "
              f"otherwise {other[0]:.1f} / {other[1]:.1f} ms")
        print(json.dumps(out))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
