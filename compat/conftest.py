"""Fixtures that run a real `openxet serve` and the stock hf_xet client.

- `openxet_bin` (session): the binary, from $OPENXET_BIN or built once with
  `go build` into a temporary directory.
- `server` (module): one `openxet serve` on a free 127.0.0.1 port with its own
  data directory; stopped with SIGTERM at teardown (SIGKILL after a bounded
  wait) and always reaped.
- `start_server` (function): a factory for extra servers with extra flags,
  stopped when the test ends.
- `XetClient`: runs hf_xet in a subprocess (compat/xet_driver.py) with an
  isolated HF_XET_CACHE / HF_HOME and short retry settings.
- `HubClient`: the `hf` CLI and HfApi (compat/hub_driver.py) of one token,
  in subprocesses with HF_ENDPOINT at the server and isolated caches.
- helpers: write_random / sha256_file for data, and request_intervals,
  peak_rate, peak_in_flight for the request log.

The server's stderr is its request log (one line per request). It is saved to
a file; the part written during a failed test is attached to the report.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path

import pytest

COMPAT_DIR = Path(__file__).resolve().parent
REPO_ROOT = COMPAT_DIR.parent
DRIVER = COMPAT_DIR / "xet_driver.py"

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
CLI_TIMEOUT_S = 30.0
DRIVER_TIMEOUT_S = 240.0
BUILD_TIMEOUT_S = 600.0

# No proxy for anything: every request of this suite goes to 127.0.0.1.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# Live servers, so a failing test's report can show their request logs.
_LIVE_SERVERS = []


def _clean_env():
    """The parent environment without anything that could steer the server
    (OPENXET_*), the Hugging Face clients (HF_*) or a proxy."""
    env = {}
    for k, v in os.environ.items():
        ku = k.upper()
        if ku.startswith(("OPENXET_", "HF_", "HUGGING")) or ku in (
            "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
        ):
            continue
        env[k] = v
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


# --------------------------------------------------------------------------
# the binary


@pytest.fixture(scope="session")
def openxet_bin(tmp_path_factory):
    env_bin = os.environ.get("OPENXET_BIN")
    if env_bin:
        p = Path(env_bin)
        if not (p.is_file() and os.access(p, os.X_OK)):
            pytest.fail(f"OPENXET_BIN={env_bin} is not an executable file")
        return p
    go = shutil.which("go")
    if go is None:
        pytest.fail("go is not on PATH and OPENXET_BIN is not set")
    out = tmp_path_factory.mktemp("bin") / "openxet"
    env = dict(os.environ)
    r = subprocess.run(
        [go, "build", "-o", str(out), "."],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
    )
    if r.returncode != 0:
        pytest.fail(f"go build failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return out


# --------------------------------------------------------------------------
# HTTP helpers


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {self.body[:300]!r}>"


def http(method, url, token=None, headers=None, body=None, timeout=30.0):
    """One HTTP request; returns Response for any status (never raises on 4xx/5xx)."""
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    data = body
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return Response(r.status, r.headers, r.read())
    except urllib.error.HTTPError as e:
        return Response(e.code, e.headers, e.read())


# --------------------------------------------------------------------------
# the server

_LOG_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_log_line(line):
    """Parse one slog text line into a dict (values stay strings)."""
    out = {}
    for k, v in _LOG_KV.findall(line):
        if v.startswith('"'):
            v = json.loads(v)
        out[k] = v
    return out


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OpenxetServer:
    """A running `openxet serve` process."""

    def __init__(self, binary, workdir, extra_args=(), extra_env=None):
        self.binary = Path(binary)
        self.extra_env = dict(extra_env or {})  # e.g. AWS_* for an s3:// bucket
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "data"
        self.stdout_path = self.workdir / "stdout.txt"
        self.log_path = self.workdir / "stderr.log"
        self.extra_args = list(extra_args)
        self.proc = None
        self.port = None
        self.admin_token = None
        self.killed = False

    # lifecycle ---------------------------------------------------------

    def start(self, admin_token=None):
        """Start the server. A first start prints the admin token; a node
        joining an index another node bootstrapped prints none: pass that
        node's token as admin_token."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        last = ""
        for _attempt in range(5):
            self.port = _free_port()
            with open(self.stdout_path, "wb") as so, open(self.log_path, "ab") as se:
                self.proc = subprocess.Popen(
                    [str(self.binary), "serve", "--data-dir", str(self.data_dir),
                     "--listen", f"127.0.0.1:{self.port}", *self.extra_args],
                    stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                    env={**_clean_env(), **self.extra_env}, start_new_session=True,
                )
            if self._wait_ready():
                break
            last = self.log_path.read_text(errors="replace")
            self._reap()
            if "address already in use" not in last:
                raise RuntimeError(f"openxet serve did not become ready:\n{last[-4000:]}")
            # Another process took the port between _free_port and listen.
            # Start over on an empty data dir (the admin token is printed
            # only on the first start).
            shutil.rmtree(self.data_dir, ignore_errors=True)
        else:
            raise RuntimeError(f"openxet serve could not find a free port:\n{last[-4000:]}")
        if admin_token:
            self.admin_token = admin_token
            _LIVE_SERVERS.append(self)
            return self
        m = re.search(r"Token \(shown once, store it now\): (hf_oxt_\S+)",
                      self.stdout_path.read_text())
        if not m:
            self.stop()
            raise RuntimeError(
                "no admin token on stdout:\n" + self.stdout_path.read_text())
        self.admin_token = m.group(1)
        _LIVE_SERVERS.append(self)
        return self

    def _wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if http("GET", self.url + "/readyz", timeout=2).status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def _reap(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self):
        """SIGTERM, wait, SIGKILL after STOP_TIMEOUT_S; always reap.
        Returns the exit code."""
        if self in _LIVE_SERVERS:
            _LIVE_SERVERS.remove(self)
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.killed = True
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        return self.proc.returncode

    def check_stopped_cleanly(self):
        """After stop(): fail if the server ignored SIGTERM or exited non-zero."""
        rc = self.proc.returncode if self.proc else None
        if self.killed or rc != 0:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            pytest.fail(f"openxet serve did not stop cleanly on SIGTERM "
                        f"(killed={self.killed}, exit={rc}):\n{tail}", pytrace=False)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    # requests ----------------------------------------------------------

    def request(self, method, path, token=None, headers=None, body=None, timeout=30.0):
        return http(method, self.url + path, token=token, headers=headers, body=body,
                    timeout=timeout)

    def make_credential(self, tenant, scope="write"):
        """Create a credential with the CLI (on the same data dir); returns the token."""
        scopes = [scope] if isinstance(scope, str) else list(scope)
        cmd = [str(self.binary), "credentials", "create", "--data-dir", str(self.data_dir),
               "--tenant", tenant, "--json"]
        for s in scopes:
            cmd += ["--scope", s]
        r = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(),
                           timeout=CLI_TIMEOUT_S)
        if r.returncode != 0:
            raise RuntimeError(f"credentials create failed ({r.returncode}): {r.stderr}")
        return json.loads(r.stdout)["token"]

    def admin_put_limits(self, tenant, **fields):
        r = self.request("PUT", f"/api/openxet/v1/admin/tenants/{tenant}/limits",
                         token=self.admin_token, body=fields)
        assert r.status == 200, f"PUT limits {tenant} {fields}: {r}"
        return r.json()

    def admin_get_limits(self, tenant):
        r = self.request("GET", f"/api/openxet/v1/admin/tenants/{tenant}/limits",
                         token=self.admin_token)
        assert r.status == 200, f"GET limits {tenant}: {r}"
        return r.json()

    def usage(self, tenant):
        """The tenant's usage counter; 0 for a tenant the index no longer
        knows (deleted, and its last bytes collected: limits answer 404)."""
        r = self.request("GET", f"/api/openxet/v1/admin/tenants/{tenant}/limits",
                         token=self.admin_token)
        if r.status == 404 and r.json().get("error") == "not_found":
            return 0
        assert r.status == 200, f"GET limits {tenant}: {r}"
        return r.json()["usage_bytes"]

    # the request log ---------------------------------------------------

    def log_mark(self):
        """An offset into the request log; pass it to requests_since."""
        self.sync_log()
        return self.log_path.stat().st_size

    def sync_log(self, timeout=10.0):
        """Make sure every request answered so far is in the log file: send a
        request with a unique path and wait until its line appears."""
        marker = f"/compat-log-mark/{uuid.uuid4().hex}"
        self.request("GET", marker)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.encode() in self.log_path.read_bytes():
                return
            time.sleep(0.02)
        raise AssertionError(f"log marker {marker} never appeared in {self.log_path}")

    def requests_since(self, mark):
        """The request-log entries written after mark (as dicts), without
        the markers themselves."""
        self.sync_log()
        with open(self.log_path, "rb") as f:
            f.seek(mark)
            text = f.read().decode(errors="replace")
        out = []
        for line in text.splitlines():
            if "msg=request" not in line:
                continue
            d = parse_log_line(line)
            if d.get("path", "").startswith("/compat-log-mark/"):
                continue
            out.append(d)
        return out

    def request_by_id(self, request_id):
        """The request-log entry of one request id (the X-Request-Id a client
        printed); fails if there is not exactly one."""
        self.sync_log()
        found = [parse_log_line(ln) for ln in self.log_path.read_text(errors="replace").splitlines()
                 if "msg=request" in ln and f"request_id={request_id}" in ln]
        assert len(found) == 1, f"{len(found)} log lines with request_id={request_id}"
        return found[0]

    def metric(self, name):
        """The value of one unlabelled series of /metrics (admin token)."""
        r = self.request("GET", "/metrics", token=self.admin_token)
        assert r.status == 200, r
        for line in r.body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"no {name} in /metrics")

    @contextlib.contextmanager
    def memory_held(self, token, nbytes, timeout=30.0):
        """Hold nbytes of the memory budget: a xorb upload that declares
        nbytes and sends two, so the server reserves its body and waits for
        the rest. Yields once /metrics shows the bytes reserved; closing
        the connection at exit releases them."""
        before = self.metric("openxet_memory_reserved_bytes")
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            sock.sendall((f"POST /v1/xorbs/default/{'ef' * 32} HTTP/1.1\r\nHost: x\r\n"
                          f"Authorization: Bearer {token}\r\nContent-Length: {nbytes}\r\n\r\nxx").encode())
            deadline = time.monotonic() + timeout
            while self.metric("openxet_memory_reserved_bytes") < before + nbytes:
                assert time.monotonic() < deadline, "the held upload never reserved its memory"
                time.sleep(0.02)
            yield
        finally:
            sock.close()

    def log_text_since(self, mark):
        with open(self.log_path, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")


@pytest.fixture(scope="module")
def server(openxet_bin, tmp_path_factory):
    s = OpenxetServer(openxet_bin, tmp_path_factory.mktemp("openxet")).start()
    try:
        yield s
    finally:
        s.stop()
    s.check_stopped_cleanly()


@pytest.fixture
def start_server(openxet_bin, tmp_path_factory):
    """Factory: start_server(*extra_flags) -> OpenxetServer, stopped after the test."""
    started = []

    def _start(*extra_args):
        s = OpenxetServer(openxet_bin, tmp_path_factory.mktemp("openxet"), extra_args).start()
        started.append(s)
        return s

    try:
        yield _start
    finally:
        for s in started:
            s.stop()
    for s in started:
        s.check_stopped_cleanly()


# --------------------------------------------------------------------------
# the hf_xet client, in a subprocess


class XetError(Exception):
    """hf_xet raised inside the driver."""

    def __init__(self, error_type, message):
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


class XetClient:
    """Runs hf_xet operations in a fresh interpreter.

    workdir holds this client's HF_XET_CACHE and HF_HOME; two clients with the
    same workdir share the local caches (shard cache, chunk cache)."""

    def __init__(self, endpoint, token, workdir, extra_env=None, python=None):
        self.endpoint = endpoint
        self.token = token
        self.workdir = Path(workdir)
        self.extra_env = dict(extra_env or {})
        self.python = str(python or sys.executable)  # another venv's: compat/matrix.py
        (self.workdir / "xet-cache").mkdir(parents=True, exist_ok=True)
        (self.workdir / "hf-home").mkdir(parents=True, exist_ok=True)

    def env(self):
        env = _clean_env()
        env.update({
            "HF_XET_CACHE": str(self.workdir / "xet-cache"),
            "HF_HOME": str(self.workdir / "hf-home"),
            "HF_XET_TELEMETRY_ENABLED": "false",
            "HF_XET_CLIENT_RETRY_BASE_DELAY": "100ms",
            "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS": "3",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        })
        env.update(self.extra_env)
        return env

    def run(self, op, timeout=DRIVER_TIMEOUT_S, **args):
        """Run one op; returns the driver's JSON answer ({"ok": ...})."""
        payload = dict(args, op=op, endpoint=self.endpoint, token=self.token)
        try:
            r = subprocess.run(
                [self.python, str(DRIVER)], input=json.dumps(payload),
                capture_output=True, text=True, env=self.env(), timeout=timeout,
                cwd=self.workdir,
            )
        except subprocess.TimeoutExpired as e:
            raise AssertionError(
                f"hf_xet {op} did not finish in {timeout}s\nstderr:\n{e.stderr}") from None
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            raise AssertionError(
                f"xet driver crashed on {op} (exit {r.returncode})\n"
                f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-8000:]}")
        return json.loads(lines[-1])

    def _ok(self, op, **args):
        out = self.run(op, **args)
        if not out["ok"]:
            raise XetError(out["error_type"], out["error"])
        return out["result"]

    def upload_files(self, paths):
        return self._ok("upload_files", paths=[str(p) for p in paths])

    def download_files(self, files):
        """files: iterable of (dest, hash, size_or_None)."""
        return self._ok("download_files", files=[
            {"dest": str(d), "hash": h, "file_size": s} for d, h, s in files])

    def session_upload(self, paths=(), contents=()):
        return self._ok("session_upload", paths=[str(p) for p in paths],
                        contents_hex=[c.hex() for c in contents])

    def session_download(self, files):
        return self._ok("session_download", files=[
            {"dest": str(d), "hash": h, "file_size": s} for d, h, s in files])


# --------------------------------------------------------------------------
# the Hub clients: the `hf` CLI and HfApi (huggingface_hub), in subprocesses

HF_CLI_TIMEOUT_S = 300.0
HUB_DRIVER = COMPAT_DIR / "hub_driver.py"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def hf_binary():
    """The `hf` CLI of the interpreter running the tests (the repo venv)."""
    p = Path(sys.executable).parent / "hf"
    if p.is_file():
        return p
    w = shutil.which("hf")
    if w is None:
        pytest.fail("the hf CLI (huggingface_hub) is not installed next to "
                    f"{sys.executable}: pip install -r compat/requirements.txt")
    return Path(w)


def cli_error(result):
    """The error block the hf CLI prints (after "Error: ", before its
    HF_DEBUG hint), and the request id in it (or None)."""
    text = _ANSI.sub("", result.stderr)
    m = re.search(r"^Error: (.*?)\n(?:Hint: set HF_DEBUG|\Z)", text, re.S | re.M)
    assert m, f"no error block in the hf output:\n{result!r}"
    rid = re.search(r"Request ID: ([0-9a-f]+)", m.group(1))
    return m.group(1).rstrip("\n"), rid.group(1) if rid else None


class CliResult:
    def __init__(self, args, returncode, stdout, stderr):
        self.args = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    @property
    def output(self):
        """stdout and stderr together, without ANSI colours."""
        return _ANSI.sub("", self.stdout + "\n" + self.stderr)

    def __repr__(self):
        return (f"<hf {' '.join(self.args)} exit={self.returncode}>\n"
                f"--- stdout\n{self.stdout[-6000:]}\n--- stderr\n{self.stderr[-6000:]}")


class HubClient:
    """The stock Hub clients (hf CLI, HfApi) of one tenant's token against one
    server. workdir holds this client's HF_HOME and HF_XET_CACHE."""

    def __init__(self, endpoint, token, workdir, extra_env=None, python=None):
        self.endpoint = endpoint
        self.token = token
        self.workdir = Path(workdir)
        self.extra_env = dict(extra_env or {})
        self.python = str(python or sys.executable)  # api_call's; hf() is always the suite's CLI
        for d in ("hf-home", "xet-cache"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)

    def env(self):
        env = _clean_env()
        env.update({
            "HF_ENDPOINT": self.endpoint,
            "HF_HOME": str(self.workdir / "hf-home"),
            "HF_XET_CACHE": str(self.workdir / "xet-cache"),
            "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_XET_TELEMETRY_ENABLED": "false",
            "HF_XET_CLIENT_RETRY_BASE_DELAY": "100ms",
            "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS": "3",
            "NO_COLOR": "1",
        })
        if self.token is not None:  # None: only what `hf auth login` stored
            env["HF_TOKEN"] = self.token
        env.update(self.extra_env)
        return env

    def hf(self, *args, timeout=HF_CLI_TIMEOUT_S, cwd=None):
        """Run `hf ARGS`; returns a CliResult whatever the exit code."""
        args = [str(a) for a in args]
        try:
            r = subprocess.run([str(hf_binary()), *args], capture_output=True, text=True,
                               env=self.env(), timeout=timeout, cwd=cwd or self.workdir,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"hf {' '.join(args)} did not finish in {timeout}s\n"
                                 f"stdout:\n{e.stdout}\nstderr:\n{e.stderr}") from None
        return CliResult(args, r.returncode, r.stdout, r.stderr)

    def hf_ok(self, *args, **kw):
        r = self.hf(*args, **kw)
        assert r.returncode == 0, f"hf {' '.join(r.args)} failed:\n{r!r}"
        return r

    def api_call(self, method, timeout=HF_CLI_TIMEOUT_S, **kwargs):
        """HfApi().method(**kwargs) in a fresh interpreter; returns the driver's
        JSON answer ({"ok": ...})."""
        payload = json.dumps({"method": method, "kwargs": kwargs})
        r = subprocess.run([self.python, str(HUB_DRIVER)], input=payload,
                           capture_output=True, text=True, env=self.env(), timeout=timeout,
                           cwd=self.workdir)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            raise AssertionError(f"hub driver crashed on {method} (exit {r.returncode})\n"
                                 f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-8000:]}")
        return json.loads(lines[-1])

    def api(self, method, **kwargs):
        """HfApi().method(**kwargs); fails the test if the client raised."""
        out = self.api_call(method, **kwargs)
        assert out["ok"], f"HfApi.{method}({kwargs}) raised {out['error_type']}: {out['error']}"
        return out["result"]


# --------------------------------------------------------------------------
# data and request-log helpers shared by the test modules

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def bench_binary(given, work):
    """The openxet binary a bench script serves with: given (its --binary),
    or this checkout built into the directory work."""
    if given:
        return str(given)
    binary = str(Path(work) / "openxet")
    subprocess.run(["go", "build", "-o", binary, "."], cwd=REPO_ROOT, check=True)
    return binary


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(4 * MiB)
            if not b:
                return h.hexdigest()
            h.update(b)


def write_random(path, size, seed, block=8 * MiB):
    """size pseudo-random bytes from seed (SHAKE-128 per block: about
    0.6 GiB/s, ten times random.randbytes); returns their sha256."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        i, left = 0, size
        while left:
            n = min(block, left)
            b = hashlib.shake_128(f"{seed}/{i}".encode()).digest(n)
            h.update(b)
            f.write(b)
            left -= n
            i += 1
    return h.hexdigest()


def request_intervals(entries):
    """(start, end) in seconds since the epoch for each request-log entry: the
    line's time is written when the answer is done; start = end - duration."""
    out = []
    for e in entries:
        end = datetime.fromisoformat(e["time"]).timestamp()
        out.append((end - float(e["duration_ms"]) / 1000, end))
    return out


def peak_rate(intervals, window=1.0):
    """Most requests started within any `window` seconds."""
    starts = sorted(s for s, _ in intervals)
    best, j = 0, 0
    for i, s in enumerate(starts):
        while starts[j] <= s - window:
            j += 1
        best = max(best, i - j + 1)
    return best


def peak_in_flight(intervals):
    """Most requests in progress at once."""
    ev = [(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals]
    ev.sort(key=lambda x: (x[0], x[1]))  # an end before a start at the same instant
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


# --------------------------------------------------------------------------
# the client matrix (compat/matrix.py, compat/test_matrix.py)


def pytest_addoption(parser):
    parser.addoption("--matrix", action="store_true",
                     help="also run every cell of the client matrix (compat/test_matrix.py), "
                          "not only the default ones")


def pytest_configure(config):
    config.addinivalue_line("markers", "matrix: a client-matrix cell run only with --matrix")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--matrix"):
        return
    keep = [i for i in items if i.get_closest_marker("matrix") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("matrix")])
        items[:] = keep


# --------------------------------------------------------------------------
# attach the request log of every live server to a failing test's report


@pytest.fixture(autouse=True)
def _server_log_marks(request):
    request.node._openxet_log_marks = {
        id(s): (s, s.log_path.stat().st_size if s.log_path.exists() else 0)
        for s in _LIVE_SERVERS
    }
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call" or not rep.failed:
        return
    marks = getattr(item, "_openxet_log_marks", {})
    servers = {id(s): (s, 0) for s in _LIVE_SERVERS}
    servers.update(marks)
    for s, mark in servers.values():
        try:
            text = s.log_text_since(mark)
        except OSError:
            continue
        if not text.strip():
            continue
        if len(text) > 60000:
            text = "... (cut; full log: %s)\n%s" % (s.log_path, text[-60000:])
        rep.sections.append((f"openxet request log {s.url} ({s.log_path})", text))
