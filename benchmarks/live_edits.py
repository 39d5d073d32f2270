"""Live memory edits, measured: how soon a pair added on one replica is retrieved on another,
and what the edits cost retrieval.

    python -m benchmarks.live_edits                    # 50 edits, 2 replicas, real Redis
    python -m benchmarks.live_edits --edits 10 --results experiments/results/live-edits.jsonl

Part 1 runs a private redis-server and two `ragmt serve` processes with the compose `api`
settings (benchmarks.swap_load) on one fresh stores directory; each installs the shipped
`general` memory at its first start (one builds it, the other waits on its lock). Each edit is
a new pair POSTed to replica A; replica B is then searched for it (GET .../memory?q=, which
ranks as translation retrieval does, without decoding) every 5 ms until it is the best match.
Reported: the POST's latency on A (the edit appended, fsynced and served there) and the time
until B serves it, p50 / p95 / max.

Part 2, in this process: retrieval time of the general memory's idf-ngram version alone against
the same version with 10, 100 and 1,000 pairs added by edits (and as many removed), on the
general dev sentences (or the memory's own sources), batch 1: the ratio is the edits' cost.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import pct, run_fields, write_record
from benchmarks.swap_load import RedisServer, Replica, compose_settings, stop_all

DOMAIN = "general"


async def propagation(n_edits: int, work: Path) -> dict[str, Any]:
    admin = secrets.token_hex(16)
    redis_server = RedisServer(work)
    env = compose_settings(redis_server.url, work / "data", admin)
    env |= {"RAGMT_INSTALL_MEMORIES": "true", "RAGMT_RECONCILE_INTERVAL_S": "30"}
    import os

    full_env = {**os.environ, **env}
    a = Replica("a", full_env, None, work)
    b = Replica("b", full_env, None, work)
    headers = {"X-Admin-Key": admin}
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=60) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=60) as cb,
    ):
        ready = [await a.ready(ca), await b.ready(cb)]
        post_ms, seen_ms = [], []
        for i in range(n_edits):
            source = f"Click Frobnicate {i} to reticulate the splines of layer {i}."
            target = (
                f"Klicken Sie auf Frobnizieren {i}, um die Splines von Ebene {i} zu retikulieren."
            )
            t0 = time.perf_counter()
            resp = await ca.post(
                f"/v1/domains/{DOMAIN}/memory",
                json={"source": source, "target": target},
                headers=headers,
            )
            t1 = time.perf_counter()
            resp.raise_for_status()
            while True:
                found = await cb.get(
                    f"/v1/domains/{DOMAIN}/memory", params={"q": source, "limit": 1}
                )
                found.raise_for_status()
                pairs = found.json()["pairs"]
                if pairs and pairs[0]["target"] == target:
                    break
                if time.perf_counter() - t1 > 30:
                    raise RuntimeError(f"edit {i} not on replica b after 30 s")
                await asyncio.sleep(0.005)
            post_ms.append((t1 - t0) * 1000)
            seen_ms.append((time.perf_counter() - t1) * 1000)
    return {
        "edits": n_edits,
        "ready_s": [round(x, 2) for x in ready],
        "post_ms": {q: round(pct(post_ms, p), 1) for q, p in (("p50", 50), ("p95", 95))}
        | {"max": round(max(post_ms), 1)},
        "other_replica_ms": {q: round(pct(seen_ms, p), 1) for q, p in (("p50", 50), ("p95", 95))}
        | {"max": round(max(seen_ms), 1)},
        "stores": str(work / "data" / "stores"),
    }


def retrieval_cost(stores: Path, queries: list[str], sizes: list[int]) -> list[dict[str, Any]]:
    from index_builder.edits import Edit, EditState, pair_key
    from index_builder.retrieval.overlay import EditedRetriever, removed_ids
    from index_builder.store import active_version, load_retriever, open_store

    version = active_version(stores, DOMAIN)
    assert version is not None
    store = open_store(stores / DOMAIN / version)
    base = load_retriever(store)
    pairs = store.pairs
    rows = []

    def timed(retriever: Any) -> float:
        retriever.search(queries[:5], 4)  # warm
        t0 = time.perf_counter()
        for q in queries:
            retriever.search([q], 4)
        return (time.perf_counter() - t0) * 1000 / len(queries)

    alone = timed(base)
    for n in sizes:
        edits = []
        for i in range(n):  # new pairs made of the memory's own words, and removals
            j = (i * 7919) % len(pairs)
            s, t = pairs.sources[j], pairs.targets[j]
            edits.append(
                Edit(2 * i + 1, "add", pair_key(s + " !", t + " !"), s + " !", t + " !", 0)
            )
            k = (i * 104729 + 1) % len(pairs)
            s, t = pairs.sources[k], pairs.targets[k]
            edits.append(Edit(2 * i + 2, "delete", pair_key(s, t), s, t, 0))
        state = EditState.of(edits)
        t0 = time.perf_counter()
        edited = EditedRetriever(base, state, removed_ids(pairs, state.removed))
        build_ms = (time.perf_counter() - t0) * 1000
        ms = timed(edited)
        rows.append(
            {"added": n, "removed": n, "ms_per_query": round(ms, 3), "alone_ms": round(alone, 3),
             "ratio": round(ms / alone, 3), "overlay_build_ms": round(build_ms, 1)}
        )  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edits", type=int, default=50)
    ap.add_argument("--queries", type=Path, default=Path("data/en-de/general/dev.en"))
    ap.add_argument("--n-queries", type=int, default=200)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    base = run_fields("live-edits")
    with tempfile.TemporaryDirectory(prefix="ragmt-live-edits-") as tmp:
        work = Path(tmp)
        try:
            prop = asyncio.run(propagation(args.edits, work))
        finally:
            stop_all()
        print(
            f"edit on replica A (POST): p50 {prop['post_ms']['p50']} ms, "
            f"p95 {prop['post_ms']['p95']} ms, max {prop['post_ms']['max']} ms"
        )
        print(
            f"served by replica B after: p50 {prop['other_replica_ms']['p50']} ms, "
            f"p95 {prop['other_replica_ms']['p95']} ms, max {prop['other_replica_ms']['max']} ms "
            f"({args.edits} edits, real Redis pub/sub, shared stores directory)"
        )
        stores = Path(prop.pop("stores"))
        if args.queries.is_file():
            queries = args.queries.read_text(encoding="utf-8").splitlines()[: args.n_queries]
            where = str(args.queries)
        else:
            from index_builder.store import active_version, open_store

            store = open_store(stores / DOMAIN / str(active_version(stores, DOMAIN)))
            queries = [store.pairs.sources[i * 37] for i in range(args.n_queries)]
            where = "the memory's own sources"
        rows = retrieval_cost(stores, queries, [10, 100, 1000])
        print(f"\nretrieval, batch 1, k 4, {len(queries)} queries from {where}:")
        print("| added + removed | ms/query | version alone | ratio | overlay built in |")
        print("|---|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['added']} + {r['removed']} | {r['ms_per_query']} | {r['alone_ms']} | "
                f"{r['ratio']}x | {r['overlay_build_ms']} ms |"
            )
        write_record(args.results, base, propagation=prop, retrieval=rows, queries=where)


if __name__ == "__main__":
    main()
