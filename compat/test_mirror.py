"""The mirror (issue 33, docs/mirror.md) with the stock clients: a second
`openxet serve` is the upstream; with HF_ENDPOINT at the mirror,
snapshot_download, hf_hub_download of a Xet file (xet-read-token, hf_xet's
reconstruction against the mirror's CAS) and transformers' from_pretrained
read an upstream repo byte for byte; a second round with a fresh client
cache makes no upstream request for file bytes (the upstream's own request
log says so).
"""

import json

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
