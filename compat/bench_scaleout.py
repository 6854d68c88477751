"""Upload and download throughput of the stock hf_xet client through the
scale-out deployment (PostgreSQL index + S3 bucket on MinIO) against the
embedded default (SQLite + file://), in the same run on the same data,
interleaved. Prints a table and JSON.

    .venv/bin/python compat/bench_scaleout.py [--mib 256] [--runs 3] [--binary PATH] [--split] [--pg-async] [--minio-no-compat] [--minio-drives N]
    .venv/bin/python compat/bench_scaleout.py --load [--tenants 50] [--duration 30s]

--split adds the two mixed deployments, SQLite + S3 and PostgreSQL +
file://, so that the index's share and the bucket's share of the gap show
apart. --pg-async gives the PostgreSQL index the durability of SQLite's
synchronous=NORMAL (synchronous_commit=off in its URL). Each upload's
requests are summed from the servers' request logs (JSON, info level): per
route, the number of requests, their total time and each stage's
(server/stages.go), and the wall time of the upload they came from.

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
import resource
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


def tree_cpu(pid):
    """CPU seconds of process pid and of its live children (PostgreSQL's
    backends), from /proc."""
    total = 0.0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(d) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def client_cpu():
    """CPU seconds of every finished child of this process (the clients)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# The routes an upload's breakdown sums, by the start of their path.
UPLOAD_ROUTES = {"xorb": ("/v1/xorbs/", "/xorbs/", "/xorb/"), "xorb-grant": ("/v1/xorb-grants/",),
                 "shard": ("/v1/shards", "/shards", "/v2/shards", "/shard/")}


def request_sums(log_path, offset):
    """Sum the request log lines of log_path from byte offset: per upload
    route, the request count, total seconds and each stage's seconds.
    Returns (sums, the new offset)."""
    sums = {}
    with open(log_path, "rb") as f:
        f.seek(offset)
        data = f.read()
    for line in data.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") != "request" or rec.get("method") != "POST":
            continue
        route = next((r for r, ps in UPLOAD_ROUTES.items() if rec.get("path", "").startswith(ps)), None)
        if route is None:
            continue
        r = sums.setdefault(route, {"n": 0, "total_s": 0.0})
        r["n"] += 1
        r["total_s"] += rec.get("duration_ms", 0) / 1e3
        r.setdefault("status", {})
        r["status"][str(rec.get("status"))] = r["status"].get(str(rec.get("status")), 0) + 1
        for k, v in rec.items():
            if k.startswith("t_") and isinstance(v, (int, float)):
                r[k[2:] + "_s"] = r.get(k[2:] + "_s", 0.0) + v / 1e9  # slog's JSON durations are ns
    return sums, offset + len(data)


def print_breakdown(breakdown):
    """One block per target: the median over runs of each route's sums."""
    print("upload breakdown, median over runs (s; the requests overlap, so their sums exceed the wall time):")
    for t, runs in breakdown.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        other = {k: statistics.median(r["upload_cpu_s_per_gib"][k] for r in runs) for k in runs[0]["upload_cpu_s_per_gib"]}
        print(f"  {t}: upload wall {wall:.2f} s; CPU s per GiB uploaded: "
              + ", ".join(f"{k} {v:.2f}" for k, v in other.items()))
        for route in UPLOAD_ROUTES:
            per = [r["routes"][route] for r in runs if route in r["routes"]]
            if not per:
                continue
            keys = sorted({k for p in per for k in p if k.endswith("_s")}, key=lambda k: (k != "total_s", k))
            cells = ", ".join(f"{k[:-2]} {statistics.median(p.get(k, 0.0) for p in per):.3f}" for k in keys)
            print(f"    {route:10} n={statistics.median(p['n'] for p in per):g} status {per[-1]['status']}: {cells}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="MiB of random data per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary", help="an openxet binary to serve with (default: build this checkout)")
    ap.add_argument("--load", action="store_true", help="run the many_tenants scenario over 1 and 3 nodes")
    ap.add_argument("--tenants", type=int, default=50)
    ap.add_argument("--duration", default="30s")
    ap.add_argument("--split", action="store_true", help="also SQLite + S3 and PostgreSQL + file://")
    ap.add_argument("--pg-async", action="store_true", help="synchronous_commit=off in the PostgreSQL index URL")
    ap.add_argument("--minio-no-compat", action="store_true",
                    help="start MinIO with --no-compat: a random ETag instead of the body's MD5 (openxet reads no ETag)")
    ap.add_argument("--minio-drives", type=int, default=1,
                    help="MinIO drives (directories on the work dir's disk): 1 is MinIO's single-drive mode, which "
                         "writes through the page cache; 4 is one erasure set (parity EC:2) written with O_DIRECT")
    opts = ap.parse_args()
    work = tempfile.mkdtemp(prefix="openxet-bench-")
    binary = opts.binary or os.path.join(work, "openxet")
    if not opts.binary:
        subprocess.run(["go", "build", "-o", binary, "."], cwd=os.path.dirname(HERE), check=True)
    minio_bin, pg_bin = _minio_binary(), _pg_bin()
    if minio_bin is None or pg_bin is None:
        sys.exit("needs MinIO (.ci/minio.sh) and PostgreSQL (apt-get install postgresql)")
    os.mkdir(os.path.join(work, "minio"))
    minio = Minio(minio_bin, os.path.join(work, "minio"), ["--no-compat"] if opts.minio_no_compat else [],
                  drives=opts.minio_drives)
    pg = Postgres(pg_bin, durable=True)
    procs = []
    try:
        if opts.load:
            return load(opts, binary, work, minio, pg, procs)
        targets, logs = {}, {}
        deployments = [("sqlite+file", False, False), ("postgres+s3", True, True)]
        if opts.split:
            deployments[1:1] = [("sqlite+s3", False, True), ("postgres+file", True, False)]
        for name, on_pg, on_s3 in deployments:
            flags, env = [], {}
            if on_pg:
                index = pg.index_url() + "&schema=" + name.replace("+", "_")
                flags += ["--index", index + ("&synchronous_commit=off" if opts.pg_async else "")]
            if on_s3:
                flags += ["--bucket", minio.bucket_url(minio.create_bucket())]
                env = minio.env()
            logs[name] = os.path.join(work, name + ".log")
            with open(logs[name], "wb") as errlog:
                p, url, _, tok = serve(binary, os.path.join(work, name), flags + ["--log-format", "json"], env,
                                       errlog=errlog, log_level="info")
            procs.append(p)
            targets[name] = (url, tok, p.pid)
        size = opts.mib << 20
        results = {t: {"upload": [], "download": []} for t in targets}
        cpu = {t: {"upload": [], "download": []} for t in targets}  # the server's CPU seconds per GiB
        breakdown = {t: [] for t in targets}
        offsets = {t: 0 for t in targets}
        for run in range(opts.runs):
            src = os.path.join(work, f"src-{run}.bin")
            write_source(src, f"scaleout-{run}", size)
            order = list(targets) if run % 2 == 0 else list(reversed(targets))
            for target in order:
                url, tok, pid = targets[target]
                _, offsets[target] = request_sums(logs[target], offsets[target])  # skip set-up lines
                meters = {"client": client_cpu, "minio": lambda: tree_cpu(minio.proc.pid), "postgres": lambda: tree_cpu(pg.proc.pid)}
                others0 = {k: f() for k, f in meters.items()}
                others = {}
                up, down, cpu_up, cpu_down = round_trip(
                    work, f"{target}-{run}", src, size, url, tok, pid,
                    after_upload=lambda: others.update({k: round((f() - others0[k]) / (size / 2**30), 2) for k, f in meters.items()}))
                routes, offsets[target] = request_sums(logs[target], offsets[target])
                breakdown[target].append({"wall_s": size / up / 1e6, "routes": routes, "upload_cpu_s_per_gib": others})
                cpu[target]["upload"].append(round(cpu_up, 2))
                cpu[target]["download"].append(round(cpu_down, 2))
                results[target]["upload"].append(up)
                results[target]["download"].append(down)
            os.remove(src)
        med = {t: {op: round(statistics.median(v), 1) for op, v in ops.items()} for t, ops in results.items()}
        print(f"hf_xet, {opts.mib} MiB random data, median of {opts.runs} interleaved runs (MB/s, includes client start-up and hashing)"
              + (", PostgreSQL with synchronous_commit=off" if opts.pg_async else "")
              + (", MinIO with --no-compat" if opts.minio_no_compat else "")
              + (f", MinIO on {opts.minio_drives} drives" if opts.minio_drives > 1 else ""))
        print(f"{'target':14} {'upload':>10} {'download':>10} {'up ratio':>9} {'down ratio':>10}")
        b = med["sqlite+file"]
        for t in targets:
            a = med[t]
            print(f"{t:14} {a['upload']:>10} {a['download']:>10} {a['upload'] / b['upload']:>9.2f} {a['download'] / b['download']:>10.2f}")
        cpu_med = {t: {op: round(statistics.median(v), 2) for op, v in ops.items()} for t, ops in cpu.items()}
        for t in targets:
            print(f"{t:12} server CPU s per GiB: upload {cpu_med[t]['upload']} (runs {cpu[t]['upload']}), "
                  f"download {cpu_med[t]['download']} (runs {cpu[t]['download']})")
        print_breakdown(breakdown)
        print(json.dumps({"mib": opts.mib, "runs": opts.runs, "pg_async": opts.pg_async,
                          "minio_no_compat": opts.minio_no_compat, "minio_drives": opts.minio_drives, "raw": results, "median": med,
                          "server_cpu_s_per_gib": {"raw": cpu, "median": cpu_med}, "breakdown": breakdown}))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        minio.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
