"""The mirror (issue 33, docs/mirror.md) with the stock clients: a second
`openxet serve` is the upstream; with HF_ENDPOINT at the mirror,
snapshot_download, hf_hub_download of a Xet file (xet-read-token, hf_xet's
reconstruction against the mirror's CAS) and transformers' from_pretrained
read an upstream repo byte for byte; a second round with a fresh client
cache makes no upstream request for file bytes (the upstream's own request
log says so).
"""

import json
import subprocess
import sys
import time

from conftest import HubClient, sha256_file, write_random
from test_parity import run_py
from test_sharing import push_tiny_bert

READ_ALL = """
    import hashlib, json, os
    from huggingface_hub import hf_hub_download, snapshot_download
    out = {}
    def sha(p):
        return hashlib.sha256(open(p, "rb").read()).hexdigest()
    d = snapshot_download("alice/tiny")
    out["snapshot"] = sorted(os.listdir(d))
    out["weights"] = sha(hf_hub_download("alice/tiny", "weights.bin", cache_dir="dl"))
    from transformers import AutoConfig, AutoTokenizer
    cfg = AutoConfig.from_pretrained("alice/tiny", cache_dir="tf")
    tok = AutoTokenizer.from_pretrained("alice/tiny", cache_dir="tf")
    out["pretrained"] = [cfg.model_type, cfg.hidden_size, tok("hello openxet")["input_ids"]]
    print(json.dumps(out))
"""


def file_byte_requests(entries):
    return [e for e in entries if "/resolve/" in e.get("path", "") or "/v1/fetch/" in e.get("path", "")
            or "/reconstructions/" in e.get("path", "")]


def test_mirror_with_stock_clients(start_server, tmp_path):
    upstream = start_server()
    alice = HubClient(upstream.url, upstream.make_credential("alice"), tmp_path / "alice")
    weights = push_tiny_bert(alice, "alice/tiny", tmp_path, 6 << 20, seed=33)
    assert alice.api("update_repo_settings", repo_id="alice/tiny", visibility="internal") is None
    bot = upstream.make_credential("mirrorbot", "read")

    mirror = start_server("--mirror-upstream", upstream.url, "--mirror-upstream-token", bot)
    bob_token = mirror.make_credential("bob", "read")

    mark = upstream.log_mark()
    first = run_py(HubClient(mirror.url, bob_token, tmp_path / "bob1"), READ_ALL)
    assert "weights.bin" in first["snapshot"] and "config.json" in first["snapshot"], first
    assert first["weights"] == sha256_file(weights), first
    assert first["pretrained"] == ["bert", 32, [2, 3]], first
    pulled = file_byte_requests(upstream.requests_since(mark))
    assert pulled, "the first round fetched no file bytes from the upstream"

    # The mirrored file's Xet hash is the upstream's.
    up_tree = upstream.request("GET", "/api/models/alice/tiny/tree/main", token=alice.token).json()
    mir_tree = mirror.request("GET", "/api/models/alice/tiny/tree/main", token=bob_token).json()
    xet = lambda tree: {e["path"]: e.get("xetHash") for e in tree}
    assert xet(up_tree)["weights.bin"] and xet(up_tree) == xet(mir_tree), (up_tree, mir_tree)

    mark = upstream.log_mark()
    second = run_py(HubClient(mirror.url, bob_token, tmp_path / "bob2"), READ_ALL)
    assert second == first, second
    again = file_byte_requests(upstream.requests_since(mark))
    assert again == [], f"a second round with a fresh cache fetched file bytes upstream: {again}"

    r = mirror.request("GET", "/api/openxet/v1/admin/mirror", token=mirror.admin_token)
    assert r.status == 200 and r.json()["revisions"][0]["repo"] == "alice/tiny", r


# Each downloader imports the client first, says it is ready, and starts its
# download when the test says go, so that the 20 first requests for the file
# reach the mirror together.
RACE_DOWNLOAD = """
import hashlib, json, os, sys, time
from huggingface_hub import hf_hub_download
open(sys.argv[1] + ".ready", "w").close()
while not os.path.exists("go"):
    time.sleep(0.01)
p = hf_hub_download("alice/tiny", "weights.bin", cache_dir=sys.argv[1])
print(json.dumps(hashlib.sha256(open(p, "rb").read()).hexdigest()))
"""

UNMIRRORED = """
import json
from huggingface_hub import hf_hub_download
try:
    hf_hub_download("alice/later", "later.bin", cache_dir="later")
    print(json.dumps({"ok": True}))
except Exception as e:
    chain, c = [], e
    while c is not None:
        chain.append(f"{type(c).__name__}: {c}")
        c = c.__cause__ or c.__context__
    print(json.dumps({"ok": False, "errors": chain}))
"""


def test_mirror_twenty_first_downloads_then_upstream_stopped(start_server, tmp_path):
    """20 stock clients asking the mirror for one file it does not hold yet
    make the upstream send it about once; with the upstream stopped, the
    mirrored repo still downloads (its branch served stale past
    mirror.refresh) and a repo never mirrored fails with the mirror's
    sentence that the upstream is unreachable."""
    upstream = start_server()
    alice = HubClient(upstream.url, upstream.make_credential("alice"), tmp_path / "alice")
    size = 8 << 20
    weights = push_tiny_bert(alice, "alice/tiny", tmp_path, size, seed=34)
    later = tmp_path / "later.bin"
    write_random(later, 1 << 20, seed=35)
    alice.api("create_repo", repo_id="alice/later")
    alice.api("upload_file", path_or_fileobj=str(later), path_in_repo="later.bin", repo_id="alice/later")
    for repo in ("alice/tiny", "alice/later"):
        assert alice.api("update_repo_settings", repo_id=repo, visibility="internal") is None
    bot = upstream.make_credential("mirrorbot", "read")

    mirror = start_server("--mirror-upstream", upstream.url, "--mirror-upstream-token", bot,
                          "--mirror-refresh", "1s")
    bob = HubClient(mirror.url, mirror.make_credential("bob", "read"), tmp_path / "bob")
    bob.workdir.mkdir(parents=True, exist_ok=True)

    n = 20
    mark = upstream.log_mark()
    procs = [subprocess.Popen([sys.executable, "-c", RACE_DOWNLOAD, f"c{i}"], cwd=bob.workdir,
                              env={**bob.env(), "HF_XET_CACHE": str(bob.workdir / f"xet-cache-{i}")},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
             for i in range(n)]
    try:
        deadline = time.monotonic() + 300
        while not all((bob.workdir / f"c{i}.ready").exists() for i in range(n)):
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, dead[0].communicate()
            assert time.monotonic() < deadline, "the downloaders never got ready"
            time.sleep(0.05)
        (bob.workdir / "go").touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
        assert json.loads(out.strip().splitlines()[-1]) == sha256_file(weights)
    sent = sum(int(e.get("bytes_out", 0)) for e in file_byte_requests(upstream.requests_since(mark)))
    ratio = sent / size
    print(f"upstream bytes sent / unique bytes served over {n} concurrent first downloads: {ratio:.3f}")
    assert 0.99 <= ratio <= 1.05, f"the upstream sent {sent} bytes for one {size}-byte file asked {n} times at once"
    # hf_xet's first downloads read the upstream's plan through relays
    # (docs/mirror.md, "First downloads") instead of waiting for the pull.
    assert mirror.metric("openxet_mirror_relay_plans_total") >= 1
    assert mirror.metric("openxet_mirror_relay_bytes_total") >= size

    upstream.stop()
    time.sleep(1.5)  # past mirror.refresh: main must be resolved again, and cannot be
    mark = mirror.log_mark()
    offline = run_py(HubClient(mirror.url, bob.token, tmp_path / "bob-offline"), READ_ALL)
    assert offline["weights"] == sha256_file(weights), offline
    assert "config.json" in offline["snapshot"], offline
    assert "serving the revision mirrored before" in mirror.log_text_since(mark), \
        "serving a branch the upstream could not confirm is not logged as stale"

    missing = run_py(HubClient(mirror.url, bob.token, tmp_path / "bob-missing"), UNMIRRORED)
    assert not missing["ok"], missing
    assert any("is unreachable and" in e and "not mirrored yet" in e for e in missing["errors"]), missing
