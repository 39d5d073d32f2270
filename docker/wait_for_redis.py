"""Wait until the Redis at RAGMT_REDIS_URL answers PING (the container entrypoint runs this).

Gives up after WAIT_FOR_REDIS_S seconds (default 60) with exit status 1 and the last error;
a refused password or a malformed URL fails at once, since waiting cannot fix it. The URL's
password never appears in messages. Standalone on purpose: it must not import the project
(importing `service` loads torch, seconds per container start).
"""

from __future__ import annotations

import os
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import redis

RETRY_S = 0.5


def redact(url: str) -> str:
    """The URL without its password (`redis://user:***@host:6379/0`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def wait(url: str, timeout_s: float) -> str | None:
    """None once Redis answers; else why not (after `timeout_s`, or at once if hopeless)."""
    deadline = time.monotonic() + timeout_s
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    except ValueError as e:
        return f"invalid RAGMT_REDIS_URL: {e}"
    last: Exception | None = None
    try:
        while True:
            try:
                client.ping()
                return None
            except redis.AuthenticationError as e:  # a wrong or missing password: hopeless
                return f"refused: {e}"
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                last = e  # not up yet (BusyLoadingError, still loading its data, is one too)
            except redis.RedisError as e:  # PING refused (ACL...): waiting will not fix it
                return f"refused: {e}"
            left = deadline - time.monotonic()
            if left <= 0:
                return f"no answer within {timeout_s:g} s ({last})"
            time.sleep(min(RETRY_S, left))
    finally:
        client.close()


def main() -> int:
    url = os.environ.get("RAGMT_REDIS_URL", "")
    raw = os.environ.get("WAIT_FOR_REDIS_S", "60")
    try:
        timeout_s = float(raw)
    except ValueError:
        print(f"entrypoint: WAIT_FOR_REDIS_S must be seconds, got {raw!r}", file=sys.stderr)
        return 2
    shown = redact(url)
    problem = wait(url, timeout_s)
    if problem is not None:
        print(f"entrypoint: Redis at {shown}: {problem}", file=sys.stderr)
        return 1
    print(f"entrypoint: Redis at {shown} is up", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
