"""Upload and download throughput of the stock hf_xet client through the
scale-out deployment (PostgreSQL index + S3 bucket on MinIO) against the
embedded default (SQLite + file://), in the same run on the same data,
interleaved. Prints a table and JSON.

    .venv/bin/python compat/bench_scaleout.py [--mib 256] [--runs 3] [--binary PATH]
    .venv/bin/python compat/bench_scaleout.py --load [--tenants 50] [--duration 30s]

--load runs `openxet load --scenario many_tenants` instead, against one node
and against three nodes of the scale-out deployment (a fresh index schema
and bucket each), and prints the honest throughput and latency of each.

PostgreSQL runs durably (fsync on) and MinIO on one local drive, both on
127.0.0.1 beside the server: the ratio scale-out/embedded is the figure to
trust, absolute MB/s drift with the machine. Needs the MinIO binary of
.ci/minio.sh and Debian's postgresql (as compat/test_s3.py does).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_transfer import round_trip, serve, write_source  # noqa: E402
from test_s3 import Minio, Postgres, _minio_binary, _pg_bin  # noqa: E402


def load(opts, binary, work, minio, pg, procs):
    """many_tenants over one node and over three; returns after printing."""
    figures = {}
    for n in (1, 3, 1):  # one node before and after three, to see the drift
        bucket = minio.bucket_url(minio.create_bucket())
        index = pg.index_url() + f"&schema=load_{len(figures)}"
        urls, admin = [], None
        for i in range(n):
            p, url, admin, _ = serve(binary, os.path.join(work, f"n{len(figures)}-{i}"),
                                     ["--index", index, "--bucket", bucket, "--memory-budget", "512MiB"], minio.env(), admin)
            procs.append(p)
            urls.append(url)
        r = subprocess.run([binary, "load", "--scenario", "many_tenants", "--server", ",".join(urls),
                            "--tenants", str(opts.tenants), "--duration", opts.duration, "--json"],
                           capture_output=True, text=True, env={**os.environ, "OPENXET_TOKEN": admin})
        rep = json.loads(r.stdout)
        ph = rep["phases"][0]["honest"]
        figures[f"{n} node{'s' if n > 1 else ''} #{len(figures)}"] = {
            "ok": rep["ok"], "ops_per_s": round(ph.get("ops_per_second", 0), 1),
            "MB_per_s": round(ph["bytes_per_second"] / 1e6, 2),
            "p50_ms": ph["latency"].get("p50_ms"), "p99_ms": ph["latency"].get("p99_ms"),
            "usage_mismatches": (rep.get("accounting") or {}).get("mismatches")}
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        procs.clear()
    print(f"many_tenants, {opts.tenants} tenants, {opts.duration} per phase, PostgreSQL + MinIO on this host")
    for k, v in figures.items():
        print(f"{k:14} {v}")
    print(json.dumps(figures))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="MiB of random data per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary", help="an openxet binary to serve with (default: build this checkout)")
    ap.add_argument("--load", action="store_true", help="run the many_tenants scenario over 1 and 3 nodes")
    ap.add_argument("--tenants", type=int, default=50)
    ap.add_argument("--duration", default="30s")
    opts = ap.parse_args()
    work = tempfile.mkdtemp(prefix="openxet-bench-")
    binary = opts.binary or os.path.join(work, "openxet")
    if not opts.binary:
        subprocess.run(["go", "build", "-o", binary, "."], cwd=os.path.dirname(HERE), check=True)
    minio_bin, pg_bin = _minio_binary(), _pg_bin()
    if minio_bin is None or pg_bin is None:
        sys.exit("needs MinIO (.ci/minio.sh) and PostgreSQL (apt-get install postgresql)")
    os.mkdir(os.path.join(work, "minio"))
    minio, pg = Minio(minio_bin, os.path.join(work, "minio")), Postgres(pg_bin, durable=True)
    procs = []
    try:
        if opts.load:
            return load(opts, binary, work, minio, pg, procs)
        targets = {}
        p, url, _, tok = serve(binary, os.path.join(work, "embedded"), [], {})
        procs.append(p)
        targets["sqlite+file"] = (url, tok, p.pid)
        p, url, _, tok = serve(binary, os.path.join(work, "node"),
                            ["--index", pg.index_url(), "--bucket", minio.bucket_url(minio.create_bucket())], minio.env())
        procs.append(p)
        targets["postgres+s3"] = (url, tok, p.pid)
        size = opts.mib << 20
        results = {t: {"upload": [], "download": []} for t in targets}
        cpu = {t: {"upload": [], "download": []} for t in targets}  # the server's CPU seconds per GiB
        for run in range(opts.runs):
            src = write_source(os.path.join(work, f"src-{run}.bin"), f"scaleout-{run}", size)
            order = list(targets) if run % 2 == 0 else list(reversed(targets))
            for target in order:
                url, tok, pid = targets[target]
                up, down, cpu_up, cpu_down = round_trip(work, f"{target}-{run}", src, size, url, tok, pid)
                cpu[target]["upload"].append(round(cpu_up, 2))
                cpu[target]["download"].append(round(cpu_down, 2))
                results[target]["upload"].append(up)
                results[target]["download"].append(down)
            os.remove(src)
        med = {t: {op: round(statistics.median(v), 1) for op, v in ops.items()} for t, ops in results.items()}
        print(f"hf_xet, {opts.mib} MiB random data, median of {opts.runs} interleaved runs (MB/s, includes client start-up and hashing)")
        print(f"{'target':12} {'upload':>10} {'download':>10}")
        for t in targets:
            print(f"{t:12} {med[t]['upload']:>10} {med[t]['download']:>10}")
        a, b = med["postgres+s3"], med["sqlite+file"]
        print(f"{'ratio':12} {a['upload'] / b['upload']:>10.2f} {a['download'] / b['download']:>10.2f}")
        cpu_med = {t: {op: round(statistics.median(v), 2) for op, v in ops.items()} for t, ops in cpu.items()}
        for t in targets:
            print(f"{t:12} server CPU s per GiB: upload {cpu_med[t]['upload']} (runs {cpu[t]['upload']}), "
                  f"download {cpu_med[t]['download']} (runs {cpu[t]['download']})")
        print(json.dumps({"mib": opts.mib, "runs": opts.runs, "raw": results, "median": med,
                          "server_cpu_s_per_gib": {"raw": cpu, "median": cpu_med}}))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        minio.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
