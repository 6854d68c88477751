"""Downloads only: the stock hf_xet client fetching one file again and again
from several openxet builds, alternated, each build serving its own copy
(uploaded once, so the object is in the page cache). Per download it
records the client's MB/s, the client's CPU (this script's children) and
the server's CPU, each per GiB. Prints a table and JSON.

    .venv/bin/python compat/bench_download.py --binary A --binary B [--mib 256] [--runs 5]

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
    ap.add_argument("--binary", action="append", required=True, help="an openxet binary (give two or more)")
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
        figures = {t: {"MB_per_s": [], "client_cpu_s_per_gib": [], "server_cpu_s_per_gib": []} for t in targets}
        for run in range(opts.runs):
            for t, (p, url, tok, h) in targets.items():
                env = client_env(work, f"cache-{run}-{t}")
                dst = os.path.join(work, "dst.bin")
                c0, s0, t0 = children_cpu(), cpu_seconds(p.pid), time.time()
                run_driver({"op": "download_files", "endpoint": url, "token": tok,
                            "files": [{"dest": dst, "hash": h, "file_size": size}]}, env)
                t1, c1, s1 = time.time(), children_cpu(), cpu_seconds(p.pid)
                if os.path.getsize(dst) != size:
                    raise RuntimeError("short download")
                os.remove(dst)
                f = figures[t]
                f["MB_per_s"].append(round(size / (t1 - t0) / 1e6))
                f["client_cpu_s_per_gib"].append(round((c1 - c0) / gib, 2))
                f["server_cpu_s_per_gib"].append(round((s1 - s0) / gib, 2))
        print(f"hf_xet downloads of {opts.mib} MiB, {opts.runs} per build, alternated (medians; runs in the JSON)")
        print(f"{'build':24} {'MB/s':>8} {'client s/GiB':>14} {'server s/GiB':>14}")
        for t, f in figures.items():
            print(f"{t:24} {statistics.median(f['MB_per_s']):>8} {statistics.median(f['client_cpu_s_per_gib']):>14} "
                  f"{statistics.median(f['server_cpu_s_per_gib']):>14}")
        print(json.dumps({"mib": opts.mib, "runs": opts.runs, "figures": figures}))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
