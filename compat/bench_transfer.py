"""Upload and download throughput of the stock hf_xet client: against a real
`openxet serve` on loopback, and against hf_xet's own in-process `local://`
store, in the same run on the same data. Prints a table and JSON.

    .venv/bin/python compat/bench_transfer.py [--mib 512] [--runs 3] [--binary PATH] [--warm-download]
        [--payload random,bf16,fp32,int8,json,parquet]

--payload picks what is uploaded (compat/payloads.py; default random, which
hf_xet stores uncompressed): model weights in bf16 and fp32 (hf_xet
compresses their chunks with BG4-LZ4, which the server decodes to check
every hash), int8-quantized weights, tokenizer-like JSON, a Parquet table.
Each payload is reported on its own.

Each operation runs in a fresh interpreter with a fresh HF_XET_CACHE, so the
client cannot dedup against its cache. The ratio openxet/local is the figure
to trust; absolute MB/s drift with the machine. The server's CPU time
(utime + stime from /proc/PID/stat) around each openxet upload and download
is reported as CPU seconds per GiB transferred.

Each download follows its upload at once, so openxet reads the xorbs it has
just written with O_DIRECT from the disk while local:// reads its files from
the page cache (--warm-download evens that), and a download takes well under a
second, so one stall of the client's own (on a VM, first touches of guest
memory) moves its ratio a lot. compat/bench_download.py --local compares
downloads alone, many times over.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DRIVER = os.path.join(HERE, "xet_driver.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """CPU time (user + system) the process has used, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_driver(args, env):
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, DRIVER], input=json.dumps(args), capture_output=True, text=True, env=env, timeout=1800)
    dt = time.perf_counter() - t0
    out = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    if not out.get("ok"):
        raise RuntimeError(f"{args['op']} failed: {out}\n{r.stderr[-2000:]}")
    return out["result"], dt


def serve(binary, data_dir, flags, env, admin=None, errlog=subprocess.DEVNULL, log_level="warn"):
    """Start `openxet serve` and wait until it is ready; returns (process,
    url, admin token, a write token of tenant bench). The first node of an
    index prints the admin token; pass it as admin to the others. Its log
    (at log_level) goes to errlog."""
    port = free_port()
    proc = subprocess.Popen([binary, "serve", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}",
                             "--log-level", log_level, *flags],
                            stdout=subprocess.PIPE, stderr=errlog, text=True, env={**os.environ, **env})
    if admin is None:
        for line in proc.stdout:
            m = re.search(r"store it now\): (\S+)", line)
            if m:
                admin = m.group(1)
                break
        else:
            sys.exit("openxet serve printed no admin token")
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/readyz", timeout=1)
            break
        except Exception:
            time.sleep(0.05)
    req = urllib.request.Request(url + "/api/openxet/v1/admin/credentials", method="POST",
                                 data=json.dumps({"tenant": "bench", "scopes": ["write"]}).encode(),
                                 headers={"Authorization": "Bearer " + admin, "Content-Type": "application/json"})
    return proc, url, admin, json.load(urllib.request.urlopen(req))["token"]


def write_source(path, seed, size, kind="random"):
    """Write about size bytes of payload kind derived from seed
    (reproducible) to path; returns the size written."""
    if kind == "random":  # no numpy needed, as before payloads.py
        with open(path, "wb") as f:
            f.write(hashlib.shake_128(seed.encode()).digest(size))
        return size
    import payloads
    return payloads.write(path, kind, seed, size)


def client_env(work, cache):
    """The environment of one stock-client run: no telemetry, and HF_HOME and
    the xet cache (directory cache) under work."""
    return dict(os.environ, HF_XET_TELEMETRY_ENABLED="false", HF_HOME=os.path.join(work, "hfhome"),
                HF_XET_CACHE=os.path.join(work, cache))


def read_tree(root):
    """Read every file under root once, so that its pages sit in the page
    cache (as hf_xet's local:// files do after it wrote them)."""
    for d, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(d, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def round_trip(work, tag, src, size, endpoint, tok, pid, warm=None, after_upload=None):
    """Upload src with the stock client and download it back, each with a
    fresh cache; returns MB/s up and down, then the CPU seconds per GiB that
    process pid (the server) spent on each. With warm, the files under that
    directory are read into the page cache between the two, outside the
    figures. after_upload, when given, is called between the two."""
    env = client_env(work, f"cache-{tag}-up")
    c0 = cpu_seconds(pid)
    up, dt_up = run_driver({"op": "upload_files", "paths": [src], "endpoint": endpoint, "token": tok}, env)
    c1 = cpu_seconds(pid)
    if after_upload:
        after_upload()
    if warm:
        read_tree(warm)
    env = client_env(work, f"cache-{tag}-down")
    dst = os.path.join(work, f"dst-{tag}.bin")
    _, dt_down = run_driver({"op": "download_files", "endpoint": endpoint, "token": tok,
                             "files": [{"dest": dst, "hash": up[0]["hash"], "file_size": size}]}, env)
    c2 = cpu_seconds(pid)
    if os.path.getsize(dst) != size:
        raise RuntimeError("short download")
    os.remove(dst)
    gib = size / 2**30
    return size / dt_up / 1e6, size / dt_down / 1e6, (c1 - c0) / gib, (c2 - c1) / gib


def bench_payload(opts, work, kind, url, token, srv):
    """The runs of one payload: the stock client against openxet and
    local://, alternated; returns the JSON record and prints its table."""
    results = {"openxet": {"upload": [], "download": []}, "local": {"upload": [], "download": []}}
    cpu = {"upload": [], "download": []}  # server CPU seconds per GiB
    data = os.path.join(work, "data")
    for run in range(opts.runs):
        src = os.path.join(work, f"src-{kind}-{run}.bin")
        size = write_source(src, f"bench-{kind}-{run}", opts.mib << 20, kind)
        for target, endpoint, tok in (("openxet", url, token), ("local", "local://" + os.path.join(work, f"local-{kind}-{run}"), None)):
            warm = data if opts.warm_download and target == "openxet" else None
            up, down, cpu_up, cpu_down = round_trip(work, f"{target}-{kind}-{run}", src, size, endpoint, tok, srv.pid, warm)
            if target == "openxet":
                cpu["upload"].append(cpu_up)
                cpu["download"].append(cpu_down)
            results[target]["upload"].append(up)
            results[target]["download"].append(down)
        os.remove(src)
    summary = {t: {op: round(statistics.median(v), 1) for op, v in ops.items()} for t, ops in results.items()}
    print(f"hf_xet 1.8.0, {opts.mib} MiB of {kind} data, median of {opts.runs} runs (MB/s, includes client start-up and hashing)"
          + (", the server's objects in the page cache before each download" if opts.warm_download else ""))
    print(f"{'target':10} {'upload':>10} {'download':>10}")
    for t in ("openxet", "local"):
        print(f"{t:10} {summary[t]['upload']:>10} {summary[t]['download']:>10}")
    print(f"{'ratio':10} {summary['openxet']['upload'] / summary['local']['upload']:>10.2f} "
          f"{summary['openxet']['download'] / summary['local']['download']:>10.2f}")
    cpu_median = {op: round(statistics.median(v), 2) for op, v in cpu.items()}
    print(f"server CPU s per GiB: upload {cpu_median['upload']} (runs {[round(x, 2) for x in cpu['upload']]}), "
          f"download {cpu_median['download']} (runs {[round(x, 2) for x in cpu['download']]})")
    return {"payload": kind, "mib": opts.mib, "runs": opts.runs, "warm_download": opts.warm_download, "raw": results,
            "median": summary, "server_cpu_s_per_gib": {"raw": cpu, "median": cpu_median}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512, help="MiB of data per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary", help="an openxet binary to serve with (default: build this checkout)")
    ap.add_argument("--payload", default="random",
                    help="comma-separated payloads of compat/payloads.py: random, bf16, fp32, int8, json, parquet")
    ap.add_argument("--warm-download", action="store_true",
                    help="read the server's stored objects into the page cache before each download: "
                         "the server writes xorbs with O_DIRECT, so by default its first read comes from the disk, "
                         "while local:// reads files it has just written through the page cache")
    opts = ap.parse_args()
    kinds = opts.payload.split(",")
    for k in kinds:
        if k not in ("random", "bf16", "fp32", "int8", "json", "parquet"):
            ap.error(f"unknown payload {k!r}")
    work = tempfile.mkdtemp(prefix="openxet-bench-")
    binary = opts.binary or os.path.join(work, "openxet")
    if not opts.binary:
        subprocess.run(["go", "build", "-o", binary, "."], cwd=ROOT, check=True)
    srv, url, _, token = serve(binary, os.path.join(work, "data"), [], {})
    try:
        records = [bench_payload(opts, work, k, url, token, srv) for k in kinds]
        print(json.dumps(records[0] if len(records) == 1 else records))
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
