"""Issue 29's served REDER on a lent GPU, in one call: each teacher distils the general pool's
training sources of its direction (beam 4), REDER at the paper's width trains on both
directions' distillation at once for a wall-clock budget, and it is scored each way on every
English-German test set, with its reversibility on general dev. What comes back fits the
device's limits (64 MiB, 16 MiB a file). The device image has torch, sentencepiece,
safetensors, sacrebleu and numpy, not this project's CLI or its other dependencies, so this
drives `models` directly; `sacremoses` and its dependencies travel as wheels.

Prepared here (`bash experiments/reder-gpu-prepare.sh`: the prepared en-de data packed into
runs/gpu-reder/work.tar.xz, the wheels into runs/gpu-reder/wheels), then, with the `device`
tool (carry runs/gpu-reder):

    pip install -q --no-index --find-links runs/gpu-reder/wheels sacremoses \
      && tar xJf runs/gpu-reder/work.tar.xz -C /tmp \
      && python experiments/reder_gpu.py --work /tmp/reder-work --minutes 5 --out $OUT

$OUT gets small.tar.gz (results.jsonl: one eval record per direction and test set, and the
reversibility records; the hypotheses; the log; the CUDA check of the served bundle; the
bundle but its weights) and those weights (fp16) in parts of 15 MiB (`cat
model.safetensors.part-* > bundle/model.safetensors` here; the manifest's checksum verifies
the join). The CUDA check runs first and the archive is packed again after each stage, so a
call cut off at its time limit still returns what was done. Tested on the CPU at a few
updates (`--device cpu --steps 4 --kd-limit 40`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from models import pipeline
from models.data import read_lines
from models.evaluate import evaluate, score
from models.results import eval_records, git_state
from models.tokenizer import Tokenizer
from models.train import TrainConfig, TrainData
from models.translator import BASELINE_BUNDLE, DecodeOptions, Translator

CONFIG = Path(__file__).resolve().parent.parent / "models" / "configs" / "reder-base-en-de.json"
DOMAINS = ["general", "bible", "medical", "software-docs"]


sys.path.insert(0, str(Path(__file__).resolve().parent))  # experiments/ is not a package
import device_return as shared  # noqa: E402
import reder_reversibility  # noqa: E402


def _head(src: Path, dst: Path, n: int | None) -> Path:
    """`src` cut to its first `n` lines at `dst` (all of it with None)."""
    lines = read_lines(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(x + "\n" for x in lines[:n]), encoding="utf-8")
    return dst


def distil(teacher: Path, source: Path, out: Path, device: str, beam: int, batch: int, log) -> None:
    """The teacher's beam translation of every line of `source`, one line each, into `out`
    (written whole, then renamed: a half-written file is never taken for a finished one)."""
    if out.is_file():
        return
    translator = Translator.from_bundle(teacher, device=device)
    lines = read_lines(source)
    started = time.time()
    options = DecodeOptions(beam_size=beam, batch_size=batch)
    done = [o.text for o in pipeline.translate(translator, lines, options).outputs]
    part = out.with_suffix(out.suffix + ".part")
    part.write_text("".join(t.replace("\n", " ") + "\n" for t in done), encoding="utf-8")
    part.rename(out)
    log(f"distilled {len(lines)} lines with {teacher.name} in {time.time() - started:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="an unpacked reder-gpu work dir")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--teacher-en-de", type=Path, default=BASELINE_BUNDLE)
    ap.add_argument("--teacher-de-en", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--minutes", type=float, default=5.0, help="REDER's training budget")
    ap.add_argument("--steps", type=int, default=None, help="a step budget instead (tests)")
    ap.add_argument("--kd-beam", type=int, default=4)
    ap.add_argument("--kd-batch", type=int, default=256)
    ap.add_argument("--kd-limit", type=int, default=None, help="distil the first N pairs only")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a test here")
    args = ap.parse_args()
    # what comes back, packed into one archive after each stage
    small, log, close_log = shared.start(args.work, args.out, args.device)
    try:
        run_stages(args, small, log)
    finally:
        close_log()
        shared.pack(small, args.out, "reder-gpu")


def run_stages(args: argparse.Namespace, small: Path, log: Callable[[str], None]) -> None:
    """The CUDA check, distillation, training and scoring, each packed into $OUT when done."""
    data = args.work / "data"
    general = data / "general"
    sentences = read_lines(general / "test.en")[:50]
    check = shared.cuda_check(small, sentences, log)
    (small / "cuda-check.json").write_text(json.dumps(check) + "\n")
    shared.pack(small, args.out, "reder-gpu")
    train_dir = args.work / "train"  # the pairs trained on (all, or the first --kd-limit)
    train_en = _head(general / "train.en", train_dir / "train.en", args.kd_limit)
    train_de = _head(general / "train.de", train_dir / "train.de", args.kd_limit)
    kd = args.work / "kd"
    kd.mkdir(exist_ok=True)
    distil(args.teacher_en_de, train_en, kd / "train.de", args.device, args.kd_beam,
           args.kd_batch, log)  # fmt: skip
    distil(args.teacher_de_en, train_de, kd / "train.en", args.device, args.kd_beam,
           args.kd_batch, log)  # fmt: skip
    shared.pack(small, args.out, "reder-gpu")

    budget = {"threads": 0, "max_hours": args.minutes / 60}
    if args.steps is not None:
        budget |= {"max_hours": 0.0, "max_steps": args.steps, "aux_after": args.steps // 2}
    cfg = TrainConfig.from_dict(json.loads(args.config.read_text()) | budget)
    run = args.work / "reder"
    run.mkdir(exist_ok=True)
    spm = args.teacher_en_de / "spm.model"  # the teachers' vocabulary: they can re-rank
    shutil.copyfile(spm, run / "spm.model")
    tokenizer = Tokenizer(run / "spm.model")
    train_data = TrainData(
        train_en, train_de, general / "dev.en", general / "dev.de", "en", "de",
        kd_forward=kd / "train.de", kd_backward=kd / "train.en",
    )  # fmt: skip
    loaded, state, seconds = shared.train_bundle(run, train_data, cfg, tokenizer, args.device, log)
    bundle = run / "bundle"
    # the bundle to serve, its weights in parts under the device's limit
    shared.split_bundle(bundle, small / "bundle", args.out)
    shared.pack(small, args.out, "reder-gpu")
    translator = Translator.from_loaded(loaded, "none")
    weights = loaded.manifest["files"]["model.safetensors"]
    git = git_state()
    results = small / "results.jsonl"
    for source, target in (("en", "de"), ("de", "en")):
        scored = evaluate(
            translator.for_pair(source, target), data, DOMAINS,
            DecodeOptions(beam_size=1, batch_size=128), hyp_dir=small / "hyps", log=log,
        )  # fmt: skip
        for record in eval_records(
            scored, system="REDER-base greedy, distilled", split="test",
            bundle={"path": "models/reder_bundle", "sha256": weights, "architecture": "reder"},
            decoding={"beam": 1, "ctc_beam": 1, "quantize": "none", "device": args.device,
                      "train_seconds": seconds, "updates": state["step"]},
            store_dirs={}, store_label=None, data_dir=data, languages=(source, target), git=git,
        ):  # fmt: skip
            with results.open("a") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        shared.pack(small, args.out, "reder-gpu")
    dev = {lang: read_lines(general / f"dev.{lang}") for lang in ("en", "de")}
    trips = {}
    for start, other in (("en", "de"), ("de", "en")):
        out = reder_reversibility.round_trip(translator, dev[start], start, other)
        trips[start] = score(out["back"], dev[start], start) | {"via": other}
    (small / "reversibility.json").write_text(json.dumps(trips, indent=2) + "\n")
    log(f"reversibility (general dev): {trips}")


if __name__ == "__main__":
    main()
