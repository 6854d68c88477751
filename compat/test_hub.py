"""The Hub API end to end with the stock clients: `hf repos create`,
`hf upload`, `hf download` and HfApi (huggingface_hub, with hf_xet for the
large files) against a real `openxet serve`.

One server per module. Tenant alice creates repos under her namespace; bob is
a second tenant that must not see them; carol has a small quota. Every
client runs in its own interpreter with its own HF_HOME and HF_XET_CACHE
(conftest.HubClient), and every download goes into a fresh directory, so
bytes come from the server, never from a local cache.
"""

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import KiB, MiB, HubClient, cli_error, sha256_file, write_random

XET_UPLOAD = ("POST", re.compile(r"^/v1/xorbs/default/[0-9a-f]{64}$"))
SHARD_UPLOAD = ("POST", re.compile(r"^/v[12]/shards$"))
RECONSTRUCTION = ("GET", re.compile(r"^/v[12]/reconstructions/[0-9a-f]{64}$"))
FETCH = ("GET", re.compile(r"^/v1/fetch/[0-9a-f]{64}$"))
SHA_RE = re.compile(r"/commit/([0-9a-f]{40})\b")
# make_folder writes random (binary) bytes above this size, text below: the
# former go through Xet ("lfs" mode), the latter are "regular".
REGULAR_MAX = 64 * KiB


# --------------------------------------------------------------------------
# helpers


@dataclass
class RepoFiles:
    """A local folder uploaded to a repo: repo path -> (local file, sha256, size)."""
    repo_id: str
    repo_type: str
    folder: Path
    files: dict
    commit: str = ""

    def expected(self):
        return {p: sha for p, (_, sha, _) in self.files.items()}


def _text(size, seed):
    words = [f"w{seed}x{i}" for i in range(97)]
    out, i = [], 0
    while sum(map(len, out)) < size:
        out.append(words[(i * 31 + seed) % len(words)] + (" " if i % 13 else "\n"))
        i += 1
    return "".join(out).encode()[:size]


def make_folder(root, spec, seed):
    """spec: {repo path: size or bytes}. Sizes > 64 KiB get random bytes,
    smaller ones text. Returns {path: (file, sha256, size)}."""
    files = {}
    for i, (rel, what) in enumerate(sorted(spec.items())):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, bytes):
            p.write_bytes(what)
        elif what > REGULAR_MAX:
            write_random(p, what, f"{seed}/{rel}")
        else:
            p.write_bytes(_text(what, i + 7 * seed))
        files[rel] = (p, sha256_file(p), p.stat().st_size)
    return files


def add_gitattributes(server, token, repo_id, files, root, repo_type="model"):
    """Add the .gitattributes every new repo starts with (the Hub's default,
    its first commit) to files, as make_folder lists them."""
    prefix = {"model": "", "dataset": "datasets/"}[repo_type]
    r = server.request("GET", f"/{prefix}{repo_id}/resolve/main/.gitattributes", token=token)
    assert r.status == 200 and b"*.safetensors filter=lfs" in r.body, r
    p = root / "gitattributes-of-the-repo"
    p.write_bytes(r.body)
    files[".gitattributes"] = (p, sha256_file(p), p.stat().st_size)
    return files


def tree_shas(root):
    """{relative path: sha256} of every file under root (symlinks followed)."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): sha256_file(p)
            for p in sorted(root.rglob("*")) if p.is_file()}


def commit_of(result):
    m = SHA_RE.search(result.output)
    assert m, f"no commit URL in the hf output:\n{result!r}"
    return m.group(1)


def matching(entries, route, status=None):
    method, pat = route
    return [e for e in entries if e.get("method") == method and pat.match(e.get("path", ""))
            and (status is None or e.get("status") == str(status))]


def snapshot_dir(cache_dir, repo_id, repo_type="model"):
    """The single snapshot folder of a repo in a huggingface_hub cache."""
    base = Path(cache_dir) / f"{repo_type}s--{repo_id.replace('/', '--')}" / "snapshots"
    snaps = [p for p in base.iterdir() if p.is_dir()]
    assert len(snaps) == 1, f"expected one snapshot under {base}, found {snaps}"
    return snaps[0]


def human_bytes(n):
    """openxet's limits.HumanBytes, as quota messages print sizes: one decimal, none when it is 0."""
    if n < 0:
        return "unlimited"
    if n < 1024:
        return f"{n} B"
    div, exp, m = 1024, 0, n // 1024
    while m >= 1024:
        div *= 1024
        exp += 1
        m //= 1024
    return f"{n / div:.1f}".removesuffix(".0") + f" {'KMGTPE'[exp]}iB"


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def alice_token(server):
    return server.make_credential("alice")


@pytest.fixture(scope="module")
def alice(server, alice_token, tmp_path_factory):
    return HubClient(server.url, alice_token, tmp_path_factory.mktemp("hub-alice"))


def fresh(server, token, tmp_path, name="client"):
    """A client with empty HF_HOME and xet cache: nothing it reads is local."""
    return HubClient(server.url, token, tmp_path / name)


MODEL_SPEC = {
    "README.md": _text(1500, 1),
    "config.json": b'{"architectures": ["OpenxetCompat"], "hidden_size": 64}\n',
    "notes/a.txt": 3 * KiB,
    "notes/b.txt": 5 * KiB,
    "sub/empty.txt": b"",
    "sub/medium.bin": 100 * KiB,
    "sub/deep/big-3m.bin": 3 * MiB,
    "sub/deep/big-7m.bin": 7 * MiB + 123,
    "sub/deep/big-20m.bin": 20 * MiB,
}


@pytest.fixture(scope="module")
def model(server, alice, alice_token, tmp_path_factory):
    """`hf repos create hub-model` then `hf upload alice/hub-model FOLDER`."""
    root = tmp_path_factory.mktemp("model-folder")
    files = make_folder(root, MODEL_SPEC, seed=1)
    created = alice.hf_ok("repos", "create", "hub-model")
    assert "alice/hub-model" in created.output, created
    mark = server.log_mark()
    up = alice.hf_ok("upload", "alice/hub-model", root, "--commit-message", "first upload")
    add_gitattributes(server, alice_token, "alice/hub-model", files, root.parent)
    rf = RepoFiles("alice/hub-model", "model", root, files, commit_of(up))
    rf.upload_requests = server.requests_since(mark)
    rf.upload_output = up.output
    rf.token = alice_token
    return rf


# --------------------------------------------------------------------------
# model repo: upload and download


def test_hf_upload_folder_goes_through_xet(model):
    reqs = model.upload_requests
    by = lambda m, p: [e for e in reqs if e["method"] == m and re.fullmatch(p, e["path"])]  # noqa: E731
    pre = by("POST", r"/api/models/alice/hub-model/preupload/main")
    assert pre and all(e["status"] == "200" for e in pre), pre
    assert [e["status"] for e in by("GET", r"/api/models/alice/hub-model/xet-write-token/main")] == ["200"]
    xorbs = matching(reqs, XET_UPLOAD)
    assert xorbs and all(e["status"] == "200" for e in xorbs), xorbs
    # Everything sent through Xet: the four files over 64 KiB (~30 MiB).
    large = sum(size for _, _, size in model.files.values() if size > REGULAR_MAX)
    assert sum(int(e["bytes_in"]) for e in xorbs) >= large
    assert [e["status"] for e in matching(reqs, SHARD_UPLOAD)] == ["200"]
    commits = by("POST", r"/api/models/alice/hub-model/commit/main")
    assert [e["status"] for e in commits] == ["200"]
    # The commit carries the regular files inline, so it is larger than them.
    small = sum(size for _, _, size in model.files.values() if size <= REGULAR_MAX)
    assert int(commits[0]["bytes_in"]) > small
    errors = [e for e in reqs if e["status"][0] in "45"
              and not (e["path"] == "/api/repos/create" and e["status"] == "409")  # exist_ok
              and not e["path"].startswith("/v1/xorb-grants/")  # hf_xet 1.8 probes; 404
              and not e["path"].startswith("/v1/chunks/")]  # dedup misses; 404
    assert not errors, errors


def test_hf_download_single_files(server, alice_token, model, tmp_path):
    client = fresh(server, alice_token, tmp_path)
    picks = ["README.md", "notes/b.txt", "sub/medium.bin", "sub/deep/big-7m.bin"]
    mark = server.log_mark()
    for i, rel in enumerate(picks):
        dest = tmp_path / f"local-{i}"
        r = client.hf_ok("download", model.repo_id, rel, "--local-dir", dest)
        got = dest / rel
        assert got.is_file(), r
        assert sha256_file(got) == model.files[rel][1], rel
    reqs = server.requests_since(mark)
    # The xet files came through the CAS, the small ones from resolve.
    assert matching(reqs, RECONSTRUCTION, 200), reqs
    assert matching(reqs, FETCH), reqs
    got_small = [e for e in reqs if e["method"] == "GET" and e["path"] == "/alice/hub-model/resolve/main/README.md"]
    assert got_small and got_small[-1]["status"] == "200", reqs


def test_hf_download_single_file_to_cache(server, alice_token, model, tmp_path):
    client = fresh(server, alice_token, tmp_path)
    cache = tmp_path / "cache"
    client.hf_ok("download", model.repo_id, "sub/deep/big-3m.bin", "--cache-dir", cache)
    snap = snapshot_dir(cache, model.repo_id)
    assert snap.name == model.commit
    assert sha256_file(snap / "sub/deep/big-3m.bin") == model.files["sub/deep/big-3m.bin"][1]


def test_hf_download_snapshot_fresh_cache(server, alice_token, model, tmp_path):
    client = fresh(server, alice_token, tmp_path)
    cache = tmp_path / "cache"
    mark = server.log_mark()
    client.hf_ok("download", model.repo_id, "--cache-dir", cache)
    reqs = server.requests_since(mark)
    snap = snapshot_dir(cache, model.repo_id)
    assert snap.name == model.commit
    assert tree_shas(snap) == model.expected()
    # The tree listing carries xetHash, so the large files skip the HEAD and
    # go straight to the CAS: one reconstruction per xet file.
    xet_files = [p for p, (_, _, size) in model.files.items() if size > REGULAR_MAX]
    recon = matching(reqs, RECONSTRUCTION, 200)
    assert len({e["path"] for e in recon}) == len(xet_files), recon
    bad = [e for e in reqs if e["status"][0] in "45"]
    assert not bad, bad


def test_list_repo_files_and_file_exists(alice, model):
    listed = alice.api("list_repo_files", repo_id=model.repo_id)
    assert sorted(listed) == sorted(model.files)
    for rel in ("README.md", "sub/empty.txt", "sub/deep/big-20m.bin"):
        assert alice.api("file_exists", repo_id=model.repo_id, filename=rel) is True, rel
    assert alice.api("file_exists", repo_id=model.repo_id, filename="no/such/file.bin") is False
    assert alice.api("file_exists", repo_id=model.repo_id, filename="sub/deep") is False
    assert alice.api("repo_exists", repo_id=model.repo_id) is True
    assert alice.api("repo_exists", repo_id="alice/no-such-repo") is False


def test_repo_info_returns_sha_and_files(alice, model):
    info = alice.api("repo_info", repo_id=model.repo_id, files_metadata=True)
    assert info["sha"] == model.commit
    sizes = {s["rfilename"]: s["size"] for s in info["siblings"]}
    assert sizes == {p: size for p, (_, _, size) in model.files.items()}
    lfs = {s["rfilename"]: s["lfs"]["sha256"] for s in info["siblings"] if s.get("lfs")}
    assert lfs == {p: sha for p, (_, sha, size) in model.files.items() if size > REGULAR_MAX}
    tree = alice.api("list_repo_tree", repo_id=model.repo_id, recursive=True)
    folders = {e["path"] for e in tree if "tree_id" in e}
    assert folders == {"notes", "sub", "sub/deep"}, tree
    tree_files = {e["path"]: e for e in tree if "blob_id" in e}
    assert set(tree_files) == set(model.files)
    for p, (_, sha, size) in model.files.items():
        assert tree_files[p]["size"] == size, tree_files[p]
        if size > REGULAR_MAX:
            assert tree_files[p]["lfs"]["sha256"] == sha, tree_files[p]


def test_urls_the_cli_prints_open_pages(server, model):
    """The repo and commit URLs `hf repos create` and `hf upload` print open
    an HTML page (what a browser gets: no token, so nothing of the repo),
    and the same page with the tenant's token lists the files."""
    urls = re.findall(r"https?://\S+/alice/hub-model(?:/commit/[0-9a-f]{40})?\b", model.upload_output)
    assert any("/commit/" in u for u in urls), model.upload_output
    for url in {*urls, server.url + "/alice/hub-model"}:
        path = url.split(server.url.split("://")[1], 1)[1]
        page = server.request("GET", path)
        assert page.status == 200 and page.headers["Content-Type"].startswith("text/html"), (url, page)
        text = page.body.decode()
        assert "hf download alice/hub-model" in text and "HF_ENDPOINT=" + server.url in text, text
        assert not [p for p in model.files if p in text], text
        if model.commit not in url:  # a commit page repeats its URL's sha, nothing else
            assert model.commit not in text, text
        full = server.request("GET", path, token=model.token).body.decode()
        assert all(p in full for p in model.files) and model.commit in full, full


# --------------------------------------------------------------------------
# a second commit, then a deletion


def test_second_upload_new_commit_and_delete(server, alice, alice_token, tmp_path):
    repo = "alice/hub-edit"
    alice.hf_ok("repos", "create", repo)
    v1 = make_folder(tmp_path / "v1", {"keep.txt": 2 * KiB, "data/blob.bin": 2 * MiB,
                                       "data/small.txt": 1 * KiB}, seed=2)
    c1 = commit_of(alice.hf_ok("upload", repo, tmp_path / "v1"))

    # Changed content: a single file to a path in the repo, then a folder.
    new_blob = tmp_path / "new-blob.bin"
    new_sha = write_random(new_blob, 3 * MiB + 5, "edit/blob-v2")
    c2 = commit_of(alice.hf_ok("upload", repo, new_blob, "data/blob.bin"))
    assert c2 != c1
    v2 = make_folder(tmp_path / "v2", {"data/small.txt": b"changed small text\n"}, seed=3)
    c3 = commit_of(alice.hf_ok("upload", repo, tmp_path / "v2"))
    assert c3 not in (c1, c2)
    assert alice.api("repo_info", repo_id=repo)["sha"] == c3

    attrs = add_gitattributes(server, alice_token, repo, {}, tmp_path)[".gitattributes"][1]
    want = {".gitattributes": attrs, "keep.txt": v1["keep.txt"][1], "data/blob.bin": new_sha,
            "data/small.txt": v2["data/small.txt"][1]}
    client = fresh(server, alice_token, tmp_path, "reader")
    client.hf_ok("download", repo, "--local-dir", tmp_path / "dl-v3")
    got = {k: v for k, v in tree_shas(tmp_path / "dl-v3").items() if not k.startswith(".cache/")}
    assert got == want

    # The old revision still has the old bytes.
    client.hf_ok("download", repo, "data/blob.bin", "--revision", c1, "--local-dir", tmp_path / "dl-v1")
    assert sha256_file(tmp_path / "dl-v1/data/blob.bin") == v1["data/blob.bin"][1]

    # Delete a file with HfApi.
    out = alice.api("delete_file", repo_id=repo, path_in_repo="data/blob.bin")
    c4 = out["oid"]
    assert c4 not in (c1, c2, c3) and re.fullmatch(r"[0-9a-f]{40}", c4), out
    assert sorted(alice.api("list_repo_files", repo_id=repo)) == [".gitattributes", "data/small.txt", "keep.txt"]
    assert alice.api("file_exists", repo_id=repo, filename="data/blob.bin") is False
    gone = client.hf("download", repo, "data/blob.bin", "--local-dir", tmp_path / "dl-gone")
    assert gone.returncode != 0, gone
    assert "404" in gone.output or "not found" in gone.output.lower(), gone
    # ...and the commit before the deletion still serves it.
    client.hf_ok("download", repo, "data/blob.bin", "--revision", c3, "--local-dir", tmp_path / "dl-c3")
    assert sha256_file(tmp_path / "dl-c3/data/blob.bin") == new_sha


def test_refused_commits_raise_what_the_hub_raises(server, alice, tmp_path):
    """delete_file / delete_folder of a path the branch does not have raise
    RemoteEntryNotFoundError (an EntryNotFoundError), as on the Hub, instead
    of making an empty commit; a commit to a tag and a branch name git
    refuses raise BadRequestError with the server's sentence. None of them
    moves the head."""
    repo = "alice/hub-refused"
    alice.hf_ok("repos", "create", repo)
    keep = tmp_path / "keep.txt"
    keep.write_bytes(b"kept\n")
    alice.hf_ok("upload", repo, keep, "keep.txt")
    alice.api("create_tag", repo_id=repo, tag="vt")
    head = alice.api("repo_info", repo_id=repo)["sha"]

    for method, kwargs in [("delete_file", {"path_in_repo": "nope.txt"}),
                           ("delete_folder", {"path_in_repo": "nope"})]:
        out = alice.api_call(method, repo_id=repo, **kwargs)
        assert not out["ok"] and out["error_type"] == "RemoteEntryNotFoundError", out
        assert out["status"] == 404 and out["headers"].get("x-error-code") == "EntryNotFound", out
        assert "nope" in out["error"], out

    out = alice.api_call("upload_file", repo_id=repo, path_or_fileobj=str(keep),
                         path_in_repo="other.txt", revision="vt")
    assert not out["ok"] and out["error_type"] == "BadRequestError", out
    assert "tags cannot be committed to" in out["error"], out

    out = alice.api_call("create_branch", repo_id=repo, branch="a..b")
    assert not out["ok"] and out["error_type"] == "BadRequestError", out
    assert "invalid branch or tag name" in out["error"], out

    assert alice.api("repo_info", repo_id=repo)["sha"] == head
    files = alice.api("list_repo_files", repo_id=repo)
    assert "keep.txt" in files and "other.txt" not in files, files


# --------------------------------------------------------------------------
# dataset repo


def test_dataset_repo_round_trip(server, alice, alice_token, tmp_path):
    repo = "alice/hub-data"
    r = alice.hf_ok("repos", "create", repo, "--repo-type", "dataset")
    assert "datasets/alice/hub-data" in r.output, r
    files = make_folder(tmp_path / "ds", {
        "README.md": b"---\nlicense: mit\n---\n# compat dataset\n",
        "data/train/part-0.csv": 4 * KiB,
        "data/train/part-1.bin": 5 * MiB,
        "data/test/part-0.bin": 200 * KiB,
    }, seed=4)
    mark = server.log_mark()
    c = commit_of(alice.hf_ok("upload", repo, tmp_path / "ds", "--repo-type", "dataset"))
    reqs = server.requests_since(mark)
    assert [e["status"] for e in reqs if e["path"] == "/api/datasets/alice/hub-data/commit/main"] == ["200"]
    assert matching(reqs, XET_UPLOAD, 200)

    add_gitattributes(server, alice_token, repo, files, tmp_path, "dataset")
    listed = alice.api("list_repo_files", repo_id=repo, repo_type="dataset")
    assert sorted(listed) == sorted(files)
    assert alice.api("file_exists", repo_id=repo, repo_type="dataset", filename="data/train/part-1.bin")
    assert not alice.api("file_exists", repo_id=repo, repo_type="dataset", filename="data/train/part-9.bin")
    # A dataset is not a model of the same name.
    assert alice.api("repo_exists", repo_id=repo) is False
    assert alice.api("repo_info", repo_id=repo, repo_type="dataset")["sha"] == c

    client = fresh(server, alice_token, tmp_path, "reader")
    cache = tmp_path / "cache"
    client.hf_ok("download", repo, "--repo-type", "dataset", "--cache-dir", cache)
    snap = snapshot_dir(cache, repo, "dataset")
    assert snap.name == c
    assert tree_shas(snap) == {p: sha for p, (_, sha, _) in files.items()}
    client.hf_ok("download", repo, "data/train/part-1.bin", "--repo-type", "dataset",
                 "--local-dir", tmp_path / "one")
    assert sha256_file(tmp_path / "one/data/train/part-1.bin") == files["data/train/part-1.bin"][1]


# --------------------------------------------------------------------------
# isolation between tenants


def test_other_tenant_cannot_read_or_write(server, model, tmp_path):
    bob_token = server.make_credential("bob")
    bob = HubClient(server.url, bob_token, tmp_path / "bob")
    mark = server.log_mark()
    r = bob.hf("download", model.repo_id, "sub/deep/big-3m.bin", "--local-dir", tmp_path / "x")
    assert r.returncode != 0, r
    assert "404" in r.output or "not found" in r.output.lower(), r
    assert not (tmp_path / "x/sub/deep/big-3m.bin").exists()
    r = bob.hf("download", model.repo_id, "--cache-dir", tmp_path / "c")
    assert r.returncode != 0, r
    info = bob.api_call("repo_info", repo_id=model.repo_id)
    assert not info["ok"] and info["status"] == 404, info
    assert bob.api("repo_exists", repo_id=model.repo_id) is False
    # Nor can bob write there.
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil/x.txt").write_text("bob was here\n")
    r = bob.hf("upload", model.repo_id, tmp_path / "evil")
    assert r.returncode != 0, r
    reqs = server.requests_since(mark)
    assert reqs and all(e.get("tenant") == "bob" for e in reqs if "tenant" in e)
    assert not [e for e in reqs if e["status"] == "200" and "/alice/" in e["path"]
                and e["path"] != "/api/repos/create"], reqs

    # The raw routes say the same: resolve, the xet token and the CAS.
    big = model.files["sub/deep/big-3m.bin"]
    for method, path in [
        ("HEAD", "/alice/hub-model/resolve/main/sub/deep/big-3m.bin"),
        ("GET", "/alice/hub-model/resolve/main/README.md"),
        ("GET", "/api/models/alice/hub-model/xet-read-token/main"),
        ("GET", "/api/models/alice/hub-model/tree/main"),
    ]:
        resp = server.request(method, path, token=bob_token)
        assert resp.status == 404, (method, path, resp)
    # alice's token gets the xet hash; bob's token cannot reconstruct it.
    head = server.request("HEAD", "/alice/hub-model/resolve/main/sub/deep/big-3m.bin",
                          token=model.token)
    assert head.status == 200 and head.headers["X-Linked-Size"] == str(big[2])
    xh = head.headers["X-Xet-Hash"]
    assert server.request("GET", f"/v1/reconstructions/{xh}", token=bob_token).status == 404


# --------------------------------------------------------------------------
# quota


def test_quota_error_renders_in_hf_cli(server, tmp_path):
    token = server.make_credential("carol")
    carol = HubClient(server.url, token, tmp_path / "carol")
    quota = 1 * MiB
    server.admin_put_limits("carol", quota_bytes=quota)
    carol.hf_ok("repos", "create", "quota-demo")
    # Something stored first, so the usage in the message is not zero.
    make_folder(tmp_path / "fits", {"fits.bin": 300 * KiB}, seed=5)
    carol.hf_ok("upload", "carol/quota-demo", tmp_path / "fits")
    usage = server.usage("carol")
    assert 300 * KiB <= usage < quota

    make_folder(tmp_path / "big", {"small.txt": 1 * KiB, "weights/big.bin": 5 * MiB}, seed=6)
    mark = server.log_mark()
    r = carol.hf("upload", "carol/quota-demo", tmp_path / "big")
    print(f"\n--- hf upload over quota: exit {r.returncode}\n{r.output}")
    assert r.returncode != 0, r
    out = r.output
    assert human_bytes(quota) in out, out  # "1 MiB"
    assert human_bytes(usage) in out, out
    assert "openxet limits set" in out, out
    assert "quota" in out.lower(), out
    reqs = server.requests_since(mark)
    refused = [e for e in reqs if e["status"] == "403"]
    assert refused and all(e.get("error") == "quota_exceeded" for e in refused), reqs
    assert not matching(reqs, XET_UPLOAD), "no xorb may be sent once the quota refuses"
    assert not [e for e in reqs if "/commit/" in e["path"]], reqs
    assert server.usage("carol") == usage

    # The raw answer the CLI rendered: JSON with the numbers, X-Error-Message.
    resp = server.request("POST", "/api/models/carol/quota-demo/preupload/main", token=token,
                          body={"files": [{"path": "weights/big.bin", "size": 5 * MiB, "sample": ""}]})
    assert resp.status == 403, resp
    body = resp.json()
    assert body["code"] == "quota_exceeded" and resp.headers["X-Error-Code"] == "quota_exceeded"
    assert body["quota"] == quota and body["usage"] == usage
    assert "openxet limits set" in body["hint"]
    assert body["error"] == resp.headers["X-Error-Message"]
    assert body["request_id"] == resp.headers["X-Request-Id"]

    # The exact text the CLI printed, and the request id in it names the
    # refused request in the server's log.
    text, rid = cli_error(r)
    assert text == (
        f"(Request ID: {rid})\n\n"
        f"403 Forbidden: tenant carol: this upload of {human_bytes(5 * MiB)} would pass the storage quota of "
        f"{human_bytes(quota)} ({human_bytes(usage)} stored). Delete files or repos you no longer need, or ask an operator to raise the quota: "
        f"openxet limits set --tenant carol --quota <size>.\n"
        f"Cannot access content at: {server.url}/api/models/carol/quota-demo/preupload/main.\n"
        f"Make sure your token has the correct permissions."), text
    logged = server.request_by_id(rid)
    assert logged["error"] == "quota_exceeded" and logged["tenant"] == "carol", logged


# --------------------------------------------------------------------------
# whoami, login and repo listings


def test_hf_auth_login_and_whoami(server, tmp_path):
    """`hf auth login --token` validates an openxet credential with
    /api/whoami-v2 and stores it; `hf auth whoami` and HfApi.whoami name the
    tenant and the credential's role."""
    token = server.make_credential("wendy")
    reader_token = server.make_credential("wendy", "read")
    client = HubClient(server.url, None, tmp_path / "login")  # no HF_TOKEN: only what login stores
    hf_home = tmp_path / "login" / "hf-home"

    r = client.hf("auth", "whoami")
    assert r.returncode != 0 and "Not logged in" in r.output, r
    r = client.hf_ok("auth", "login", "--token", token)
    cred_id = token.split("_")[2]
    assert "Token is valid (permission: write)." in r.output, r
    assert f"The current active token is: `openxet-wendy-{cred_id}`" in r.output, r
    assert (hf_home / "token").read_text().strip() == token
    assert f"[openxet-wendy-{cred_id}]" in (hf_home / "stored_tokens").read_text()

    r = client.hf_ok("auth", "whoami")
    assert re.search(r"^\s*user: wendy$", r.output, re.M), r
    assert re.search(rf"^\s*endpoint: {re.escape(server.url)}$", r.output, re.M), r
    info = client.api("whoami")
    assert info["name"] == "wendy" and info["orgs"] == [], info
    assert info["auth"]["accessToken"]["role"] == "write", info

    reader = HubClient(server.url, reader_token, tmp_path / "reader")
    assert reader.api("whoami")["auth"]["accessToken"]["role"] == "read"

    bad = HubClient(server.url, None, tmp_path / "bad")
    r = bad.hf("auth", "login", "--token", token[:-4] + "0000")
    assert r.returncode != 0, r
    assert "Invalid user token." in r.output, r
    assert not (tmp_path / "bad" / "hf-home" / "token").exists()


def test_hf_models_ls_lists_own_and_shared_repos(server, tmp_path):
    """`hf models ls`, `hf datasets ls`, HfApi.list_models and list_datasets
    list the caller's repos and other tenants' public ones; another
    tenant's private repos never."""
    token = server.make_credential("lister")
    lister = HubClient(server.url, token, tmp_path / "lister")
    lister.hf_ok("repos", "create", "ls-beta", "--private")
    lister.hf_ok("repos", "create", "ls-alpha", "--public")
    lister.hf_ok("repos", "create", "ls-data", "--repo-type", "dataset")
    other = HubClient(server.url, server.make_credential("outsider"), tmp_path / "outsider")
    other.hf_ok("repos", "create", "not-listed")

    def ls(client, *args):
        r = client.hf_ok(*args, "--format", "json")
        return json.loads(r.stdout)

    models = ls(lister, "models", "ls")
    assert [m["id"] for m in models] == ["lister/ls-alpha", "lister/ls-beta"], models
    assert [m["private"] for m in models] == [False, True], models
    assert all(m["author"] == "lister" and re.fullmatch(r"[0-9a-f]{40}", m["sha"]) for m in models), models
    assert [m["id"] for m in ls(lister, "models", "ls", "--author", "lister", "--search", "BETA")] == ["lister/ls-beta"]
    assert [m["id"] for m in ls(lister, "datasets", "ls")] == ["lister/ls-data"]
    assert ls(lister, "models", "ls", "--author", "outsider") == []
    # Another tenant sees lister's public repo, never its private one
    # (docs/sharing.md).
    assert [m["id"] for m in ls(other, "models", "ls", "--author", "lister")] == ["lister/ls-alpha"]
    seen = [m["id"] for m in ls(other, "models", "ls") if m["id"].startswith(("lister/", "outsider/"))]
    assert seen == ["lister/ls-alpha", "outsider/not-listed"], seen

    listed = lister.api("list_models", author="lister")
    assert [m["id"] for m in listed] == ["lister/ls-alpha", "lister/ls-beta"], listed
    assert [m["id"] for m in lister.api("list_models", search="alpha", limit=5)] == ["lister/ls-alpha"]
    assert [d["id"] for d in lister.api("list_datasets", author="lister")] == ["lister/ls-data"]


# --------------------------------------------------------------------------
# refusals as the hf CLI prints them


def test_missing_scope_error_in_hf_cli(server, tmp_path):
    """A read credential that uploads: the CLI prints which scope is
    missing and how to get a credential that has it."""
    owner = HubClient(server.url, server.make_credential("scoped"), tmp_path / "owner")
    owner.hf_ok("repos", "create", "scoped-model")
    reader = HubClient(server.url, server.make_credential("scoped", "read"), tmp_path / "reader")
    make_folder(tmp_path / "up", {"a.txt": 2 * KiB}, seed=8)
    r = reader.hf("upload", "scoped/scoped-model", tmp_path / "up")
    assert r.returncode != 0, r
    text, rid = cli_error(r)
    assert text == (
        f"(Request ID: {rid})\n\n"
        "403 Forbidden: this credential of tenant scoped has scope read; this route needs write. "
        "Use a credential with the write scope: openxet credentials create --tenant scoped --scope write.\n"
        f"Cannot access content at: {server.url}/api/models/scoped/scoped-model/preupload/main.\n"
        "Make sure your token has the correct permissions."), text
    logged = server.request_by_id(rid)
    assert logged["error"] == "forbidden" and logged["status"] == "403", logged


def test_rate_limited_error_in_hf_cli(server, tmp_path):
    """A tenant out of requests: `hf models info` (a call huggingface_hub
    does not retry) prints the limit, the wait and openxet's sentence."""
    token = server.make_credential("slowpoke")
    client = HubClient(server.url, token, tmp_path / "slow")
    client.hf_ok("repos", "create", "slow-model")
    server.admin_put_limits("slowpoke", tenant_requests_per_second=0.001, tenant_burst=1)
    # Spend the burst: nothing refills for 1000 s.
    for _ in range(3):
        if server.request("GET", "/api/models/slowpoke/slow-model", token=token).status == 429:
            break
    r = client.hf("models", "info", "slowpoke/slow-model")
    assert r.returncode != 0, r
    text, rid = cli_error(r)
    m = re.search(r"Retry after (\d+) seconds", text)
    assert m, text
    secs = int(m.group(1))
    assert 900 <= secs <= 1000, text
    assert text == (
        f"(Request ID: {rid})\n\n"
        "429 Too Many Requests: you have reached your 'tenant' rate limit.\n"
        f"Retry after {secs} seconds (0/1 requests remaining in current 1000s window).\n"
        f"Url: {server.url}/api/models/slowpoke/slow-model.\n"
        f"tenant rate limit reached. Slow down and retry in {secs} s (Retry-After)"), text
    logged = server.request_by_id(rid)
    assert logged["error"] == "rate_limited" and logged["limit"] == "tenant", logged


def test_memory_busy_error_in_hf_cli(start_server, tmp_path):
    """While another tenant holds the whole memory budget, an upload's Hub
    call waits memory_wait and is refused; huggingface_hub retries it (it
    honours Retry-After) and then prints openxet's sentence."""
    server = start_server("--memory-budget", "65MiB", "--credential-memory-share", "1",
                          "--tenant-memory-share", "1", "--memory-wait", "50ms")
    token = server.make_credential("busy")
    client = HubClient(server.url, token, tmp_path / "busy")
    client.hf_ok("repos", "create", "busy-model")
    make_folder(tmp_path / "up", {"a.txt": 2 * KiB}, seed=9)
    with server.memory_held(server.make_credential("holder"), 65 * MiB):
        r = client.hf("upload", "busy/busy-model", tmp_path / "up")
    assert r.returncode != 0, r
    text, rid = cli_error(r)
    m = re.search(r"for url '(\S+/api/models/busy/busy-model/(?:preupload|commit)/main)'", text)
    assert m, text
    assert text == (
        f"Server error '503 Service Unavailable' for url '{m.group(1)}' (Request ID: {rid})\n"
        "For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/503\n\n"
        "the server's memory for request work is taken by other requests. "
        "Retry in 1 s (Retry-After); fewer concurrent requests help"), text
    logged = server.request_by_id(rid)
    assert logged["error"] == "memory_busy" and logged["tenant"] == "busy", logged


def _safetensors(path, name, n, seed):
    """A safetensors file of one F32 tensor of n values; returns its header."""
    header = {"__metadata__": {"format": "pt"}, name: {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}
    raw = json.dumps(header).encode()
    data = random.Random(seed).randbytes(4 * n)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)
    return header


def test_sharded_safetensors_metadata(server, tmp_path):
    """get_sharded_safetensors_metadata (one request to safetensors-metadata)
    and get_safetensors_metadata (the index, then each shard's header through
    resolve) agree on a sharded model uploaded with upload_folder, one shard
    through hf_xet, one small."""
    alice = HubClient(server.url, server.make_credential("alice"), tmp_path / "alice")
    folder = tmp_path / "sharded"
    folder.mkdir()
    _safetensors(folder / "model-00001-of-00002.safetensors", "layers.0.w", 600_000, 1)
    _safetensors(folder / "model-00002-of-00002.safetensors", "lm_head.w", 16, 2)
    (folder / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 2_400_064},
        "weight_map": {"layers.0.w": "model-00001-of-00002.safetensors", "lm_head.w": "model-00002-of-00002.safetensors"}}))
    alice.api("create_repo", repo_id="alice/sharded")
    alice.api("upload_folder", folder_path=str(folder), repo_id="alice/sharded")
    one = alice.api("get_sharded_safetensors_metadata", repo_id="alice/sharded")
    each = alice.api("get_safetensors_metadata", repo_id="alice/sharded")
    assert one == each, (one, each)
    assert one["sharded"] and one["metadata"] == {"total_size": 2_400_064}, one
    assert one["weight_map"] == {"layers.0.w": "model-00001-of-00002.safetensors", "lm_head.w": "model-00002-of-00002.safetensors"}
    assert one["files_metadata"]["model-00001-of-00002.safetensors"]["tensors"]["layers.0.w"]["shape"] == [600_000], one
