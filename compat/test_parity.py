"""Hub parity with the libraries people use on top of huggingface_hub
(issue 30): `datasets` (push_to_hub, load_dataset), `transformers` without
torch (configs and tokenizers), repo settings, move and duplicate, anonymous
existence checks, and the routes openxet does not serve.

Each library runs in its own interpreter with a fresh HF_HOME
(conftest.HubClient.env), so what it reads comes from the server. The
assertions are on what the user sees: return values, exception classes and
the messages the client prints.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import HubClient

PY_TIMEOUT_S = 240


def run_py(client, code, timeout=PY_TIMEOUT_S):
    """Run code in a fresh interpreter with client's environment; the code
    prints one JSON value on its last line, which is returned."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=client.env(), timeout=timeout, cwd=client.workdir, stdin=subprocess.DEVNULL)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    if r.returncode != 0 or not lines:
        raise AssertionError(f"python exited {r.returncode}\nstdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-8000:]}")
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def alice_token(server):
    return server.make_credential("alice")


@pytest.fixture(scope="module")
def alice(server, alice_token, tmp_path_factory):
    return HubClient(server.url, alice_token, tmp_path_factory.mktemp("parity-alice"))


def fresh(server, token, tmp_path, name):
    return HubClient(server.url, token, tmp_path / name)


# --------------------------------------------------------------------------
# datasets


def test_datasets_push_to_hub_then_load_dataset(server, alice, alice_token, tmp_path):
    """push_to_hub of a 10-row dataset (one parquet shard of a few KiB, the
    reported failure) and of a 3-shard one, then load_dataset of each from a
    fresh cache, downloaded and streamed."""
    pushed = run_py(alice, """
        import json
        from datasets import Dataset
        small = Dataset.from_dict({"id": list(range(10)), "text": [f"row {i}" for i in range(10)]})
        small.push_to_hub("alice/ds-small")
        big = Dataset.from_dict({"id": list(range(3000)), "text": [f"line {i} " * 5 for i in range(3000)]})
        big.push_to_hub("alice/ds-sharded", num_shards=3)
        print(json.dumps("ok"))
    """)
    assert pushed == "ok"

    files = alice.api("list_repo_files", repo_id="alice/ds-small", repo_type="dataset")
    assert sorted(files) == [".gitattributes", "README.md", "data/train-00000-of-00001.parquet"], files
    sharded = alice.api("list_repo_files", repo_id="alice/ds-sharded", repo_type="dataset")
    assert sorted(f for f in sharded if f.endswith(".parquet")) == [
        f"data/train-0000{i}-of-00003.parquet" for i in range(3)], sharded
    info = alice.api("dataset_info", repo_id="alice/ds-small", files_metadata=True)
    by_name = {s["rfilename"]: s for s in info["siblings"]}
    assert by_name["data/train-00000-of-00001.parquet"]["lfs"] is not None, by_name  # went through Xet
    assert by_name["README.md"]["lfs"] is None, by_name

    reader = fresh(server, alice_token, tmp_path, "reader")
    got = run_py(reader, """
        import json
        from datasets import load_dataset
        out = {}
        for repo in ("alice/ds-small", "alice/ds-sharded"):
            ds = load_dataset(repo, split="train")
            st = load_dataset(repo, split="train", streaming=True)
            streamed = list(st)
            out[repo] = {"rows": ds.num_rows, "first": ds[0], "last": ds[-1],
                         "streamed": len(streamed), "stream_last": streamed[-1],
                         "ids": sorted(ds["id"]) == list(range(ds.num_rows))}
        print(json.dumps(out))
    """)
    assert got["alice/ds-small"] == {"rows": 10, "first": {"id": 0, "text": "row 0"}, "last": {"id": 9, "text": "row 9"},
                                     "streamed": 10, "stream_last": {"id": 9, "text": "row 9"}, "ids": True}
    big = got["alice/ds-sharded"]
    assert (big["rows"], big["streamed"], big["ids"]) == (3000, 3000, True), big
    assert big["last"] == big["stream_last"] == {"id": 2999, "text": "line 2999 " * 5}, big


def test_pandas_reads_hf_paths(server, alice, alice_token, tmp_path):
    """pandas on hf:// (HfFileSystem under fsspec): a parquet file and a CSV
    written with to_parquet / to_csv on hf:// paths are read back with
    read_parquet / read_csv from a fresh cache, and a glob lists them."""
    wrote = run_py(alice, """
        import json
        import pandas as pd
        from huggingface_hub import HfApi
        HfApi().create_repo("alice/pd", repo_type="dataset")
        df = pd.DataFrame({"id": list(range(50)), "name": [f"n{i}" for i in range(50)]})
        df.to_parquet("hf://datasets/alice/pd/data/part.parquet")
        df.to_csv("hf://datasets/alice/pd/data/part.csv", index=False)
        print(json.dumps("ok"))
    """)
    assert wrote == "ok"
    reader = fresh(server, alice_token, tmp_path, "pandas-reader")
    got = run_py(reader, """
        import json
        import pandas as pd
        from huggingface_hub import HfFileSystem
        pq = pd.read_parquet("hf://datasets/alice/pd/data/part.parquet")
        csv = pd.read_csv("hf://datasets/alice/pd/data/part.csv")
        listed = sorted(HfFileSystem().glob("datasets/alice/pd/data/*"))
        print(json.dumps({"pq": [len(pq), int(pq["id"].sum()), pq["name"].iloc[-1]],
                          "csv": [len(csv), int(csv["id"].sum()), csv["name"].iloc[-1]], "listed": listed}))
    """)
    assert got["pq"] == [50, sum(range(50)), "n49"], got
    assert got["csv"] == [50, sum(range(50)), "n49"], got
    assert got["listed"] == ["datasets/alice/pd/data/part.csv", "datasets/alice/pd/data/part.parquet"], got


# --------------------------------------------------------------------------
# transformers (no torch)


def test_transformers_config_and_tokenizer_round_trip(server, alice, alice_token, tmp_path):
    """A config and a fast tokenizer pushed with push_to_hub come back with
    from_pretrained from a fresh cache."""
    pushed = run_py(alice, """
        import json
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import BertConfig, PreTrainedTokenizerFast
        vocab = {"[UNK]": 0, "[PAD]": 1, "hello": 2, "openxet": 3, "world": 4}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
        cfg = BertConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, vocab_size=5)
        cfg.push_to_hub("alice/tf-tiny")
        fast.push_to_hub("alice/tf-tiny")
        print(json.dumps("ok"))
    """)
    assert pushed == "ok"
    reader = fresh(server, alice_token, tmp_path, "reader")
    got = run_py(reader, """
        import json
        from transformers import AutoConfig, AutoTokenizer
        cfg = AutoConfig.from_pretrained("alice/tf-tiny")
        tok = AutoTokenizer.from_pretrained("alice/tf-tiny")
        print(json.dumps({"model_type": cfg.model_type, "hidden": cfg.hidden_size, "layers": cfg.num_hidden_layers,
                          "ids": tok("hello openxet world")["input_ids"], "unk": tok("nope")["input_ids"],
                          "fast": tok.is_fast}))
    """)
    assert got == {"model_type": "bert", "hidden": 48, "layers": 2, "ids": [2, 3, 4], "unk": [0], "fast": True}
    files = alice.api("list_repo_files", repo_id="alice/tf-tiny")
    assert {".gitattributes", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(files), files


# --------------------------------------------------------------------------
# settings, move, duplicate, hf repos ls


def test_repo_settings_move_duplicate_and_ls(server, alice, tmp_path):
    """update_repo_settings and `hf repos settings`, move_repo and
    `hf repos move`, duplicate_repo and `hf repos duplicate`, `hf repos ls`,
    and what a user sees when a target is in another namespace."""
    alice.hf_ok("repos", "create", "alice/set-me")
    src = tmp_path / "w.bin"
    src.write_bytes(bytes(range(256)) * 400)  # binary: through Xet
    alice.api("upload_file", path_or_fileobj=str(src), path_in_repo="w.bin", repo_id="alice/set-me")

    assert alice.api("update_repo_settings", repo_id="alice/set-me", private=True, gated="manual") is None
    info = alice.api("model_info", repo_id="alice/set-me")
    assert (info["private"], info["gated"]) == (True, "manual"), info
    alice.hf_ok("repos", "settings", "alice/set-me", "--gated", "false", "--public")
    info = alice.api("model_info", repo_id="alice/set-me")
    assert (info["private"], info["gated"]) == (False, False), info
    bad = alice.api_call("update_repo_settings", repo_id="alice/no-such-repo", gated="auto")
    assert bad["error_type"] == "RepositoryNotFoundError", bad

    # Move within the namespace; the old name is gone.
    assert alice.api("move_repo", from_id="alice/set-me", to_id="alice/moved") is None
    assert alice.api("repo_exists", repo_id="alice/set-me") is False
    gone = alice.api_call("model_info", repo_id="alice/set-me")
    assert gone["error_type"] == "RepositoryNotFoundError", gone
    assert "repository alice/set-me was moved to alice/moved. Use the new name, alice/moved" in gone["error"], gone
    assert alice.api("file_exists", repo_id="alice/moved", filename="w.bin") is True
    moved = alice.hf_ok("repos", "move", "alice/moved", "alice/moved-again")
    assert "alice/moved-again" in moved.output, moved
    other = alice.api_call("move_repo", from_id="alice/moved-again", to_id="bob/stolen")
    assert other["error_type"] == "HfHubHTTPError" and other["status"] == 403, other
    assert "a credential of tenant alice cannot move repos into namespace bob" in other["error"], other

    # Duplicate: same files, no bytes sent.
    mark = server.log_mark()
    url = alice.api("duplicate_repo", from_id="alice/moved-again", to_id="alice/copy")
    assert url == f"{server.url}/alice/copy", url
    reqs = server.requests_since(mark)
    assert not [e for e in reqs if e["path"].startswith(("/v1/xorbs", "/v1/shards", "/v2/shards"))], reqs
    assert sorted(alice.api("list_repo_files", repo_id="alice/copy")) == [".gitattributes", "w.bin"]
    again = alice.api_call("duplicate_repo", from_id="alice/moved-again", to_id="alice/copy")
    assert again["error_type"] == "HfHubHTTPError" and again["status"] == 409, again
    assert alice.api("duplicate_repo", from_id="alice/moved-again", to_id="alice/copy", exist_ok=True) == url
    dup = alice.hf_ok("repos", "duplicate", "alice/copy", "copy-of-copy", "--private")
    assert "alice/copy-of-copy" in dup.output, dup
    assert alice.api("model_info", repo_id="alice/copy-of-copy")["private"] is True

    ls = alice.hf_ok("repos", "ls")
    for repo in ("alice/moved-again", "alice/copy", "alice/copy-of-copy"):
        assert repo in ls.output, ls
    assert "alice/set-me" not in ls.output, ls
    repos = {r["id"]: r for r in alice.api("list_user_repos")}
    assert repos["alice/copy-of-copy"]["visibility"] == "private", repos
    assert repos["alice/copy"]["storage"] == repos["alice/copy-of-copy"]["storage"] > 256 * 400, repos


# --------------------------------------------------------------------------
# answers that follow the Hub


def test_card_tree_expand_and_full_listing(alice, tmp_path):
    """card_data and library_name from README.md, last_commit in
    list_repo_tree(expand=True), siblings in list_models(full=True)."""
    alice.hf_ok("repos", "create", "alice/carded")
    readme = tmp_path / "README.md"
    readme.write_text("---\nlicense: apache-2.0\nlibrary_name: transformers\ntags:\n- openxet\n---\n# A card\n")
    first = alice.api("upload_file", path_or_fileobj=str(readme), path_in_repo="README.md", repo_id="alice/carded",
                      commit_message="add the card")
    info = run_py(alice, """
        import json
        from huggingface_hub import HfApi
        info = HfApi().model_info("alice/carded")
        print(json.dumps({"library_name": info.library_name, "tags": info.tags, "card": info.card_data.to_dict()}))
    """)
    assert info == {"library_name": "transformers", "tags": ["openxet"],
                    "card": {"license": "apache-2.0", "library_name": "transformers", "tags": ["openxet"]}}, info
    tree = {e["path"]: e for e in alice.api("list_repo_tree", repo_id="alice/carded", expand=True)}
    assert tree["README.md"]["last_commit"]["oid"] == first["oid"], tree
    assert tree["README.md"]["last_commit"]["title"] == "add the card", tree
    assert tree[".gitattributes"]["last_commit"]["title"] == "initial commit", tree
    listed = {m["id"]: m for m in alice.api("list_models", author="alice", full=True)}
    assert sorted(s["rfilename"] for s in listed["alice/carded"]["siblings"]) == [".gitattributes", "README.md"], listed


def test_anonymous_repo_exists_and_file_exists_say_false(server, alice, tmp_path):
    """Without a token, repo_exists and file_exists return False (the
    Hub's answer for a repo it will not show), and a download raises
    RepositoryNotFoundError, not a bare 401."""
    alice.hf_ok("repos", "create", "alice/hidden")
    anon = HubClient(server.url, None, tmp_path / "anon")
    assert anon.api("repo_exists", repo_id="alice/hidden") is False
    assert anon.api("file_exists", repo_id="alice/hidden", filename=".gitattributes") is False
    got = anon.api_call("hf_hub_download", repo_id="alice/hidden", filename=".gitattributes")
    assert got["error_type"] == "RepositoryNotFoundError" and got["status"] == 401, got
    assert "missing Authorization: Bearer token" in got["error"], got
    # With the token, both are there.
    assert alice.api("repo_exists", repo_id="alice/hidden") is True
    assert alice.api("file_exists", repo_id="alice/hidden", filename=".gitattributes") is True


def test_features_not_served_say_so(alice):
    """Likes, discussions, pull requests and Space runtimes: the client
    raises an HTTP error whose message says that openxet does not serve
    them."""
    alice.hf_ok("repos", "create", "alice/social")
    alice.hf_ok("repos", "create", "alice/app", "--repo-type", "space", "--space-sdk", "static")
    for method, kwargs, what in [
        ("unlike", {"repo_id": "alice/social"}, "likes"),
        ("list_liked_repos", {"user": "alice"}, "likes"),
        ("list_repo_likers", {"repo_id": "alice/social"}, "likes"),
        ("get_repo_discussions", {"repo_id": "alice/social"}, "discussions or pull requests"),
        ("create_pull_request", {"repo_id": "alice/social", "title": "x"}, "discussions or pull requests"),
        ("get_space_runtime", {"repo_id": "alice/app"}, "Space runtimes"),
    ]:
        out = alice.api_call(method, **kwargs)
        assert out["ok"] is False and out["status"] == 501, (method, out)
        assert out["error_type"] == "HfHubHTTPError", (method, out)
        assert f"openxet does not serve {what}" in out["error"], (method, out)
    pr = alice.hf("upload", "alice/social", __file__, "t.py", "--create-pr")
    assert pr.returncode != 0 and "openxet does not serve pull requests" in pr.output, pr
