"""Paths, history and copies with the stock Python client: HfApi's
get_paths_info and list_repo_commits, create_commit with
CommitOperationCopy (within a repo and from another repo of the tenant),
`hf repos cp`, and HfFileSystem's info, modified, cp_file and mv, against a
real `openxet serve`.

Each call runs in a fresh interpreter with its own HF_HOME (conftest.HubClient
env), and each test asserts what the user gets back: the objects the client
builds from the answers, the files a download brings, the usage the tenant
is charged.
"""

import hashlib
import json
import subprocess
import sys
from datetime import datetime

import pytest

from conftest import KiB, HubClient, write_random

PY_TIMEOUT_S = 300.0

PRELUDE = """
import json, sys, warnings
warnings.simplefilter("ignore")
ARGS = json.loads(sys.stdin.read())
from huggingface_hub import HfApi, HfFileSystem, CommitOperationAdd, CommitOperationCopy, CommitOperationDelete
api = HfApi()
def out(v):
    sys.stdout.write(json.dumps(v, default=str) + "\\n")
"""


def run_py(client, code, **args):
    """Run PRELUDE + code in a fresh interpreter with client's environment;
    code prints its result with out(...). Returns that result."""
    r = subprocess.run([sys.executable, "-c", PRELUDE + code], input=json.dumps(args), capture_output=True,
                       text=True, env=client.env(), timeout=PY_TIMEOUT_S, cwd=client.workdir)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("{", "["))]
    if r.returncode != 0 or not lines:
        raise AssertionError(f"script failed (exit {r.returncode})\nstdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-8000:]}")
    return json.loads(lines[-1])


def sha256(b):
    return hashlib.sha256(b).hexdigest()


@pytest.fixture(scope="module")
def frank(server, tmp_path_factory):
    token = server.make_credential("frank")
    return HubClient(server.url, token, tmp_path_factory.mktemp("hub-frank"))


@pytest.fixture(scope="module")
def src_repo(frank, tmp_path_factory):
    """frank/paths: commit 1 adds a big Xet file, a small one and a folder,
    commit 2 changes dir/x.txt. Returns the files' bytes and the commits."""
    root = tmp_path_factory.mktemp("paths-src")
    write_random(root / "big.bin", 300 * KiB + 5, "paths-big")
    files = {"big.bin": (root / "big.bin").read_bytes(), "small.txt": b"small file\n", "dir/x.txt": b"x one\n"}
    res = run_py(frank, """
api.create_repo("frank/paths")
c1 = api.create_commit("frank/paths", commit_message="first files", operations=[
    CommitOperationAdd(path_in_repo=p, path_or_fileobj=ARGS["root"] + "/" + p if p == "big.bin" else ARGS["small"][p].encode())
    for p in ["big.bin", "small.txt", "dir/x.txt"]])
c2 = api.create_commit("frank/paths", commit_message="change x", operations=[
    CommitOperationAdd(path_in_repo="dir/x.txt", path_or_fileobj=b"x two\\n")])
out({"c1": c1.oid, "c2": c2.oid})
""", root=str(root), small={"small.txt": "small file\n", "dir/x.txt": "x one\n"})
    files["dir/x.txt"] = b"x two\n"
    return {"files": files, **res}


def test_get_paths_info(frank, src_repo):
    got = run_py(frank, """
def show(e):
    d = {"class": type(e).__name__, "path": e.path}
    for k in ("size", "blob_id", "xet_hash", "tree_id"):
        if hasattr(e, k):
            d[k] = getattr(e, k)
    lfs = getattr(e, "lfs", None)
    d["lfs"] = None if lfs is None else {"sha256": lfs.sha256, "size": lfs.size, "pointer_size": lfs.pointer_size}
    lc = e.last_commit
    d["last_commit"] = None if lc is None else {"oid": lc.oid, "title": lc.title, "date": lc.date.isoformat()}
    return d
plain = api.get_paths_info("frank/paths", ["big.bin", "small.txt", "dir", "missing.txt"])
expanded = api.get_paths_info("frank/paths", ["big.bin", "dir/x.txt", "dir"], expand=True)
out({"plain": [show(e) for e in plain], "expanded": [show(e) for e in expanded]})
""")
    big = src_repo["files"]["big.bin"]
    plain = {e["path"]: e for e in got["plain"]}
    assert set(plain) == {"big.bin", "small.txt", "dir"}, got  # missing.txt is left out
    assert plain["big.bin"]["class"] == "RepoFile" and plain["big.bin"]["size"] == len(big)
    assert plain["big.bin"]["lfs"]["sha256"] == sha256(big) and plain["big.bin"]["lfs"]["size"] == len(big)
    assert plain["big.bin"]["xet_hash"] and plain["big.bin"]["last_commit"] is None
    assert plain["small.txt"]["class"] == "RepoFile" and plain["small.txt"]["lfs"] is None
    assert plain["small.txt"]["size"] == len(src_repo["files"]["small.txt"]) and plain["small.txt"]["xet_hash"] is None
    assert plain["dir"]["class"] == "RepoFolder" and plain["dir"]["tree_id"]

    expanded = {e["path"]: e for e in got["expanded"]}
    assert expanded["big.bin"]["last_commit"]["oid"] == src_repo["c1"]
    assert expanded["big.bin"]["last_commit"]["title"] == "first files"
    assert expanded["dir/x.txt"]["last_commit"]["oid"] == src_repo["c2"]
    assert expanded["dir"]["last_commit"]["oid"] == src_repo["c2"]
    assert expanded["dir/x.txt"]["last_commit"]["title"] == "change x"


def test_get_paths_info_errors(server, frank, src_repo, tmp_path):
    bob = HubClient(server.url, server.make_credential("bob-paths"), tmp_path / "bob")
    code = """
try:
    api.get_paths_info(ARGS["repo"], ["big.bin"], revision=ARGS.get("rev"))
    out({"raised": None})
except Exception as e:
    out({"raised": type(e).__name__, "status": getattr(getattr(e, "response", None), "status_code", None), "message": str(e)})
"""
    for client, repo, rev, cls, sentence in [
        (bob, "frank/paths", None, "RepositoryNotFoundError", "repository frank/paths not found"),
        (frank, "frank/none", None, "RepositoryNotFoundError", "repository frank/none not found"),
        (frank, "frank/paths", "nobranch", "RevisionNotFoundError", "revision nobranch not found in frank/paths"),
    ]:
        got = run_py(client, code, repo=repo, rev=rev)
        assert got["raised"] == cls and got["status"] == 404, got
        assert sentence in got["message"] and "/paths-info/" in got["message"], got


def test_copy_commits_cost_no_bytes(server, frank, src_repo):
    """CommitOperationCopy of a Xet file and of a regular one, within the
    repo and from it into another repo of the tenant: the copies download
    as the originals, and the tenant's usage does not move."""
    run_py(frank, 'api.create_repo("frank/copies", repo_type="dataset"); out({})')
    before = server.usage("frank")
    mark = server.log_mark()
    res = run_py(frank, """
c = api.create_commit("frank/paths", commit_message="copy inside", operations=[
    CommitOperationCopy(src_path_in_repo="big.bin", path_in_repo="copies/big.bin"),
    CommitOperationCopy(src_path_in_repo="small.txt", path_in_repo="copies/small.txt")])
x = api.create_commit("frank/copies", repo_type="dataset", commit_message="copy across", operations=[
    CommitOperationCopy(src_path_in_repo="big.bin", path_in_repo="from-paths/big.bin", src_repo_id="frank/paths", src_repo_type="model"),
    CommitOperationCopy(src_path_in_repo="dir/x.txt", path_in_repo="from-paths/x.txt", src_repo_id="frank/paths", src_repo_type="model")])
got = {}
for repo, typ, p in [("frank/paths", "model", "copies/big.bin"), ("frank/paths", "model", "copies/small.txt"),
                     ("frank/copies", "dataset", "from-paths/big.bin"), ("frank/copies", "dataset", "from-paths/x.txt")]:
    got[repo + ":" + p] = open(api.hf_hub_download(repo, p, repo_type=typ), "rb").read().hex()
out({"inside": c.oid, "across": x.oid, "files": got})
""")
    files = src_repo["files"]
    assert res["files"] == {
        "frank/paths:copies/big.bin": files["big.bin"].hex(),
        "frank/paths:copies/small.txt": files["small.txt"].hex(),
        "frank/copies:from-paths/big.bin": files["big.bin"].hex(),
        "frank/copies:from-paths/x.txt": files["dir/x.txt"].hex(),
    }
    assert server.usage("frank") == before, "a copy of a Xet file must cost no bytes"
    reqs = server.requests_since(mark)
    dup = [e for e in reqs if e.get("path") == "/api/models/frank/paths/lfs-files/duplicate"]
    assert [e["status"] for e in dup] == ["200"], dup
    assert not [e for e in reqs if e.get("path", "").startswith("/v1/xorbs/")], "a copy uploads no xorb"


def test_hf_repos_cp_between_repos(server, frank, src_repo):
    run_py(frank, 'api.create_repo("frank/cp-dest"); out({})')
    before = server.usage("frank")
    r = frank.hf_ok("repos", "cp", "hf://frank/paths/big.bin", "hf://frank/cp-dest/weights/big.bin")
    r2 = frank.hf_ok("repos", "cp", "hf://frank/paths/dir/", "hf://frank/cp-dest/dir/")
    got = run_py(frank, """
out({p: open(api.hf_hub_download("frank/cp-dest", p), "rb").read().hex() for p in api.list_repo_files("frank/cp-dest") if p != ".gitattributes"})
""")
    assert got == {"weights/big.bin": src_repo["files"]["big.bin"].hex(), "dir/x.txt": src_repo["files"]["dir/x.txt"].hex()}, (got, r, r2)
    assert server.usage("frank") == before


def test_list_repo_commits_pages(server, frank):
    """60 commits and the initial one: list_repo_commits follows the Link
    header through two pages of 50 and returns them newest first."""
    res = run_py(frank, """
api.create_repo("frank/history")
oids = []
for i in range(60):
    oids.append(api.create_commit("frank/history", commit_message=f"commit {i}", commit_description=f"body <{i}>",
        operations=[CommitOperationAdd(path_in_repo="n.txt", path_or_fileobj=str(i).encode())]).oid)
out({"oids": oids})
""")
    mark = server.log_mark()
    got = run_py(frank, """
cs = api.list_repo_commits("frank/history")
fm = api.list_repo_commits("frank/history", formatted=True)[:2]
out({"commits": [{"id": c.commit_id, "title": c.title, "message": c.message, "authors": c.authors,
                  "date": c.created_at.isoformat(), "ft": c.formatted_title} for c in cs],
     "formatted": [{"title": c.formatted_title, "message": c.formatted_message} for c in fm]})
""")
    commits = got["commits"]
    assert [c["id"] for c in commits] == list(reversed(res["oids"])) + [commits[-1]["id"]]
    assert len(commits) == 61 and commits[-1]["title"] == "initial commit"
    assert commits[0]["title"] == "commit 59" and commits[0]["message"] == "body <59>" and commits[0]["authors"] == ["frank"]
    assert commits[0]["ft"] is None
    dates = [datetime.fromisoformat(c["date"]) for c in commits]
    assert dates == sorted(dates, reverse=True)
    assert got["formatted"][0] == {"title": "commit 59", "message": "body &lt;59&gt;"}
    pages = [e for e in server.requests_since(mark) if e.get("path") == "/api/models/frank/history/commits/main"]
    assert len(pages) == 4 and all(e["status"] == "200" for e in pages), pages  # two listings of two pages each


def test_hf_file_system(server, frank, src_repo):
    """HfFileSystem.info (refresh, expand_info), modified, cp_file and mv on
    a repo of the tenant."""
    (frank.workdir / "fs-big.bin").write_bytes(src_repo["files"]["big.bin"])
    run_py(frank, """
api.create_repo("frank/fs")
api.create_commit("frank/fs", commit_message="fs files", operations=[
    CommitOperationAdd(path_in_repo="big.bin", path_or_fileobj=ARGS["big"]),
    CommitOperationAdd(path_in_repo="notes/a.txt", path_or_fileobj=b"note a\\n")])
out({})
""", big=str(frank.workdir / "fs-big.bin"))
    before = server.usage("frank")
    got = run_py(frank, """
fs = HfFileSystem()
head = api.list_repo_commits("frank/fs")[0]
r = {"head": head.commit_id, "head_date": head.created_at.isoformat()}
r["info"] = fs.info("frank/fs/big.bin", refresh=True)
r["info_expand"] = fs.info("frank/fs/big.bin", expand_info=True)
r["dir_expand"] = fs.info("frank/fs/notes", expand_info=True)
r["root_expand"] = fs.info("frank/fs", expand_info=True)
r["modified"] = fs.modified("frank/fs/notes/a.txt").isoformat()
fs.cp_file("frank/fs/big.bin", "frank/fs/copy/big.bin")
fs.mv("frank/fs/notes/a.txt", "frank/fs/moved/a.txt")
fs2 = HfFileSystem()
r["after"] = sorted(fs2.find("frank/fs"))
r["copy"] = fs2.cat_file("frank/fs/copy/big.bin").hex()
r["moved"] = fs2.cat_file("frank/fs/moved/a.txt").decode()
try:
    fs2.info("frank/fs/notes/a.txt", refresh=True)
    r["gone"] = None
except FileNotFoundError as e:
    r["gone"] = "FileNotFoundError"
out(r)
""")
    big = src_repo["files"]["big.bin"]
    assert got["info"] == {"name": "frank/fs/big.bin", "size": len(big), "type": "file"}
    ie = got["info_expand"]
    assert ie["type"] == "file" and ie["size"] == len(big) and ie["xet_hash"]
    assert ie["lfs"]["sha256"] == sha256(big)
    assert ie["last_commit"]["oid"] == got["head"] and ie["last_commit"]["title"] == "fs files"
    assert got["dir_expand"]["type"] == "directory" and got["dir_expand"]["last_commit"]["oid"] == got["head"]
    # The root's last commit, as the client computes it, is the history's oldest.
    assert got["root_expand"]["last_commit"]["title"] == "initial commit"
    assert datetime.fromisoformat(got["modified"]) == datetime.fromisoformat(got["head_date"])
    assert got["after"] == ["frank/fs/.gitattributes", "frank/fs/big.bin", "frank/fs/copy/big.bin", "frank/fs/moved/a.txt"]
    assert got["copy"] == big.hex() and got["moved"] == "note a\n" and got["gone"] == "FileNotFoundError"
    assert server.usage("frank") == before
