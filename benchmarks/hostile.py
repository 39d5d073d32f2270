"""Faults and hostile input against a real `ragmt serve` process, one scenario a row, as an
independent review ran them (issue 32), so a fix is shown by the figures of a rerun:

    python -m benchmarks.hostile [--model BUNDLE] [--results FILE]

- uploads-without-key: 8 concurrent 45 MB corpus uploads without the admin key; the server's
  RSS before, at its peak while they stream, and after (MiB), and what they were answered.
- stalled-bodies: 2,000 connections send their headers and part of a body, then nothing; how
  many the server answered (408) and closed within RAGMT_BODY_TIMEOUT_S + 5 s.
- stalled-headers: 2,000 connections send part of their headers, then nothing; how many the
  server closed within RAGMT_HEADER_TIMEOUT_S + 5 s.
- long-texts: 3 texts of 100 sentences, and 64 texts of 5 sentences, on an idle server.
- made-up-keys: 10 requests with a fresh made-up key each, rate limit 5 and no keys required.
- nested-json: LibreTranslate's /translate with JSON nested 100,000 deep.
- clients-gone: 30 clients of 8 sentences each hang up 0.3 s after sending; how many texts
  were decoded anyway (the metrics' batch text count) against how many were sent.
- truncated-store: every file of the active store truncated on disk, then 20 requests.
- drain: 40 requests in flight (one text of 8 sentences each), then SIGTERM with
  RAGMT_DRAIN_TIMEOUT_S=5: seconds until the process exits, answers (200) and cut requests,
  and what a new client gets meanwhile.

Each scenario starts its own server (the committed memory model unless `--model`) on a free
loopback port with one store of synthetic UI-string pairs. Clients run in this process, on
the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import free_port, machine, proc_memory_mib, run_fields, write_record
from index_builder.corpus import Pair
from index_builder.store import build_store, set_active

DOMAIN = "ui"
OBJECTS = ["file", "folder", "document", "printer", "window", "account", "password", "page"]
ACTIONS = [
    ("Open the {}.", "Öffnen Sie {}."),
    ("Close the {}.", "Schließen Sie {}."),
    ("Delete the {}.", "Löschen Sie {}."),
    ("The {} could not be saved.", "{} konnte nicht gespeichert werden."),
    ("The {} is not responding.", "{} antwortet nicht."),
]
ARTICLES = {
    "file": "die Datei",
    "folder": "den Ordner",
    "document": "das Dokument",
    "printer": "den Drucker",
    "window": "das Fenster",
    "account": "das Konto",
    "password": "das Passwort",
    "page": "die Seite",
}


def corpus() -> list[Pair]:
    """UI-string pairs made from templates (no corpus ships with the repository)."""
    out = []
    for en, de in ACTIONS:
        for obj in OBJECTS:
            target = de.format(ARTICLES[obj])
            out.append(Pair(en.format(obj), target[0].upper() + target[1:]))
    return out


def sentence(rng: random.Random, short: bool = False) -> str:
    """A source sentence; `short`: at most 17 characters, so 100 fit in one text's limit."""
    if short:
        return f"{rng.choice(['Open', 'Close'])} the {rng.choice(['file', 'page', 'window'])}."
    en, _ = rng.choice(ACTIONS)
    return en.format(rng.choice(OBJECTS))


class Served:
    """`ragmt serve` in its own process with `env` on top of a clean RAGMT_* environment."""

    def __init__(self, model: Path | None, stores: Path, log: Path, **env: str) -> None:
        self.admin_key = secrets.token_hex(16)
        self.port = free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAGMT_")}
        base |= {
            "RAGMT_STORES_DIR": str(stores),
            "RAGMT_ADMIN_KEY": self.admin_key,
            "RAGMT_PORT": str(self.port),
            "RAGMT_CACHE_TTL_S": "0",
            "RAGMT_REQUIRED_DOMAINS": DOMAIN,
        }
        if model is not None:
            base["RAGMT_MODEL_PATH"] = str(model)
        code = "from service.cli import app; app(prog_name='ragmt')"
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, "serve"],
                env=base | env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.url = f"http://127.0.0.1:{self.port}"

    async def ready(self, timeout_s: float = 300) -> None:
        start = time.monotonic()
        async with httpx.AsyncClient(base_url=self.url) as c:
            while time.monotonic() - start < timeout_s:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited:\n{self.log.read_text()[-3000:]}")
                try:
                    if (await c.get("/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError(f"server not ready:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Bench:
    """One store, and a fresh server per scenario."""

    def __init__(self, model: Path | None, work: Path) -> None:
        self.model, self.work = model, work
        self.stores = work / "stores"
        version = build_store(corpus(), DOMAIN, "idf-ngram", self.stores).name
        set_active(self.stores, DOMAIN, version)
        self.version = version

    async def server(self, **env: str) -> Served:
        served = Served(self.model, self.stores, self.work / "server.log", **env)
        await served.ready()
        return served


async def metric(c: httpx.AsyncClient, name: str) -> float:
    """One sample of the Prometheus exposition (0 when absent)."""
    for line in (await c.get("/metrics")).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def stalled(port: int, n: int, first: bytes) -> list[socket.socket]:
    """`n` connections to the server that send `first` and then nothing."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(first)
        s.setblocking(False)
        out.append(s)
    return out


async def until_closed(sock: socket.socket, within_s: float) -> tuple[bytes, bool]:
    """What the server sent on `sock` within `within_s`, and whether it closed it by then."""
    loop = asyncio.get_running_loop()
    got, deadline = b"", time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 4096), 0.5)
        except TimeoutError:
            continue
        except OSError:
            return got, True
        if not data:
            return got, True
        got += data
    return got, False


# --- scenarios ------------------------------------------------------------------------------


async def uploads_without_key(bench: Bench) -> dict[str, Any]:
    served = await bench.server()
    size, chunk = 45_000_000, b"x" * (1 << 20)

    async def body() -> AsyncIterator[bytes]:
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="c.tsv"\r\n\r\n'
        for _ in range(size // len(chunk)):
            yield chunk
        yield b"\r\n--b--\r\n"

    try:
        before = peak = proc_memory_mib(served.proc.pid)["VmRSS"]
        done = False

        async def sample() -> None:
            nonlocal peak
            while not done:
                peak = max(peak, proc_memory_mib(served.proc.pid)["VmRSS"])
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        headers = {"Content-Type": "multipart/form-data; boundary=b"}
        start = time.perf_counter()
        async with httpx.AsyncClient(base_url=served.url, timeout=120) as c:
            answers = await asyncio.gather(
                *(c.post(f"/v1/domains/{DOMAIN}/corpora", content=body(), headers=headers)
                  for _ in range(8)),
                return_exceptions=True,
            )  # fmt: skip
        seconds = time.perf_counter() - start
        done = True
        await sampler
        after = proc_memory_mib(served.proc.pid)["VmRSS"]
    finally:
        served.stop()
    return {
        "statuses": dict(Counter(_status(a) for a in answers)),
        "rss_before_mib": round(before, 1),
        "rss_peak_mib": round(peak, 1),
        "rss_after_mib": round(after, 1),
        "seconds": round(seconds, 2),
    }


def _status(answer: Any) -> str:
    return str(answer.status_code) if isinstance(answer, httpx.Response) else type(answer).__name__


async def stalled_bodies(bench: Bench, connections: int = 2000) -> dict[str, Any]:
    timeout_s = 10.0
    served = await bench.server(RAGMT_BODY_TIMEOUT_S=str(timeout_s))
    head = (
        b"POST /v1/translate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"texts": ['
    )
    socks: list[socket.socket] = []
    try:
        socks += stalled(served.port, connections, head)
        fds_open = len(os.listdir(f"/proc/{served.proc.pid}/fd"))

        ends = await asyncio.gather(*(until_closed(s, timeout_s + 5) for s in socks))
        results = [(got.startswith(b"HTTP/1.1 408"), closed) for got, closed in ends]
        fds_after = len(os.listdir(f"/proc/{served.proc.pid}/fd"))
    finally:
        for s in socks:
            s.close()
        served.stop()
    return {
        "connections": connections,
        "answered_408": sum(a for a, _ in results),
        "closed_by_server": sum(c for _, c in results),
        "server_fds_while_stalled": fds_open,
        "server_fds_after": fds_after,
        "body_timeout_s": timeout_s,
    }


async def stalled_headers(bench: Bench, connections: int = 2000) -> dict[str, Any]:
    """Connections that send part of their headers and then nothing (slowloris)."""
    timeout_s = 10.0
    served = await bench.server(RAGMT_HEADER_TIMEOUT_S=str(timeout_s))
    socks: list[socket.socket] = []
    try:
        socks += stalled(served.port, connections, b"POST /v1/translate HTTP/1.1\r\nHost: t\r\n")

        ends = await asyncio.gather(*(until_closed(s, timeout_s + 5) for s in socks))
        results = [closed for _, closed in ends]
    finally:
        for s in socks:
            s.close()
        served.stop()
    return {
        "connections": connections,
        "closed_by_server": sum(results),
        "header_timeout_s": timeout_s,
    }


async def long_texts(bench: Bench) -> dict[str, Any]:
    served = await bench.server()
    rng = random.Random(3)
    out: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=600) as c:
            for name, texts, per in (("3x100", 3, 100), ("64x5", 64, 5)):
                body = {
                    "texts": [
                        " ".join(sentence(rng, short=True) for _ in range(per))
                        for _ in range(texts)
                    ]
                }
                start = time.perf_counter()
                resp = await c.post("/v1/translate", json=body)
                out[name] = {
                    "status": resp.status_code,
                    "seconds": round(time.perf_counter() - start, 1),
                }
    finally:
        served.stop()
    return out


async def made_up_keys(bench: Bench) -> dict[str, Any]:
    served = await bench.server(RAGMT_RATE_LIMIT="5", RAGMT_RATE_WINDOW_S="60")
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as c:
            codes = [
                (await c.post("/v1/translate", json={"texts": ["Open the file."]},
                              headers={"X-API-Key": secrets.token_hex(8)})).status_code
                for _ in range(10)
            ]  # fmt: skip
    finally:
        served.stop()
    return {"statuses": dict(Counter(map(str, codes)))}


async def nested_json(bench: Bench) -> dict[str, Any]:
    served = await bench.server()
    deep = b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b', "source": "en", "target": "de"}'
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as c:
            resp = await c.post(
                "/translate", content=deep, headers={"Content-Type": "application/json"}
            )
    finally:
        served.stop()
    return {"status": resp.status_code, "code": resp.json().get("code")}


async def clients_gone(bench: Bench, clients: int = 30) -> dict[str, Any]:
    served = await bench.server(RAGMT_BEAM_SIZE="4")
    rng = random.Random(5)
    texts = [[sentence(rng) + f" {i}" for _ in range(8)] for i in range(clients)]
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=600) as c:
            tasks = [asyncio.create_task(c.post("/v1/translate", json={"texts": t})) for t in texts]
            await asyncio.sleep(0.3)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            deadline = time.monotonic() + 300
            while await metric(c, "ragmt_queue_depth") > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)  # the batch in progress finishes
            decoded = await metric(c, "ragmt_batch_texts_sum")
            gone = await metric(c, 'ragmt_rejections_total{reason="client_gone"}')
    finally:
        served.stop()
    return {
        "texts_sent": clients * 8,
        "texts_decoded": int(decoded),
        "requests_cancelled": int(gone),
    }


async def truncated_store(bench: Bench) -> dict[str, Any]:
    served = await bench.server()
    statuses: Counter[str] = Counter()
    version_dir = bench.stores / DOMAIN / bench.version
    saved = {p: p.read_bytes() for p in version_dir.iterdir() if p.is_file()}
    try:
        for p in saved:
            with p.open("r+b") as f:
                f.truncate(0)
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as c:
            for i in range(20):
                body = {"texts": [f"Open the page {i}."], "domain": DOMAIN}
                try:
                    statuses[str((await c.post("/v1/translate", json=body)).status_code)] += 1
                except httpx.TransportError as e:
                    statuses[type(e).__name__] += 1
        alive = served.proc.poll() is None
    finally:
        for p, data in saved.items():
            p.write_bytes(data)
        served.stop()
    return {"statuses": dict(statuses), "server_alive": alive}


async def drain(bench: Bench, clients: int = 40) -> dict[str, Any]:
    timeout_s = 5.0
    served = await bench.server(RAGMT_DRAIN_TIMEOUT_S=str(timeout_s), RAGMT_BEAM_SIZE="4")
    rng = random.Random(7)
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=120) as c:
            # One text of 8 sentences each: all fit the queue, and decoding them all takes
            # longer than the drain timeout.
            bodies = [
                {"texts": [" ".join(sentence(rng) for _ in range(8)) + f" {i}"]}
                for i in range(clients)
            ]
            tasks = [asyncio.create_task(c.post("/v1/translate", json=b)) for b in bodies]
            await asyncio.sleep(1.0)
            start = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            async with httpx.AsyncClient(base_url=served.url, timeout=10) as fresh:
                try:
                    newcomer = str((await fresh.post("/v1/translate", json=bodies[0])).status_code)
                except httpx.TransportError as e:
                    newcomer = type(e).__name__
            answers = await asyncio.gather(*tasks, return_exceptions=True)
            while served.proc.poll() is None and time.monotonic() - start < 120:
                await asyncio.sleep(0.05)
            exited_after = time.monotonic() - start
    finally:
        served.stop()
    return {
        "in_flight": clients,
        "answers": dict(Counter(_status(a) for a in answers)),
        "new_client_during_drain": newcomer,
        "exit_after_s": round(exited_after, 2),
        "drain_timeout_s": timeout_s,
    }


def outcome(name: str, row: dict[str, Any]) -> str:
    """A scenario's figures in one line, for the report's table."""
    if name == "uploads-without-key":
        return (
            f"{row['statuses']}; RSS {row['rss_before_mib']:.0f} -> peak "
            f"{row['rss_peak_mib']:.0f} -> {row['rss_after_mib']:.0f} MiB"
        )
    if name == "stalled-bodies":
        return (
            f"{row['answered_408']} of {row['connections']} answered 408, "
            f"{row['closed_by_server']} closed by the server within {row['body_timeout_s'] + 5:g} s"
        )
    if name == "stalled-headers":
        return (
            f"{row['closed_by_server']} of {row['connections']} closed by the server within "
            f"{row['header_timeout_s'] + 5:g} s"
        )
    if name == "long-texts":
        return "; ".join(f"{k}: {v['status']} in {v['seconds']} s" for k, v in row.items())
    if name == "clients-gone":
        return (
            f"{row['texts_decoded']} of {row['texts_sent']} texts decoded, "
            f"{row['requests_cancelled']} requests cancelled"
        )
    if name == "truncated-store":
        return f"{row['statuses']}; server alive: {row['server_alive']}"
    if name == "drain":
        return (
            f"{row['answers']} of {row['in_flight']} in flight; a new client: "
            f"{row['new_client_during_drain']}; exit after {row['exit_after_s']} s "
            f"(limit {row['drain_timeout_s']:g} s)"
        )
    return str({k: v for k, v in row.items()})


SCENARIOS = {
    "uploads-without-key": uploads_without_key,
    "stalled-bodies": stalled_bodies,
    "stalled-headers": stalled_headers,
    "long-texts": long_texts,
    "made-up-keys": made_up_keys,
    "nested-json": nested_json,
    "clients-gone": clients_gone,
    "truncated-store": truncated_store,
    "drain": drain,
}


async def main_async(args: argparse.Namespace) -> None:
    base = run_fields("service-hostile")
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="ragmt-hostile-") as tmp:
        bench = Bench(args.model, Path(tmp))
        for name in args.only or list(SCENARIOS):
            start = time.perf_counter()
            row = await SCENARIOS[name](bench)
            row["outcome"] = outcome(name, row)
            print(f"{name:20s} {row['outcome']}  ({time.perf_counter() - start:.0f} s)", flush=True)
            write_record(args.results, base, scenario=name, label=args.label, **row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="bundle served (default: the committed one)")
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--results", type=Path, help="append one record per scenario")
    parser.add_argument("--label", default="", help="recorded with each row, e.g. before/after")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
