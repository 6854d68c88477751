"""Sharing across tenants (issue 32, docs/sharing.md) with the stock clients:
tenant bob reads alice's internal repo with snapshot_download,
hf_hub_download (a Xet file, through xet-read-token and hf_xet) and
transformers' from_pretrained (config and tokenizer); his writes are
refused; once alice makes the repo private every one of those calls fails as
the Hub's do for a repo the caller cannot see (RepositoryNotFoundError).
"""

import json

from conftest import HubClient, sha256_file, write_random
from test_parity import run_py

READ_ALL = """
    import hashlib, json, os
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError
    out = {}
    def attempt(name, fn):
        try:
            out[name] = fn()
        except RepositoryNotFoundError as e:
            out[name] = "RepositoryNotFoundError"
        except Exception as e:
            out[name] = type(e).__name__ + ": " + str(e)[:300]
    def sha(p):
        return hashlib.sha256(open(p, "rb").read()).hexdigest()
    def snap():
        d = snapshot_download("alice/shared", cache_dir="snap-" + os.environ["ROUND"])
        return sorted(f for f in os.listdir(d))
    def weights():
        return sha(hf_hub_download("alice/shared", "weights.bin", cache_dir="dl-" + os.environ["ROUND"]))
    def pretrained():
        from transformers import AutoConfig, AutoTokenizer
        cfg = AutoConfig.from_pretrained("alice/shared", cache_dir="tf-" + os.environ["ROUND"])
        tok = AutoTokenizer.from_pretrained("alice/shared", cache_dir="tf-" + os.environ["ROUND"])
        return [cfg.model_type, cfg.hidden_size, tok("hello openxet")["input_ids"]]
    attempt("snapshot", snap)
    attempt("weights", weights)
    attempt("pretrained", pretrained)
    print(json.dumps(out))
"""


def push_tiny_bert(alice, repo_id, tmp_path, weights_bytes, seed):
    """Pushes a tiny BERT config and tokenizer with transformers'
    push_to_hub, then a random weights.bin of weights_bytes through hf_xet,
    into repo_id as alice; returns the weights' path."""
    pushed = run_py(alice, f"""
        import json
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import BertConfig, PreTrainedTokenizerFast
        vocab = {{"[UNK]": 0, "[PAD]": 1, "hello": 2, "openxet": 3}}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
        cfg = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, vocab_size=4)
        cfg.push_to_hub("{repo_id}")
        fast.push_to_hub("{repo_id}")
        print(json.dumps("ok"))
    """)
    assert pushed == "ok"
    weights = tmp_path / "weights.bin"
    write_random(weights, weights_bytes, seed=seed)
    alice.api("upload_file", path_or_fileobj=str(weights), path_in_repo="weights.bin", repo_id=repo_id)
    return weights


def test_internal_repo_read_by_another_tenant_then_closed(server, tmp_path):
    alice = HubClient(server.url, server.make_credential("alice"), tmp_path / "alice")
    bob_token = server.make_credential("bob")
    bob = HubClient(server.url, bob_token, tmp_path / "bob")

    weights = push_tiny_bert(alice, "alice/shared", tmp_path, 3 << 20, seed=32)
    # Made without a visibility, the repo is private: bob cannot see it.
    assert alice.api("model_info", repo_id="alice/shared")["private"] is True
    hidden = bob.api_call("model_info", repo_id="alice/shared")
    assert hidden["error_type"] == "RepositoryNotFoundError", hidden

    r = server.request("PUT", "/api/models/alice/shared/settings", token=alice.token,
                       headers={"Content-Type": "application/json"}, body=json.dumps({"visibility": "internal"}).encode())
    assert r.status == 200, r
    bob.extra_env["ROUND"] = "open"
    got = run_py(bob, READ_ALL)
    assert "weights.bin" in got["snapshot"] and "config.json" in got["snapshot"], got
    assert got["weights"] == sha256_file(weights), got
    assert got["pretrained"] == ["bert", 32, [2, 3]], got
    assert bob.api("model_info", repo_id="alice/shared")["private"] is False

    # Bob reads; he does not write (403 as the Hub's for someone else's repo).
    small = tmp_path / "evil.txt"
    small.write_text("evil")
    refused = bob.api_call("upload_file", path_or_fileobj=str(small), path_in_repo="evil.txt", repo_id="alice/shared")
    assert refused["error_type"] == "HfHubHTTPError" and refused["status"] == 403, refused
    assert "evil.txt" not in alice.api("list_repo_files", repo_id="alice/shared")

    assert alice.api("update_repo_settings", repo_id="alice/shared", private=True) is None
    bob.extra_env["ROUND"] = "closed"
    closed = run_py(bob, READ_ALL)
    assert closed == {"snapshot": "RepositoryNotFoundError", "weights": "RepositoryNotFoundError",
                      "pretrained": closed["pretrained"]}, closed
    # transformers wraps the Hub's error in an OSError that names the repo.
    assert "alice/shared" in closed["pretrained"] and closed["pretrained"].startswith("OSError"), closed
    assert alice.api("model_info", repo_id="alice/shared")["private"] is True


def test_anonymous_reads_of_a_public_repo(start_server, tmp_path):
    """With hub.anonymous_reads on, a client with no token at all
    (no HF_TOKEN, nothing stored) downloads alice's public repo with
    snapshot_download, hf_hub_download of a Xet file (bytes from resolve)
    and from_pretrained; her internal repo stays RepositoryNotFoundError."""
    server = start_server("--hub-anonymous-reads", "true")
    alice = HubClient(server.url, server.make_credential("alice"), tmp_path / "alice")
    weights = push_tiny_bert(alice, "alice/shared", tmp_path, 3 << 20, seed=33)

    anon = HubClient(server.url, None, tmp_path / "anon")
    anon.extra_env["ROUND"] = "private"
    closed = run_py(anon, READ_ALL)
    assert (closed["snapshot"], closed["weights"]) == ("RepositoryNotFoundError",) * 2, closed

    assert alice.api("update_repo_settings", repo_id="alice/shared", visibility="public") is None
    anon.extra_env["ROUND"] = "public"
    got = run_py(anon, READ_ALL)
    assert "weights.bin" in got["snapshot"] and "config.json" in got["snapshot"], got
    assert got["weights"] == sha256_file(weights), got
    assert got["pretrained"] == ["bert", 32, [2, 3]], got

    r = server.request("PUT", "/api/models/alice/shared/settings", token=alice.token,
                       headers={"Content-Type": "application/json"}, body=json.dumps({"visibility": "internal"}).encode())
    assert r.status == 200, r
    anon.extra_env["ROUND"] = "internal"
    closed = run_py(anon, READ_ALL)
    assert (closed["snapshot"], closed["weights"]) == ("RepositoryNotFoundError",) * 2, closed


def test_anonymous_load_dataset_of_a_public_dataset(start_server, tmp_path):
    """datasets.load_dataset with no token at all reads alice's public
    dataset repo; with bob's token it reads her internal one; once each is
    private, the same calls fail as the Hub's do (DatasetNotFoundError)."""
    server = start_server("--hub-anonymous-reads", "true")
    alice = HubClient(server.url, server.make_credential("alice"), tmp_path / "alice")
    bob = HubClient(server.url, server.make_credential("bob"), tmp_path / "bob")
    anon = HubClient(server.url, None, tmp_path / "anon")
    rows = tmp_path / "train.csv"
    rows.write_text("text,label\n" + "".join(f"row {i},{i % 2}\n" for i in range(50)))
    for name, visibility in [("pub", "public"), ("intern", "internal")]:
        alice.api("create_repo", repo_id="alice/" + name, repo_type="dataset")
        alice.api("update_repo_settings", repo_id="alice/" + name, repo_type="dataset", visibility=visibility)
        alice.api("upload_file", path_or_fileobj=str(rows), path_in_repo="train.csv", repo_id="alice/" + name, repo_type="dataset")
    LOAD = """
        import json, os
        from datasets import load_dataset
        try:
            ds = load_dataset(os.environ["REPO"], split="train", cache_dir="ds-" + os.environ["ROUND"])
            print(json.dumps([len(ds), ds[3]["text"], ds[3]["label"]]))
        except Exception as e:
            print(json.dumps(type(e).__name__))
    """
    for client, repo in [(anon, "alice/pub"), (bob, "alice/intern")]:
        client.extra_env.update(REPO=repo, ROUND="open")
        assert run_py(client, LOAD) == [50, "row 3", 1], repo
    anon.extra_env.update(REPO="alice/intern", ROUND="hidden")
    assert run_py(anon, LOAD) == "DatasetNotFoundError"
    for name in ("pub", "intern"):
        assert alice.api("update_repo_settings", repo_id="alice/" + name, repo_type="dataset", private=True) is None
    for client, repo in [(anon, "alice/pub"), (bob, "alice/intern")]:
        client.extra_env.update(REPO=repo, ROUND="closed")
        assert run_py(client, LOAD) == "DatasetNotFoundError", repo


COPY = """
    import hashlib, json
    from huggingface_hub import HfApi, CommitOperationCopy, hf_hub_download
    from huggingface_hub.errors import RepositoryNotFoundError
    api = HfApi()
    def copy(src):
        try:
            api.create_commit(repo_id="bob/copydst", commit_message="copy from " + src, operations=[
                CommitOperationCopy(src_repo_id=src, src_repo_type="model", src_path_in_repo="weights.bin", path_in_repo="copied.bin"),
                CommitOperationCopy(src_repo_id=src, src_repo_type="model", src_path_in_repo="notes.txt", path_in_repo="notes.txt")])
            return "ok"
        except RepositoryNotFoundError:
            return "RepositoryNotFoundError"
        except Exception as e:
            return type(e).__name__ + ": " + str(e)[:300]
    out = {"internal": copy("alice/copysrc")}
    out["sha"] = hashlib.sha256(open(hf_hub_download("bob/copydst", "copied.bin", cache_dir="dl"), "rb").read()).hexdigest()
    out["notes"] = open(hf_hub_download("bob/copydst", "notes.txt", cache_dir="dl"), "rb").read().decode()
    out["private"] = copy("alice/copypriv")
    out["files"] = sorted(api.list_repo_files("bob/copydst"))
    print(json.dumps(out))
"""


def test_copy_from_another_tenants_repo(server, tmp_path):
    """Tenant bob's create_commit with CommitOperationCopy(src_repo_id=
    alice's internal repo) copies her hf_xet-uploaded weights.bin (through
    lfs-files/duplicate on her repo, then a commit naming it by its oid) and
    a regular file (downloaded and committed inline); bob downloads the copy
    as the same bytes. From her private repo the same copy fails as the
    Hub's does for a repo the caller cannot see (RepositoryNotFoundError),
    and so does a direct duplicate request; bob's repo is unchanged."""
    alice = HubClient(server.url, server.make_credential("alice"), tmp_path / "alice")
    bob = HubClient(server.url, server.make_credential("bob"), tmp_path / "bob")
    notes = tmp_path / "notes.txt"
    notes.write_text("copied between tenants\n")
    weights = tmp_path / "weights.bin"
    write_random(weights, 3 << 20, seed=34)
    for name, visibility in [("copysrc", "internal"), ("copypriv", "private")]:
        alice.api("create_repo", repo_id="alice/" + name)
        alice.api("update_repo_settings", repo_id="alice/" + name, visibility=visibility)
        alice.api("upload_file", path_or_fileobj=str(weights), path_in_repo="weights.bin", repo_id="alice/" + name)
        alice.api("upload_file", path_or_fileobj=str(notes), path_in_repo="notes.txt", repo_id="alice/" + name)
    info = server.request("POST", "/api/models/alice/copysrc/paths-info/main", token=alice.token,
                          headers={"Content-Type": "application/json"}, body=b'{"paths":["weights.bin"]}').json()
    assert info[0].get("xetHash"), info  # uploaded through hf_xet
    bob.api("create_repo", repo_id="bob/copydst")
    alice_before = server.usage("alice")

    mark = server.log_mark()
    got = run_py(bob, COPY)
    assert got["internal"] == "ok", got
    assert got["sha"] == sha256_file(weights), got
    assert got["notes"] == "copied between tenants\n", got
    assert got["private"] == "RepositoryNotFoundError", got
    assert got["files"] == [".gitattributes", "copied.bin", "notes.txt"], got
    reqs = server.requests_since(mark)
    dup = [e for e in reqs if e.get("path", "").endswith("/lfs-files/duplicate")]
    assert [(e["path"], e["status"]) for e in dup] == [("/api/models/alice/copysrc/lfs-files/duplicate", "200")], dup
    assert not [e for e in reqs if e.get("path", "").startswith("/v1/xorbs/")], "a copy uploads no xorb"
    # server.dedup_scope is global here: bob's copy references alice's xorbs.
    assert server.usage("alice") == alice_before

    # The route itself, on the private repo, as huggingface_hub would send it.
    body = json.dumps({"target": {"type": "model", "name": "bob/copydst"},
                       "files": [{"xetHash": info[0]["xetHash"], "sha256": info[0]["lfs"]["oid"], "filename": "weights.bin"}]}).encode()
    r = server.request("POST", "/api/models/alice/copypriv/lfs-files/duplicate", token=bob.token,
                       headers={"Content-Type": "application/json"}, body=body)
    assert r.status == 404 and r.headers.get("X-Error-Code") == "RepoNotFound", r


def test_duplicate_another_tenants_repo(server, tmp_path):
    """Tenant bob's duplicate_repo of alice's internal repo (hf_xet-uploaded
    weights and a regular file, two commits) makes a repo of his with her
    history, which hf_hub_download reads as her bytes with bob's token, even
    after she deletes hers; from her private repo duplicate_repo raises
    RepositoryNotFoundError and makes nothing."""
    alice = HubClient(server.url, server.make_credential("alice"), tmp_path / "alice")
    bob = HubClient(server.url, server.make_credential("bob"), tmp_path / "bob")
    weights = tmp_path / "weights.bin"
    write_random(weights, 2 << 20, seed=35)
    notes = tmp_path / "second.txt"
    notes.write_text("second\n")
    for name, visibility in [("dupsrc", "internal"), ("duppriv", "private")]:
        alice.api("create_repo", repo_id="alice/" + name)
        alice.api("update_repo_settings", repo_id="alice/" + name, visibility=visibility)
        alice.api("upload_file", path_or_fileobj=str(weights), path_in_repo="weights.bin", repo_id="alice/" + name)
        alice.api("upload_file", path_or_fileobj=str(notes), path_in_repo="notes.txt", repo_id="alice/" + name)
    url = bob.api("duplicate_repo", from_id="alice/dupsrc", to_id="bob/dupcopy")
    assert url.rstrip("/").endswith("/bob/dupcopy"), url
    src = [c["commit_id"] for c in alice.api("list_repo_commits", repo_id="alice/dupsrc")]
    dup = [c["commit_id"] for c in bob.api("list_repo_commits", repo_id="bob/dupcopy")]
    assert dup == src and len(src) >= 2, (src, dup)
    alice.api("delete_repo", repo_id="alice/dupsrc")
    path = bob.api("hf_hub_download", repo_id="bob/dupcopy", filename="weights.bin")
    assert sha256_file(path) == sha256_file(weights)
    out = bob.api_call("duplicate_repo", from_id="alice/duppriv", to_id="bob/dupnope")
    assert not out["ok"] and out["error_type"] == "RepositoryNotFoundError", out
    assert not bob.api("repo_exists", repo_id="bob/dupnope")
