"""The stock hf_xet client uploads, deduplicates and downloads through openxet.

One server per module; tenant "alice" uploads the whole data set once
(module fixture `alice`), and the tests read from that upload. Each client
scenario runs hf_xet in its own interpreter with its own caches (conftest.XetClient).
"""

import array
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

import lz4.frame
import pytest

from conftest import XetClient, XetError, http, sha256_file, write_random

KiB = 1 << 10
MiB = 1 << 20
ZERO_HASH = "0" * 64
XORB_POST = re.compile(r"^/v1/xorbs/default/([0-9a-f]{64})$")
# Seen from hf_xet 1.8.0 and allowed in an upload's request log:
# (method, path pattern, statuses)
UPLOAD_ROUTES = [
    ("GET", re.compile(r"^/v1/chunks/default/[0-9a-f]{64}$"), {200, 404}),
    # 1.8.0 asks for an upload grant first; openxet has no such route (404)
    # and the client falls back to a direct xorb POST.
    ("POST", re.compile(r"^/v1/xorb-grants/default/[0-9a-f]{64}$"), {200, 404}),
    ("POST", XORB_POST, {200}),
    ("POST", re.compile(r"^/v2/shards$"), {200}),
    ("POST", re.compile(r"^/v1/shards$"), {200}),
]
DOWNLOAD_ROUTES = [
    ("GET", re.compile(r"^/v2/reconstructions/[0-9a-f]{64}$"), {200}),
    ("GET", re.compile(r"^/v1/reconstructions/[0-9a-f]{64}$"), {200}),
    ("GET", re.compile(r"^/v1/fetch/[0-9a-f]{64}$"), {200, 206}),
]


# --------------------------------------------------------------------------
# the data set


@dataclass
class File:
    name: str
    path: Path
    size: int
    sha256: str


def _text_bytes(size, seed):
    """Compressible text-like bytes (LZ4 shrinks them)."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(500)]
    out = bytearray()
    while len(out) < size:
        out += (" ".join(rng.choice(words) for _ in range(16)) + "\n").encode()
    return bytes(out[:size])


def _float_bytes(size, seed):
    """float32 samples of a slow signal: what byte grouping (BG4) is for."""
    rng = random.Random(seed)
    n = size // 4
    a = array.array("f", (math.sin(i / 500.0) * 1000.0 + rng.random() * 0.01 for i in range(n)))
    return a.tobytes()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("dataset")
    specs = {}

    def add(name, writer):
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        writer(p)
        specs[name] = File(name, p, p.stat().st_size, sha256_file(p))

    add("empty.bin", lambda p: p.write_bytes(b""))
    add("one.bin", lambda p: p.write_bytes(b"\x5a"))
    add("r100k.bin", lambda p: write_random(p, 100 * KiB, 1))
    add("r10m.bin", lambda p: write_random(p, 10 * MiB, 2))
    add("r200m.bin", lambda p: write_random(p, 200 * MiB, 3))
    base = random.Random(4).randbytes(8 * MiB)
    add("twin_a.bin", lambda p: p.write_bytes(base + random.Random(5).randbytes(64 * KiB)))
    add("twin_b.bin", lambda p: p.write_bytes(base + random.Random(6).randbytes(64 * KiB)))
    del base
    add("text.bin", lambda p: p.write_bytes(_text_bytes(3 * MiB, 7)))
    add("floats.bin", lambda p: p.write_bytes(_float_bytes(2 * MiB, 8)))
    rng = random.Random(9)
    for i in range(50):
        size = rng.randint(1 * KiB, 20 * KiB)
        add(f"small/s{i:02d}.bin", lambda p, size=size, i=i: write_random(p, size, 100 + i))
    return specs


# --------------------------------------------------------------------------
# helpers


def xorb_posts(reqs):
    """(hash, status, bytes_in) of every xorb upload in a request log slice."""
    out = []
    for r in reqs:
        m = XORB_POST.match(r.get("path", ""))
        if r.get("method") == "POST" and m:
            out.append((m.group(1), int(r["status"]), int(r["bytes_in"])))
    return out


def unexpected_requests(reqs, allowed):
    bad = []
    for r in reqs:
        ok = any(r.get("method") == m and p.match(r.get("path", "")) and int(r["status"]) in st
                 for m, p, st in allowed)
        if not ok:
            bad.append(f'{r.get("method")} {r.get("path")} -> {r.get("status")} ({r.get("error", "")})')
    return bad


@dataclass
class Upload:
    """One tenant's upload of the data set."""
    tenant: str
    token: str
    client: XetClient
    infos: dict  # name -> {"hash", "file_size", "sha256"}
    requests: list  # request-log entries of the upload
    usage_after: int


@pytest.fixture(scope="module")
def alice(server, dataset, tmp_path_factory):
    token = server.make_credential("alice", "write")
    client = XetClient(server.url, token, tmp_path_factory.mktemp("alice-client"))
    names = list(dataset)
    mark = server.log_mark()
    res = client.upload_files([dataset[n].path for n in names])
    reqs = server.requests_since(mark)
    assert len(res) == len(names)
    return Upload("alice", token, client, dict(zip(names, res)), reqs, server.usage("alice"))


def _download_all(client, dataset, infos, names, dest):
    dest.mkdir(parents=True, exist_ok=True)
    files = [(dest / n.replace("/", "_"), infos[n]["hash"], infos[n]["file_size"]) for n in names]
    paths = client.download_files(files)
    assert len(paths) == len(files)
    bad = []
    for (p, h, _), n in zip(files, names):
        want = dataset[n]
        if not p.exists():
            bad.append(f"{n}: {p} was not written")
            continue
        size, digest = p.stat().st_size, sha256_file(p)
        if size != want.size or digest != want.sha256:
            bad.append(f"{n}: got {size} bytes sha256 {digest}, want {want.size} {want.sha256}")
        else:
            p.unlink()  # keep the temporary directory small
    return bad


# --------------------------------------------------------------------------
# upload and download


def test_upload_reports_each_file(alice, dataset):
    bad = []
    for name, f in dataset.items():
        info = alice.infos[name]
        if info["file_size"] != f.size:
            bad.append(f"{name}: file_size {info['file_size']} want {f.size}")
        if f.size == 0:
            # hf_xet gives the empty file the all-zero xet hash (and reports an
            # all-zero sha256 too, not the sha256 of b"").
            if info["hash"] != ZERO_HASH:
                bad.append(f"{name}: empty file hash {info['hash']}")
            continue
        if not re.fullmatch(r"[0-9a-f]{64}", info["hash"]) or info["hash"] == ZERO_HASH:
            bad.append(f"{name}: hash {info['hash']!r}")
        if info["sha256"] != f.sha256:
            bad.append(f"{name}: sha256 {info['sha256']} want {f.sha256}")
    assert not bad, "\n".join(bad)
    hashes = [i["hash"] for n, i in alice.infos.items() if dataset[n].size]
    assert len(set(hashes)) == len(hashes), "two different files got the same xet hash"


def test_upload_request_pattern(alice, server):
    """Every request of the upload is one the protocol expects, nothing failed
    but the expected probes, and the tenant is charged exactly the xorb bytes
    it stored."""
    bad = unexpected_requests(alice.requests, UPLOAD_ROUTES)
    assert not bad, "unexpected requests during upload:\n" + "\n".join(bad)
    posts = xorb_posts(alice.requests)
    assert posts, "the upload sent no xorb"
    assert any(p.startswith("/v2/shards") or p.startswith("/v1/shards")
               for p in (r["path"] for r in alice.requests if int(r["status"]) == 200))
    stored = {h: n for h, st, n in posts if st == 200}
    assert alice.usage_after == sum(stored.values()), (
        f"usage {alice.usage_after} != sum of stored xorb sizes {sum(stored.values())}")
    # 200 MiB + 10 MiB + 8 MiB (once, shared by the twins) of random data at least.
    assert alice.usage_after >= 218 * MiB


def test_download_round_trip(alice, dataset, server, tmp_path):
    """A fresh client (no caches) downloads every file back, byte for byte."""
    client = XetClient(server.url, alice.token, tmp_path / "client")
    mark = server.log_mark()
    bad = _download_all(client, dataset, alice.infos, list(dataset), tmp_path / "out")
    assert not bad, "\n".join(bad)
    reqs = server.requests_since(mark)
    unexpected = unexpected_requests(reqs, DOWNLOAD_ROUTES)
    assert not unexpected, "unexpected requests during download:\n" + "\n".join(unexpected)


def test_empty_file_downloads_as_empty(alice, server, tmp_path):
    client = XetClient(server.url, alice.token, tmp_path / "client")
    dest = tmp_path / "empty-out"
    client.download_files([(dest, ZERO_HASH, 0)])
    assert dest.exists() and dest.stat().st_size == 0
    # The zero hash is never stored (hf_xet 1.8.0 writes the empty file without
    # asking); a direct query gets the empty answer of the reference server.
    r = server.request("GET", f"/v1/reconstructions/{ZERO_HASH}", token=alice.token)
    assert r.status == 200, r
    assert r.json()["terms"] == [], r


# --------------------------------------------------------------------------
# deduplication


def _check_reupload(server, dataset, alice, client):
    before = server.usage("alice")
    assert before == alice.usage_after
    mark = server.log_mark()
    res = client.upload_files([dataset[n].path for n in dataset])
    reqs = server.requests_since(mark)
    got = {n: r["hash"] for n, r in zip(dataset, res)}
    want = {n: i["hash"] for n, i in alice.infos.items()}
    assert got == want, "the second upload reported different file hashes"
    bad = unexpected_requests(reqs, UPLOAD_ROUTES)
    assert not bad, "unexpected requests during re-upload:\n" + "\n".join(bad)
    first = {h for h, st, _ in xorb_posts(alice.requests) if st == 200}
    posts = xorb_posts(reqs)
    new = [h for h, st, _ in posts if h not in first]
    assert not new, f"the re-upload stored {len(new)} new xorbs: {new[:5]}"
    after = server.usage("alice")
    assert after == before, f"usage changed on re-upload: {before} -> {after}"
    return posts


def test_dedup_reupload_same_cache(server, dataset, alice):
    """Same client caches: hf_xet deduplicates locally and sends no xorb."""
    posts = _check_reupload(server, dataset, alice, alice.client)
    assert posts == [], f"{len(posts)} xorb POSTs on a re-upload with a warm cache"


def test_dedup_reupload_fresh_cache(server, dataset, alice, tmp_path):
    """Fresh caches: the client learns what is stored from the global dedup
    query (GET /v1/chunks) and stores nothing new."""
    client = XetClient(server.url, alice.token, tmp_path / "client")
    _check_reupload(server, dataset, alice, client)


# --------------------------------------------------------------------------
# tenants


BOB_FILES = ["r10m.bin", "r100k.bin", "text.bin", "small/s00.bin", "small/s01.bin"]


def test_cross_tenant_isolation(server, dataset, alice, tmp_path):
    bob_token = server.make_credential("bob", "write")
    bob = XetClient(server.url, bob_token, tmp_path / "bob")
    alice_usage = server.usage("alice")

    mark = server.log_mark()
    res = bob.upload_files([dataset[n].path for n in BOB_FILES])
    reqs = server.requests_since(mark)
    for n, r in zip(BOB_FILES, res):
        assert r["hash"] == alice.infos[n]["hash"], n
    bad = unexpected_requests(reqs, UPLOAD_ROUTES)
    assert not bad, "\n".join(bad)
    # Bob's upload neither charges nor credits alice.
    assert server.usage("alice") == alice_usage
    # With the default dedup scope (global) the dedup query offers bob alice's
    # xorbs; referencing them costs nothing, so bob pays exactly for the xorbs
    # he sent himself (hf_xet 1.8.0 sends none here: usage 0).
    bob_usage = server.usage("bob")
    sent = sum(n for _, st, n in xorb_posts(reqs) if st == 200)
    assert bob_usage == sent, f"bob usage {bob_usage} != bytes of the xorbs he stored {sent}"

    # Bob reads his own files back.
    bad = _download_all(bob, dataset, alice.infos, BOB_FILES, tmp_path / "bob-out")
    assert not bad, "\n".join(bad)

    # Files only alice registered do not exist for bob.
    for n in ["r200m.bin", "twin_a.bin", "small/s02.bin"]:
        h = alice.infos[n]["hash"]
        r = server.request("GET", f"/v1/reconstructions/{h}", token=bob_token)
        assert r.status == 404, f"bob GET /v1/reconstructions/{h} ({n}): {r}"
        r = server.request("GET", f"/v2/reconstructions/{h}", token=bob_token)
        assert r.status == 404, f"bob GET /v2/reconstructions/{h} ({n}): {r}"
        # ... and still exist for alice.
        r = server.request("GET", f"/v1/reconstructions/{h}", token=alice.token,
                           headers={"Range": "bytes=0-0"})
        assert r.status == 200, f"alice GET /v1/reconstructions/{h} ({n}): {r}"

    dest = tmp_path / "stolen"
    with pytest.raises(XetError) as ei:
        bob.download_files([(dest, alice.infos["twin_a.bin"]["hash"], dataset["twin_a.bin"].size)])
    # hf_xet 1.8.0 reports the 404 as XetObjectNotFoundError (a RuntimeError-ish
    # class); older releases raised ConnectionError/RuntimeError.
    # hf_xet 1.8.0: GET /v2/reconstructions -> 404 makes it fall back to v1
    # (it cannot tell "no v2 route" from "no such file"), v1 -> 404 is fatal
    # and surfaces as ConnectionError("Network error: ... 404 Not Found ...").
    assert ei.value.error_type == "ConnectionError" and "404" in ei.value.message, ei.value
    assert not dest.exists() or dest.stat().st_size == 0


def test_cross_tenant_charged_as_if_alone(start_server, dataset, tmp_path):
    """With dedup limited to the tenant's own data, a second tenant uploading
    the same bytes stores the same xorbs and is charged their full size."""
    srv = start_server("--dedup-scope", "tenant")
    names = ["r10m.bin", "twin_a.bin", "twin_b.bin", "small/s03.bin"]
    paths = [dataset[n].path for n in names]
    ta, tb = srv.make_credential("ta", "write"), srv.make_credential("tb", "write")

    mark = srv.log_mark()
    ra = XetClient(srv.url, ta, tmp_path / "a").upload_files(paths)
    posts_a = xorb_posts(srv.requests_since(mark))
    usage_a = srv.usage("ta")
    assert usage_a > 0

    mark = srv.log_mark()
    rb = XetClient(srv.url, tb, tmp_path / "b").upload_files(paths)
    reqs_b = srv.requests_since(mark)
    posts_b = xorb_posts(reqs_b)
    assert [r["hash"] for r in ra] == [r["hash"] for r in rb]
    assert srv.usage("ta") == usage_a, "tenant ta's usage changed when tb uploaded"
    usage_b = srv.usage("tb")
    assert usage_b == usage_a, f"tb usage {usage_b} != ta usage {usage_a} for the same data"
    # hf_xet packs chunks of files ingested in parallel into xorbs in no fixed
    # order, so the xorb hashes of two uploads of the same files may differ;
    # the bytes charged are the bytes each tenant stored.
    assert usage_a == sum(n for _, st, n in posts_a if st == 200)
    assert usage_b == sum(n for _, st, n in posts_b if st == 200)
    bad = unexpected_requests(reqs_b, UPLOAD_ROUTES)
    assert not bad, "\n".join(bad)


def test_read_scope_cannot_upload(server, dataset, tmp_path):
    token = server.make_credential("reader", "read")
    client = XetClient(server.url, token, tmp_path / "c")
    fresh = tmp_path / "fresh.bin"
    write_random(fresh, 300 * KiB, 77)  # data nobody stored: a xorb must be sent
    mark = server.log_mark()
    with pytest.raises(XetError):
        client.upload_files([fresh])
    reqs = server.requests_since(mark)
    writes = [(r["method"], r["path"], r["status"]) for r in reqs
              if XORB_POST.match(r["path"]) or r["path"] in ("/v1/shards", "/v2/shards")]
    assert writes and all(st == "403" for _, _, st in writes), writes
    assert any(XORB_POST.match(p) for _, p, _ in writes), writes
    assert server.usage("reader") == 0


# --------------------------------------------------------------------------
# ranged reconstruction, decoded by hand


def ungroup4(g):
    n = len(g)
    q, r = divmod(n, 4)
    lens = [q + (r > 0), q + (r > 1), q + (r > 2), q]
    out = bytearray(n)
    pos = 0
    for j in range(4):
        out[j::4] = g[pos:pos + lens[j]]
        pos += lens[j]
    return bytes(out)


def decode_chunks(buf):
    """Decode a run of serialized xorb chunks; returns [(scheme, bytes)]."""
    out = []
    pos = 0
    while pos < len(buf):
        assert len(buf) - pos >= 8, f"truncated chunk header at {pos}"
        hdr = buf[pos:pos + 8]
        version, scheme = hdr[0], hdr[4]
        csize = int.from_bytes(hdr[1:4], "little")
        usize = int.from_bytes(hdr[5:8], "little")
        assert version == 0, f"chunk version {version} at {pos}"
        data = buf[pos + 8:pos + 8 + csize]
        assert len(data) == csize, f"chunk at {pos} wants {csize} bytes, {len(data)} left"
        if scheme == 0:
            raw = data
        elif scheme == 1:
            raw = lz4.frame.decompress(data)
        elif scheme == 2:
            raw = ungroup4(lz4.frame.decompress(data))
        else:
            raise AssertionError(f"unknown compression scheme {scheme} at {pos}")
        assert len(raw) == usize, f"chunk at {pos}: {len(raw)} bytes, header says {usize}"
        out.append((scheme, raw))
        pos += 8 + csize
    return out


def reconstruct(server, token, file_hash, start, end, api="v1", schemes=None):
    """GET the reconstruction for bytes=start-end and rebuild those bytes from
    the fetch URLs (fetched without Authorization)."""
    r = server.request("GET", f"/{api}/reconstructions/{file_hash}", token=token,
                       headers={"Range": f"bytes={start}-{end}"})
    assert r.status == 200, f"reconstruction {api} bytes={start}-{end}: {r}"
    ans = r.json()
    # (xorb, chunk start, chunk end, url, byte start, byte end) per fetchable range
    fetches = []
    if api == "v1":
        for x, items in ans["fetch_info"].items():
            for it in items:
                fetches.append((x, it["range"]["start"], it["range"]["end"], it["url"],
                                it["url_range"]["start"], it["url_range"]["end"]))
    else:
        for x, items in ans["xorbs"].items():
            for it in items:
                for rg in it["ranges"]:
                    fetches.append((x, rg["chunks"]["start"], rg["chunks"]["end"], it["url"],
                                    rg["bytes"]["start"], rg["bytes"]["end"]))
    cache = {}
    out = bytearray()
    for term in ans["terms"]:
        x, ts, te = term["hash"], term["range"]["start"], term["range"]["end"]
        f = next((f for f in fetches if f[0] == x and f[1] <= ts and te <= f[2]), None)
        assert f is not None, f"no fetch range covers term {term}"
        if f not in cache:
            fr = http("GET", f[3], headers={"Range": f"bytes={f[4]}-{f[5]}"})
            assert fr.status in (200, 206), f"fetch {f[3]} bytes={f[4]}-{f[5]}: {fr}"
            assert len(fr.body) == f[5] - f[4] + 1, "fetch returned the wrong length"
            cache[f] = decode_chunks(fr.body)
            assert len(cache[f]) == f[2] - f[1], "fetched range has the wrong chunk count"
        chunks = cache[f][ts - f[1]:te - f[1]]
        if schemes is not None:
            schemes.update(s for s, _ in chunks)
        data = b"".join(c for _, c in chunks)
        assert len(data) == term["unpacked_length"], f"term {term}: {len(data)} bytes"
        out += data
    off = ans["offset_into_first_range"]
    return bytes(out[off:off + (end - start + 1)])


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_ranged_reconstruction(server, alice, dataset, api):
    data = dataset["r10m.bin"].path.read_bytes()
    size = len(data)
    h = alice.infos["r10m.bin"]["hash"]
    windows = [
        (0, 0),
        (0, 65535),
        (1000, 2_000_000),
        (5_000_000, 5_000_100),
        (131_071, 131_073),
        (size - 100, size - 1),
        (size - 1, size - 1),
        (0, size - 1),
        (7 * MiB, size + 12345),  # end past EOF: clamped to the file
    ]
    for s, e in windows:
        got = reconstruct(server, alice.token, h, s, e, api)
        want = data[s:min(e, size - 1) + 1]
        assert got == want, f"{api} bytes={s}-{e}: got {len(got)} bytes, differs from the file"


def test_ranged_reconstruction_compressed(server, alice, dataset):
    """Compressible files come back through LZ4 (and BG4) chunks."""
    # hf_xet 1.8.0 (compression policy "auto") picks LZ4 for the text and
    # byte-grouping + LZ4 for the float32 samples.
    for name, scheme in [("text.bin", 1), ("floats.bin", 2)]:
        data = dataset[name].path.read_bytes()
        h = alice.infos[name]["hash"]
        schemes = set()
        for s, e in [(0, len(data) - 1), (12345, 1_000_000), (len(data) - 7, len(data) - 1)]:
            got = reconstruct(server, alice.token, h, s, e, "v1", schemes)
            assert got == data[s:e + 1], f"{name} bytes={s}-{e}"
        assert scheme in schemes, f"{name}: no chunk with scheme {scheme} (saw {schemes})"


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_range_errors(server, alice, dataset, api):
    h = alice.infos["r10m.bin"]["hash"]
    size = dataset["r10m.bin"].size
    path = f"/{api}/reconstructions/{h}"
    # A window starting at or past EOF is the client's end-of-file signal: 416.
    for rng in [f"bytes={size}-{size + 10}", f"bytes={size + 5}-", f"bytes={size}-{size}"]:
        r = server.request("GET", path, token=alice.token, headers={"Range": rng})
        assert r.status == 416, f"{api} Range: {rng}: {r}"
    # A malformed header is 400 (a 416 would read as EOF to the client).
    for rng in ["bytes=abc", "bytes=10-5", "items=0-10", "bytes=", "bytes=x-10"]:
        r = server.request("GET", path, token=alice.token, headers={"Range": rng})
        assert r.status == 400, f"{api} Range: {rng}: {r}"


def test_fetch_url_is_self_authorising_and_bound(server, alice, dataset):
    h = alice.infos["r10m.bin"]["hash"]
    r = server.request("GET", f"/v1/reconstructions/{h}", token=alice.token,
                       headers={"Range": "bytes=0-200000"})
    assert r.status == 200, r
    x, items = next(iter(r.json()["fetch_info"].items()))
    it = items[0]
    url, a, b = it["url"], it["url_range"]["start"], it["url_range"]["end"]
    ok = http("GET", url, headers={"Range": f"bytes={a}-{b}"})
    assert ok.status in (200, 206) and len(ok.body) == b - a + 1, ok
    # A tampered signature or a range outside the signed one is refused.
    tampered = re.sub(r"([?&]s=)([0-9a-f])", lambda m: m.group(1) + ("0" if m.group(2) != "0" else "1"), url)
    assert tampered != url
    r = http("GET", tampered, headers={"Range": f"bytes={a}-{b}"})
    assert r.status in (401, 403), f"tampered fetch URL: {r}"
    r = http("GET", url, headers={"Range": f"bytes={a}-{b + 1000}"})
    assert r.status in (403, 416) or len(r.body) <= b - a + 1, f"fetch beyond the signed range: {r}"


# --------------------------------------------------------------------------
# the session API (XetSession), as huggingface_hub >= 1.19 uses it


def test_session_api_round_trip(server, alice, dataset, tmp_path):
    token = server.make_credential("carol", "write")
    client = XetClient(server.url, token, tmp_path / "c")
    blob = random.Random(42).randbytes(3 * MiB + 17)
    res = client.session_upload(paths=[dataset["r100k.bin"].path, dataset["one.bin"].path],
                                contents=[blob])
    assert [r["file_size"] for r in res] == [100 * KiB, 1, len(blob)]
    assert res[0]["hash"] == alice.infos["r100k.bin"]["hash"]
    assert res[0]["sha256"] == dataset["r100k.bin"].sha256
    assert server.usage("carol") > 0

    out = tmp_path / "out"
    out.mkdir()
    fresh = XetClient(server.url, token, tmp_path / "fresh")
    got = fresh.session_download([
        (out / "r100k", res[0]["hash"], res[0]["file_size"]),
        (out / "one", res[1]["hash"], None),
        (out / "blob", res[2]["hash"], res[2]["file_size"]),
    ])
    assert len(got) == 3
    assert (out / "r100k").read_bytes() == dataset["r100k.bin"].path.read_bytes()
    assert (out / "one").read_bytes() == b"\x5a"
    assert (out / "blob").read_bytes() == blob

    # The legacy API reads what the session API wrote and vice versa.
    client.download_files([(out / "blob-legacy", res[2]["hash"], len(blob))])
    assert (out / "blob-legacy").read_bytes() == blob
    alice_dl = XetClient(server.url, alice.token, tmp_path / "a")
    alice_dl.session_download([(out / "r10m", alice.infos["r10m.bin"]["hash"], dataset["r10m.bin"].size)])
    assert sha256_file(out / "r10m") == dataset["r10m.bin"].sha256
