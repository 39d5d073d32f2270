"""What the one-call GPU scripts (experiments/ast_gpu.py, reder_gpu.py, byte_fusion_gpu.py)
share: a log that comes back with the results, a training run made into a loaded bundle, the
served bundle's CUDA check, a bundle split to fit what the device returns (at most 8 files
of 16 MiB), and the archive of everything else, packed again as results come in.

A device call is cut off at its time limit and returns only what its output folder holds
then, so each script packs after every finished stage, and `start` makes the cut-off's
SIGTERM an exit that runs the scripts' `finally` blocks (their last pack)."""

from __future__ import annotations

import shutil
import signal
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from models import pipeline
from models.bundle import LoadedBundle, load_bundle
from models.train import TrainConfig, TrainData, finalize, train
from models.translator import DEFAULT_BUNDLE, DecodeOptions, Translator

PART = 15 * 2**20  # bytes a returned file part holds (the device returns files of 16 MiB)


def start(
    work: Path, out: Path, device: str, folder: str = "return"
) -> tuple[Path, Callable[[str], None], Callable]:
    """(the folder whose files come back in one archive, `work`/`folder`; log; close the log):
    each message is printed and appended to its log.txt at once. Refuses "cuda" on a machine
    without it."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: use --device cpu for a test run")
    exit_on_term()
    out.mkdir(parents=True, exist_ok=True)
    small = work / folder
    small.mkdir(exist_ok=True)
    log_file = (small / "log.txt").open("a")

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    return small, log, log_file.close


def train_bundle(
    run: Path,
    data: TrainData,
    cfg: TrainConfig,
    tokenizer,
    device: str,
    log: Callable[[str], None],
    init: Path | None = None,
) -> tuple[LoadedBundle, dict, float]:
    """Train `run` (fine-tuning `init`, a bundle of the same architecture, when given), write
    its bundle to `run`/bundle and load it on `device`: (bundle, the run's final state,
    training seconds)."""
    started = time.time()
    state = train(run, data, cfg, tokenizer, log=log, init=init)
    seconds = round(time.time() - started, 1)
    finalize(run, run / "bundle", data, tokenizer, cfg.average_last, log=log)
    log(f"{run.name}: {state['step']} updates in {seconds} s on {device}")
    return load_bundle(run / "bundle", device=device), state, seconds


def cuda_check(out: Path, sentences: list[str], log: Callable[[str], None]) -> dict:
    """The served bundle decoding on this device against the CPU: the same sentences, greedy
    and beam 4, and whether the outputs agree (half precision on CUDA may change a few)."""
    found: dict = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    if not torch.cuda.is_available():
        return found
    cpu = Translator.from_bundle(DEFAULT_BUNDLE, quantize="none")
    gpu = Translator.from_bundle(DEFAULT_BUNDLE, device="cuda")
    for beam in (1, 4):
        options = DecodeOptions(beam_size=beam, batch_size=32)
        outs = {}
        for name, t in (("cpu", cpu), ("cuda", gpu)):
            start = time.perf_counter()
            outs[name] = [o.text for o in pipeline.translate(t, sentences, options).outputs]
            found[f"beam{beam}_{name}_seconds"] = round(time.perf_counter() - start, 3)
        same = sum(a == b for a, b in zip(outs["cpu"], outs["cuda"], strict=True))
        found[f"beam{beam}_same"] = f"{same}/{len(sentences)}"
        (out / f"cuda-check-beam{beam}.txt").write_text("".join(x + "\n" for x in outs["cuda"]))
    log(f"CUDA check: {found}")
    return found


def split_bundle(bundle: Path, keep: Path, out: Path, prefix: str = "") -> None:
    """`bundle`'s small files copied into `keep`, its weights into `out` in parts of `PART`
    bytes, each file named `prefix`model.safetensors.part-NN (`cat` of them in order joins
    them; the manifest's checksum verifies the join)."""
    keep.mkdir(parents=True, exist_ok=True)
    for f in bundle.iterdir():
        if f.name != "model.safetensors":
            shutil.copyfile(f, keep / f.name)
    with (bundle / "model.safetensors").open("rb") as f:
        for i, chunk in enumerate(iter(lambda: f.read(PART), b"")):
            (out / f"{prefix}model.safetensors.part-{i:02d}").write_bytes(chunk)


def exit_on_term() -> None:
    """SIGTERM (what `timeout` sends when a device call runs out) raises SystemExit(143), so
    `finally` blocks run and the last results are packed before the call ends."""

    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends at once
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def pack(small: Path, out: Path, arcname: str) -> None:
    """Everything in `small` into `out`/small.tar.gz (at most 8 files come back, so all but
    the weights travel in one archive), replaced whole: a call cut off while this writes
    still returns the last complete archive."""
    tmp = out / "small.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(small, arcname=arcname)
    tmp.replace(out / "small.tar.gz")
