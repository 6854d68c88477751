"""The stock hf_xet client round trip through an openxet whose bucket is S3,
and through the scale-out deployment: two nodes on one PostgreSQL index.

A real S3-compatible server, MinIO, runs on 127.0.0.1 for the module: the
binary .ci/minio.sh builds (found as the Go tests find it: $OPENXET_MINIO,
else the cache directory .ci/minio.sh installs into). Without it the module
is skipped, unless OPENXET_REQUIRE_S3=1 makes that a failure. Likewise a
throwaway PostgreSQL cluster (Debian's postgresql package, run as the
postgres user when the tests run as root), required by OPENXET_REQUIRE_PG=1.
"""

import datetime
import glob
import hashlib
import hmac
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, MiB, OpenxetServer, XetClient, http, sha256_file, write_random, _free_port

REGION = "us-east-1"
MINIO_READY_TIMEOUT_S = 120.0


def _minio_binary():
    """The MinIO binary, or None: $OPENXET_MINIO, else where .ci/minio.sh
    installs the version it pins."""
    if os.environ.get("OPENXET_MINIO"):
        return Path(os.environ["OPENXET_MINIO"])
    m = re.search(r"^version=(\S+)$", (REPO_ROOT / ".ci" / "minio.sh").read_text(), re.M)
    cache = os.environ.get("OPENXET_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "openxet")
    p = Path(cache) / f"minio-{m.group(1)}" / "minio"
    if p.is_file():
        return p
    w = shutil.which("minio")
    return Path(w) if w else None


def _sigv4_headers(method, url_path, host, access, secret, payload=b""):
    """Headers of an AWS Signature Version 4 request to S3 (enough to create
    a bucket; no query string)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(payload).hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = "\n".join([
        method, url_path, "",
        f"host:{host}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{amz_date}\n",
        signed, payload_hash,
    ])
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (day, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {
        "x-amz-date": amz_date,
        "x-amz-content-sha256": payload_hash,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
                         f"SignedHeaders={signed}, Signature={sig}",
    }


class Minio:
    def __init__(self, binary, workdir, extra_args=(), drives=1):
        self.workdir = Path(workdir)
        self.port, console = _free_port(), _free_port()
        self.access = "oxt" + secrets.token_hex(8)
        self.secret = secrets.token_hex(20)
        self.log = open(self.workdir / "minio.log", "wb")
        # Only 127.0.0.1, no console, no update checks, no call-home, nothing
        # from the user's home or environment.
        self.proc = subprocess.Popen(
            [str(binary), "server", "--quiet", "--anonymous",
             "--address", f"127.0.0.1:{self.port}", "--console-address", f"127.0.0.1:{console}",
             "--certs-dir", str(self.workdir / "certs"), *extra_args,
             # several drives: one erasure set over data1..dataN (MinIO's own ellipsis syntax)
             str(self.workdir / ("data" if drives == 1 else f"data{{1...{drives}}}"))],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL, start_new_session=True,
            env={"HOME": str(self.workdir), "PATH": os.environ.get("PATH", ""),
                 "MINIO_ROOT_USER": self.access, "MINIO_ROOT_PASSWORD": self.secret,
                 "MINIO_UPDATE": "off", "MINIO_BROWSER": "off", "MINIO_CALLHOME_ENABLE": "off",
                 "MINIO_CI_CD": "1", "GOMAXPROCS": "2"},
        )
        deadline = time.monotonic() + MINIO_READY_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if http("GET", self.endpoint + "/minio/health/ready", timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("MinIO did not become ready:\n" +
                           (self.workdir / "minio.log").read_text(errors="replace")[-4000:])

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def create_bucket(self):
        name = "openxet-" + secrets.token_hex(6)
        # MinIO can answer its readiness probe before it takes requests
        # (503 XMinioServerNotInitialized, "please try again"): retry that,
        # bounded, as a wait on the child process, not as an assertion.
        deadline = time.monotonic() + 60
        while True:
            h = _sigv4_headers("PUT", "/" + name, f"127.0.0.1:{self.port}", self.access, self.secret)
            r = http("PUT", f"{self.endpoint}/{name}", headers=h, body=b"")
            if r.status != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert r.status == 200, f"create bucket {name}: {r}"
        return name

    def bucket_url(self, name):
        return (f"s3://{name}?endpoint={self.endpoint}&region={REGION}&use_path_style=true")

    def env(self):
        """What openxet needs to reach it: credentials from the environment,
        nothing from the machine's AWS configuration."""
        return {"AWS_ACCESS_KEY_ID": self.access, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()


def _pg_bin():
    """The directory of initdb and postgres, or None (as store/pgtest finds it)."""
    if os.environ.get("OPENXET_PG_BIN"):
        return Path(os.environ["OPENXET_PG_BIN"])
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                  key=lambda d: int(Path(d).parent.name) if Path(d).parent.name.isdigit() else 0)
    for d in reversed(dirs):
        if (Path(d) / "initdb").exists():
            return Path(d)
    w = shutil.which("initdb")
    return Path(w).parent if w else None


class Postgres:
    """A throwaway PostgreSQL cluster on 127.0.0.1, trusted local logins."""

    def __init__(self, bindir, durable=False):
        # Not under pytest's temporary directory: the postgres user could not
        # enter that (mode 0700, owned by root).
        self.workdir = Path(tempfile.mkdtemp(prefix="openxet-pg-"))
        user = "postgres" if os.geteuid() == 0 else None  # it refuses to run as root
        if user:
            shutil.chown(self.workdir, user, user)
        env = {"HOME": str(self.workdir), "LC_ALL": "C", "PATH": os.environ.get("PATH", ""), "TZ": "UTC"}
        data = self.workdir / "data"
        subprocess.run([str(bindir / "initdb"), "--no-sync", "--auth=trust", "--username=openxet",
                        "--encoding=UTF8", "--locale=C", "-D", str(data)],
                       user=user, env=env, check=True, capture_output=True)
        self.port = _free_port()
        self.log = open(self.workdir / "postgres.log", "wb")
        # A test's cluster never outlives a crash of the machine: no fsync,
        # unless durable (benchmarks).
        fast = [] if durable else ["-c", "fsync=off", "-c", "synchronous_commit=off"]
        self.proc = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(self.port),
             "-k", str(self.workdir), *fast],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL, start_new_session=True,
            user=user, env=env)
        deadline = time.monotonic() + MINIO_READY_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            r = subprocess.run([str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                               capture_output=True)
            if r.returncode == 0:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("PostgreSQL did not become ready:\n" +
                           (self.workdir / "postgres.log").read_text(errors="replace")[-4000:])

    def index_url(self):
        return f"postgres://openxet@127.0.0.1:{self.port}/postgres?sslmode=disable"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _require(found, msg, env):
    """Skip when found is None, or fail when the environment variable env is 1."""
    if found is None:
        if os.environ.get(env) == "1":
            pytest.fail(f"{msg} ({env}=1 requires it)")
        pytest.skip(msg)
    return found


@pytest.fixture(scope="module")
def postgres():
    bindir = _require(_pg_bin(), "PostgreSQL is not installed: apt-get install postgresql to run this test",
                      "OPENXET_REQUIRE_PG")
    p = Postgres(bindir)
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def minio(tmp_path_factory):
    binary = _require(_minio_binary(), "MinIO is not installed: run .ci/minio.sh (or set OPENXET_MINIO) "
                      "to run the S3 compat test", "OPENXET_REQUIRE_S3")
    m = Minio(binary, tmp_path_factory.mktemp("minio"))
    try:
        yield m
    finally:
        m.stop()


def test_round_trip_through_s3(minio, openxet_bin, tmp_path):
    """hf_xet uploads through openxet into S3 (a file of several xorbs, one
    of one chunk, an empty one) and a fresh client downloads every byte
    back; nothing lands on the node's disk but the index, and the AWS SDK
    logs nothing."""
    srv = OpenxetServer(openxet_bin, tmp_path / "openxet",
                        ["--bucket", minio.bucket_url(minio.create_bucket())],
                        extra_env=minio.env()).start()
    try:
        files = {"big.bin": 70 * MiB, "small.bin": 1000, "empty.bin": 0}
        paths, sums = [], {}
        for name, size in files.items():
            p = tmp_path / "in" / name
            sums[name] = write_random(p, size, seed=name)
            paths.append(p)
        up = XetClient(srv.url, srv.admin_token, tmp_path / "up").upload_files(paths)
        assert srv.usage("admin") >= 70 * MiB
        out = tmp_path / "out"
        out.mkdir()
        down = XetClient(srv.url, srv.admin_token, tmp_path / "down")
        down.download_files([(out / n, info["hash"], info["file_size"])
                             for n, info in zip(files, up)])
        bad = [f"{n}: {sha256_file(out / n)} != {sums[n]}" for n in files
               if sha256_file(out / n) != sums[n]]
        assert not bad, "\n".join(bad)
        assert not (srv.data_dir / "bucket").exists(), "objects were written to the node's disk"
    finally:
        srv.stop()
    srv.check_stopped_cleanly()
    log = srv.log_path.read_text(errors="replace")
    assert "SDK " not in log, "the AWS SDK logged:\n" + log[-3000:]


def test_round_trip_through_postgres_and_s3(postgres, minio, openxet_bin, tmp_path):
    """The scale-out deployment: two nodes with data directories of their
    own on one PostgreSQL index and one S3 bucket. hf_xet uploads through
    node A; a fresh client downloads every byte back through node B, which
    knows A's credential, file and signing key from what they share."""
    flags = ["--index", postgres.index_url(), "--bucket", minio.bucket_url(minio.create_bucket())]
    a = OpenxetServer(openxet_bin, tmp_path / "a", flags, extra_env=minio.env()).start()
    b = OpenxetServer(openxet_bin, tmp_path / "b", flags, extra_env=minio.env()).start(a.admin_token)
    try:
        files = {"big.bin": 20 * MiB, "small.bin": 1000, "empty.bin": 0}
        paths, sums = [], {}
        for name, size in files.items():
            p = tmp_path / "in" / name
            sums[name] = write_random(p, size, seed="pg-" + name)
            paths.append(p)
        up = XetClient(a.url, a.admin_token, tmp_path / "up").upload_files(paths)
        assert b.usage("admin") >= 20 * MiB
        out = tmp_path / "out"
        out.mkdir()
        XetClient(b.url, a.admin_token, tmp_path / "down").download_files(
            [(out / n, info["hash"], info["file_size"]) for n, info in zip(files, up)])
        bad = [f"{n}: {sha256_file(out / n)} != {sums[n]}" for n in files
               if sha256_file(out / n) != sums[n]]
        assert not bad, "\n".join(bad)
        for srv in (a, b):
            assert not (srv.data_dir / "index.db").exists(), "a node wrote a SQLite index"
            assert not (srv.data_dir / "bucket").exists(), "objects were written to a node's disk"
    finally:
        b.stop()
        a.stop()
    a.check_stopped_cleanly()
    b.check_stopped_cleanly()
