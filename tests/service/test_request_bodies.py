"""Request bodies over real loopback (uvicorn in this process): an upload without the admin
key is refused before its body is read, an upload with it streams to disk instead of memory,
a stalled body gets 408 and its connection closed, and a client that goes away takes its
queued texts with it."""

from __future__ import annotations

import asyncio
import socket
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from service.settings import Settings
from tests.service.conftest import serving

pytestmark = [pytest.mark.system, pytest.mark.anyio]

UPLOAD = "/v1/domains/toy/corpora"


def settings(bundle: Path, tmp_path: Path, **extra) -> Settings:
    base = dict(model_path=bundle, stores_dir=tmp_path / "stores", admin_key="adm", beam_size=1)
    return Settings(**(base | extra))


async def raw_request(base: str, head: str, body: bytes = b"") -> socket.socket:
    """A connection that sent `head` and part of a body, and then nothing more."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(head.encode() + b"\r\n\r\n" + body)
    sock.setblocking(False)
    return sock


async def answer(sock: socket.socket, within_s: float) -> tuple[bytes, bool]:
    """What the server sent within `within_s`, and whether it then closed the connection."""
    loop = asyncio.get_running_loop()
    got, deadline = b"", time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            chunk = await asyncio.wait_for(loop.sock_recv(sock, 65536), 0.1)
        except TimeoutError:
            continue
        if not chunk:
            return got, True
        got += chunk
    return got, False


async def test_upload_without_the_admin_key_is_refused_before_its_body(
    bundle: Path, tmp_path: Path
) -> None:
    app = create_app(settings(bundle, tmp_path))
    async with serving(app) as base:
        head = (
            f"POST {UPLOAD} HTTP/1.1\r\nHost: t\r\nContent-Length: 45000000\r\n"
            "Content-Type: multipart/form-data; boundary=b"
        )
        for headers, status in (("", b"401"), ("\r\nX-Admin-Key: wrong", b"403")):
            sock = await raw_request(base, head + headers, b"--b\r\n")
            try:
                got, _ = await answer(sock, 2.0)  # 45 MB never sent: the answer comes anyway
            finally:
                sock.close()
            assert got.startswith(b"HTTP/1.1 " + status), got[:200]


async def test_an_upload_streams_through_instead_of_being_held_in_memory(
    bundle: Path, tmp_path: Path
) -> None:
    # No worker: the route answers 503 after the form is parsed, which is all this measures.
    app = create_app(settings(bundle, tmp_path, run_worker=False))
    size = 24 * 1024 * 1024
    line = b"red house\trot haus\n" * 3000

    async def corpus() -> AsyncIterator[bytes]:
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="c.tsv"\r\n\r\n'
        for _ in range(size // len(line)):
            yield line
        yield b"\r\n--b--\r\n"

    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=60) as c:
        tracemalloc.start()
        try:
            resp = await c.post(
                UPLOAD,
                content=corpus(),
                headers={"X-Admin-Key": "adm", "Content-Type": "multipart/form-data; boundary=b"},
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert resp.status_code == 503 and "worker" in resp.text, resp.text
    assert peak < size / 3, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.0f} MiB upload"


async def test_a_stalled_body_gets_408_and_its_connection_closed(
    bundle: Path, tmp_path: Path
) -> None:
    app = create_app(settings(bundle, tmp_path, body_timeout_s=0.5))
    async with serving(app) as base:
        heads = [
            "POST /v1/translate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            "Content-Length: 100",
            f"POST {UPLOAD} HTTP/1.1\r\nHost: t\r\nX-Admin-Key: adm\r\nContent-Length: 5000\r\n"
            "Content-Type: multipart/form-data; boundary=b",
        ]
        starts = [
            b'{"texts": [',
            b'--b\r\nContent-Disposition: form-data; name="file"; filename="c.tsv"\r\n\r\nred',
        ]
        socks = [await raw_request(base, heads[i % 2], starts[i % 2]) for i in range(20)]
        try:
            answers = await asyncio.gather(*(answer(s, 3.0) for s in socks))
        finally:
            for s in socks:
                s.close()
    for got, closed in answers:
        assert got.startswith(b"HTTP/1.1 408"), got[:200]
        assert b"request_timeout" in got and closed


async def test_a_client_that_goes_away_is_not_decoded(bundle: Path, tmp_path: Path) -> None:
    app = create_app(settings(bundle, tmp_path, cache_ttl_s=0, batch_wait_ms=0))
    engine = app.state.engine
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        engine._decode_lock.acquire()  # the first request decodes, and stays there
        try:
            first = asyncio.create_task(c.post("/v1/translate", json={"texts": ["red"]}))
            while not engine._decode_lock.locked() or engine.queued:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            gone = [
                asyncio.create_task(c.post("/v1/translate", json={"texts": [w, w]}))
                for w in ("one", "two", "three", "four")
            ]
            while engine.queued < 8:
                await asyncio.sleep(0.01)
            for task in gone:  # the clients hang up while their texts wait
                task.cancel()
            await asyncio.gather(*gone, return_exceptions=True)
            deadline = time.monotonic() + 5
            while engine.queued and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
                metrics = (await c.get("/metrics")).text
                if 'ragmt_rejections_total{reason="client_gone"} 4.0' in metrics:
                    break
        finally:
            engine._decode_lock.release()
        assert (await first).status_code == 200
        after = (await c.post("/v1/translate", json={"texts": ["blue"]})).json()
        assert after["results"][0]["translation"] == "blau"
        metrics = (await c.get("/metrics")).text
    assert 'ragmt_rejections_total{reason="client_gone"} 4.0' in metrics
    # Decoded: "red" and "blue" alone, none of the eight texts whose clients left.
    assert "ragmt_batch_texts_sum 2.0" in metrics


async def test_headers_that_trickle_are_cut_at_the_deadline(bundle: Path, tmp_path: Path) -> None:
    app = create_app(settings(bundle, tmp_path, header_timeout_s=1.0))
    async with serving(app) as base:
        loop = asyncio.get_running_loop()
        port = int(base.rsplit(":", 1)[1])
        trickling, silent = (socket.create_connection(("127.0.0.1", port)) for _ in range(2))
        trickling.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        silent.sendall(b"GET /livez HTTP/1.1\r\nHost: t\r\n")  # and never the blank line
        for s in (trickling, silent):
            s.setblocking(False)
        start = time.monotonic()
        closed_after = None
        for _ in range(40):  # a header byte every 0.1 s keeps the connection busy, not done
            try:
                await loop.sock_sendall(trickling, b"x")
            except OSError:
                closed_after = time.monotonic() - start
                break
            await asyncio.sleep(0.1)
        got, closed = await answer(silent, 1.0)
        trickling.close()
        silent.close()
        # A complete request on a new connection is unaffected.
        async with httpx.AsyncClient(base_url=base) as c:
            assert (await c.get("/livez")).status_code == 200
    assert closed_after is not None and closed_after < 2.5, closed_after
    assert closed and got == b""
