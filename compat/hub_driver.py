"""Call one huggingface_hub HfApi method and print its result as JSON.

Run in a fresh interpreter (conftest.HubClient.api) so that HF_ENDPOINT,
HF_TOKEN and HF_HOME, which huggingface_hub reads at import, are the test's.

Input (argv[1] or stdin): {"method": "<HfApi method>", "kwargs": {...}}
Output, one JSON object on stdout:
    {"ok": true, "result": <the return value, made JSON-able>}
    {"ok": false, "error_type": "<exception class>", "error": "<message>",
     "status": <HTTP status or null>, "headers": {...}}
"""

import dataclasses
import json
import sys
import warnings

warnings.simplefilter("ignore")

from huggingface_hub import HfApi  # noqa: E402


def _plain(v, depth=0):
    """The value as JSON-able data (dataclasses become dicts)."""
    if depth > 6:
        return str(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name, None), depth + 1) for f in dataclasses.fields(v)}
    if isinstance(v, dict):
        return {str(k): _plain(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)) or (hasattr(v, "__iter__") and hasattr(v, "__next__")):
        return [_plain(x, depth + 1) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def main():
    raw = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read()
    args = json.loads(raw)
    api = HfApi()
    try:
        res = getattr(api, args["method"])(**args.get("kwargs", {}))
        out = {"ok": True, "result": _plain(res)}
    except Exception as e:  # every client failure goes back to the test
        resp = getattr(e, "response", None)
        out = {
            "ok": False,
            "error_type": type(e).__name__,
            "error": str(e),
            "status": getattr(resp, "status_code", None),
            "headers": dict(resp.headers) if resp is not None else {},
        }
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
