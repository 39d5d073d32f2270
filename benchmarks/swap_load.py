"""Two replicas under load while an operator swaps a domain's store version back and forth:
what the compose deployment does on one CPU host, measured end to end over loopback:

    python -m benchmarks.swap_load                 # 200 clients, 60 s, 20 swaps
    python -m benchmarks.swap_load --quick         # 20 clients, 10 s, 3 swaps: a check
    python -m benchmarks.swap_load --corpus pairs.tsv --model models/baseline_bundle \
        --results experiments/results/swap-load.jsonl

A private redis-server runs as docker-compose.yml runs it (append-only file, no snapshots,
1 GB volatile-lru), and two `ragmt serve` processes with the `api` service's settings of
docker-compose.yml + docker-compose.cpu.yml (Redis registry, a shared stores directory, no
in-process worker, an admin key, CPU, two replicas per host: each takes its share of the
cores, service/threads.py), otherwise defaults (beam, batching, translation cache). No proxy:
each client alternates between the replicas, as nginx's round robin spreads requests.

The domain has two versions of one corpus (idf-sentence and idf-ngram stores). Without
`--corpus` (a TSV of source and target) the corpus is the English prose that ships in the
repository (README, docs, docstrings) with German from the committed baseline bundle (greedy):
a silver translation memory of real text, made in a few seconds. Clients send one sentence
per request, taken in turn from the shuffled sources (each is in the store, as in a translation
memory), then think 0.5 s; a share of requests (`--repeat`, 0.2) resends a recent sentence
instead, which the shared cache answers when the version has not changed since.
Swaps are spread evenly over the load, alternating replicas. Everything runs on the same
machine: the clients take CPU from the replicas. `--results FILE` appends one record per run.

One table, a column per replica: requests, non-2xx by status, transport errors and timeouts,
latency p50/p95/p99, cache hits, requests served per version, convergence after the swaps made
on the other replica (its GET /v1/domains naming the new version; its first response with it,
to a request sent after the activation answered), /livez latency (event-loop stalls), RSS at
start and end; then each swap, and whether the replicas, the ACTIVE file and Redis agree.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import re
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

from benchmarks._common import (
    free_port,
    machine,
    pct,
    proc_memory_mib,
    run_fields,
    write_record,
)
from benchmarks._corpus import repo_corpus
from index_builder.readers import read_tsv
from index_builder.store import active_version, build_store, corpus_sha256, set_active

DOMAIN = "docs"
METHODS = ("idf-sentence", "idf-ngram")  # version A, version B
THINK_S = 0.5  # as tests/service/test_server.py's hot-swap test
PREFIX = "ragmt"  # RAGMT_REDIS_PREFIX's default: the registry is the hash <prefix>:active
# docker-compose.yml's `redis` command, less what places it (port, bind, dir)
REDIS_ARGS = ["--maxmemory", "1gb", "--maxmemory-policy", "volatile-lru",
              "--appendonly", "yes", "--save", ""]  # fmt: skip
RECENT = 512  # sentences a resent one is drawn from: ~20 s of the full load
STOP_GRACE_S = 45  # compose's stop_grace_period of `api`


@dataclass(frozen=True)
class Plan:
    clients: int
    seconds: float
    swaps: int


FULL = Plan(clients=200, seconds=60.0, swaps=20)
QUICK = Plan(clients=20, seconds=10.0, swaps=3)


@dataclass
class Sample:
    """One translation request; times in seconds since the load started."""

    replica: int
    sent: float
    done: float
    status: int | None  # None: no HTTP answer (`error` says why)
    error: str | None = None  # transport error or timeout, or the error code of a non-2xx
    version: str | None = None
    cache_hit: bool = False


@dataclass
class Swap:
    """One activation; times in seconds since the load started."""

    replica: int
    version: str
    asked: float
    answered: float = 0.0
    status: int | None = None
    server_s: float | None = None  # the replica's load + verify + flip
    error: str | None = None
    polled_s: float | None = None  # answer -> the other replica's GET /v1/domains names it
    superseded: bool = False  # the next swap came before the other replica took this one
    first_response_s: float | None = None  # answer -> its first response from the other one


# --- processes ------------------------------------------------------------------------------

_children: list[subprocess.Popen] = []  # every process started: stopped however the run ends


def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A child in its own session: Ctrl-C reaches this script, which then stops it in order."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    _children.append(proc)
    return proc


def stop_all() -> None:
    """SIGTERM to every child still running, then wait (compose's grace period), then kill."""
    for proc in _children:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in _children:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class RedisServer:
    """redis-server with the compose file's persistence and memory policy, on a free port."""

    def __init__(self, work: Path) -> None:
        self.port = free_port()
        data = work / "redis"
        data.mkdir()
        self.cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                    "--dir", str(data), *REDIS_ARGS]  # fmt: skip
        self.proc = _spawn(self.cmd, work / "redis.log")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: {self.cmd}") from None
                time.sleep(0.05)


class Replica:
    """`ragmt serve` in its own process with the compose `api` service's settings."""

    def __init__(self, name: str, env: dict[str, str], model: Path | None, work: Path) -> None:
        self.name = name
        self.port = free_port()
        code = "from service.cli import app; app(prog_name='ragmt')"
        cmd = [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--model", str(model)] if model is not None else []
        self.log = work / f"replica-{name}.log"
        self.proc = _spawn(cmd, self.log, env)
        self.url = f"http://127.0.0.1:{self.port}"

    async def ready(self, client: httpx.AsyncClient, timeout_s: float = 600) -> float:
        """Wait for /readyz 200; returns the seconds it took. uvicorn answers only once the
        lifespan has loaded everything, so a 503 that lasts 10 s will last (no model)."""
        start, answered = time.perf_counter(), None
        while time.perf_counter() - start < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited:\n{self.log_tail()}")
            try:
                resp = await client.get("/readyz")
            except httpx.TransportError:
                await asyncio.sleep(0.2)
                continue
            if resp.status_code == 200:
                return time.perf_counter() - start
            answered = answered or time.perf_counter()
            if time.perf_counter() - answered > 10:
                raise RuntimeError(f"replica {self.name} not ready: {resp.text}")
            await asyncio.sleep(0.2)
        raise RuntimeError(f"replica {self.name} not ready in {timeout_s} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def log_lines(self, pattern: str) -> list[str]:
        return [ln for ln in self.log.read_text(errors="replace").splitlines() if pattern in ln]

    def memory(self) -> dict[str, float]:
        return proc_memory_mib(self.proc.pid)


def compose_settings(redis_url: str, data: Path, admin_key: str) -> dict[str, str]:
    """The `api` service's environment (both compose files), on this machine's paths; the
    variables compose passes empty when the shell sets nothing are passed empty too."""
    return {
        "RAGMT_REDIS_URL": redis_url,
        "RAGMT_DATA_DIR": str(data),
        "RAGMT_STORES_DIR": str(data / "stores"),
        "RAGMT_STORE_SIGNING_KEY": "",
        "RAGMT_RUN_WORKER": "false",
        "RAGMT_ADMIN_KEY": admin_key,
        "RAGMT_API_KEYS": "",
        "RAGMT_API_KEYS_FILE": "",
        "RAGMT_DEVICE": "cpu",
        "RAGMT_REPLICAS_PER_HOST": "2",
        "FORWARDED_ALLOW_IPS": "*",
    }


# --- the load -------------------------------------------------------------------------------


class Texts:
    """What the clients send: the shuffled sources in turn, so a sentence comes back only after
    all the others; a `repeat` share of requests resends one of the last RECENT instead (real
    traffic repeats itself, and the cache answers some of it)."""

    def __init__(self, texts: list[str], repeat: float) -> None:
        self._cycle = itertools.cycle(texts)
        self._recent: deque[str] = deque(maxlen=RECENT)
        self._rng = random.Random(1)
        self.repeat = repeat

    def next(self) -> str:
        if self._recent and self._rng.random() < self.repeat:
            return self._rng.choice(self._recent)
        text = next(self._cycle)
        self._recent.append(text)
        return text


async def _client(
    i: int, http: list[httpx.AsyncClient], texts: Texts, body: dict[str, Any],
    t0: float, end: float, samples: list[Sample],
) -> None:  # fmt: skip
    """Requests until `end`, alternating replicas, thinking THINK_S between them."""
    turn = i % 2
    await asyncio.sleep(random.Random(i).uniform(0, THINK_S))  # no thundering herd at t0
    while time.perf_counter() < end:
        r, turn = turn, 1 - turn
        s = Sample(r, time.perf_counter() - t0, 0.0, None)
        try:
            resp = await http[r].post("/v1/translate", json={**body, "texts": [texts.next()]})
        except httpx.TimeoutException:
            s.error = "timeout"
        except httpx.TransportError as e:
            s.error = type(e).__name__
        else:
            s.status = resp.status_code
            if resp.status_code == 200:
                out = resp.json()
                s.version = out["results"][0]["store_version"]
                s.cache_hit = out["timings"]["cache_hits"] > 0
            else:
                try:
                    s.error = resp.json()["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    s.error = resp.text[:80]
        s.done = time.perf_counter() - t0
        samples.append(s)
        await asyncio.sleep(THINK_S)


async def _active_on(http: httpx.AsyncClient) -> str | None:
    resp = await http.get(f"/v1/domains/{DOMAIN}")
    return resp.json()["active_version"] if resp.status_code == 200 else None


async def _operator(
    http: list[httpx.AsyncClient], key: str, versions: tuple[str, str], plan: Plan, t0: float
) -> list[Swap]:
    """`plan.swaps` activations of the other version, evenly spread, alternating replicas;
    after each, the other replica is polled until it serves the new version too."""
    swaps: list[Swap] = []
    polls: list[asyncio.Task[None]] = []
    interval = plan.seconds / (plan.swaps + 1)
    current = versions[0]

    async def poll(k: int) -> None:
        swap, other = swaps[k], http[1 - swaps[k].replica]
        while time.perf_counter() - t0 - swap.answered < 60:
            try:
                now = await _active_on(other)
            except httpx.TransportError:
                now = None
            if now == swap.version:
                swap.polled_s = time.perf_counter() - t0 - swap.answered
                return
            if len(swaps) > k + 1 and swaps[k + 1].status is not None:
                swap.superseded = True
                return
            await asyncio.sleep(0.02)

    for k in range(plan.swaps):
        await asyncio.sleep(max(0.0, t0 + (k + 1) * interval - time.perf_counter()))
        version = versions[1] if current == versions[0] else versions[0]
        swap = Swap(k % 2, version, time.perf_counter() - t0)
        swaps.append(swap)
        try:
            resp = await http[swap.replica].post(
                f"/v1/domains/{DOMAIN}/activate",
                json={"version": version},
                headers={"X-Admin-Key": key},
            )
        except httpx.TransportError as e:
            swap.error = type(e).__name__
        else:
            swap.status = resp.status_code
            if resp.status_code == 200:
                current = version
                attempt = resp.json()["last_attempt"] or {}
                swap.server_s = attempt.get("seconds")
            else:
                swap.error = resp.text[:200]
        swap.answered = time.perf_counter() - t0
        if swap.status == 200:
            polls.append(asyncio.create_task(poll(k)))
    await asyncio.gather(*polls)
    return swaps


async def _probe(http: httpx.AsyncClient, end: float, out: list[float]) -> None:
    """GET /livez every 0.25 s until `end`: its latency shows how long the event loop stalls."""
    while time.perf_counter() < end:
        t = time.perf_counter()
        try:
            await http.get("/livez")
            out.append((time.perf_counter() - t) * 1000)
        except httpx.TransportError:
            out.append(float("inf"))
        await asyncio.sleep(0.25)


def _first_responses(swaps: list[Swap], samples: list[Sample]) -> None:
    """Each swap's first response from the other replica with the new version, counting only
    requests sent after the activation answered (earlier ones may carry the same version
    from before the previous swap)."""
    for swap in swaps:
        if swap.status != 200:
            continue
        done = [
            s.done
            for s in samples
            if s.replica != swap.replica and s.version == swap.version and s.sent >= swap.answered
        ]
        if done:
            swap.first_response_s = min(done) - swap.answered


async def _metrics(http: httpx.AsyncClient) -> dict[str, float]:
    """The replica's counters that tell of trouble under load (summed over labels but reason)."""
    wanted = ("ragmt_rejections_total", "ragmt_backend_errors_total",
              "ragmt_store_swap_failures_total", "ragmt_store_versions_loaded",
              "ragmt_store_swap_seconds_count")  # fmt: skip
    out: dict[str, float] = {}
    for line in (await http.get("/metrics")).text.splitlines():
        name, _, value = line.rpartition(" ")
        base = name.split("{")[0]
        if base in wanted:
            label = re.search(r'(reason|operation|outcome)="([^"]*)"', name)
            key = f"{base}{{{label.group(2)}}}" if label else base
            out[key] = out.get(key, 0.0) + float(value)
    return out


# --- the run --------------------------------------------------------------------------------


def _stores(args: argparse.Namespace, stores: Path) -> dict[str, Any]:
    """The corpus and the domain's two versions built from it (A active); what was made."""
    t = time.perf_counter()
    if args.corpus is not None:
        pairs, origin = read_tsv(args.corpus), str(args.corpus)
    else:
        pairs = repo_corpus()
        origin = "repository prose (README, docs, docstrings) + baseline German, greedy"
    made_s = time.perf_counter() - t
    versions = {}
    for method in METHODS:
        versions[build_store(pairs, DOMAIN, method, stores).name] = method
        time.sleep(0.002)  # version ids sort by build time (ms)
    set_active(stores, DOMAIN, next(iter(versions)))
    texts = list(dict.fromkeys(p.source for p in pairs))
    random.Random(0).shuffle(texts)
    digest = corpus_sha256(pairs)
    print(f"corpus: {len(pairs)} pairs, {len(texts)} distinct sources, from {origin} "
          f"({made_s:.1f} s; sha256 {digest[:12]})")  # fmt: skip
    a, b = versions
    print(f"domain {DOMAIN}: A = {a} ({METHODS[0]}, active at start), B = {b} ({METHODS[1]})")
    return {"corpus": origin, "corpus_sha256": digest, "pairs": len(pairs), "texts": texts,
            "versions": versions}  # fmt: skip


async def _settle(
    http: list[httpx.AsyncClient], body: dict[str, Any], text: str, last: str
) -> dict[str, str | None]:
    """Each replica's version once both name `last` (30 s at most): in GET /v1/domains and
    in a translation it serves."""
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline:
        if all([await _active_on(h) == last for h in http]):
            break
        await asyncio.sleep(0.1)
    out: dict[str, str | None] = {}
    for name, h in zip(("r1", "r2"), http, strict=True):
        resp = await h.post("/v1/translate", json={**body, "texts": [text]})
        out[f"replica {name}"] = (
            resp.json()["results"][0]["store_version"] if resp.is_success else None
        )
        out[f"GET {name}"] = await _active_on(h)
    return out


async def run(args: argparse.Namespace, plan: Plan, work: Path) -> None:
    base = run_fields("swap-load")
    print(f"command: python -m benchmarks.swap_load {' '.join(sys.argv[1:])}")
    print(f"machine: {machine()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {_load()}")
    made = _stores(args, work / "data" / "stores")
    a, b = made["versions"]
    names = {a: f"A ({METHODS[0]})", b: f"B ({METHODS[1]})"}

    server = RedisServer(work)
    admin_key = secrets.token_hex(16)
    compose = compose_settings(server.url, work / "data", admin_key)
    # This shell's RAGMT_* variables are dropped: only the compose settings configure them.
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGMT_")} | compose
    if args.torch_threads is not None:  # e.g. every core, torch's own default, for comparison
        env["RAGMT_TORCH_THREADS"] = str(args.torch_threads)
    replicas = [Replica(n, env, args.model, work) for n in ("r1", "r2")]
    limits = httpx.Limits(  # expire idle connections before uvicorn's 5 s keep-alive does
        max_connections=plan.clients + 8, max_keepalive_connections=plan.clients + 8,
        keepalive_expiry=2.0,
    )  # fmt: skip
    async with (
        httpx.AsyncClient(base_url=replicas[0].url, timeout=args.timeout, limits=limits) as h1,
        httpx.AsyncClient(base_url=replicas[1].url, timeout=args.timeout, limits=limits) as h2,
    ):
        http = [h1, h2]
        ready = await asyncio.gather(*(r.ready(h) for r, h in zip(replicas, http, strict=True)))
        info = (await h1.get("/info")).json()
        model, lim = next(m for m in info["models"] if m["default"]), info["limits"]
        body = {"source_lang": model["languages"]["source"],
                "target_lang": model["languages"]["target"], "domain": DOMAIN}  # fmt: skip
        shown = compose | {"RAGMT_ADMIN_KEY": "<random, 32 hex>"}
        print("settings of both replicas (docker-compose.yml + docker-compose.cpu.yml, `api`):")
        print("  " + " ".join(f"{k}={v}" for k, v in shown.items()))
        print(f"  model: {args.model or 'RAGMT_MODEL_PATH unset: the committed bundles'}; "
              f"default {model['name']} ({model['architecture']}, uses retrieved pairs: "
              f"{model['uses_memory']}); beam {lim['beam_size']}, queue {lim['queue_size']} "
              f"texts, rate limit {lim['rate_limit']}; batching, cache: defaults")  # fmt: skip
        for r, s in zip(replicas, ready, strict=True):
            threads = next(iter(r.log_lines("torch threads")), "?").split("ragmt.service")[-1]
            print(f"  replica {r.name}: pid {r.proc.pid}, port {r.port}, ready in {s:.1f} s; "
                  f"{threads.strip(' :-')}")  # fmt: skip
        aof = server.client.info("persistence")["aof_enabled"]
        print(f"  {shlex.join(server.cmd)}; aof_enabled={aof}")
        print(f"load: {plan.clients} clients x {plan.seconds:.0f} s, think {THINK_S} s, one "
              f"sentence per request ({args.repeat:.0%} resent from the last {RECENT}), "
              f"alternating replicas; {plan.swaps} swaps every "
              f"{plan.seconds / (plan.swaps + 1):.1f} s alternating replicas; client timeout "
              f"{args.timeout:.0f} s", flush=True)  # fmt: skip

        mem_start = [r.memory() for r in replicas]
        sent = Texts(made["texts"], args.repeat)
        samples: list[Sample] = []
        probes: list[list[float]] = [[], []]
        t0 = time.perf_counter()
        end = t0 + plan.seconds
        load = [_client(i, http, sent, body, t0, end, samples) for i in range(plan.clients)]
        swaps, *_ = await asyncio.gather(
            _operator(http, admin_key, (a, b), plan, t0),
            *load,
            *(_probe(h, end, p) for h, p in zip(http, probes, strict=True)),
        )
        wall = time.perf_counter() - t0
        mem_end = [r.memory() for r in replicas]
        _first_responses(swaps, samples)
        last = next((s.version for s in reversed(swaps) if s.status == 200), a)
        final = await _settle(http, body, made["texts"][0], last)
        final["ACTIVE file"] = active_version(work / "data" / "stores", DOMAIN)
        final["redis"] = server.client.hget(f"{PREFIX}:active", DOMAIN)
        counters = [await _metrics(h) for h in http]
    agree = set(final.values()) == {last}
    summary = _report(samples, swaps, probes, (mem_start, mem_end), replicas, wall, names)
    print(f"\nend state (last activated: {names[last]}): "
          + ", ".join(f"{k} {names.get(str(v), v)}" for k, v in final.items())
          + f" -> {'all agree' if agree else 'DISAGREE'}")  # fmt: skip
    for r, c in zip(replicas, counters, strict=True):
        print(f"replica {r.name} counters: " + ", ".join(f"{k} {v:g}" for k, v in c.items()))
        for line in (r.log_lines("WARNING") + r.log_lines("ERROR"))[:5]:
            print(f"  log: {line[:200]}")
    print(f"finished {time.strftime('%H:%M UTC', time.gmtime())}; {_load()}")
    made.pop("texts")
    write_record(
        args.results, base,
        settings={"clients": plan.clients, "seconds": plan.seconds, "swaps": plan.swaps,
                  "think_s": THINK_S, "timeout_s": args.timeout, "repeat": args.repeat,
                  "model": str(args.model) if args.model else None, "env": shown,
                  "redis": REDIS_ARGS, **made},
        **summary, end_state=final, end_state_agrees=agree, counters=counters,
        swap_detail=[asdict(s) for s in swaps],
    )  # fmt: skip


def _load() -> str:
    """The machine's load (other work running alongside skews every number here)."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _nums(col: dict[str, Any], keys: str, spec: str) -> str:
    return " / ".join(_num(col.get(k), spec) for k in keys.split())


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "0"


def _report(
    samples: list[Sample], swaps: list[Swap], probes: list[list[float]],
    memory: tuple[list[dict[str, float]], list[dict[str, float]]],
    replicas: list[Replica], wall: float, names: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    """Print the summary table (a column per replica, one for both) and the per-swap detail;
    returns the record's measured values."""
    cols: list[dict[str, Any]] = []
    for r in (0, 1, None):
        mine = [s for s in samples if r is None or s.replica == r]
        ok = [(s.done - s.sent) * 1000 for s in mine if s.status is not None and s.status < 300]
        # a swap converges on the replica it was NOT made on
        conv = [w for w in swaps if w.status == 200 and (r is None or w.replica != r)]
        first = [w.first_response_s for w in conv if w.first_response_s is not None]
        polled = [w.polled_s for w in conv if w.polled_s is not None]
        probe = [x for i, p in enumerate(probes) if r is None or i == r for x in p]
        cols.append({
            "requests": len(mine),
            "requests_per_s": len(mine) / wall,
            "ok": len(ok),
            "non_2xx": dict(Counter(f"{s.status} {s.error}" for s in mine
                                    if s.status is not None and s.status >= 300)),
            "transport_errors": dict(Counter(s.error for s in mine if s.status is None)),
            "p50_ms": pct(ok, 50) if ok else None,
            "p95_ms": pct(ok, 95) if ok else None,
            "p99_ms": pct(ok, 99) if ok else None,
            "cache_hits": sum(s.cache_hit for s in mine),
            "by_version": dict(Counter(names.get(str(s.version), "none") for s in mine
                                       if s.status == 200)),
            "swaps_converged": len(first), "swaps_to_converge": len(conv),
            "first_response_p50_s": pct(first, 50) if first else None,
            "first_response_max_s": max(first) if first else None,
            "polled_p50_s": pct(polled, 50) if polled else None,
            "polled_max_s": max(polled) if polled else None,
            "superseded": sum(w.superseded for w in conv),
            "livez_p50_ms": pct(probe, 50) if probe else None,
            "livez_max_ms": max(probe) if probe else None,
        })  # fmt: skip
    for i, (start, end) in enumerate(zip(*memory, strict=True)):
        cols[i] |= {"rss_start_mib": start["VmRSS"], "rss_end_mib": end["VmRSS"],
                    "rss_peak_mib": end["VmHWM"]}  # fmt: skip
    rows = [
        ("requests (sent in the window), per s",
         lambda c: f"{c['requests']}, {c['requests_per_s']:.1f}/s"),
        ("2xx", lambda c: str(c["ok"])),
        ("non-2xx (status, error code)", lambda c: _counts(c["non_2xx"])),
        ("transport errors / timeouts", lambda c: _counts(c["transport_errors"])),
        ("latency p50 / p95 / p99 ms (2xx)", lambda c: _nums(c, "p50_ms p95_ms p99_ms", ".0f")),
        ("cache hits", lambda c: str(c["cache_hits"])),
        *[(f"served with {n}", lambda c, n=n: str(c["by_version"].get(n, 0)))
          for n in sorted(cols[2]["by_version"])],
        ("swaps converged here / made on the other (superseded)",
         lambda c: f"{c['swaps_converged']} / {c['swaps_to_converge']} ({c['superseded']})"),
        ("convergence, first response p50 / max s",
         lambda c: _nums(c, "first_response_p50_s first_response_max_s", ".2f")),
        ("convergence, GET /v1/domains p50 / max s",
         lambda c: _nums(c, "polled_p50_s polled_max_s", ".2f")),
        ("/livez p50 / max ms (event loop)",
         lambda c: _nums(c, "livez_p50_ms livez_max_ms", ".0f")),
        ("VmRSS start / end / peak MiB",
         lambda c: _nums(c, "rss_start_mib rss_end_mib rss_peak_mib", ".0f")),
    ]  # fmt: skip
    print(f"\n| measure | replica {replicas[0].name} | replica {replicas[1].name} | both |")
    print("|---|---:|---:|---:|")
    for label, cell in rows:
        print(f"| {label} | " + " | ".join(cell(c) for c in cols) + " |")
    print(
        "\nswaps (s since the load started; convergence on the other replica, s after the "
        "answer: its GET /v1/domains naming the version, its first response with it):"
    )
    print("\n| # | on | to | asked | answer | status | server s | other: GET | other: response |")
    print("|---:|---|---|---:|---:|---|---:|---:|---:|")
    for k, w in enumerate(swaps, 1):
        status = str(w.status) if w.error is None else f"{w.status} {w.error[:60]}"
        polled = "superseded" if w.superseded else _num(w.polled_s, ".2f")
        print(f"| {k} | {replicas[w.replica].name} | {names[w.version]} | {w.asked:.1f} "
              f"| {w.answered - w.asked:.2f} | {status} | {_num(w.server_s, '.3f')} | {polled} "
              f"| {_num(w.first_response_s, '.2f')} |")  # fmt: skip
    return {"wall_s": wall, "replicas": cols[:2], "both": cols[2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="bundle (default: the committed)")
    ap.add_argument("--corpus", type=Path, default=None, help="TSV: source, target per line")
    ap.add_argument("--quick", action="store_true", help="20 clients, 10 s, 3 swaps")
    ap.add_argument("--clients", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--swaps", type=int, default=None)
    ap.add_argument("--repeat", type=float, default=0.2, help="share of requests resending")
    ap.add_argument("--timeout", type=float, default=60.0, help="client timeout per request, s")
    ap.add_argument("--results", type=Path, default=None, help="append a record of the run")
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="RAGMT_TORCH_THREADS of both replicas (default: their share of the cores); "
        f"{os.cpu_count()}, every core, is what torch takes when left alone",
    )
    args = ap.parse_args()
    plan = QUICK if args.quick else FULL
    plan = Plan(
        clients=args.clients or plan.clients,
        seconds=args.seconds or plan.seconds,
        swaps=plan.swaps if args.swaps is None else args.swaps,
    )
    # SIGTERM unwinds like Ctrl-C, so the finally below stops every child either way.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with tempfile.TemporaryDirectory(prefix="ragmt-swap-load-") as tmp:
            try:
                asyncio.run(run(args, plan, Path(tmp)))
            finally:
                stop_all()
    except KeyboardInterrupt:
        print("interrupted; every process started was stopped", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
