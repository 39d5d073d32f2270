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

At most 8 files come back, so $OUT gets small.tar.gz (results.jsonl: one eval record per system
and language; each system's hypotheses; selection.json; the CUDA check of the served bundle;
the log; the FFN-sparse bundle but its weights) and those weights (fp16) in parts of 15 MiB
(`cat model.safetensors.part-* > bundle-ffn-sparse/model.safetensors` here; the manifest's
checksum verifies the join). Tested on the CPU at a few updates (`--device cpu`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
from pathlib import Path

from models.evaluate import evaluate
from models.results import eval_records, git_state
from models.tokenizer import Tokenizer
from models.train import TrainConfig, TrainData
from models.translator import DecodeOptions, Translator

sys.path.insert(0, str(Path(__file__).resolve().parent))  # experiments/ is not a package
import ast_selection  # noqa: E402
import device_return as shared  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="an unpacked ast-bible work dir")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--systems", default="dense,ffn-sparse,dense-wide,ffn-sparse-notopk")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a test here")
    ap.add_argument("--steps", type=int, default=None, help="override every system's updates")
    ap.add_argument("--beam", type=int, default=4)
    args = ap.parse_args()
    # what comes back, packed into one archive at the end
    small, log, close_log = shared.start(args.work, args.out, args.device)
    data = TrainData.from_prepared(args.work / "data", "bible")
    tokenizer = Tokenizer(args.work / "spm.model")
    results = small / "results.jsonl"
    git = git_state()
    for system in args.systems.split(","):
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
                with results.open("a") as f:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
    found = {
        s: ast_selection.selection(args.work / s / "bundle")
        for s in args.systems.split(",")
        if "sparse" in s
    }
    (small / "selection.json").write_text(json.dumps(found, indent=2) + "\n")
    sentences = (args.work / "general-test.en").read_text().splitlines()
    (small / "cuda-check.json").write_text(json.dumps(shared.cuda_check(small, sentences, log)))
    sparse = args.work / "ffn-sparse" / "bundle"
    if sparse.is_dir():  # the bundle to serve, its weights in parts under the device's limit
        shared.split_bundle(sparse, small / "bundle-ffn-sparse", args.out)
    # at most 8 files come back: everything but the weights in one archive
    close_log()
    with tarfile.open(args.out / "small.tar.gz", "w:gz") as tar:
        tar.add(small, arcname="ast-gpu")


if __name__ == "__main__":
    main()
