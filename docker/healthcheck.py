"""Docker HEALTHCHECK of the API containers: exit 0 if GET /livez answers 200, else 1.

Reads RAGMT_PORT (default 8000) the way the service does and asks 127.0.0.1; stdlib only, so
a check every few seconds costs a Python start, not an import of torch.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    port = os.environ.get("RAGMT_PORT") or "8000"
    url = f"http://127.0.0.1:{port}/livez"
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            status = response.status
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"{url}: {e}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"{url}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
