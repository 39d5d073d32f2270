"""Shared helpers for the benchmarks: the machine they ran on, percentiles, result records."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.results import FORMAT, append_record, git_state
from models.translator import BASELINE_BUNDLE, DEFAULT_BUNDLE


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{cpu}; {os.cpu_count()} cores; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads); {dev}"
    )


def decode_arguments(doc: str, stores_required: bool = False) -> argparse.ArgumentParser:
    """A parser with what the side-by-side decoding benchmarks share: the baseline and the
    memory model bundles, the prepared data, the domain whose test sentences (and store) they
    decode, and the stores directory. `doc`: the benchmark's module docstring."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, default=BASELINE_BUNDLE)
    ap.add_argument("--model", type=Path, default=DEFAULT_BUNDLE, help="the memory model")
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--domain", default="medical", help="test sentences (and store) of it")
    ap.add_argument(
        "--stores",
        type=Path,
        required=stores_required,
        default=None,
        help="stores directory, by domain",
    )
    return ap


@contextlib.contextmanager
def int8_weights_as(kind: str) -> Iterator[None]:
    """Within the block, ort-int8 graphs are built with `kind` weights ("s8", "s7" or "u8";
    `models.ort_decoder.int8_weights`), whatever suits this CPU: to time both side by side."""
    before = os.environ.get("RAGMT_INT8_WEIGHTS")
    os.environ["RAGMT_INT8_WEIGHTS"] = kind
    try:
        yield
    finally:
        if before is None:
            del os.environ["RAGMT_INT8_WEIGHTS"]
        else:
            os.environ["RAGMT_INT8_WEIGHTS"] = before


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def decode_speed(translator: Any, beam: int, latency: list[str], batch: list[str]) -> dict:
    """A translator's speed through the pipeline the service uses: p50/p95 of `latency` one
    sentence at a time (and their time per target piece), and `batch` in batches of 32
    (target pieces and sentences per second); pieces are the translator's tokenizer's."""
    from models import pipeline
    from models.translator import DecodeOptions

    def pieces(outputs: list[Any]) -> int:
        return sum(
            len(translator.tokenizer.encode(o.text, translator.target_lang)) for o in outputs
        )

    def utf8(outputs: list[Any]) -> int:
        return sum(len(o.text.encode("utf-8")) for o in outputs)

    one = DecodeOptions(beam_size=beam, batch_size=1)
    pipeline.translate(translator, latency[:2], one)  # warm-up (and any lazy set-up)
    times, latency_pieces, latency_bytes = [], 0, 0
    for s in latency:
        start = time.perf_counter()
        done = pipeline.translate(translator, [s], one)
        times.append((time.perf_counter() - start) * 1000)
        latency_pieces += pieces(done.outputs)
        latency_bytes += utf8(done.outputs)
    start = time.perf_counter()
    done = pipeline.translate(translator, batch, DecodeOptions(beam_size=beam, batch_size=32))
    seconds = time.perf_counter() - start
    return {
        "p50_ms": pct(times, 50),
        "mean_ms": float(np.mean(times)),
        "p95_ms": pct(times, 95),
        "ms_per_piece_batch1": sum(times) / max(1, latency_pieces),
        "pieces_per_s": pieces(done.outputs) / seconds,
        "sentences_per_s": len(batch) / seconds,
        # the outputs' UTF-8 bytes: one unit whatever the tokenizer (a byte model's piece is
        # a byte), and what a model that loops to its length limit is charged for
        "ms_per_output_byte_batch1": sum(times) / max(1, latency_bytes),
        "output_bytes_per_s": utf8(done.outputs) / seconds,
    }


def run_fields(kind: str) -> dict[str, Any]:
    """The fields every benchmark record shares, read once at the start of a run: the git state
    (a commit made while it runs did not produce its numbers), the machine, the date, the
    command line. Each measured row adds its settings and values to a copy."""
    return {
        "format": FORMAT,
        "kind": kind,
        "git": git_state(),
        "machine": machine(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(
            ["python", "-m", f"benchmarks.{Path(sys.argv[0]).stem}", *sys.argv[1:]]
        ),
        "recovered_from": None,
    }


def write_record(path: Path | None, base: dict[str, Any], **row: Any) -> None:
    """Append one measured row (`base` from `run_fields` plus the row's fields) to the results
    file `path` (`--results`); nothing without one."""
    if path is not None:
        append_record(path, {**base, **row})


def free_port() -> int:
    """A free TCP port on loopback, for a server a benchmark starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_memory_mib(pid: int) -> dict[str, float]:
    """Of process `pid`, MiB: VmRSS (resident now), VmHWM (its peak), RssAnon (heap: what a
    leak grows) and RssFile (mapped files)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    return out
