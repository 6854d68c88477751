"""The client matrix: older stock clients still in wide use, each in its own
environment cached under ~/.cache/openxet (compat/test_matrix.py drives them).

Python cells pair an hf_xet with the huggingface_hub of its time, chosen by
the hub's own requirement on hf-xet (PyPI metadata):

    huggingface_hub 0.30.2   hf-xet>=0.1.4, only with the [hf_xet] extra
    huggingface_hub 0.35.3   hf-xet>=1.1.3,<2   (0.36.2 the same)
    huggingface_hub 1.0.1    hf-xet>=1.2.0,<2   (1.5.0 the same)
    huggingface_hub 1.10.2   hf-xet>=1.4.3,<2
    huggingface_hub 1.20.1   hf-xet>=1.5.1,<2
    huggingface_hub 1.33.0   hf-xet>=1.6.0,<2   (2.0.0 to 2.4.0 the same)

A venv per cell lives in ~/.cache/openxet/venvs/<cell>, built from wheels in
~/.cache/openxet/wheels: the first build downloads them (pip download), every
later one installs offline (pip --no-index), and a venv whose marker file
names the same pins is reused as it is. The cell whose pins are those of
compat/requirements.txt runs in the interpreter of the suite itself.

JS cells install one @huggingface/hub version each into
~/.cache/openxet/js/hub-<version> (npm, --prefer-offline: npm's own cache
makes a rebuild offline-fast); compat/js/roundtrip.mjs is copied next to its
node_modules so that its import resolves to that version. The newest is
compat/js itself (package-lock.json).

Usage outside pytest (to warm the caches, e.g. in a CI image):

    .venv/bin/python compat/matrix.py            # every cell
    .venv/bin/python compat/matrix.py 1.1.6      # the cells whose name contains 1.1.6
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

COMPAT_DIR = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("OPENXET_CACHE", Path.home() / ".cache" / "openxet"))
WHEELS = CACHE / "wheels"
VENVS = CACHE / "venvs"
JS_CACHE = CACHE / "js"
INSTALL_TIMEOUT_S = 600.0

@dataclass(frozen=True)
class PyCell:
    name: str
    hf_xet: str  # "" for a hub without hf_xet
    hub: str
    default: bool = False  # run by the default test command too

    def pins(self):
        p = [f"huggingface_hub=={self.hub}"]
        if self.hf_xet:
            p.insert(0, f"hf_xet=={self.hf_xet}")
        return p


@dataclass(frozen=True)
class JSCell:
    version: str
    default: bool = False

    @property
    def name(self):
        return f"js-{self.version}"


PY_CELLS = [
    PyCell("hub0.30.2-no-hf_xet", "", "0.30.2"),
    PyCell("hf_xet1.0.5-hub0.30.2", "1.0.5", "0.30.2", default=True),
    PyCell("hf_xet1.1.5-hub0.35.3", "1.1.5", "0.35.3"),
    PyCell("hf_xet1.1.6-hub0.36.2", "1.1.6", "0.36.2", default=True),
    PyCell("hf_xet1.1.10-hub0.36.2", "1.1.10", "0.36.2"),
    PyCell("hf_xet1.2.0-hub1.0.1", "1.2.0", "1.0.1"),
    PyCell("hf_xet1.3.2-hub1.5.0", "1.3.2", "1.5.0"),
    PyCell("hf_xet1.4.3-hub1.10.2", "1.4.3", "1.10.2"),
    PyCell("hf_xet1.5.2-hub1.20.1", "1.5.2", "1.20.1"),
    PyCell("hf_xet1.6.0-hub1.33.0", "1.6.0", "1.33.0"),
    PyCell("hf_xet1.7.1-hub2.0.0", "1.7.1", "2.0.0"),
    PyCell("hf_xet1.8.0-hub2.4.0", "1.8.0", "2.4.0", default=True),
]

JS_CELLS = [
    JSCell("1.1.2", default=True),
    JSCell("2.0.1"),
    JSCell("2.6.13"),
    JSCell("2.7.2", default=True),
    JSCell("2.15.0"),
    JSCell("2.17.5", default=True),
]


def _pinned_in_requirements():
    pins = {}
    for line in (COMPAT_DIR / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            k, v = line.split("==", 1)
            pins[k.strip().lower().replace("-", "_")] = v.strip()
    return pins


def _run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                       timeout=INSTALL_TIMEOUT_S, **kw)
    return r.returncode, r.stdout + r.stderr


def python_of(cell):
    """The interpreter of a Python cell, its venv built (or reused) first."""
    req = _pinned_in_requirements()
    if cell.hf_xet == req.get("hf_xet") and cell.hub == req.get("huggingface_hub"):
        return Path(sys.executable)
    venv = VENVS / cell.name
    py = venv / "bin" / "python"
    marker = venv / "openxet-cell.json"
    want = {"pins": cell.pins()}
    try:
        if json.loads(marker.read_text()) == want and py.exists():
            return py
    except (OSError, ValueError):
        pass
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", None) or sys.executable
    rc, out = _run([base, "-m", "venv", venv])
    if rc != 0:
        raise RuntimeError(f"venv {venv}: {out}")
    pip = [py, "-m", "pip", "--disable-pip-version-check", "-q"]
    WHEELS.mkdir(parents=True, exist_ok=True)
    rc, out = _run([*pip, "install", "--no-index", "--find-links", WHEELS, *cell.pins()])
    if rc != 0:  # first build: fetch the wheels once, then install offline
        rc, out = _run([*pip, "download", "--dest", WHEELS, *cell.pins()])
        if rc != 0:
            raise RuntimeError(f"pip download {cell.pins()}: {out}")
        rc, out = _run([*pip, "install", "--no-index", "--find-links", WHEELS, *cell.pins()])
        if rc != 0:
            raise RuntimeError(f"pip install {cell.pins()}: {out}")
    marker.write_text(json.dumps(want))
    return py


def js_dir_of(cell):
    """A directory holding roundtrip.mjs and driver.mjs beside a
    node_modules with the cell's @huggingface/hub."""
    pinned = json.loads((COMPAT_DIR / "js" / "package.json").read_text())["dependencies"]["@huggingface/hub"]
    if cell.version == pinned:
        return COMPAT_DIR / "js"
    d = JS_CACHE / f"hub-{cell.version}"
    pj = d / "node_modules" / "@huggingface" / "hub" / "package.json"
    try:
        installed = json.loads(pj.read_text())["version"]
    except (OSError, ValueError, KeyError):
        installed = None
    if installed != cell.version:
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is not on PATH")
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        (d / "package.json").write_text(json.dumps(
            {"name": f"openxet-compat-js-{cell.version}", "private": True, "type": "module",
             "dependencies": {"@huggingface/hub": cell.version}}, indent=1))
        rc, out = _run([npm, "install", "--prefer-offline", "--no-audit", "--no-fund",
                        "--loglevel=error"], cwd=d)
        if rc != 0:
            raise RuntimeError(f"npm install @huggingface/hub@{cell.version}: {out}")
    for f in ("roundtrip.mjs", "driver.mjs"):
        shutil.copyfile(COMPAT_DIR / "js" / f, d / f)
    return d


def main():
    want = sys.argv[1:]
    for cell in PY_CELLS + JS_CELLS:
        if want and not any(w in cell.name for w in want):
            continue
        where = python_of(cell) if isinstance(cell, PyCell) else js_dir_of(cell)
        print(f"{cell.name}: {where}", flush=True)


if __name__ == "__main__":
    main()
