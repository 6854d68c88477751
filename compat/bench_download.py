"""Downloads only: the stock hf_xet client fetching one file again and again
from several openxet builds, alternated, each build serving its own copy
(uploaded once; the first download reads it from the disk, the later ones
from the page cache). Per download it records the client's MB/s, the
client's CPU (this script's children) and the server's CPU, each per GiB.
With --local, hf_xet's own local:// store is one more target of the
alternation (its copy written by the client, so in the page cache), and each
build's median is also given as a ratio to it. Prints a table and JSON.

    .venv/bin/python compat/bench_download.py --binary A [--binary B] [--local] [--mib 256] [--runs 5]

Compare builds within one run: absolute figures drift with the machine.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_transfer import client_env, cpu_seconds, run_driver, serve, write_source  # noqa: E402


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", required=True, help="an openxet binary (repeat to compare builds)")
    ap.add_argument("--local", action="store_true", help="also download from hf_xet's own local:// store, alternated with the builds")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    opts = ap.parse_args()
    work = tempfile.mkdtemp(prefix="openxet-bench-")
    size, gib = opts.mib << 20, opts.mib / 1024
    procs, targets = [], {}
    try:
        src = os.path.join(work, "src.bin")
        write_source(src, "download", size)
        for i, b in enumerate(opts.binary):
            name = f"{i}:{os.path.basename(b)}"
            p, url, _, tok = serve(b, os.path.join(work, f"data-{i}"), [], {})
            procs.append(p)
            env = client_env(work, f"cache-up-{i}")
            up, _ = run_driver({"op": "upload_files", "paths": [src], "endpoint": url, "token": tok}, env)
            targets[name] = (p, url, tok, up[0]["hash"])
        if opts.local:
            url = "local://" + os.path.join(work, "local")
            up, _ = run_driver({"op": "upload_files", "paths": [src], "endpoint": url, "token": None},
                               client_env(work, "cache-up-local"))
            targets["local://"] = (None, url, None, up[0]["hash"])
        figures = {t: {"MB_per_s": [], "client_cpu_s_per_gib": [], "server_cpu_s_per_gib": []} for t in targets}
        for run in range(opts.runs):
            for t, (p, url, tok, h) in targets.items():
                env = client_env(work, f"cache-{run}-{t}")
                dst = os.path.join(work, "dst.bin")
                c0, s0, t0 = children_cpu(), cpu_seconds(p.pid) if p else 0, time.time()
                run_driver({"op": "download_files", "endpoint": url, "token": tok,
                            "files": [{"dest": dst, "hash": h, "file_size": size}]}, env)
                t1, c1, s1 = time.time(), children_cpu(), cpu_seconds(p.pid) if p else 0
                if os.path.getsize(dst) != size:
                    raise RuntimeError("short download")
                os.remove(dst)
                f = figures[t]
                f["MB_per_s"].append(round(size / (t1 - t0) / 1e6))
                f["client_cpu_s_per_gib"].append(round((c1 - c0) / gib, 2))
                f["server_cpu_s_per_gib"].append(round((s1 - s0) / gib, 2))
        local = statistics.median(figures["local://"]["MB_per_s"]) if opts.local else None
        print(f"hf_xet downloads of {opts.mib} MiB, {opts.runs} per target, alternated (medians; runs in the JSON)")
        print(f"{'target':24} {'MB/s':>8} {'client s/GiB':>14} {'server s/GiB':>14}" + (f" {'/ local://':>12}" if local else ""))
        for t, f in figures.items():
            mbs = statistics.median(f["MB_per_s"])
            print(f"{t:24} {mbs:>8} {statistics.median(f['client_cpu_s_per_gib']):>14} "
                  f"{statistics.median(f['server_cpu_s_per_gib']) if targets[t][0] else '-':>14}"
                  + (f" {mbs / local:>12.2f}" if local else ""))
        print(json.dumps({"mib": opts.mib, "runs": opts.runs, "figures": figures}))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
