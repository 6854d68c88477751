"""Run one hf_xet operation and print its result as JSON.

The compat tests run every client scenario in a fresh interpreter because
hf_xet reads its configuration (HF_XET_*) once per process and keeps caches
and connection pools for the life of the process.

Usage: python xet_driver.py '<json>'   (or the JSON on stdin when no argument)

The JSON object has "op" plus the op's arguments; "endpoint" and "token" are
common to all ops. Output, one JSON object on stdout:
    {"ok": true, "result": ...}
    {"ok": false, "error_type": "<exception class>", "error": "<message>"}
A crash (exit code != 0 without that object) is a failure of the driver.
"""

import json
import sys
import warnings

# The legacy functions raise DeprecationWarning on every call since 1.5.
warnings.simplefilter("ignore", DeprecationWarning)

import hf_xet  # noqa: E402

FAR_FUTURE = 4102444800  # 2100-01-01


def _token_info(args):
    tok = args.get("token")
    return None if tok is None else (tok, FAR_FUTURE)


def _upload_info(u):
    # hf_xet 1.0.x returns a PyPointerFile (path, hash, filesize; no SHA-256).
    size = u.file_size if hasattr(u, "file_size") else u.filesize
    return {"hash": u.hash, "file_size": size, "sha256": getattr(u, "sha256", None)}


def op_upload_files(args):
    res = hf_xet.upload_files(
        args["paths"], args["endpoint"], _token_info(args), None, None, None
    )
    return [_upload_info(u) for u in res]


def op_upload_bytes(args):
    blobs = [bytes.fromhex(h) for h in args["contents_hex"]]
    res = hf_xet.upload_bytes(blobs, args["endpoint"], _token_info(args), None, None, None)
    return [_upload_info(u) for u in res]


def op_download_files(args):
    # hf_xet 1.0.x takes PyPointerFile(path, hash, filesize) instead.
    info = getattr(hf_xet, "PyXetDownloadInfo", None) or hf_xet.PyPointerFile
    infos = [info(f["dest"], f["hash"], f.get("file_size")) for f in args["files"]]
    return hf_xet.download_files(infos, args["endpoint"], _token_info(args), None, None)


def _session_kwargs(args):
    kw = {"endpoint": args["endpoint"]}
    if args.get("token") is not None:
        kw["token"] = args["token"]
        kw["token_expiry_unix_secs"] = FAR_FUTURE
    return kw


def op_session_upload(args):
    session = hf_xet.XetSession()
    handles = []
    with session.new_upload_commit(**_session_kwargs(args)) as commit:
        for p in args["paths"]:
            handles.append(commit.start_upload_file(p))
        for b in args.get("contents_hex", []):
            handles.append(commit.start_upload_bytes(bytes.fromhex(b)))
    out = []
    for h in handles:
        info = h.result().xet_info
        out.append({"hash": info.hash, "file_size": info.file_size, "sha256": info.sha256})
    return out


def op_session_download(args):
    session = hf_xet.XetSession()
    handles = []
    with session.new_file_download_group(**_session_kwargs(args)) as group:
        for f in args["files"]:
            fi = hf_xet.XetFileInfo(f["hash"], file_size=f.get("file_size"))
            handles.append(group.start_download_file(fi, f["dest"]))
    out = []
    for h in handles:
        r = h.result()
        out.append({"path": str(r.path), "hash": r.file_info.hash, "file_size": r.file_info.file_size})
    return out


OPS = {
    "upload_files": op_upload_files,
    "upload_bytes": op_upload_bytes,
    "download_files": op_download_files,
    "session_upload": op_session_upload,
    "session_download": op_session_download,
}


def main():
    raw = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read()
    args = json.loads(raw)
    fn = OPS[args["op"]]
    try:
        out = {"ok": True, "result": fn(args)}
    except Exception as e:  # report every client failure to the test
        out = {"ok": False, "error_type": type(e).__name__, "error": str(e)}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
