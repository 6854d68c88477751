"""The client matrix (compat/matrix.py): older stock clients against one
openxet serve, each cell in its own cached environment.

Per Python cell (an hf_xet with the huggingface_hub of its time):
- xet: the core round trip through hf_xet alone: upload, re-upload with
  fresh caches (same file hashes, nothing new stored), download with fresh
  caches, byte compare;
- hub_upload: HfApi create_repo and upload_folder, then hf_hub_download of
  what was uploaded, byte compare (through Xet when the cell has hf_xet);
- hub_download: hf_hub_download of files the suite's pinned client uploaded.
Per JS cell (@huggingface/hub):
- js_upload: compat/js/roundtrip.mjs (createRepo, uploadFiles, listFiles,
  downloadFile, byte compare);
- js_download: roundtrip.mjs downloading what the pinned Python client
  uploaded.

Cells marked default in compat/matrix.py (oldest, a middle one and the
newest) run in the default test command; the rest only with --matrix
(`task compat:matrix`).
"""

import json
import re
import subprocess

import pytest

import matrix
from conftest import KiB, MiB, HubClient, XetClient, _clean_env, sha256_file, write_random
from test_js import NODE_TIMEOUT_S, node_client  # noqa: F401 (the fixture)

XORB_POST = re.compile(r"^/(?:v1/xorbs|xorbs|xorb)/[^/]+/[0-9a-f]{64}$")


def _params(cells):
    out = []
    for c in cells:
        marks = []
        if not c.default:
            marks.append(pytest.mark.matrix)
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


XET_CELLS = _params([c for c in matrix.PY_CELLS if c.hf_xet])
HUB_CELLS = _params(matrix.PY_CELLS)
JS_CELLS = _params(matrix.JS_CELLS)


def _version(v):
    return tuple(int(x) for x in v.split("."))


def _tenant(cell, op):
    return re.sub(r"[^a-z0-9]+", "-", f"m-{op}-{cell.name}".lower()).strip("-")


def small_set(d, seed):
    """A few files of every kind the round trip needs, small enough for CI.
    The seed is the cell's: the server's global dedup spans tenants, so
    cells sharing data would find their chunks stored by another."""
    d.mkdir(parents=True)
    (d / "empty.bin").write_bytes(b"")
    (d / "one.bin").write_bytes(b"\x5a")
    write_random(d / "r100k.bin", 100 * KiB, f"{seed}-100k")
    write_random(d / "r3m.bin", 3 * MiB + 17, f"{seed}-3m")
    (d / "text.txt").write_bytes(b"".join(b"%s line %06d of the matrix text\n" % (seed.encode(), i)
                                          for i in range(40_000)))
    return sorted(d.iterdir())


@pytest.fixture(scope="module")
def pinned_repo(server, tmp_path_factory):
    """A repo uploaded by the suite's pinned client: a text file and a binary
    stored through Xet; (token, repo, {path: sha256})."""
    token = server.make_credential("m-pinned")
    tmp = tmp_path_factory.mktemp("matrix-pinned")
    hub = HubClient(server.url, token, tmp / "hf")
    src = tmp / "src"
    (src / "w").mkdir(parents=True)
    (src / "README.md").write_text("# uploaded by the pinned client\n" * 10)
    write_random(src / "w/weights.bin", 2 * MiB + 4097, "matrix-pinned")
    hub.hf_ok("repos", "create", "pinned")
    hub.hf_ok("upload", "m-pinned/pinned", src)
    return token, "m-pinned/pinned", {p: sha256_file(src / p) for p in ("README.md", "w/weights.bin")}


# --------------------------------------------------------------------------
# Python cells


@pytest.mark.parametrize("cell", XET_CELLS)
def test_xet_round_trip(cell, server, tmp_path):
    py = matrix.python_of(cell)
    tenant = _tenant(cell, "xet")
    token = server.make_credential(tenant)
    paths = small_set(tmp_path / "data", cell.name)
    first = XetClient(server.url, token, tmp_path / "up1", python=py).upload_files(paths)
    assert [f["file_size"] for f in first] == [p.stat().st_size for p in paths], first
    usage = server.usage(tenant)
    assert usage >= 3 * MiB, f"{usage} bytes stored after the upload"

    again = XetClient(server.url, token, tmp_path / "up2", python=py).upload_files(paths)
    assert [f["hash"] for f in again] == [f["hash"] for f in first], "the re-upload reported other file hashes"
    assert server.usage(tenant) == usage, "the re-upload with fresh caches stored new bytes"

    out = tmp_path / "out"
    out.mkdir()
    dests = [(out / p.name, f["hash"], f["file_size"]) for p, f in zip(paths, first)]
    XetClient(server.url, token, tmp_path / "down", python=py).download_files(dests)
    for (dest, _, size), p in zip(dests, paths):
        if size == 0 and not dest.exists() and _version(cell.hf_xet) < (1, 3):
            # hf_xet before 1.3 writes no file for an empty download: the
            # reconstruction has no terms, so it never opens the file
            # (huggingface_hub never hands it an empty file).
            continue
        assert dest.exists() and sha256_file(dest) == sha256_file(p), f"{p.name} came back different"


@pytest.fixture(scope="module")
def owned_file(server, tmp_path_factory):
    """A file another tenant stored with the suite's pinned client, for the
    cells to deduplicate against: (path, xet hash)."""
    token = server.make_credential("m-owner")
    tmp = tmp_path_factory.mktemp("matrix-owned")
    path = tmp / "owned.bin"
    write_random(path, 3 * MiB + 4097, "matrix-owned")
    [info] = XetClient(server.url, token, tmp / "up").upload_files([path])
    return path, info["hash"]


@pytest.mark.parametrize("cell", XET_CELLS)
def test_xet_cross_tenant_dedup(cell, server, owned_file, tmp_path):
    """Under global dedup a cell's client uploads a file another tenant
    stored: it references that tenant's xorbs, which openxet accepts only
    with verification entries that prove it holds the chunks (SECURITY.md,
    the possession rule), so every client version must send them. The
    upload succeeds, stores next to nothing new, and downloads back."""
    py = matrix.python_of(cell)
    tenant = _tenant(cell, "xdedup")
    token = server.make_credential(tenant)
    path, _ = owned_file
    mark = server.log_mark()
    [info] = XetClient(server.url, token, tmp_path / "up", python=py).upload_files([path])
    shards = [e for e in server.requests_since(mark) if e["method"] in ("POST", "PUT") and "shard" in e["path"]]
    assert shards and all(e["status"] == "200" for e in shards), f"shard uploads: {shards}"
    # hf_xet 1.1.6 and older give this file another hash than the pinned
    # client does and store a part of it anew, but find most of it stored.
    size = path.stat().st_size
    assert server.usage(tenant) < size // 2, f"{server.usage(tenant)} of {size} bytes stored: the client did not deduplicate"
    dest = tmp_path / "back.bin"
    XetClient(server.url, token, tmp_path / "down", python=py).download_files([(dest, info["hash"], size)])
    assert sha256_file(dest) == sha256_file(path), "the deduplicated file came back different"


@pytest.mark.parametrize("cell", HUB_CELLS)
def test_hub_upload(cell, server, tmp_path):
    py = matrix.python_of(cell)
    tenant = _tenant(cell, "hub")
    token = server.make_credential(tenant)
    hub = HubClient(server.url, token, tmp_path / "hf", python=py)
    repo = f"{tenant}/up"
    src = tmp_path / "src"
    (src / "w").mkdir(parents=True)
    (src / "README.md").write_text(f"# uploaded by {cell.name}\n")
    write_random(src / "w/weights.bin", 2 * MiB + 4097, f"matrix-hub-{cell.name}")
    hub.api("create_repo", repo_id=repo)
    mark = server.log_mark()
    hub.api("upload_folder", repo_id=repo, folder_path=str(src), commit_message=f"from {cell.name}")
    if cell.hf_xet:
        xorbs = [e for e in server.requests_since(mark)
                 if e["method"] == "POST" and XORB_POST.match(e["path"]) and e["status"] == "200"]
        assert xorbs, "the upload sent no xorb: it did not go through Xet"
    fresh = HubClient(server.url, token, tmp_path / "hf2", python=py)
    for p in ("README.md", "w/weights.bin"):
        got = fresh.api("hf_hub_download", repo_id=repo, filename=p, local_dir=str(tmp_path / "dl"))
        assert sha256_file(got) == sha256_file(src / p), f"{p} came back different"


@pytest.mark.parametrize("cell", HUB_CELLS)
def test_hub_download(cell, server, pinned_repo, tmp_path):
    py = matrix.python_of(cell)
    token, repo, want = pinned_repo
    hub = HubClient(server.url, token, tmp_path / "hf", python=py)
    for p, sha in want.items():
        got = hub.api("hf_hub_download", repo_id=repo, filename=p, local_dir=str(tmp_path / "dl"))
        assert sha256_file(got) == sha, f"{p} came back different"


# --------------------------------------------------------------------------
# JS cells


def _roundtrip(node, js_dir, server, token, repo, cwd, **env_extra):
    env = _clean_env()
    env.update({"HUB_URL": server.url, "HF_TOKEN": token, "REPO": repo, "NODE_NO_WARNINGS": "1"})
    env.update(env_extra)
    r = subprocess.run([node, str(js_dir / "roundtrip.mjs")], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"roundtrip.mjs printed no result (exit {r.returncode})\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    out = json.loads(lines[-1])
    refused = [q for q in out.get("requests", []) if q.get("refused")]
    assert not refused, f"the client tried to leave 127.0.0.1: {refused}"
    brief = {k: v for k, v in out.items() if k != "requests"}
    assert out["ok"] and r.returncode == 0, f"roundtrip.mjs: {json.dumps(brief)[:4000]}"
    return out


@pytest.mark.parametrize("cell", JS_CELLS)
def test_js_upload(cell, server, node_client, tmp_path):  # noqa: F811
    js_dir = matrix.js_dir_of(cell)
    tenant = _tenant(cell, "jsup")
    token = server.make_credential(tenant)
    out = _roundtrip(node_client, js_dir, server, token, f"{tenant}/rt", tmp_path, BIG_BYTES=str(MiB + 17))
    files = {f["path"]: f for f in out["files"]}
    assert set(files) == {"README.txt", "data/nested/random.bin"}, files


@pytest.mark.parametrize("cell", JS_CELLS)
def test_js_download(cell, server, node_client, pinned_repo, tmp_path):  # noqa: F811
    js_dir = matrix.js_dir_of(cell)
    token, repo, want = pinned_repo
    expect = [{"path": p, "sha256": s} for p, s in want.items()]
    out = _roundtrip(node_client, js_dir, server, token, repo, tmp_path, EXPECT=json.dumps(expect))
    assert {f["path"] for f in out["files"]} == set(want)
