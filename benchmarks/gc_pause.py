"""How long one full pass of Python's garbage collector stalls a replica, with the served models
and a store loaded as the service loads them, before and after `gc.freeze()` (what the service
calls once it has started), side by side in one process:

    python -m benchmarks.gc_pause --data data/en-de --stores STORES [--domain general] \
        [--passes 5] [--results F]

Why: a full pass visits every object the collector tracks, and importing torch alone makes
that well over a hundred thousand. The interpreter runs one whenever enough objects have
outlived two younger passes, in the middle of whatever request is decoding; `gc.freeze()` moves
everything loaded so far out of the collector's sight. Before each measurement the memory model
translates 64 of the domain's test sentences with retrieval, so the objects that serving leaves
behind are counted too.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

from benchmarks._common import machine, run_fields, write_record
from index_builder.retrieval.serving import retrieve_with
from index_builder.store import load_retriever, open_store
from models import pipeline
from models.bundle import load_bundle
from models.data import read_lines
from models.translator import BASELINE_BUNDLE, DEFAULT_BUNDLE, DecodeOptions, Translator


def pause_ms(passes: int) -> float:
    """The median milliseconds of `passes` full collections."""
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--stores", type=Path, required=True, help="stores directory, by domain")
    ap.add_argument("--domain", default="general", help="the store loaded")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    fields = run_fields("gc-pause")
    served = [
        Translator.from_loaded(load_bundle(path), quantize="native-int8")
        for path in (BASELINE_BUNDLE, DEFAULT_BUNDLE)
    ]
    retriever = load_retriever(open_store(args.stores / args.domain), None)
    memory = served[1]
    retrieve = retrieve_with(memory, retriever)
    sentences = [s for s in read_lines(args.data / args.domain / "test.en") if s.strip()][:64]

    def serve() -> None:
        pipeline.translate(memory, sentences, DecodeOptions(beam_size=4, batch_size=32), retrieve)

    serve()
    tracked = len(gc.get_objects())
    before = pause_ms(args.passes)
    gc.freeze()
    serve()
    after = pause_ms(args.passes)
    left = len(gc.get_objects())
    gc.unfreeze()
    print(f"machine: {machine()}; {len(served)} bundles and the {args.domain} store loaded")
    print(f"a full collection: {before:.1f} ms over {tracked} tracked objects")
    print(
        f"after gc.freeze() and serving again: {after:.2f} ms over {left} "
        f"({after / before:.3f}x the time)"
    )
    write_record(
        args.results,
        fields,
        domain=args.domain,
        passes=args.passes,
        bundles=len(served),
        tracked=tracked,
        pause_ms=before,
        frozen_pause_ms=after,
        frozen_tracked=left,
        ratio=after / before,
    )


if __name__ == "__main__":
    main()
