"""Memory shares with the stock client (issue: memory budget with
per-credential and per-tenant shares).

A file of 100,000 one-chunk terms has a whole-file reconstruction answer
larger than a credential's share of a 280MiB budget, so openxet refuses it
with 413 answer_too_large; hf_xet asks in ranges and downloads it whole.
"""

import hashlib
import json
import subprocess

from conftest import REPO_ROOT, XetClient, http


def test_many_terms_file_413_whole_but_hf_xet_downloads_in_ranges(start_server, tmp_path):
    server = start_server("--memory-budget", "280MiB")
    token = server.make_credential("alice")
    r = subprocess.run(["go", "run", "./compat/tools/manyterms", "-server", server.url, "-token", token],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    f = json.loads(r.stdout)
    assert f["terms"] == 100_000

    whole = http("GET", server.url + "/v1/reconstructions/" + f["hash"], token=token)
    assert whole.status == 413, whole.body
    body = json.loads(whole.body)
    assert body["error"] == "answer_too_large" and "Range" in body["hint"]

    # hf_xet's smallest reconstruction window is 256MiB by default; a 4MB
    # file fits one window, so the test asks it for 1MiB windows, as it
    # would use on a file of gigabytes.
    client = XetClient(server.url, token, tmp_path / "client", extra_env={
        "HF_XET_RECONSTRUCTION_MIN_RECONSTRUCTION_FETCH_SIZE": "1048576",
        "HF_XET_RECONSTRUCTION_MAX_RECONSTRUCTION_FETCH_SIZE": "1048576",
    })
    mark = server.log_mark()
    dest = tmp_path / "out.bin"
    client.download_files([(dest, f["hash"], f["size"])])
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == f["sha256"]
    recon = [e for e in server.requests_since(mark) if "/reconstructions/" in e["path"]]
    assert len(recon) > 1 and all(e["status"] == "200" for e in recon), recon
