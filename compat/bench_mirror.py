"""The mirror's figures with the stock client (issue 33, docs/mirror.md):
an upstream `openxet serve` and a mirror in front of it on loopback, one
random file per run pushed to the upstream, then, each with a fresh client
cache, hf_hub_download of it

  direct    from the upstream itself,
  first     through the mirror, which pulls it from the upstream meanwhile,
  mirrored  through the mirror again (no upstream bytes),
  local     from a repo a tenant of the mirror pushed the same bytes to.

Prints the median seconds of each and the ratios the issue names: first
against direct (goal >= 0.8, a speed ratio: direct's time over first's)
and mirrored against local (goal >= 0.95); and the mirror's CPU seconds per
GiB for a first download with its pull (relay and storing).

    .venv/bin/python compat/bench_mirror.py [--mib 256] [--runs 3] [--binary PATH] [--payload bf16]

The clients, both servers and the loopback share the machine's cores, so the
ratios are what to read; the MB/s follow the host. Before each timed download
the page cache is written back and, when the bench may (root), dropped: every
download then starts from the disk with no writeback of the one before under
way. Without that the order decides (the first download to read a xorb
warms the cache for the ones after it, and a download timed while the last
one's 256 MiB are written back is slower by up to 1.5x).
"""

import argparse
import time
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import payloads  # noqa: E402
from conftest import HubClient, OpenxetServer, bench_binary, write_random  # noqa: E402
from bench_transfer import cpu_seconds  # noqa: E402
from test_parity import run_py  # noqa: E402

TIMED = """
    import json, time
    from huggingface_hub import hf_hub_download
    t = time.monotonic()
    hf_hub_download("{repo}", "big.bin", cache_dir="dl")
    print(json.dumps(time.monotonic() - t))
"""


def routes(entries):
    """How many requests of each file-bytes route a download made: which
    path the client took (resolve for a plain download, reconstructions
    and fetches for hf_xet's)."""
    kinds = {"resolve": "/resolve/", "reconstructions": "/reconstructions/", "fetch": "/v1/fetch/"}
    n = {k: sum(1 for e in entries if v in e.get("path", "")) for k, v in kinds.items()}
    return ", ".join(f"{k} {v}" for k, v in n.items())


def settle():
    """Write back the page cache and drop it where allowed, so that each
    timed download starts from the same state."""
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary")
    ap.add_argument("--payload", default="random", choices=[k for k in payloads.KINDS if k != "parquet"],
                    help="what the upstream holds (compat/payloads.py); bf16 stands for a model's weights")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-mirror-"))
    binary = bench_binary(a.binary, work)

    upstream = OpenxetServer(binary, work / "upstream", ["--log-level", "warn"]).start()
    alice = HubClient(upstream.url, upstream.make_credential("alice"), work / "alice")
    bob_up = upstream.make_credential("bob", "read")
    bot = upstream.make_credential("mirrorbot", "read")
    mirror = OpenxetServer(binary, work / "mirror", ["--mirror-upstream", upstream.url,
                                                     "--mirror-upstream-token", bot]).start()
    bob = mirror.make_credential("bob", "read")
    carol = HubClient(mirror.url, mirror.make_credential("carol"), work / "carol")

    size = a.mib << 20
    times = {k: [] for k in ("direct", "first", "mirrored", "local")}
    cpu = {"first_and_pull": []}
    try:
        for run in range(a.runs):
            src = work / f"big-{run}.bin"
            if a.payload == "random":
                write_random(src, size, seed=3300 + run)
            else:
                payloads.write(str(src), a.payload, f"mirror-{run}", size)
            repo = f"alice/big-{run}"
            alice.api("create_repo", repo_id=repo)
            alice.api("upload_file", path_or_fileobj=str(src), path_in_repo="big.bin", repo_id=repo)
            alice.api("update_repo_settings", repo_id=repo, visibility="internal")
            local = f"carol/big-{run}"
            carol.api("create_repo", repo_id=local)
            carol.api("upload_file", path_or_fileobj=str(src), path_in_repo="big.bin", repo_id=local)
            src.unlink()

            def timed(name, endpoint, token, repo_id):
                mark = mirror.log_mark() if endpoint == mirror.url else None
                settle()
                t = run_py(HubClient(endpoint, token, work / f"{name}-{run}"), TIMED.format(repo=repo_id), timeout=900)
                times[name].append(t)
                if mark is not None and run == 0:
                    try:
                        relay = ", ".join(f"{k} {int(mirror.metric('openxet_mirror_relay_' + k + '_total'))}" for k in ("plans", "bytes"))
                    except AssertionError:  # a build from before relays
                        relay = "none (no relay metrics)"
                    print(f"{name}: the mirror answered {routes(mirror.requests_since(mark))}; relays so far: {relay}", flush=True)

            timed("direct", upstream.url, bob_up, repo)
            cpu0 = cpu_seconds(mirror.proc.pid)
            timed("first", mirror.url, bob, repo)
            # A first download through a relay can end before its pull has
            # stored the file: "mirrored" is timed once it is stored.
            deadline = time.monotonic() + 300
            while mirror.metric("openxet_mirror_upstream_files_total") < run + 1:
                assert time.monotonic() < deadline, "the pull of the first download never ended"
                time.sleep(0.05)
            cpu["first_and_pull"].append(cpu_seconds(mirror.proc.pid) - cpu0)
            timed("mirrored", mirror.url, bob, repo)
            timed("local", mirror.url, carol.token, local)
            print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
    finally:
        mirror.stop()
        upstream.stop()
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in times.items()}
    mbs = {k: size / 1e6 / v for k, v in med.items()}
    out = {
        "mib": a.mib, "runs": a.runs, "seconds": times,
        "median_mb_s": {k: round(v, 1) for k, v in mbs.items()},
        "first_vs_direct": round(med["direct"] / med["first"], 2),
        "mirrored_vs_local": round(med["local"] / med["mirrored"], 2),
        "mirror_cpu_s_per_gib_first_and_pull": round(statistics.median(cpu["first_and_pull"]) / (size / 2**30), 2),
    }
    print(f"{a.mib} MiB, median of {a.runs}: " + ", ".join(f"{k} {v:.1f} MB/s" for k, v in mbs.items()))
    print(f"first through the mirror / direct: {out['first_vs_direct']} (goal >= 0.8); "
          f"mirrored / local: {out['mirrored_vs_local']} (goal >= 0.95)")
    print(f"the mirror's CPU for a first download and its pull: {out['mirror_cpu_s_per_gib_first_and_pull']} s per GiB")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
