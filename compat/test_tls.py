"""The stock hf_xet client over HTTPS to openxet's built-in TLS.

openxet serves TLS itself when server.tls_cert and server.tls_key are set.
The test makes a throwaway CA and a certificate for localhost with the openssl
command line, starts `openxet serve --tls-cert … --tls-key …`, and drives
hf_xet (Rust, reqwest with rustls) at https://localhost:<port>. hf_xet trusts a
private CA through SSL_CERT_FILE (read by its platform verifier); without it
the same upload is refused by the client. After a renewal and SIGHUP the
server presents the new certificate and hf_xet keeps working.
"""

import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import OpenxetServer, Response, XetClient, XetError, sha256_file, write_random

KiB = 1 << 10

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="the openssl command makes the test CA; install openssl")


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"openssl {' '.join(args)}:\n{r.stderr}"


class CA:
    """A throwaway CA under dir; issue() writes a server certificate."""

    def __init__(self, dir):
        self.dir = dir
        self.cert = dir / "ca.pem"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=openxet compat CA",
                 cwd=dir)
        (dir / "ext.cnf").write_text(
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")

    def issue(self, serial, cert, key):
        """Write a certificate for localhost with this serial, and its key,
        beside and then renamed over cert and key (as renewal tools do)."""
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", "new.key", "-out", "new.csr", "-subj", "/CN=localhost", cwd=self.dir)
        _openssl("x509", "-req", "-in", "new.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-set_serial", str(serial), "-days", "1", "-extfile", "ext.cnf", "-out", "new.pem",
                 cwd=self.dir)
        (self.dir / "new.key").replace(key)
        (self.dir / "new.pem").replace(cert)


class TLSServer(OpenxetServer):
    """`openxet serve` with built-in TLS, reached as https://localhost."""

    def __init__(self, binary, workdir, ca, cert, key):
        super().__init__(binary, workdir, ["--tls-cert", str(cert), "--tls-key", str(key)])
        self.context = ssl.create_default_context(cafile=str(ca.cert))
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self.context))

    @property
    def url(self):
        return f"https://localhost:{self.port}"

    def request(self, method, path, token=None, headers=None, body=None, timeout=30.0):
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=h)
        try:
            with self.opener.open(req, timeout=timeout) as r:
                return Response(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            return Response(e.code, e.headers, e.read())

    def _wait_ready(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.request("GET", "/readyz", timeout=2).status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def serial(self):
        """The serial number of the certificate the server presents now."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            with self.context.wrap_socket(raw, server_hostname="localhost") as s:
                return int(s.getpeercert()["serialNumber"], 16)


@pytest.fixture
def tls_server(openxet_bin, tmp_path):
    (tmp_path / "ca").mkdir()
    ca = CA(tmp_path / "ca")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.issue(1001, cert, key)
    s = TLSServer(openxet_bin, tmp_path / "server", ca, cert, key).start()
    try:
        yield s, ca, cert, key
    finally:
        s.stop()
    s.check_stopped_cleanly()


def test_hf_xet_over_https(tls_server, tmp_path):
    server, ca, cert, key = tls_server
    token = server.make_credential("alice", "write")
    src = tmp_path / "model.bin"
    digest = write_random(src, 300 * KiB, seed=15)
    trusting = XetClient(server.url, token, tmp_path / "client", {"SSL_CERT_FILE": str(ca.cert)})

    # A client that does not trust the CA refuses the server: nothing is stored.
    stranger = XetClient(server.url, token, tmp_path / "stranger")
    with pytest.raises(XetError):
        stranger.upload_files([src])
    assert server.usage("alice") == 0

    [info] = trusting.upload_files([src])
    assert info["sha256"] == digest
    dest = tmp_path / "copy.bin"
    trusting.download_files([(dest, info["hash"], info["file_size"])])
    assert sha256_file(dest) == digest
    assert server.usage("alice") > 0

    # Renew the certificate, SIGHUP: new connections get the new one, and
    # the stock client keeps working.
    assert server.serial() == 1001
    mark = server.log_mark()
    ca.issue(1002, cert, key)
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while "tls certificate reloaded" not in server.log_text_since(mark):
        assert time.monotonic() < deadline, server.log_text_since(mark)
        time.sleep(0.05)
    assert server.serial() == 1002
    dest2 = tmp_path / "copy2.bin"
    XetClient(server.url, token, tmp_path / "client2", {"SSL_CERT_FILE": str(ca.cert)}).download_files(
        [(dest2, info["hash"], info["file_size"])])
    assert sha256_file(dest2) == digest
