"""Redis for the tests: a private redis-server on a free loopback port, or a running one.

A private server (no persistence) can be stopped and started again mid-test, and a suite run
never touches a Redis that other programs share. Without the binary, a Redis answering on
127.0.0.1:6379 is used instead, each test keeping to its own key prefix.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

SHARED_PORT = 6379
MISSING = "needs redis-server (Debian package redis-server) or a Redis on 127.0.0.1:6379"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def url_of(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def has_redis_server() -> bool:
    return shutil.which("redis-server") is not None


def answers(port: int, timeout: float = 1.0) -> bool:
    """Whether a Redis on 127.0.0.1:`port` answers PING (not merely accepts connections)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A throwaway redis-server, stoppable and restartable; without `data_dir` it keeps
    nothing, with one it persists every write (append-only file, fsync always) across a stop
    and start, as a deployed Redis does."""

    def __init__(self, port: int, data_dir: Path | None = None) -> None:
        self.port = port
        self.data_dir = data_dir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return url_of(self.port)

    def start(self) -> None:
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        if self.data_dir is None:
            cmd += ["--save", "", "--appendonly", "no"]
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            cmd += ["--dir", str(self.data_dir), "--save", "", "--appendonly", "yes"]
            cmd += ["--appendfsync", "always"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            if answers(self.port, timeout=0.2):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
