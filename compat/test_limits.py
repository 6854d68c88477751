"""Rate limits and quotas as the stock hf_xet client meets them (docs/design.md §13):
a throttled client retries its 429s until the transfer is done,
the default limits never throttle a default transfer (measured: peak request
rate and in-flight count, written to compat/.results/default_limits.json),
and a tenant over its quota can still read, query dedup and register data it
already stored.
"""

import json
import os
import re
import shutil
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import (
    COMPAT_DIR, GiB, KiB, MiB, XetClient, XetError, peak_in_flight, peak_rate,
    request_intervals, sha256_file, write_random,
)

RESULTS = COMPAT_DIR / ".results" / "default_limits.json"
XORB_POST = re.compile(r"^/v1/xorbs/default/[0-9a-f]{64}$")
SHARD_POST = re.compile(r"^/v[12]/shards$")
CHUNK_GET = re.compile(r"^/v1/chunks/default/([0-9a-f]{64})$")


def _files(tmp, sizes, seed):
    """Random files; returns [(path, sha256, size)]."""
    out = []
    for i, size in enumerate(sizes):
        p = tmp / f"f{i:02d}.bin"
        out.append((p, write_random(p, size, f"{seed}/{i}"), size))
    return out


def _check_download(client, uploaded, files, dest_dir):
    dest_dir.mkdir(parents=True, exist_ok=True)
    dests = [dest_dir / p.name for p, _, _ in files]
    client.session_download([(d, u["hash"], u["file_size"]) for d, u in zip(dests, uploaded)])
    for d, (_, sha, size) in zip(dests, files):
        assert d.stat().st_size == size, d
        assert sha256_file(d) == sha, d


def _status_counts(entries):
    return dict(Counter(e["status"] for e in entries))


# --------------------------------------------------------------------------
# 429: the client retries until done


# The transfer meets 429s by construction, not by the machine's pace: the
# tenant starts STARVED (one request per 100 s, burst 4), so once the
# upload's ten dedup queries have used up the burst its xorb or shard upload
# is refused, however slowly it runs. When the log shows that refusal, the
# limit is raised to THROTTLE and the client's retries get through; the
# download then runs at 5 requests/s (it may meet 429s too; it must finish).
# hf_xet 1.8.0 ignores Retry-After and sleeps a jittered fraction of the
# base delay between attempts, so its retry budget is about attempts x base
# delay: 100 x 1 s, far more than reading the log and raising the limit take.
STARVED = {"tenant_requests_per_second": 0.01, "tenant_burst": 4}
THROTTLE = {"tenant_requests_per_second": 5, "tenant_burst": 4}
THROTTLED_CLIENT_ENV = {
    "HF_XET_CLIENT_RETRY_BASE_DELAY": "1s",
    "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS": "100",
}


def _refused_retried_route(entries):
    """Whether a xorb or shard upload (a request hf_xet retries) got a 429."""
    return any(e["status"] == "429" and (XORB_POST.match(e["path"]) or SHARD_POST.match(e["path"]))
               for e in entries)


def test_rate_limited_client_recovers(server, tmp_path):
    tenant = "throttled"
    token = server.make_credential(tenant)
    lim = server.admin_put_limits(tenant, **STARVED)
    assert lim["tenant_requests_per_second"] == 0.01 and lim["tenant_burst"] == 4
    files = _files(tmp_path / "src", [150 * KiB + 997 * i for i in range(10)], "throttled")

    mark = server.log_mark()
    t0 = time.monotonic()
    up = XetClient(server.url, token, tmp_path / "up", THROTTLED_CLIENT_ENV)
    with ThreadPoolExecutor(max_workers=1) as pool:
        upload = pool.submit(up.session_upload, paths=[p for p, _, _ in files])
        # Poll the server's request log (a child process) until the refusal
        # shows; the upload cannot end without it, and the driver's own
        # timeout bounds the wait.
        while True:
            ended = upload.done()
            if _refused_retried_route(e for e in server.requests_since(mark) if e.get("tenant") == tenant):
                break
            if ended:
                upload.result()  # raises the client's error, if any
                pytest.fail("the starved upload ended without a refused xorb or shard upload: "
                            f"{_status_counts(server.requests_since(mark))}")
            time.sleep(0.05)
        t_refused = time.monotonic() - t0
        lim = server.admin_put_limits(tenant, **THROTTLE)
        assert lim["tenant_requests_per_second"] == 5 and lim["tenant_burst"] == 4
        uploaded = upload.result()
    t_up = time.monotonic() - t0
    assert [u["sha256"] for u in uploaded] == [sha for _, sha, _ in files]
    down = XetClient(server.url, token, tmp_path / "down", THROTTLED_CLIENT_ENV)
    _check_download(down, uploaded, files, tmp_path / "dst")
    t_all = time.monotonic() - t0

    reqs = [e for e in server.requests_since(mark) if e.get("tenant") == tenant]
    limited = [e for e in reqs if e["status"] == "429"]
    print(f"\nthrottled transfer: refused after {t_refused:.1f}s, upload {t_up:.1f}s, total {t_all:.1f}s, "
          f"statuses {_status_counts(reqs)}, 429 by path prefix "
          f"{dict(Counter(e['path'][:12] for e in limited))}")
    assert _refused_retried_route(limited)
    assert all(e.get("error") == "rate_limited" and e.get("limit") == "tenant" for e in limited)
    # Retried, not given up: every path refused with 429 was later answered,
    # except dedup queries, which hf_xet does not retry (a refused query just
    # means no dedup).
    ok_paths = {e["path"] for e in reqs if e["status"][0] == "2"}
    unretried = {e["path"] for e in limited} - ok_paths
    assert all(CHUNK_GET.match(p) for p in unretried), unretried
    # Nothing else failed.
    assert not [e for e in reqs if e["status"][0] in "45" and e["status"] != "429"
                and not (CHUNK_GET.match(e["path"]) and e["status"] == "404")]

    # The refusal itself, as a client sees it: starved again, the tenant has
    # at most its burst of 4 left, and nothing refills while 5 requests run.
    server.admin_put_limits(tenant, **STARVED)
    for _ in range(STARVED["tenant_burst"] + 1):
        r = server.request("GET", "/v1/chunks/default/" + "0" * 64, token=token)
        if r.status == 429:
            break
    assert r.status == 429, r
    body = r.json()
    assert body["error"] == "rate_limited" and body["limit"] == "tenant"
    assert int(r.headers["Retry-After"]) >= 1
    assert r.headers["RateLimit-Policy"].startswith('"tenant";q=4')


# --------------------------------------------------------------------------
# default limits and a 1 GiB transfer

GIB_FILE_SIZES = [512 * MiB, 256 * MiB, 192 * MiB, 64 * MiB]  # 1 GiB


@pytest.fixture(scope="module")
def gib_data(tmp_path_factory):
    """1 GiB of random data in a few files, deleted after the module."""
    d = tmp_path_factory.mktemp("gib-data")
    t0 = time.monotonic()
    files = _files(d, GIB_FILE_SIZES, "default-limits")
    print(f"\ngenerated {sum(GIB_FILE_SIZES) / GiB:.0f} GiB in {time.monotonic() - t0:.1f}s")
    try:
        yield files
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _traffic(entries):
    """Peak request rate (1 s window) and in-flight count per tenant, and over
    all requests (unauthenticated probes such as hf_xet's xorb-grants have no
    tenant)."""
    per = {}
    tenants = sorted({e["tenant"] for e in entries if "tenant" in e})
    for t in tenants:
        iv = request_intervals([e for e in entries if e.get("tenant") == t])
        per[t] = {"requests": len(iv), "peak_requests_per_second": peak_rate(iv),
                  "peak_in_flight": peak_in_flight(iv)}
    iv = request_intervals(entries)
    return {
        "requests": len(entries),
        "statuses": _status_counts(entries),
        "routes": dict(Counter(re.sub(r"[0-9a-f]{64}", "{hash}", e["path"]) for e in entries)),
        "peak_requests_per_second": peak_rate(iv),
        "peak_in_flight": peak_in_flight(iv),
        "per_tenant": per,
    }


def _record(mode, result):
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    try:
        doc = json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        doc = {}
    doc.update({
        "what": "one hf_xet session upload and download of 1 GiB of random data "
                "against openxet serve with default limits",
        "hf_xet": _hf_xet_version(),
        "cpus": os.cpu_count(),
        "data_bytes": sum(GIB_FILE_SIZES),
        "files": len(GIB_FILE_SIZES),
    })
    doc.setdefault("modes", {})[mode] = result
    RESULTS.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def _hf_xet_version():
    try:
        from importlib.metadata import version
        return version("hf_xet")
    except Exception:  # noqa: BLE001
        return None


@pytest.mark.parametrize("mode", ["default", "high_performance"])
def test_default_limits_never_throttle_stock_client(start_server, gib_data, tmp_path, mode):
    srv = start_server()  # fresh store: every byte is really uploaded
    try:
        result, up_reqs, down_reqs = _transfer_gib(srv, gib_data, tmp_path, mode)
        srv.stop()
        srv.check_stopped_cleanly()
    finally:  # never leave 1 GiB behind, whatever happened
        srv.stop()
        shutil.rmtree(srv.data_dir, ignore_errors=True)
        for d in ("dst", "up", "down"):
            shutil.rmtree(tmp_path / d, ignore_errors=True)

    o, u, d = result["overall"], result["upload"], result["download"]
    print(f"\n[{mode}] 1 GiB: upload {result['upload_seconds']}s, download "
          f"{result['download_seconds']}s; requests {o['requests']} {o['statuses']}; peak rate/s "
          f"upload {u['peak_requests_per_second']} download {d['peak_requests_per_second']}; "
          f"peak in flight upload {u['peak_in_flight']} download {d['peak_in_flight']}; "
          f"per tenant {o['per_tenant']}")
    _record(mode, result)

    throttled = [e for e in up_reqs + down_reqs if e["status"] == "429"]
    assert not throttled, throttled[:20]
    assert not [e for e in up_reqs + down_reqs if e["status"][0] == "5"]
    assert sum(int(e["bytes_in"]) for e in up_reqs if XORB_POST.match(e["path"])) >= sum(GIB_FILE_SIZES)
    # Headroom: the defaults are far above what one stock transfer needs.
    lim = result["limits"]
    per = o["per_tenant"]["bulk"]
    assert per["peak_requests_per_second"] < lim["credential_burst"]
    assert per["peak_in_flight"] < lim["max_in_flight_per_credential"]


def _transfer_gib(srv, files, tmp_path, mode):
    """Upload and download files with hf_xet as tenant bulk; returns the
    measurements and the request-log entries of each phase."""
    tenant = "bulk"
    token = srv.make_credential(tenant)
    lim = srv.admin_get_limits(tenant)
    assert all(v == "default" for v in lim["source"].values()), lim
    env = {"HF_XET_HIGH_PERFORMANCE": "1"} if mode == "high_performance" else {}
    m0 = srv.log_mark()
    t0 = time.monotonic()
    uploaded = XetClient(srv.url, token, tmp_path / "up", env).session_upload(
        paths=[p for p, _, _ in files])
    t_up = time.monotonic() - t0
    up_reqs = srv.requests_since(m0)
    m1 = srv.log_mark()
    t1 = time.monotonic()
    _check_download(XetClient(srv.url, token, tmp_path / "down", env), uploaded, files,
                    tmp_path / "dst")
    t_down = time.monotonic() - t1
    down_reqs = srv.requests_since(m1)
    result = {
        "env": env,
        "limits": {k: lim[k] for k in ("tenant_requests_per_second", "tenant_burst",
                                       "credential_requests_per_second", "credential_burst",
                                       "max_in_flight_per_credential")},
        "upload_seconds": round(t_up, 2),
        "download_seconds": round(t_down, 2),
        "upload": _traffic(up_reqs),
        "download": _traffic(down_reqs),
        "overall": _traffic(up_reqs + down_reqs),
    }
    return result, up_reqs, down_reqs


# --------------------------------------------------------------------------
# over quota: reads, dedup and shards of known data go on


def test_over_quota_tenant_reads_dedups_and_reregisters(server, tmp_path):
    tenant = "overquota"
    token = server.make_credential(tenant)
    old = _files(tmp_path / "old", [4 * MiB + 333, 1 * MiB], "overquota-old")
    mark = server.log_mark()
    first = XetClient(server.url, token, tmp_path / "c1").session_upload(paths=[p for p, _, _ in old])
    first_reqs = server.requests_since(mark)
    chunk_queries = [CHUNK_GET.match(e["path"]).group(1) for e in first_reqs
                     if e.get("tenant") == tenant and CHUNK_GET.match(e["path"])]
    assert chunk_queries, first_reqs
    usage = server.usage(tenant)
    assert usage >= 5 * MiB

    lim = server.admin_put_limits(tenant, quota_bytes=usage // 2)
    assert lim["usage_bytes"] > lim["quota_bytes"]

    # Reads.
    _check_download(XetClient(server.url, token, tmp_path / "r1"), first, old, tmp_path / "dl")
    # Dedup queries (the first chunk of a stored file is known now).
    r = server.request("GET", f"/v1/chunks/default/{chunk_queries[0]}", token=token)
    assert r.status == 200, r

    # New data: refused with quota_exceeded, and hf_xet gives up (403 is fatal).
    new = _files(tmp_path / "new", [2 * MiB], "overquota-new")
    mark = server.log_mark()
    with pytest.raises(XetError) as ei:
        XetClient(server.url, token, tmp_path / "c2").session_upload(paths=[new[0][0]])
    print(f"\nhf_xet on a new upload over quota: {ei.value}")
    assert "403" in str(ei.value) or "quota" in str(ei.value).lower(), ei.value
    reqs = [e for e in server.requests_since(mark) if e.get("tenant") == tenant]
    refused = [e for e in reqs if XORB_POST.match(e["path"])]
    assert refused and all(e["status"] == "403" and e.get("error") == "quota_exceeded"
                           for e in refused), refused
    assert not [e for e in reqs if SHARD_POST.match(e["path"]) and e["status"] == "200"]
    assert server.usage(tenant) == usage

    # The same data again, from a fresh cache: the dedup query finds it, no
    # xorb is stored, the shard registers the files, and it costs nothing.
    mark = server.log_mark()
    again = XetClient(server.url, token, tmp_path / "c3").session_upload(paths=[p for p, _, _ in old])
    assert [u["hash"] for u in again] == [u["hash"] for u in first]
    reqs = [e for e in server.requests_since(mark) if e.get("tenant") == tenant]
    assert [e for e in reqs if CHUNK_GET.match(e["path"]) and e["status"] == "200"], reqs
    assert not [e for e in reqs if XORB_POST.match(e["path"]) and e["status"] != "200"], reqs
    assert [e["status"] for e in reqs if SHARD_POST.match(e["path"])] == ["200"], reqs
    # ...and from the first client's cache (local dedup, shard only).
    XetClient(server.url, token, tmp_path / "c1").session_upload(paths=[p for p, _, _ in old])
    assert server.usage(tenant) == usage
    # Still readable by a new client after all that.
    _check_download(XetClient(server.url, token, tmp_path / "r2"), again, old, tmp_path / "dl2")
