"""The stock JavaScript client, @huggingface/hub (pinned in
compat/js/package.json, locked in package-lock.json), uploads and downloads
through openxet's Xet path with hubUrl pointing at the server.

compat/js/roundtrip.mjs does the round trips and compat/js/driver.mjs single
calls (whoAmI, listModels, fileExists, uploadFiles and the errors they
show); their fetch refuses every host but 127.0.0.1, so Node only ever talks
to the server under test. `npm ci` runs
once per session, and only when compat/js/node_modules does not already hold
exactly the locked versions.
"""

import hashlib
import json
import re
import shutil
import subprocess

import pytest

from conftest import COMPAT_DIR, KiB, MiB, HubClient, _clean_env, sha256_file, write_random

JS_DIR = COMPAT_DIR / "js"
NPM_TIMEOUT_S = 300.0
NODE_TIMEOUT_S = 180.0
XORB_POST = re.compile(r"^/v1/xorbs/(default|default-merkledb)/[0-9a-f]{64}$")
SHARD_POST = re.compile(r"^/v[12]/shards$")
RECONSTRUCTION = re.compile(r"^/v[12]/reconstructions/[0-9a-f]{64}$")
FETCH = re.compile(r"^/v1/fetch/[0-9a-f]{64}$")


def _installed_matches_lock():
    """True when node_modules holds every package of package-lock.json at
    its locked version (then npm ci, and the network, are not needed)."""
    lock = JS_DIR / "package-lock.json"
    if not (JS_DIR / "node_modules").is_dir() or not lock.is_file():
        return False
    for path, meta in json.loads(lock.read_text()).get("packages", {}).items():
        if not path:
            continue
        pj = JS_DIR / path / "package.json"
        if meta.get("optional") and not pj.exists():
            continue  # an optional package npm skips on this platform
        try:
            if json.loads(pj.read_text()).get("version") != meta.get("version"):
                return False
        except (OSError, ValueError):
            return False
    return True


@pytest.fixture(scope="session")
def node_client():
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm (Node 20+) are needed for the JavaScript compat test")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    assert int(version.lstrip("v").split(".")[0]) >= 20, f"Node 20+ needed, found {version}"
    if not _installed_matches_lock():
        cmd = [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        if not (JS_DIR / "package-lock.json").is_file():
            cmd[1] = "install"
        r = subprocess.run(cmd, cwd=JS_DIR, capture_output=True, text=True, timeout=NPM_TIMEOUT_S)
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
        assert _installed_matches_lock(), "npm did not install the locked versions"
    pkg = json.loads((JS_DIR / "node_modules/@huggingface/hub/package.json").read_text())
    assert pkg["version"] == json.loads((JS_DIR / "package.json").read_text())["dependencies"]["@huggingface/hub"]
    return node


def run_roundtrip(node, server, token, repo, tmp_path, **env_extra):
    env = _clean_env()
    env.update({"HUB_URL": server.url, "HF_TOKEN": token, "REPO": repo,
                "NODE_NO_WARNINGS": "1"})
    env.update(env_extra)
    r = subprocess.run([node, str(JS_DIR / "roundtrip.mjs")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError(f"roundtrip.mjs printed no result (exit {r.returncode})\n"
                             f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}")
    out = json.loads(lines[-1])
    out["_exit"] = r.returncode
    out["_stderr"] = r.stderr[-4000:]
    return out


def _assert_local_only(out):
    refused = [q for q in out.get("requests", []) if q.get("refused")]
    assert not refused, f"the client tried to leave 127.0.0.1: {refused}"


def test_js_upload_and_download_through_xet(server, node_client, tmp_path):
    token = server.make_credential("alice")
    mark = server.log_mark()
    out = run_roundtrip(node_client, server, token, "alice/js-roundtrip", tmp_path,
                        BIG_BYTES=str(3 * MiB + 17))
    print("\nroundtrip.mjs:", json.dumps({k: v for k, v in out.items() if k != "requests"}, indent=1))
    _assert_local_only(out)
    reqs = server.requests_since(mark)
    assert out["ok"] and out["_exit"] == 0, out

    files = {f["path"]: f for f in out["files"]}
    assert set(files) == {"README.txt", "data/nested/random.bin"}
    for f in files.values():
        assert f["downloaded_sha256"] == f["sha256"] and f["downloaded_size"] == f["size"], f
    big = files["data/nested/random.bin"]
    assert big["xet"] and big["blob_class"] == "XetBlob", big
    assert out["missing_is_null"] is True
    listed = {e["path"]: e for e in out["listed"]}
    assert listed["data/nested/random.bin"]["xetHash"] == big["xet_hash"]

    # The Xet path, not plain LFS: the LFS batch answered "xet", the bytes
    # went to the CAS as xorbs and a shard, and came back from it.
    ok = lambda m, pat: [e for e in reqs if e["method"] == m and pat.match(e["path"]) and e["status"] in ("200", "206")]  # noqa: E731
    assert ok("POST", re.compile(r"^/alice/js-roundtrip\.git/info/lfs/objects/batch$")), reqs
    xorbs = ok("POST", XORB_POST)
    assert xorbs and sum(int(e["bytes_in"]) for e in xorbs) >= big["size"], reqs
    assert ok("POST", SHARD_POST), reqs
    assert ok("GET", re.compile(r"^/api/models/alice/js-roundtrip/xet-read-token/[0-9a-f]{40}$")), reqs
    assert ok("GET", RECONSTRUCTION), reqs
    assert ok("GET", FETCH), reqs
    assert all(e.get("tenant") in ("alice", None) for e in reqs)


def test_js_upload_without_xet_goes_through_lfs_basic(server, node_client, tmp_path):
    """uploadFiles with useXet: false (the default of @huggingface/hub up to
    2.6) offers only the LFS transfers: the batch answers basic, the client
    PUTs the object to the href, and the server stores it as Xet, so the
    Xet download that follows works."""
    token = server.make_credential("fay")
    mark = server.log_mark()
    out = run_roundtrip(node_client, server, token, "fay/js-lfs", tmp_path,
                        BIG_BYTES=str(2 * MiB + 5), USE_XET="0")
    _assert_local_only(out)
    assert out["ok"] and out["_exit"] == 0, out
    big = {f["path"]: f for f in out["files"]}["data/nested/random.bin"]
    assert big["xet"] and big["blob_class"] == "XetBlob", big
    reqs = server.requests_since(mark)
    puts = [e for e in reqs if e["method"] == "PUT" and e["path"].startswith("/fay/js-lfs.git/info/lfs/objects/")]
    assert [e["status"] for e in puts] == ["200"], reqs
    assert not [e for e in reqs if XORB_POST.match(e["path"])], reqs


def test_js_downloads_what_hf_uploaded(server, node_client, tmp_path):
    """downloadFile through Xet, for files the Python client uploaded."""
    token = server.make_credential("dana")
    hub = HubClient(server.url, token, tmp_path / "hf")
    src = tmp_path / "src"
    (src / "deep").mkdir(parents=True)
    (src / "hello.txt").write_text("hello from hf upload\n" * 20)
    write_random(src / "deep/weights.bin", 2 * MiB + 4097, "js-download")
    hub.hf_ok("repos", "create", "js-download")
    hub.hf_ok("upload", "dana/js-download", src)
    expect = [{"path": p, "sha256": sha256_file(src / p)} for p in ("hello.txt", "deep/weights.bin")]

    mark = server.log_mark()
    out = run_roundtrip(node_client, server, token, "dana/js-download", tmp_path,
                        EXPECT=json.dumps(expect))
    print("\nroundtrip.mjs (download only):",
          json.dumps({k: v for k, v in out.items() if k != "requests"}, indent=1))
    _assert_local_only(out)
    assert out["ok"] and out["_exit"] == 0, out
    files = {f["path"]: f for f in out["files"]}
    assert files["deep/weights.bin"]["xet"] and files["deep/weights.bin"]["blob_class"] == "XetBlob"
    assert not files["hello.txt"]["xet"]
    reqs = server.requests_since(mark)
    assert [e for e in reqs if RECONSTRUCTION.match(e["path"]) and e["status"] == "200"], reqs
    assert [e for e in reqs if FETCH.match(e["path"]) and e["status"] in ("200", "206")], reqs


def test_js_empty_file(server, node_client, tmp_path):
    """A 0-byte file committed with uploadFiles downloads with
    fileDownloadInfo and downloadFile: the resolve answer to their
    "Range: bytes=0-0" says the size (Content-Range: bytes */0)."""
    token = server.make_credential("erin")
    mark = server.log_mark()
    out = run_roundtrip(node_client, server, token, "erin/js-empty", tmp_path,
                        BIG_BYTES=str(MiB), EMPTY="empty/zero.txt")
    print("\nroundtrip.mjs (with an empty file):",
          json.dumps({k: v for k, v in out.items() if k != "requests"}, indent=1))
    _assert_local_only(out)
    assert out["ok"] and out["_exit"] == 0, out
    files = {f["path"]: f for f in out["files"]}
    empty = files["empty/zero.txt"]
    assert empty["size"] == empty["downloaded_size"] == 0, empty
    assert empty["downloaded_sha256"] == hashlib.sha256(b"").hexdigest(), empty
    assert not empty["xet"], empty
    listed = {e["path"]: e for e in out["listed"]}
    assert listed["empty/zero.txt"]["size"] == 0, listed
    reqs = server.requests_since(mark)
    assert [e for e in reqs if e["method"] == "GET" and e["path"] == "/erin/js-empty/resolve/main/empty/zero.txt"
            and e["status"] == "200"], reqs


# --------------------------------------------------------------------------
# single calls through compat/js/driver.mjs


def js_call(node, server, token, op, **args):
    """One @huggingface/hub call; returns the driver's answer
    ({"ok": true, "result"} or {"ok": false, "message", "status", ...})."""
    payload = dict(args, op=op, hubUrl=server.url, token=token)
    env = _clean_env()
    env["NODE_NO_WARNINGS"] = "1"
    r = subprocess.run([node, str(JS_DIR / "driver.mjs")], input=json.dumps(payload), cwd=JS_DIR,
                       env=env, capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError(f"driver.mjs printed no result (exit {r.returncode})\n"
                             f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}")
    out = json.loads(lines[-1])
    _assert_local_only(out)
    return out


def js_ok(node, server, token, op, **args):
    out = js_call(node, server, token, op, **args)
    assert out["ok"], f"{op} {args} threw: {out}"
    return out["result"]


def js_error(node, server, token, op, **args):
    """The HubApiError a call threw: its message (what a user sees) and
    request id."""
    out = js_call(node, server, token, op, **args)
    assert not out["ok"] and out["constructor"] == "HubApiError", out
    return out


def test_js_whoami_and_listings(server, node_client, tmp_path):
    token = server.make_credential("jslist")
    hub = HubClient(server.url, token, tmp_path / "hf")
    hub.hf_ok("repos", "create", "js-b", "--private")
    hub.hf_ok("repos", "create", "js-a", "--public")
    hub.hf_ok("repos", "create", "js-d", "--repo-type", "dataset")

    me = js_ok(node_client, server, token, "whoAmI")
    assert me["name"] == "jslist" and me["type"] == "user" and me["orgs"] == [], me
    assert me["auth"]["type"] == "access_token" and me["auth"]["accessToken"]["role"] == "write", me
    reader = server.make_credential("jslist", "read")
    assert js_ok(node_client, server, reader, "whoAmI")["auth"]["accessToken"]["role"] == "read"

    models = js_ok(node_client, server, token, "listModels", owner="jslist")
    assert [(m["name"], m["private"]) for m in models] == [("jslist/js-a", False), ("jslist/js-b", True)], models
    assert all(m["updatedAt"] and m["id"] for m in models), models
    assert [m["name"] for m in js_ok(node_client, server, token, "listModels", query="js-b")] == ["jslist/js-b"]
    assert [d["name"] for d in js_ok(node_client, server, token, "listDatasets", owner="jslist")] == ["jslist/js-d"]
    other = server.make_credential("jsother")
    # Another tenant lists jslist's public repo only (docs/sharing.md).
    assert [m["name"] for m in js_ok(node_client, server, other, "listModels", owner="jslist")] == ["jslist/js-a"]


def test_js_file_exists(server, node_client, tmp_path):
    """fileExists (a HEAD on /{repo}/raw/{rev}/{path}) is true for a
    regular and a Xet file, false for a path that is not there."""
    token = server.make_credential("jsexists")
    hub = HubClient(server.url, token, tmp_path / "hf")
    hub.hf_ok("repos", "create", "exists")
    hub.hf_ok("repos", "create", "exists-data", "--repo-type", "dataset")
    commit = js_ok(node_client, server, token, "uploadFiles", repo="jsexists/exists",
                   files=[{"path": "README.md", "text": "# hello\n"}, {"path": "w/big.bin", "size": 200 * KiB}])
    js_ok(node_client, server, token, "uploadFiles", repo="jsexists/exists-data", repoType="dataset",
          files=[{"path": "rows.csv", "text": "a,b\n"}])
    for path, want in [("README.md", True), ("w/big.bin", True), ("w", False), ("missing.txt", False)]:
        out = js_call(node_client, server, token, "fileExists", repo="jsexists/exists", path=path)
        assert out["ok"] and out["result"] is want, (path, out)
        assert [q["path"] for q in out["requests"]] == [f"/jsexists/exists/raw/main/{path}"], out
    assert js_ok(node_client, server, token, "fileExists", repo="jsexists/exists", path="README.md", revision=commit) is True
    assert js_ok(node_client, server, token, "fileExists", repo="jsexists/exists-data", repoType="dataset", path="rows.csv") is True
    # Another tenant does not learn that the file exists.
    other = server.make_credential("jsnosy")
    assert js_ok(node_client, server, other, "fileExists", repo="jsexists/exists", path="README.md") is False


def _js_text(sentence, url, out):
    return f"{sentence}. URL: {url}. Request ID: {out['requestId']}"


def test_js_error_texts(server, node_client, tmp_path):
    """What @huggingface/hub shows for a missing scope, an exceeded quota
    and a rate limit: openxet's sentence and hint, then the URL and the
    request id, which names the request in the server's log."""
    token = server.make_credential("jserr")
    reader = server.make_credential("jserr", "read")
    HubClient(server.url, token, tmp_path / "hf").hf_ok("repos", "create", "err")
    preupload = f"{server.url}/api/models/jserr/err/preupload/main"

    out = js_error(node_client, server, reader, "uploadFiles", repo="jserr/err", files=[{"path": "a.txt", "text": "a"}])
    assert out["status"] == 403 and out["message"] == _js_text(
        "this credential of tenant jserr has scope read; this route needs write. "
        "Use a credential with the write scope: openxet credentials create --tenant jserr --scope write", preupload, out), out
    assert server.request_by_id(out["requestId"])["error"] == "forbidden"

    server.admin_put_limits("jserr", quota_bytes=1000)
    out = js_error(node_client, server, token, "uploadFiles", repo="jserr/err", files=[{"path": "big.bin", "size": 100 * KiB}])
    assert out["status"] == 403 and out["message"] == _js_text(
        "tenant jserr: this upload of 100 KiB would pass the storage quota of 1000 B (0 B stored). "
        "Delete files or repos you no longer need, or ask an operator to raise the quota: openxet limits set --tenant jserr --quota <size>", preupload, out), out
    assert server.request_by_id(out["requestId"])["error"] == "quota_exceeded"
    server.admin_put_limits("jserr", quota_bytes=-1)

    server.admin_put_limits("jserr", tenant_requests_per_second=0.001, tenant_burst=1)
    for _ in range(3):
        if server.request("GET", "/api/whoami-v2", token=token).status == 429:
            break
    out = js_error(node_client, server, token, "whoAmI")
    secs = int(re.search(r"retry in (\d+) s", out["message"]).group(1))
    assert 900 <= secs <= 1000 and out["status"] == 429, out
    assert out["message"] == _js_text(
        f"tenant rate limit reached. Slow down and retry in {secs} s (Retry-After)", f"{server.url}/api/whoami-v2", out), out
    logged = server.request_by_id(out["requestId"])
    assert logged["error"] == "rate_limited" and logged["limit"] == "tenant", logged


def test_js_memory_busy_text(start_server, node_client, tmp_path):
    """While another tenant holds the whole memory budget, uploadFiles
    fails with openxet's memory_busy sentence (the JS client does not
    retry it)."""
    server = start_server("--memory-budget", "65MiB", "--credential-memory-share", "1",
                          "--tenant-memory-share", "1", "--memory-wait", "50ms")
    token = server.make_credential("jsbusy")
    HubClient(server.url, token, tmp_path / "hf").hf_ok("repos", "create", "busy")
    with server.memory_held(server.make_credential("holder"), 65 * MiB):
        out = js_error(node_client, server, token, "uploadFiles", repo="jsbusy/busy", files=[{"path": "a.txt", "text": "a"}])
    url = re.search(r"URL: (\S+/api/models/jsbusy/busy/(?:preupload|commit)/main)\.", out["message"])
    assert url and out["status"] == 503, out
    assert out["message"] == _js_text(
        "the server's memory for request work is taken by other requests. "
        "Retry in 1 s (Retry-After); fewer concurrent requests help", url.group(1), out), out
    assert server.request_by_id(out["requestId"])["error"] == "memory_busy"


# --------------------------------------------------------------------------
# paths, history and the cache downloads


@pytest.fixture(scope="module")
def js_history(server, tmp_path_factory):
    """jshist/repo and jshist/data (a dataset): two commits with hf upload
    (a regular file, a Xet file under a folder), then a third changing the
    regular file. Returns the token, the files' sha256 and the commits,
    newest first."""
    token = server.make_credential("jshist")
    tmp = tmp_path_factory.mktemp("js-history")
    hub = HubClient(server.url, token, tmp / "hf")
    src = tmp / "src"
    (src / "w").mkdir(parents=True)
    (src / "README.md").write_text("# one\n")
    write_random(src / "w/big.bin", 300 * KiB + 3, "js-history")
    hub.hf_ok("repos", "create", "repo")
    hub.hf_ok("repos", "create", "data", "--repo-type", "dataset")
    hub.hf_ok("upload", "jshist/repo", src, "--commit-message", "first")
    hub.hf_ok("upload", "jshist/data", src, "--repo-type", "dataset", "--commit-message", "first")
    (src / "README.md").write_text("# two\n")
    hub.hf_ok("upload", "jshist/repo", src / "README.md", "README.md", "--commit-message", "second")
    commits = hub.api("list_repo_commits", repo_id="jshist/repo")
    files = {p: sha256_file(src / p) for p in ("README.md", "w/big.bin")}
    return {"token": token, "files": files, "commits": [c["commit_id"] for c in commits]}


def test_js_paths_info(server, node_client, js_history):
    token, (second, first, _initial) = js_history["token"], js_history["commits"]
    got = js_ok(node_client, server, token, "pathsInfo", repo="jshist/repo", paths=["w/big.bin", "README.md", "w", "nope"], expand=True)
    by = {p["path"]: p for p in got}
    assert set(by) == {"w/big.bin", "README.md", "w"}, got
    big = by["w/big.bin"]
    assert big["type"] == "file" and big["lfs"]["oid"] == js_history["files"]["w/big.bin"] and big["xetHash"], big
    assert big["lastCommit"]["id"] == first and big["lastCommit"]["title"] == "first", big
    assert by["README.md"]["lastCommit"]["id"] == second and "lfs" not in by["README.md"], by["README.md"]
    assert by["w"]["type"] == "directory" and by["w"]["lastCommit"]["id"] == first, by["w"]
    plain = js_ok(node_client, server, token, "pathsInfo", repo="jshist/repo", paths=["README.md"], revision=first)
    assert len(plain) == 1 and "lastCommit" not in plain[0] and plain[0]["size"] == len("# one\n"), plain
    out = js_error(node_client, server, server.make_credential("jsnosy2"), "pathsInfo", repo="jshist/repo", paths=["README.md"])
    assert out["status"] == 404, out


def test_js_list_and_count_commits(server, node_client, js_history):
    token, commits = js_history["token"], js_history["commits"]
    listed = js_ok(node_client, server, token, "listCommits", repo="jshist/repo", batchSize=2)
    assert [c["oid"] for c in listed] == commits, listed
    assert [c["title"] for c in listed] == ["second", "first", "initial commit"], listed
    assert listed[0]["authors"] == [{"username": "jshist"}] and listed[0]["date"], listed
    out = js_call(node_client, server, token, "listCommits", repo="jshist/repo", batchSize=2)
    assert [q["path"] for q in out["requests"]] == [
        "/api/models/jshist/repo/commits/main?limit=2", "/api/models/jshist/repo/commits/main?limit=2&p=1"], out
    assert js_ok(node_client, server, token, "countCommits", repo="jshist/repo") == 3
    assert js_ok(node_client, server, token, "countCommits", repo="jshist/repo", revision=commits[1]) == 2
    assert js_ok(node_client, server, token, "countCommits", repo="jshist/data", repoType="dataset") == 2


def test_js_model_and_dataset_info_without_revision(server, node_client, js_history):
    token = js_history["token"]
    m = js_ok(node_client, server, token, "modelInfo", repo="jshist/repo")
    assert m["name"] == "jshist/repo" and m["sha"] == js_history["commits"][0], m
    assert set(m["files"]) >= {"README.md", "w/big.bin"}, m
    d = js_ok(node_client, server, token, "datasetInfo", repo="jshist/data")
    assert d["name"] == "jshist/data" and set(d["files"]) >= {"README.md", "w/big.bin"}, d
    out = js_call(node_client, server, token, "modelInfo", repo="jshist/repo")
    assert out["requests"][0]["path"].startswith("/api/models/jshist/repo/revision/HEAD?"), out


def test_js_snapshot_and_cache_downloads(server, node_client, js_history, tmp_path):
    token, files = js_history["token"], js_history["files"]
    snap = js_ok(node_client, server, token, "snapshotDownload", repo="jshist/repo", cacheDir=str(tmp_path / "cache"))
    assert snap["folder"].endswith("/snapshots/" + js_history["commits"][0]), snap
    got = {p: s for p, s in snap["files"].items() if not p.endswith(".gitattributes")}
    assert got == files, snap
    one = js_ok(node_client, server, token, "downloadFileToCacheDir", repo="jshist/data", repoType="dataset",
                path="w/big.bin", cacheDir=str(tmp_path / "cache2"))
    assert one["sha256"] == files["w/big.bin"] and "/snapshots/" in one["pointer"], one


def test_js_download_file_of_shared_repos(start_server, node_client, tmp_path):
    """@huggingface/hub downloadFile of alice's Xet file: without a token
    from her public repo, with tenant bob's token from her internal one
    (through xet-read-token); once she makes each private with
    update_repo_settings(private=True), the same calls fail as the Hub's do
    for a repo the caller cannot see (404 HubApiError)."""
    server = start_server("--hub-anonymous-reads", "true")
    alice = HubClient(server.url, server.make_credential("alice"), tmp_path / "alice")
    bob_token = server.make_credential("bob")
    weights = tmp_path / "weights.bin"
    write_random(weights, 3 * MiB, seed=3201)
    want = sha256_file(weights)
    for name, visibility in [("pub", "public"), ("intern", "internal")]:
        alice.api("create_repo", repo_id="alice/" + name)
        alice.api("update_repo_settings", repo_id="alice/" + name, visibility=visibility)
        alice.api("upload_file", path_or_fileobj=str(weights), path_in_repo="weights.bin", repo_id="alice/" + name)

    anon = js_ok(node_client, server, None, "downloadFile", repo="alice/pub", path="weights.bin")
    assert anon == {"size": 3 * MiB, "sha256": want}, anon
    bob = js_ok(node_client, server, bob_token, "downloadFile", repo="alice/intern", path="weights.bin")
    assert bob == {"size": 3 * MiB, "sha256": want}, bob
    # Anonymous readers see no internal repo.
    hidden = js_call(node_client, server, None, "downloadFile", repo="alice/intern", path="weights.bin")
    assert not hidden["ok"] and hidden.get("status") in (401, 404), hidden

    for name in ("pub", "intern"):
        assert alice.api("update_repo_settings", repo_id="alice/" + name, private=True) is None
    for token, name in [(None, "pub"), (bob_token, "intern")]:
        out = js_error(node_client, server, token, "downloadFile", repo="alice/" + name, path="weights.bin")
        assert out["status"] in (401, 404), out
