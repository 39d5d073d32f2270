"""The translation service over real loopback, side by side in one run: requests/s and
latency p50/p95 at concurrency 1, 8 and 32, without and with retrieval (no domain vs the
`software-docs` store), cache miss and hit; activation time of a ~33k-pair store (idf-ngram
and idf-sentence); resident memory of the server before and after 100 activations:

    python -m benchmarks.service --model models/baseline_bundle --data /root/ragmt/data/en-de

The server is `ragmt serve` in its own process (uvicorn, one worker, in-process shared state,
the default settings: beam 4, batches of up to 32 texts, translation cache on), configured
by RAGMT_* variables only; clients are httpx async clients in this process, one sentence per
request. Both store versions hold software-docs train+dev+test (33,016 pairs), so each query
(a test sentence) is also in the store, as in a translation memory. Miss cells send sentences
this domain has not seen; hit cells repeat sentences of the miss cells. Everything runs on
the same machine: the clients take CPU from the server. `--results FILE` appends one record
per measured row (`models.results`): "service-benchmark" per cell, "service-activation" per
store version, "service-memory" per memory sample.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import (
    free_port,
    machine,
    pct,
    proc_memory_mib,
    run_fields,
    write_record,
)
from index_builder.readers import read_moses
from index_builder.store import build_store, set_active

DOMAIN = "software-docs"
CONCURRENCY = (1, 8, 32)


@dataclass(frozen=True)
class Plan:
    """How many requests each measurement gets (miss cells need unseen sentences)."""

    miss: dict[int, int]  # concurrency -> requests
    hit: int  # requests per hit cell
    warmup: int
    activations: int


FULL = Plan(miss={1: 100, 8: 200, 32: 384}, hit=400, warmup=32, activations=100)
QUICK = Plan(miss={1: 3, 8: 8, 32: 32}, hit=32, warmup=2, activations=10)


@dataclass
class Cell:
    latencies_ms: list[float] = field(default_factory=list)
    retrieval_ms: list[float] = field(default_factory=list)  # server-reported
    unexpected: int = 0  # a miss that hit the cache, a hit that missed, another version
    seconds: float = 0.0
    batches: float = 0.0  # decoding batches the server ran during the cell (its metrics)
    batched_texts: float = 0.0

    @property
    def rps(self) -> float:
        return len(self.latencies_ms) / self.seconds


# --- the server process ---------------------------------------------------------------------


class Server:
    """`ragmt serve` in a subprocess on a free loopback port; its log goes to a file."""

    def __init__(self, model: Path, stores: Path, log: Path) -> None:
        self.admin_key = secrets.token_hex(16)
        self.port = free_port()
        env = {
            **os.environ,
            "RAGMT_STORES_DIR": str(stores),
            "RAGMT_ADMIN_KEY": self.admin_key,
            "RAGMT_REQUIRED_DOMAINS": DOMAIN,
            "RAGMT_CACHE_TTL_S": "3600",
        }
        for name in ("RAGMT_REDIS_URL", "RAGMT_API_KEYS", "RAGMT_RATE_LIMIT"):
            env.pop(name, None)
        code = "from service.cli import app; app(prog_name='ragmt')"
        cmd = [sys.executable, "-c", code, "serve", "--port", str(self.port), "--model", str(model)]
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

    async def ready(self, client: httpx.AsyncClient, timeout_s: float = 600) -> float:
        """Wait for /readyz 200; returns the seconds it took."""
        start = time.perf_counter()
        while time.perf_counter() - start < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited:\n{self.log.read_text()[-3000:]}")
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return time.perf_counter() - start
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError(f"server not ready in {timeout_s} s:\n{self.log.read_text()[-3000:]}")

    def memory(self) -> dict[str, float]:
        return proc_memory_mib(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- measurements ---------------------------------------------------------------------------


async def _cell(
    client: httpx.AsyncClient,
    texts: list[str],
    concurrency: int,
    langs: tuple[str, str],
    domain: str | None,
    expect: tuple[int, str | None],
) -> Cell:
    """Send `texts` (one per request) from `concurrency` clients in a closed loop."""
    cell, todo = Cell(), iter(texts)
    want_hits, want_version = expect

    async def one_client() -> None:
        for text in todo:  # shared iterator: each text is sent once
            body: dict[str, Any] = {
                "texts": [text],
                "source_lang": langs[0],
                "target_lang": langs[1],
            }
            if domain is not None:
                body["domain"] = domain
            t0 = time.perf_counter()
            resp = await client.post("/v1/translate", json=body)
            cell.latencies_ms.append((time.perf_counter() - t0) * 1000)
            if resp.status_code != 200:
                raise RuntimeError(f"{resp.status_code}: {resp.text[:500]}")
            out = resp.json()
            cell.retrieval_ms.append(out["timings"]["retrieval_ms"])
            got = (out["timings"]["cache_hits"], out["results"][0]["store_version"])
            cell.unexpected += got != (want_hits, want_version)

    batches, batched = await _batch_totals(client)
    start = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(concurrency)))
    cell.seconds = time.perf_counter() - start
    after = await _batch_totals(client)
    cell.batches, cell.batched_texts = after[0] - batches, after[1] - batched
    return cell


async def _batch_totals(client: httpx.AsyncClient) -> tuple[float, float]:
    """(decoding batches, texts in them) so far, from the server's /metrics."""
    values = {}
    for line in (await client.get("/metrics")).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("ragmt_batch_texts_count", "ragmt_batch_texts_sum"):
            values[name] = float(value)
    return values.get("ragmt_batch_texts_count", 0.0), values.get("ragmt_batch_texts_sum", 0.0)


async def _activate(client: httpx.AsyncClient, key: str, version: str) -> tuple[float, float]:
    """(client wall seconds, server-measured load+verify+swap seconds) of one activation."""
    t0 = time.perf_counter()
    resp = await client.post(
        f"/v1/domains/{DOMAIN}/activate", json={"version": version}, headers={"X-Admin-Key": key}
    )
    wall = time.perf_counter() - t0
    if resp.status_code != 200:
        raise RuntimeError(f"activation {version}: {resp.status_code} {resp.text[:500]}")
    attempt = resp.json()["last_attempt"]
    if attempt is None or attempt["version"] != version or not attempt["ok"]:
        raise RuntimeError(f"activation {version}: unexpected {attempt}")
    return wall, attempt["seconds"]


def _test_sentences(data: Path) -> list[str]:
    """Distinct, non-empty software-docs test sentences in a fixed random order."""
    lines = (data / DOMAIN / "test.en").read_text(encoding="utf-8").splitlines()
    texts = list(dict.fromkeys(s.strip() for s in lines if s.strip()))
    random.Random(0).shuffle(texts)
    return texts


def _load() -> str:
    """The machine's load (other work running alongside skews every number here)."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


async def run(args: argparse.Namespace, plan: Plan, work: Path) -> None:
    base = run_fields("service-benchmark")
    base["settings"] = {
        "model": str(args.model), "domain": DOMAIN, "miss_requests": plan.miss,
        "hit_requests": plan.hit, "warmup": plan.warmup, "activations": plan.activations,
    }  # fmt: skip
    stores = work / "stores"
    d = args.data / DOMAIN
    pairs = []
    for split in ("train", "dev", "test"):
        pairs += read_moses(d / f"{split}.en", d / f"{split}.de")
    built = {}
    for method in ("idf-ngram", "idf-sentence"):
        t0 = time.perf_counter()
        path = build_store(pairs, DOMAIN, method, stores)
        built[method] = (path.name, time.perf_counter() - t0)
        time.sleep(0.002)  # version ids sort by build time (ms)
    version_a, version_b = built["idf-ngram"][0], built["idf-sentence"][0]
    set_active(stores, DOMAIN, version_a)
    texts = _test_sentences(args.data)
    need = plan.warmup + sum(plan.miss.values())
    if len(texts) < need:
        raise SystemExit(f"{DOMAIN} test.en has {len(texts)} distinct sentences; need {need}")

    print(f"command: python -m benchmarks.service {' '.join(sys.argv[1:])}")
    print(f"machine: {machine()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {_load()}")
    for method, (version, seconds) in built.items():
        print(f"store {DOMAIN}/{version}: {method}, {len(pairs)} pairs, built in {seconds:.1f} s")

    server = Server(args.model, stores, work / "server.log")
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=600, limits=limits) as client:
            ready_s = await server.ready(client)
            info = (await client.get("/info")).json()
            model = next(m for m in info["models"] if m["default"])
            langs = (model["languages"]["source"], model["languages"]["target"])
            mem_start = server.memory()
            print(
                f"model: {args.model} ({model['architecture']}, {model['parameters']} parameters, "
                f"uses retrieved pairs: {model['uses_memory']}); beam {info['limits']['beam_size']}"
            )
            print(
                f"server: ragmt serve, pid {server.proc.pid}, ready in {ready_s:.1f} s, "
                f"RSS {mem_start['VmRSS']:.0f} MiB; torch threads from OMP_NUM_THREADS="
                f"{os.environ.get('OMP_NUM_THREADS', 'unset')}"
            )
            print(
                f"requests: one {DOMAIN} test sentence each (distinct, shuffled with seed 0); "
                f"miss cells {plan.miss[1]}/{plan.miss[8]}/{plan.miss[32]} requests at "
                f"concurrency 1/8/32, hit cells {plan.hit}; {plan.warmup} warm-up requests "
                "per retrieval setting, not counted; with and without retrieval run back to "
                "back on the same sentences"
            )
            cells: dict[tuple[str, str, int], Cell] = {}
            settings = [("none", None, None), ("idf-ngram", DOMAIN, version_a)]
            warm, rest = texts[: plan.warmup], texts[plan.warmup :]
            for _, domain, version in settings:  # up to a full batch: buffers grown first
                await _cell(client, warm, len(warm), langs, domain, (0, version))
            # The cells compared side by side run one after the other (first one, then the
            # other setting), on the same sentences, so drift on the machine hits both alike.
            seen: list[str] = []
            for i, c in enumerate(CONCURRENCY):
                batch, rest = rest[: plan.miss[c]], rest[plan.miss[c] :]
                for name, domain, version in settings[:: 1 if i % 2 == 0 else -1]:
                    cells[name, "miss", c] = await _cell(
                        client, batch, c, langs, domain, (0, version)
                    )
                seen += batch
            for i, c in enumerate(CONCURRENCY):
                repeat = [seen[j % len(seen)] for j in range(plan.hit)]
                for name, domain, version in settings[:: 1 if i % 2 == 0 else -1]:
                    cells[name, "hit", c] = await _cell(
                        client, repeat, c, langs, domain, (1, version)
                    )
            mem_traffic = server.memory()
            _print_cells(cells)
            for name, cache, c in _CELL_ORDER:
                write_record(args.results, base, **_cell_record(cells, name, cache, c))
            rec = (args.results, base)
            await _activations(client, server, plan, built, version_a, version_b, mem_start, rec)
            # The domain still serves, from the version the alternation ended on.
            check = await _cell(client, texts[:1], 1, langs, DOMAIN, (1, version_a))
            print(f"\nafter the activations: translation with domain ok ({check.unexpected} "
                  f"unexpected); RSS after traffic was {mem_traffic['VmRSS']:.0f} MiB")  # fmt: skip
            print(f"finished {time.strftime('%H:%M UTC', time.gmtime())}; {_load()}")
    finally:
        server.stop()


_CELL_ORDER = [
    (n, cache, c) for n in ("none", "idf-ngram") for cache in ("miss", "hit") for c in CONCURRENCY
]


def _cell_record(
    cells: dict[tuple[str, str, int], Cell], name: str, cache: str, c: int
) -> dict[str, Any]:
    """One cell's measured values, with the ratios the printed table shows."""
    cell = cells[name, cache, c]
    lat = cell.latencies_ms

    def ratio(other: Cell) -> float | None:
        return cell.rps / other.rps if other.rps else None

    return {
        "retrieval": None if name == "none" else f"{DOMAIN} {name}",
        "cache": cache,
        "concurrency": c,
        "requests": len(lat),
        "requests_per_second": cell.rps,
        "p50_ms": pct(lat, 50),
        "p95_ms": pct(lat, 95),
        "retrieval_p50_ms": pct(cell.retrieval_ms, 50),
        "texts_per_batch": cell.batched_texts / cell.batches if cell.batches else None,
        "rps_vs_no_retrieval": ratio(cells["none", cache, c]) if name != "none" else None,
        "rps_vs_miss": ratio(cells[name, "miss", c]) if cache == "hit" else None,
        "rps_vs_concurrency_1": ratio(cells[name, cache, 1]) if c != 1 else None,
        "unexpected": cell.unexpected,
    }


def _print_cells(cells: dict[tuple[str, str, int], Cell]) -> None:
    print(
        "\n| retrieval | cache | conc. | requests | req/s | p50 ms | p95 ms | retrieval ms p50 "
        "| texts/batch "
        "| req/s vs no retrieval | req/s vs miss | req/s vs conc. 1 | unexpected |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, cache, c in _CELL_ORDER:
        cell = cells[name, cache, c]
        lat = cell.latencies_ms
        print(
            f"| {'none (no domain)' if name == 'none' else f'{DOMAIN} {name}'} | {cache} | {c} "
            f"| {len(lat)} | {cell.rps:.2f} | {pct(lat, 50):.0f} | {pct(lat, 95):.0f} "
            f"| {pct(cell.retrieval_ms, 50):.1f} "
            f"| {f'{cell.batched_texts / cell.batches:.1f}' if cell.batches else '-'} "
            f"| {_ratio(cell.rps, cells['none', cache, c].rps) if name != 'none' else '-'} "
            f"| {_ratio(cell.rps, cells[name, 'miss', c].rps) if cache == 'hit' else '-'} "
            f"| {_ratio(cell.rps, cells[name, cache, 1].rps) if c != 1 else '-'} "
            f"| {cell.unexpected} |",
            flush=True,
        )


async def _activations(
    client: httpx.AsyncClient,
    server: Server,
    plan: Plan,
    built: dict[str, tuple[str, float]],
    version_a: str,
    version_b: str,
    mem_start: dict[str, float],
    rec: tuple[Path | None, dict[str, Any]],
) -> None:
    """Alternate the domain between its two versions, timing each and sampling memory;
    `rec`: the results file (or None) and the run's record fields."""
    n = plan.activations
    times: dict[str, list[tuple[float, float]]] = {version_a: [], version_b: []}
    marks = sorted({0, n, *range(0, n, max(1, n // 10))})
    memory = {0: server.memory()}
    for i in range(1, n + 1):
        version = version_b if i % 2 else version_a  # starts on a, ends on a (n even)
        times[version].append(await _activate(client, server.admin_key, version))
        if i in marks:
            memory[i] = server.memory()
    print(f"\nactivation of a {DOMAIN} version while idle ({n} activations alternating "
          "between the two; server s: load, verify checksums, smoke query, swap; "
          "client s: the whole POST)")  # fmt: skip
    print("\n| version | method | activations | first s | server p50 s | server p95 s "
          "| client p50 s | client p95 s |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for method, (version, _) in built.items():
        ts = times[version]
        if not ts:
            continue
        wall, srv = [t[0] for t in ts], [t[1] for t in ts]
        print(
            f"| {version} | {method} | {len(ts)} | {srv[0]:.3f} | {pct(srv, 50):.3f} "
            f"| {pct(srv, 95):.3f} | {pct(wall, 50):.3f} | {pct(wall, 95):.3f} |"
        )
        write_record(
            rec[0], {**rec[1], "kind": "service-activation"}, version=version, method=method,
            activations=len(ts), first_server_s=srv[0], server_p50_s=pct(srv, 50),
            server_p95_s=pct(srv, 95), client_p50_s=pct(wall, 50), client_p95_s=pct(wall, 95),
        )  # fmt: skip
    srv_a = [t[1] for t in times[version_a]]
    srv_b = [t[1] for t in times[version_b]]
    print(f"ratio idf-ngram / idf-sentence activation (server p50): "
          f"{_ratio(pct(srv_a, 50), pct(srv_b, 50))}")  # fmt: skip
    print(f"\nresident memory of the server, MiB (VmRSS at start {mem_start['VmRSS']:.0f}; "
          "RssAnon: heap, RssFile: mapped files):")  # fmt: skip
    print("\n| after activations | VmRSS | RssAnon | RssFile |")
    print("|---:|---:|---:|---:|")
    for i, m in memory.items():
        print(f"| {i} | {m['VmRSS']:.0f} | {m['RssAnon']:.0f} | {m['RssFile']:.0f} |")
        write_record(
            rec[0], {**rec[1], "kind": "service-memory"}, after_activations=i,
            vmrss_mib=m["VmRSS"], rssanon_mib=m["RssAnon"], rssfile_mib=m["RssFile"],
            vmrss_start_mib=mem_start["VmRSS"],
        )  # fmt: skip
    first, half, last = memory[0], memory[marks[len(marks) // 2]], memory[n]
    peak = max(m["VmRSS"] for m in memory.values())
    print(
        f"growth over {n} activations: VmRSS {last['VmRSS'] - first['VmRSS']:+.1f} MiB "
        f"({_ratio(last['VmRSS'], first['VmRSS'])} of before); over the second half "
        f"({n - marks[len(marks) // 2]} activations): {last['VmRSS'] - half['VmRSS']:+.1f} MiB; "
        f"highest sample {peak:.0f} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path("models/baseline_bundle"))
    ap.add_argument("--data", type=Path, default=Path("/root/ragmt/data/en-de"))
    ap.add_argument("--quick", action="store_true", help="few requests: checks the script works")
    ap.add_argument("--activations", type=int, default=None, help="even; default 100 (quick: 10)")
    ap.add_argument("--results", type=Path, default=None, help="append a record per row")
    args = ap.parse_args()
    plan = QUICK if args.quick else FULL
    if args.activations is not None:
        plan = replace(plan, activations=args.activations + args.activations % 2)
    with tempfile.TemporaryDirectory(prefix="ragmt-bench-service-") as tmp:
        asyncio.run(run(args, plan, Path(tmp)))


if __name__ == "__main__":
    main()
