"""Uploads that do not use Xet, through the LFS basic transfer, with the
stock huggingface_hub: upload_file from a BytesIO (which huggingface_hub
never sends through Xet, on any version) against a real `openxet serve`.

The server stores what arrives as a Xet upload would: the file it registers
has the hash hf_xet computes for the same bytes, a Xet download of it works,
and the same bytes uploaded again through Xet store nothing new.
"""

import subprocess
import sys

import hf_xet

from conftest import MiB, HubClient, write_random

UPLOAD_FROM_BYTESIO = """
import io, sys
from huggingface_hub import HfApi
data = open(sys.argv[1], "rb").read()
info = HfApi().upload_file(path_or_fileobj=io.BytesIO(data), path_in_repo=sys.argv[2],
                           repo_id=sys.argv[3], commit_message="from a BytesIO")
print(info.oid)
"""


def upload_bytesio(client, path, path_in_repo, repo_id):
    r = subprocess.run([sys.executable, "-c", UPLOAD_FROM_BYTESIO, str(path), path_in_repo, repo_id],
                       capture_output=True, text=True, env=client.env(), timeout=300)
    assert r.returncode == 0, f"upload_file from a BytesIO failed:\n{r.stdout}\n{r.stderr[-6000:]}"
    return r


def test_upload_file_from_bytesio_is_stored_as_xet(server, tmp_path):
    token = server.make_credential("lfsuser")
    alice = HubClient(server.url, token, tmp_path / "client")
    alice.api("create_repo", repo_id="lfsuser/from-bytesio")
    src = tmp_path / "weights.bin"
    sha = write_random(src, 9 * MiB + 77, seed=31)
    [want] = hf_xet.hash_files([str(src)])
    want_hash = want.hash if hasattr(want, "hash") else want

    mark = server.log_mark()
    up = upload_bytesio(alice, src, "weights.bin", "lfsuser/from-bytesio")
    reqs = server.requests_since(mark)
    puts = [q for q in reqs if q.get("method") == "PUT" and "/info/lfs/objects/" in q.get("path", "")]
    assert [q.get("status") for q in puts] == ["200"], (reqs, up.stderr[-3000:])
    assert all("token" not in q.get("path", "") for q in puts), "the CAS token reached the log"
    assert not [q for q in reqs if q.get("path", "").startswith("/v1/xorbs/")], "the client used Xet"
    usage = server.usage("lfsuser")
    assert 9 * MiB <= usage <= 9 * MiB + 64 * 1024, usage

    # The registered file is the one hf_xet would have made.
    head = server.request("HEAD", "/lfsuser/from-bytesio/resolve/main/weights.bin", token=token)
    assert head.status == 200, head
    assert head.headers.get("X-Xet-Hash") == want_hash, (head.headers, want_hash)

    # A Xet download of it, by a client with an empty cache.
    dl = HubClient(server.url, token, tmp_path / "download")
    mark = server.log_mark()
    got = dl.api("hf_hub_download", repo_id="lfsuser/from-bytesio", filename="weights.bin",
                 local_dir=str(tmp_path / "out"))
    assert open(got, "rb").read() == src.read_bytes()
    assert any("/reconstructions/" in q.get("path", "") for q in server.requests_since(mark))

    # The same bytes through Xet (upload_file from a path) store nothing new.
    mark = server.log_mark()
    alice.api("upload_file", path_or_fileobj=str(src), path_in_repo="again.bin",
              repo_id="lfsuser/from-bytesio")
    reqs = server.requests_since(mark)
    assert not [q for q in reqs if "/info/lfs/objects/" in q.get("path", "") and q.get("method") == "PUT"], reqs
    assert server.usage("lfsuser") == usage
    head = server.request("HEAD", "/lfsuser/from-bytesio/resolve/main/again.bin", token=token)
    assert head.headers.get("X-Xet-Hash") == want_hash
    assert sha  # the helper's sha256 of the source, for the failure message above
