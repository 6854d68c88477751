"""The storage lifecycle end to end with the stock clients: a tenant fills
its quota with `hf upload`, frees it with `hf repos delete` (or
HfApi.super_squash_history, delete_branch, delete_tag), one `openxet gc`
pass runs, and `hf upload` fits again. Usage figures are checked against
the owner records in the bucket (the source of truth reindex rebuilds
usage from).

One server per module, started with `--gc-interval 0s` so that passes run
only when a test runs `openxet gc` (with `--gc-grace 0s`: nothing waits out
a grace period) beside it on the same data directory.
"""

import hashlib
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import CLI_TIMEOUT_S, KiB, MiB, HubClient, _clean_env, sha256_file, write_random


@pytest.fixture(scope="module")
def lserver(openxet_bin, tmp_path_factory):
    from conftest import OpenxetServer
    s = OpenxetServer(openxet_bin, tmp_path_factory.mktemp("openxet-lifecycle"),
                      ["--gc-interval", "0s"]).start()
    try:
        yield s
    finally:
        s.stop()
    s.check_stopped_cleanly()


def openxet(server, *args, remote=False):
    """Run the openxet CLI on the server's data directory (or, remote,
    through its admin API); returns the CompletedProcess."""
    env = _clean_env()
    cmd = [str(server.binary), *args]
    if remote:
        env["OPENXET_SERVER"] = server.url
        env["OPENXET_TOKEN"] = server.admin_token
    else:
        cmd += ["--data-dir", str(server.data_dir)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CLI_TIMEOUT_S)


def gc(server, grace="0s"):
    """One pass (by default with no grace period); returns its report."""
    r = openxet(server, "gc", "--gc-grace", grace, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def gc_until(server, tenant, usage, grace="0s"):
    """Passes until tenant's usage is `usage`: a pass defers what was
    touched in the second it started (an upload racing it), so one more
    pass may be needed right after an upload."""
    reports = []
    for _ in range(3):
        reports.append(gc(server, grace))
        if server.usage(tenant) == usage:
            return reports
        time.sleep(1.1)
    pytest.fail(f"{tenant}'s usage {server.usage(tenant)} != {usage} after passes {reports}")


def owned_in_bucket(server, tenant):
    """The sum of the sizes in tenant's owner records whose xorb is stored:
    the usage reindex rebuilds."""
    th = hashlib.sha256(tenant.encode()).hexdigest()
    bucket = server.data_dir / "bucket"
    total = 0
    owners = bucket / "xorb-owners"
    if not owners.exists():
        return 0
    for xorb_dir in owners.iterdir():
        rec = xorb_dir / th
        if rec.exists() and (bucket / "xorbs" / "default" / xorb_dir.name).exists():
            total += json.loads(rec.read_text())["size_bytes"]
    return total


def check_usage(server, tenant):
    usage = server.usage(tenant)
    assert usage == owned_in_bucket(server, tenant), (tenant, usage)
    r = openxet(server, "usage", "--tenant", tenant, "--json")
    assert r.returncode == 0, r.stderr
    view = json.loads(r.stdout)["tenants"][0]
    assert view["usage_bytes"] == usage == view["owned_bytes"], view
    assert view["retained_bytes"] + view["releasable_bytes"] == usage, view
    return usage


def quota_refused(result):
    return result.returncode != 0 and "quota" in result.output.lower()


def folder(tmp_path, name, size, seed):
    d = tmp_path / name
    sha = write_random(d / f"{name}.bin", size, seed)
    return d, sha


def test_repo_delete_then_gc_gives_quota_back(lserver, tmp_path):
    token = lserver.make_credential("dana")
    dana = HubClient(lserver.url, token, tmp_path / "dana")
    lserver.admin_put_limits("dana", quota_bytes=1 * MiB)
    first, _ = folder(tmp_path, "first", 700 * KiB, "lc-1")
    second, second_sha = folder(tmp_path, "second", 700 * KiB, "lc-2")
    dana.hf_ok("repos", "create", "q1")
    dana.hf_ok("upload", "dana/q1", first)
    used = check_usage(lserver, "dana")
    assert 700 * KiB <= used < 1 * MiB

    r = dana.hf("upload", "dana/q1", second)
    assert quota_refused(r), r
    assert lserver.usage("dana") == used

    dana.hf_ok("repos", "delete", "dana/q1", "--yes")
    # Deleting frees nothing by itself: the collector releases.
    assert lserver.usage("dana") == used
    reports = gc_until(lserver, "dana", 0)
    assert sum(rep["released_bytes"] for rep in reports) == used, reports
    assert sum(rep["deleted_xorbs"] for rep in reports) >= 1, reports
    check_usage(lserver, "dana")

    dana.hf_ok("repos", "create", "q2")
    dana.hf_ok("upload", "dana/q2", second)
    check_usage(lserver, "dana")
    out = tmp_path / "down"
    fresh = HubClient(lserver.url, token, tmp_path / "fresh")
    fresh.hf_ok("download", "dana/q2", "--local-dir", out)
    assert sha256_file(out / "second.bin") == second_sha


def test_reupload_with_the_same_client_cache(lserver, tmp_path):
    """hf_xet dedups a new upload against the shards of its own earlier
    uploads, kept in its local cache for 3 weeks, without asking the
    server. Within the grace period (the default, 22 days, outlasts that
    cache) the same file uploads again after its repo was deleted and its
    quota given back: the xorb is still stored and the shard makes the
    tenant its owner again. Once a pass with no grace deleted the xorb, the
    client's shard is refused with a message that says to clear the cache;
    with a cleared cache the upload works."""
    token = lserver.make_credential("fern")
    fern = HubClient(lserver.url, token, tmp_path / "fern")
    data, sha = folder(tmp_path, "same", 300 * KiB, "lc-same")
    fern.hf_ok("repos", "create", "r1")
    fern.hf_ok("upload", "fern/r1", data)
    size = check_usage(lserver, "fern")
    fern.hf_ok("repos", "delete", "fern/r1", "--yes")
    reports = gc_until(lserver, "fern", 0, grace="1h")
    assert sum(r["deleted_xorbs"] for r in reports) == 0, reports

    fern.hf_ok("repos", "create", "r2")
    mark = lserver.log_mark()
    fern.hf_ok("upload", "fern/r2", data)
    sent = [e for e in lserver.requests_since(mark) if e["path"].startswith("/v1/xorbs/")]
    assert not sent, "the client re-sent the xorb (its cache did not dedup?)"
    assert check_usage(lserver, "fern") == size, "the shard did not make fern the owner again"
    out = tmp_path / "down1"
    HubClient(lserver.url, token, tmp_path / "fresh1").hf_ok("download", "fern/r2", "--local-dir", out)
    assert sha256_file(out / "same.bin") == sha

    fern.hf_ok("repos", "delete", "fern/r2", "--yes")
    gc_until(lserver, "fern", 0)
    fern.hf_ok("repos", "create", "r3")
    r = fern.hf("upload", "fern/r3", data)
    print(f"\n--- the same file after a pass with no grace, same cache: exit {r.returncode}\n{r.output[-1500:]}")
    assert r.returncode != 0 and "HF_XET_CACHE" in r.output, r
    shutil.rmtree(fern.workdir / "xet-cache")
    (fern.workdir / "xet-cache").mkdir()
    fern.hf_ok("upload", "fern/r3", data)
    check_usage(lserver, "fern")
    out = tmp_path / "down2"
    HubClient(lserver.url, token, tmp_path / "fresh2").hf_ok("download", "fern/r3", "--local-dir", out)
    assert sha256_file(out / "same.bin") == sha


def test_super_squash_then_gc_gives_quota_back(lserver, tmp_path):
    token = lserver.make_credential("erin")
    erin = HubClient(lserver.url, token, tmp_path / "erin")
    lserver.admin_put_limits("erin", quota_bytes=1 * MiB)
    a, _ = folder(tmp_path, "a", 700 * KiB, "lc-a")
    b, b_sha = folder(tmp_path, "b", 700 * KiB, "lc-b")
    erin.hf_ok("repos", "create", "sq")
    erin.hf_ok("upload", "erin/sq", a)
    used = check_usage(lserver, "erin")
    erin.hf_ok("repos", "delete-files", "erin/sq", "a.bin")
    # The first revision still has a.bin: nothing is released.
    gc(lserver)
    assert lserver.usage("erin") == used
    assert quota_refused(erin.hf("upload", "erin/sq", b))

    erin.api("super_squash_history", repo_id="erin/sq")
    gc_until(lserver, "erin", 0)
    check_usage(lserver, "erin")
    erin.hf_ok("upload", "erin/sq", b)
    files = erin.api("list_repo_files", repo_id="erin/sq")
    assert "b.bin" in files and "a.bin" not in files, files
    out = tmp_path / "down"
    HubClient(lserver.url, token, tmp_path / "fresh").hf_ok("download", "erin/sq", "--local-dir", out)
    assert sha256_file(out / "b.bin") == b_sha
    check_usage(lserver, "erin")


def test_branch_and_tag_deletion(lserver, tmp_path):
    token = lserver.make_credential("gus")
    gus = HubClient(lserver.url, token, tmp_path / "gus")
    dev, _ = folder(tmp_path, "dev", 300 * KiB, "lc-dev")
    gus.hf_ok("repos", "create", "bt")
    gus.api("create_branch", repo_id="gus/bt", branch="dev")
    gus.hf_ok("upload", "gus/bt", dev, "--revision", "dev")
    gus.api("create_tag", repo_id="gus/bt", tag="v1", revision="dev")
    refs = gus.api("list_repo_refs", repo_id="gus/bt")
    assert sorted(b["name"] for b in refs["branches"]) == ["dev", "main"], refs
    assert [t["name"] for t in refs["tags"]] == ["v1"], refs
    used = check_usage(lserver, "gus")
    assert used > 0

    out = gus.api_call("create_tag", repo_id="gus/bt", tag="v1", revision="dev")
    assert not out["ok"] and out["status"] == 409, out
    gus.api("create_tag", repo_id="gus/bt", tag="v1", revision="dev", exist_ok=True)

    gus.api("delete_branch", repo_id="gus/bt", branch="dev")
    gc(lserver)
    assert lserver.usage("gus") == used, "the tag still holds the file"
    gus.api("delete_tag", repo_id="gus/bt", tag="v1")
    gc_until(lserver, "gus", 0)
    check_usage(lserver, "gus")
    out = gus.api_call("delete_branch", repo_id="gus/bt", branch="main")
    assert not out["ok"] and out["status"] == 400, out
    out = gus.api_call("super_squash_history", repo_id="gus/bt", branch="nope")
    assert not out["ok"] and out["status"] == 404, out


def test_cas_only_files_and_tenant_deletion(lserver, tmp_path):
    """A file uploaded with hf_xet alone is kept until deleted; deleting
    the tenant releases everything and its token stops working."""
    from conftest import XetClient
    token = lserver.make_credential("hal")
    xc = XetClient(lserver.url, token, tmp_path / "xet")
    p = tmp_path / "cas.bin"
    write_random(p, 200 * KiB, "lc-cas")
    xc.upload_files([p])
    gc(lserver)
    used = check_usage(lserver, "hal")
    assert used > 0, "a CAS-only file keeps its bytes"

    r = openxet(lserver, "tenants", "delete", "--yes", "--json", "hal", remote=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["credentials"] == 1 and out["released_files"] == 1, out
    coll = out["collection"]
    assert coll is None or coll["released_bytes"] in (0, used), out
    if lserver.usage("hal") != 0:
        gc_until(lserver, "hal", 0)
    assert owned_in_bucket(lserver, "hal") == 0
    resp = lserver.request("GET", "/api/openxet/v1/usage", token=token)
    assert resp.status == 401, resp
    r = openxet(lserver, "usage", "--json", remote=True)
    assert r.returncode == 0, r.stderr
    assert "hal" not in [t["tenant"] for t in json.loads(r.stdout)["tenants"]]
