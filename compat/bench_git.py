"""git against a real `openxet serve` (docs/git.md), for BENCHMARKS.md's git
figures that a Go benchmark cannot take (the server is a process of its own):

1. `git clone --depth 1` of a repo holding one large model file, smudged
   through git-lfs (the LFS batch route, then the object URL), against
   `hf download` of the same revision (hf_xet's reconstruction), both from
   the same server, alternated, each into an empty directory with empty
   caches. Reported: each one's wall time and git's speed as a share of
   hf download's.
2. The server's peak RSS (VmHWM, reset before through /proc/PID/clear_refs)
   while --clients `git clone`s of an internal repo of --files small
   files run at once, each with the read token of a tenant of its own,
   against the memory budget the server runs with.

    .venv/bin/python compat/bench_git.py [--mib 1024] [--payload bf16] [--runs 2]
        [--files 10000] [--clients 20] [--memory-budget 512MiB] [--binary PATH]

Needs git and git-lfs (apt-get install git git-lfs).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import payloads  # noqa: E402
from conftest import MiB, HubClient, OpenxetServer, bench_binary, sha256_file  # noqa: E402


def git_env(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "HF_"))}
    env.update({"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
                "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.com"})
    return env


def git(home, *args, cwd=None):
    r = subprocess.run(["git", *args], cwd=cwd or home, env=git_env(home), capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed:\n{r.stdout}\n{r.stderr[-4000:]}")
    return r.stdout.strip()


def timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def model_download(server, token, work, args):
    """Figure 1: depth-1 clone with LFS smudge against hf download."""
    client = HubClient(server.url, token, work / "uploader")
    repo = "bench/model"
    client.api("create_repo", repo_id=repo)
    folder = work / "folder"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 4096}\n')
    size = payloads.write(str(folder / "model.safetensors"), args.payload, "bench-git", args.mib * MiB)
    want = sha256_file(folder / "model.safetensors")
    client.api("upload_folder", folder_path=str(folder), repo_id=repo, commit_message="the model")
    host = urlsplit(server.url).netloc
    hf_s, git_s = [], []
    for run in range(args.runs):
        dest = work / f"hf{run}"
        hf = HubClient(server.url, token, work / f"hf-client{run}")
        hf_s.append(timed(lambda: hf.hf_ok("download", repo, "--local-dir", str(dest), timeout=3600)))
        assert sha256_file(dest / "model.safetensors") == want
        shutil.rmtree(dest)
        home = work / f"git-home{run}"
        home.mkdir()
        git(home, "lfs", "install", "--skip-repo")
        git_s.append(timed(lambda: git(home, "clone", "-q", "--depth", "1", f"http://git:{token}@{host}/{repo}", "m")))
        assert sha256_file(home / "m" / "model.safetensors") == want
        shutil.rmtree(home)
    return {"bytes": size, "hf_download_s": hf_s, "git_clone_depth1_lfs_s": git_s,
            "git_speed_share": [h / g for h, g in zip(hf_s, git_s)]}


def vm_hwm(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmHWM")


def many_clones(server, token, work, args):
    """Figure 2: the server's peak RSS while args.clients clones run."""
    # internal: every tenant's token reads it, and each clone is another
    # person's (one credential's clones share its memory share).
    server.request("POST", "/api/repos/create", token=token,
                   body=json.dumps({"name": "files", "visibility": "internal"}).encode())
    host = urlsplit(server.url).netloc
    url = f"http://git:{token}@{host}/bench/files"
    readers = [server.make_credential(f"reader{n}", "read") for n in range(args.clients)]
    home = work / "pusher"
    home.mkdir()
    git(home, "clone", "-q", url, "files")
    repo = home / "files"
    for i in range(args.files):
        d = repo / f"d{i % 100:03d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i:05d}.txt").write_text(f"file {i} of a repo of many small files\n" * 8)
    git(home, "add", "-A", cwd=repo)
    git(home, "commit", "-q", "-m", f"{args.files} files", cwd=repo)
    git(home, "push", "-q", "origin", "main", cwd=repo)
    head = git(home, "rev-parse", "HEAD", cwd=repo)
    pid = server.proc.pid
    idle = vm_hwm(pid)
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts again from the RSS now
    before = vm_hwm(pid)
    errors = []
    mark = server.log_mark()

    def clone(n):
        h = work / f"cloner{n}"
        h.mkdir()
        try:
            git(h, "clone", "-q", "--no-checkout", f"http://git:{readers[n]}@{host}/bench/files", "c")
            if git(h, "rev-parse", "HEAD", cwd=h / "c") != head:
                errors.append(f"clone {n}: wrong head")
        except SystemExit as e:
            errors.append(str(e))

    threads = [threading.Thread(target=clone, args=(n,)) for n in range(args.clients)]
    t = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t
    if errors:
        refused = [f"{q.get('path')}: {q.get('status')} {q.get('error')} {q.get('message')}"
                   for q in server.requests_since(mark) if q.get("status") != 200]
        raise SystemExit("\n".join(errors + sorted(set(refused))))
    return {"files": args.files, "clients": args.clients, "wall_s": wall, "rss_before_clones": before,
            "hwm_before_reset": idle, "peak_rss": vm_hwm(pid), "memory_budget": args.memory_budget}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--payload", default="bf16", choices=payloads.KINDS)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--memory-budget", default="512MiB")
    ap.add_argument("--binary", default=None)
    ap.add_argument("--skip", choices=("model", "clones"), default=None)
    args = ap.parse_args()
    if shutil.which("git") is None or subprocess.run(["git", "lfs", "version"], capture_output=True).returncode:
        raise SystemExit("needs git and git-lfs (apt-get install git git-lfs)")
    work = Path(tempfile.mkdtemp(prefix="bench-git-"))
    binary = bench_binary(args.binary, work)
    server = OpenxetServer(binary, work / "server", ("--memory-budget", args.memory_budget)).start()
    out = {"payload": args.payload, "mib": args.mib}
    try:
        token = server.make_credential("bench")
        if args.skip != "model":
            out["model"] = m = model_download(server, token, work, args)
            print(f"{m['bytes']} B model: hf download {', '.join(f'{s:.1f}' for s in m['hf_download_s'])} s; "
                  f"git clone --depth 1 + LFS {', '.join(f'{s:.1f}' for s in m['git_clone_depth1_lfs_s'])} s; "
                  f"git's speed {', '.join(f'{r:.2f}' for r in m['git_speed_share'])}x hf download's")
        if args.skip != "clones":
            out["clones"] = c = many_clones(server, token, work, args)
            print(f"{c['clients']} clones of {c['files']} files at once: {c['wall_s']:.1f} s; server peak RSS "
                  f"{c['peak_rss'] / MiB:.0f} MiB (before {c['rss_before_clones'] / MiB:.0f} MiB), "
                  f"memory budget {c['memory_budget']}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
