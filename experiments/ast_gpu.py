"""Issue 31's experiment on a lent GPU, in one call: train every system of an
`experiments/ast-bible.sh` work directory there, score each language, and bring back what the
report needs within the device's limits (64 MiB, 16 MiB a file). The device image has torch,
sentencepiece, safetensors, sacrebleu and numpy, not this project's CLI or its other
dependencies, so this drives `models` directly; `sacremoses` and its dependencies travel as
wheels.

Prepared here (`bash experiments/ast-gpu-prepare.sh`: the data, tokenizer and configs of
ast-bible.sh packed into runs/gpu-ast/work.tar.xz, the wheels into runs/gpu-ast/wheels), then,
with the `device` tool (carry runs/gpu-ast):

    pip install -q --no-index --find-links runs/gpu-ast/wheels sacremoses \
      && tar xJf runs/gpu-ast/work.tar.xz -C /tmp \
      && python experiments/ast_gpu.py --work /tmp/ast-work --out $OUT

The systems train in the order given, most needed first: the comparison (dense, FFN-sparse
with its scores at 30x), the top-k ablation, the equal-total-size reference, a second seed,
the disparity ablation. A call is cut off at 10 minutes and returns only what is in $OUT by
then, so the CUDA check runs first, $OUT is packed again after each system, and a system
starts only when the longest one so far still fits in `--minutes`.

At most 8 files come back, so $OUT gets small.tar.gz (results.jsonl: one eval record per system
and language; each system's hypotheses; selection.json; the CUDA check of the served bundle;
the log; the served sparse bundle but its weights) and those weights (fp16) in parts of 15 MiB
(`cat model.safetensors.part-* > bundle-<system>/model.safetensors` here; the manifest's
checksum verifies the join). Tested on the CPU at a few updates (`--device cpu`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from models.evaluate import evaluate
from models.results import eval_records, git_state
from models.tokenizer import Tokenizer
from models.train import TrainConfig, TrainData
from models.translator import DecodeOptions, Translator

sys.path.insert(0, str(Path(__file__).resolve().parent))  # experiments/ is not a package
import ast_selection  # noqa: E402
import device_return as shared  # noqa: E402

# The comparison first (dense against FFN-sparse with its scores at 30x), then the top-k
# ablation, the equal-total-size reference, a second seed of the sparse model, and the
# disparity ablation.
SYSTEMS = (
    "dense,ffn-sparse-lr30,ffn-sparse-lr30-notopk,dense-wide,ffn-sparse-lr30-seed2,"
    "ffn-sparse-lr30-nodisparity"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="an unpacked ast-bible work dir")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--systems", default=SYSTEMS, help="comma-separated, most needed first")
    ap.add_argument("--serve", default="ffn-sparse-lr30", help="the system whose bundle returns")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a test here")
    ap.add_argument("--steps", type=int, default=None, help="override every system's updates")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument(
        "--minutes", type=float, default=8.5, help="start no system that would end after this"
    )
    args = ap.parse_args()
    started = time.time()
    # what comes back, packed into one archive after each step
    small, log, close_log = shared.start(args.work, args.out, args.device)
    try:
        sentences = (args.work / "general-test.en").read_text().splitlines()
        check = shared.cuda_check(small, sentences, log)
        (small / "cuda-check.json").write_text(json.dumps(check))
        shared.pack(small, args.out, "ast-gpu")
        data = TrainData.from_prepared(args.work / "data", "bible")
        tokenizer = Tokenizer(args.work / "spm.model")
        longest = 0.0
        for system in args.systems.split(","):
            elapsed = time.time() - started
            if elapsed + longest > args.minutes * 60:
                log(f"{system} not started: {elapsed:.0f} s gone, the longest system took "
                    f"{longest:.0f} s, the budget is {args.minutes * 60:.0f} s")  # fmt: skip
                continue
            begun = time.time()
            train_and_score(args, system, data, tokenizer, small, log)
            longest = max(longest, time.time() - begun)
            log(f"{system} done in {time.time() - begun:.0f} s")
            shared.pack(small, args.out, "ast-gpu")
    finally:
        close_log()
        shared.pack(small, args.out, "ast-gpu")


def train_and_score(
    args: argparse.Namespace,
    system: str,
    data: TrainData,
    tokenizer: Tokenizer,
    small: Path,
    log: Callable[[str], None],
) -> None:
    """Train `system`, score every language into `small`/results.jsonl, and record its
    selections; the served one's weights go to `args.out` in parts."""
    cfg_dict = json.loads((args.work / "configs" / f"{system}.json").read_text())
    if args.steps is not None:
        cfg_dict["max_steps"] = args.steps
        if "phase2_after" in cfg_dict:
            cfg_dict["phase2_after"] = int(0.4 * args.steps)
    cfg = TrainConfig.from_dict(cfg_dict | {"threads": 0, "max_hours": 0.0})
    run = args.work / system
    run.mkdir(exist_ok=True)
    shutil.copyfile(args.work / "spm.model", run / "spm.model")
    if (args.work / "cache").is_dir() and not (run / "cache").exists():
        # encoded here: no tokenising there (absolute: a relative --work would dangle)
        (run / "cache").symlink_to((args.work / "cache").resolve())
    loaded, state, seconds = shared.train_bundle(run, data, cfg, tokenizer, args.device, log)
    bundle = run / "bundle"
    translator = Translator.from_loaded(loaded, "none")
    weights = loaded.manifest["files"]["model.safetensors"]
    git = git_state()
    for source, target in data.pairs:
        scored = evaluate(
            translator.for_pair(source, target), args.work / "data", ["bible"],
            DecodeOptions(beam_size=args.beam, batch_size=64),
            hyp_dir=small / "hyps" / system, log=log,
        )  # fmt: skip
        for record in eval_records(
            scored, system=system, split="test",
            bundle={"path": str(bundle), "sha256": weights,
                    "architecture": "sparse-transformer"},
            decoding={"beam": args.beam, "quantize": "none", "device": args.device,
                      "train_seconds": seconds, "updates": state["step"]},
            store_dirs={}, store_label=None, data_dir=args.work / "data",
            languages=(source, target), git=git,
        ):  # fmt: skip
            with (small / "results.jsonl").open("a") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    if "sparse" in system:
        selection = small / "selection.json"
        found = json.loads(selection.read_text()) if selection.exists() else {}
        found[system] = ast_selection.selection(bundle)
        selection.write_text(json.dumps(found, indent=2) + "\n")
    if system == args.serve:  # its weights in parts under the device's limit
        shared.split_bundle(bundle, small / f"bundle-{system}", args.out)


if __name__ == "__main__":
    main()
