"""The LFS basic transfer beside Xet, with the stock huggingface_hub against a
real `openxet serve` on loopback: upload MB/s and the server's CPU per GiB
for one file through LFS basic (upload_file from a file object, which
huggingface_hub never sends through Xet) and through hf_xet (upload_file from
a path), each to a fresh tenant; then the bytes stored when the same file
arrives once through each, in both orders. Prints a table and JSON.

    .venv/bin/python compat/bench_lfs.py [--mib 1024] [--binary PATH] [--payload KIND]

--payload is one of compat/payloads.py's (default random; bf16 stands for a
model's weights).

MB/s is the file's size over the wall time of upload_file (fresh interpreter
and caches each time; the LFS path includes the client's own SHA-256 pass,
the Xet path its chunking and hashing) and, for LFS, over the PUT alone as
the server logged it. Server CPU is utime + stime from /proc/PID/stat around
each upload.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import payloads  # noqa: E402
from bench_transfer import cpu_seconds  # noqa: E402
from conftest import MiB, GiB, HubClient, OpenxetServer, bench_binary, write_random  # noqa: E402

UPLOAD = r"""
import sys, time
from huggingface_hub import HfApi
api = HfApi()
src, repo, path, how = sys.argv[1:5]
api.create_repo(repo, exist_ok=True)
t = time.monotonic()
if how == "lfs":
    with open(src, "rb") as f:
        api.upload_file(path_or_fileobj=f, path_in_repo=path, repo_id=repo)
else:
    api.upload_file(path_or_fileobj=src, path_in_repo=path, repo_id=repo)
print("SECONDS", time.monotonic() - t)
"""


def upload(server, tenant, src, repo, path, how, work, stored=False):
    """One upload_file; stored: the tenant has the bytes already (then the
    LFS batch offers no PUT)."""
    token = server.make_credential(tenant)
    client = HubClient(server.url, token, os.path.join(work, f"{tenant}-{how}-{path}"))
    mark = server.log_mark()
    cpu0 = cpu_seconds(server.proc.pid)
    r = subprocess.run([sys.executable, "-c", UPLOAD, src, repo, path, how], env=client.env(),
                       capture_output=True, text=True, timeout=1800)
    cpu = cpu_seconds(server.proc.pid) - cpu0
    if r.returncode != 0:
        raise SystemExit(f"{how} upload failed:\n{r.stdout}\n{r.stderr[-4000:]}")
    secs = float(r.stdout.split("SECONDS")[1].split()[0])
    reqs = server.requests_since(mark)
    puts = [q for q in reqs if q.get("method") == "PUT" and "/info/lfs/objects/" in q.get("path", "")]
    xorbs = [q for q in reqs if q.get("path", "").startswith("/v1/xorbs/")]
    if how == "lfs" and not stored and not puts or how == "xet" and puts:
        raise SystemExit(f"the {how} upload took the other path: {reqs}")
    put_ms = sum(float(q["duration_ms"]) for q in puts if q.get("status") == "200")
    return {"seconds": secs, "server_cpu_s": cpu, "put_ms": put_ms, "xorb_posts": len(xorbs),
            "usage": server.usage(tenant)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--binary", default=None)
    ap.add_argument("--payload", default="random", choices=payloads.KINDS)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-lfs-")
    binary = bench_binary(args.binary, work)
    src = os.path.join(work, "file.bin")
    if args.payload == "random":
        size = args.mib * MiB
        write_random(src, size, seed="bench-lfs")
    else:
        size = payloads.write(src, args.payload, "bench-lfs", args.mib * MiB)
    # Tenant-scoped dedup: each tenant stores its own copy, so the second
    # throughput upload is not deduplicated against the first.
    server = OpenxetServer(binary, os.path.join(work, "server"), ("--dedup-scope", "tenant")).start()
    try:
        gib = size / GiB
        out = {"mib": args.mib, "payload": args.payload}
        lfs = upload(server, "lfs1", src, "lfs1/r", "f.bin", "lfs", work)
        xet = upload(server, "xet1", src, "xet1/r", "f.bin", "xet", work)
        out["lfs"] = dict(lfs, mb_s=size / 1e6 / lfs["seconds"], put_mb_s=size / 1e6 / (lfs["put_ms"] / 1e3),
                          cpu_s_per_gib=lfs["server_cpu_s"] / gib)
        out["xet"] = dict(xet, mb_s=size / 1e6 / xet["seconds"], cpu_s_per_gib=xet["server_cpu_s"] / gib)
        # Stored bytes: one tenant, the same file through both paths, each order.
        a1 = upload(server, "both1", src, "both1/r", "lfs.bin", "lfs", work)
        a2 = upload(server, "both1", src, "both1/r", "xet.bin", "xet", work)
        b1 = upload(server, "both2", src, "both2/r", "xet.bin", "xet", work)
        b2 = upload(server, "both2", src, "both2/r", "lfs.bin", "lfs", work, stored=True)
        out["stored"] = {"lfs_then_xet": [a1["usage"], a2["usage"]], "xet_then_lfs": [b1["usage"], b2["usage"]],
                         "second_upload": {"lfs_then_xet_xorb_posts": a2["xorb_posts"],
                                           "xet_then_lfs_put_ms": b2["put_ms"]}}
    finally:
        server.stop()
    print(f"{'path':<10} {'upload_file MB/s':>17} {'PUT MB/s':>9} {'server CPU s/GiB':>17}")
    print(f"{'LFS basic':<10} {out['lfs']['mb_s']:>17.0f} {out['lfs']['put_mb_s']:>9.0f} {out['lfs']['cpu_s_per_gib']:>17.2f}")
    print(f"{'hf_xet':<10} {out['xet']['mb_s']:>17.0f} {'':>9} {out['xet']['cpu_s_per_gib']:>17.2f}")
    s = out["stored"]
    print(f"stored bytes of a {size} B file: LFS then Xet {s['lfs_then_xet']}, Xet then LFS {s['xet_then_lfs']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
