"""A lying upstream behind the mirror's relay, with the stock client
(issue 45 item 1, docs/mirror.md "What a relay checks"): a tampering proxy
in front of a real `openxet serve` flips a byte of every xorb range it
sends, or lists a file under another file's xetHash. hf_hub_download
through the mirror must fail rather than return a wrong file, leave no file
at the path it would return, and the mirror must refuse the file after.
"""

import http.client
import http.server
import json
import threading
import urllib.parse

import pytest

from conftest import HubClient, write_random
from test_parity import run_py

DOWNLOAD = """
import hashlib, json, os
from huggingface_hub import hf_hub_download
try:
    p = hf_hub_download("alice/lie", "weights.bin", cache_dir="dl")
    print(json.dumps({"ok": True, "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}))
except Exception as e:
    done = []
    for root, _, files in os.walk("dl"):
        done += [f for f in files if not f.endswith(".incomplete") and not f.endswith(".lock")]
    print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"[:2000], "files": done}))
"""


class TamperProxy:
    """Forwards every request to target and changes what comes back: every
    mention of target in a JSON answer or a header becomes the proxy (so
    the CAS and fetch URLs come through it too), then edit_json and
    edit_fetch change JSON answers and /v1/fetch/ answers."""

    def __init__(self, target, edit_json=None, edit_fetch=None):
        self.target = urllib.parse.urlsplit(target)
        self.edit_json, self.edit_fetch = edit_json, edit_fetch
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn = http.client.HTTPConnection(proxy.target.hostname, proxy.target.port, timeout=60)
                conn.request(self.command, self.path, body=body, headers=headers)
                res = conn.getresponse()
                data = res.read()
                conn.close()
                origin, me = f"http://{proxy.target.netloc}", proxy.url
                ctype = res.getheader("Content-Type") or ""
                if ctype.startswith("application/json"):
                    data = data.replace(origin.encode(), me.encode())
                    if proxy.edit_json:
                        data = proxy.edit_json(self.path, data)
                elif self.path.startswith("/v1/fetch/") and proxy.edit_fetch and self.command == "GET":
                    data = proxy.edit_fetch(data)
                self.send_response(res.status)
                for k, v in res.getheaders():
                    if k.lower() in ("content-length", "transfer-encoding", "connection"):
                        continue
                    self.send_header(k, v.replace(origin, me))
                self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else res.getheader("Content-Length") or 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def flip(data):
    # A data byte of the first chunk: random bytes are stored uncompressed,
    # so the chunk still decodes, to other bytes.
    if len(data) > 100:
        data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
    return data


@pytest.mark.parametrize("mode", ["flipped byte", "xetHash of other content"])
def test_lying_upstream_fails_the_stock_download(start_server, tmp_path, mode):
    upstream = start_server()
    alice = HubClient(upstream.url, upstream.make_credential("alice"), tmp_path / "alice")
    weights, other = tmp_path / "weights.bin", tmp_path / "other.bin"
    want = write_random(weights, 4 << 20, seed=451)
    write_random(other, 4 << 20, seed=452)
    alice.api("create_repo", repo_id="alice/lie")
    for f in (weights, other):
        alice.api("upload_file", path_or_fileobj=str(f), path_in_repo=f.name, repo_id="alice/lie")
    assert alice.api("update_repo_settings", repo_id="alice/lie", visibility="internal") is None
    tree = upstream.request("GET", "/api/models/alice/lie/tree/main", token=alice.token).json()
    hashes = {e["path"]: e["xetHash"] for e in tree if e.get("xetHash")}
    assert set(hashes) == {"weights.bin", "other.bin"}, tree

    edit_json = edit_fetch = None
    if mode == "flipped byte":
        edit_fetch = flip
    else:
        def edit_json(path, data):
            if "/tree/" in path or "/paths-info/" in path:
                return data.replace(hashes["weights.bin"].encode(), hashes["other.bin"].encode())
            return data
    proxy = TamperProxy(upstream.url, edit_json=edit_json, edit_fetch=edit_fetch)
    try:
        bot = upstream.make_credential("mirrorbot", "read")
        mirror = start_server("--mirror-upstream", proxy.url, "--mirror-upstream-token", bot)
        bob = HubClient(mirror.url, mirror.make_credential("bob", "read"), tmp_path / "bob")
        got = run_py(bob, DOWNLOAD)
        assert not got["ok"], f"hf_hub_download returned a file of a lying upstream: {got} (want sha256 {want})"
        assert "weights.bin" not in got["files"], got
        # The mirror refuses the file from now on.
        got = run_py(bob, DOWNLOAD)
        assert not got["ok"] and "weights.bin" not in got["files"], got
        # resolve pulls by path and holds back the last byte until the file
        # checks out: the answer is refused, or cut one byte short.
        try:
            r = mirror.request("GET", "/alice/lie/resolve/main/weights.bin", token=bob.token)
            assert r.status == 502 and b"upstream_bad_answer" in r.body, r
        except http.client.IncompleteRead as e:
            assert len(e.partial) < 4 << 20, e
    finally:
        proxy.close()
