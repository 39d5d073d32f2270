"""Issue 30's experiments on a lent GPU, one call per part: train every system there, score it
per language, time its CPU decoding, and bring back what the report needs within the device's
limits (64 MiB, 8 files of 16 MiB). The device image has torch, sentencepiece, safetensors,
sacrebleu and numpy, not this project's CLI or its other dependencies, so this drives `models`
directly; `sacremoses` and its dependencies travel as wheels.

- `--part m2o`: many-to-English on the Bible (`data/m2o`, from `ragmt data mix`): each system
  of `--systems` for `--epochs` (equal epochs, the paper's protocol), then the subword model
  again for Byte-nCF's training seconds (the wall-clock-matched comparison); each scored per
  source language on the clean and the noisy test sources.
- `--part transfer`: for each high:low pair, subword (vocabulary of the high-resource pair
  only) and Byte-nCF trained on high->en for `--transfer-epochs`, scored on high and zero-shot
  on low, then fine-tuned for `--finetune-steps` on each few-shot set (`data/<low>-en-<N>`) and
  scored on low.

Prepared here (`python experiments/byte_fusion_gpu.py prepare --bible data/bible`: the data,
SentencePiece models and configs packed into runs/gpu-byte/work.tar.xz, the wheels into
runs/gpu-byte/wheels; no training), then, with the `device` tool (carry runs/gpu-byte):

    pip install -q --no-index --find-links runs/gpu-byte/wheels sacremoses \\
      && tar xJf runs/gpu-byte/work.tar.xz -C /tmp \\
      && python experiments/byte_fusion_gpu.py run --work /tmp/byte-work --out $OUT --part m2o

$OUT gets small.tar.gz (results.jsonl: one eval record per system, pair and test set, each
with its training seconds and updates; cpu-decode.jsonl; the hypotheses; the log; the
returned bundles but their weights) and the weights of `--return` systems (fp16) in parts of
15 MiB (`cat model.safetensors.part-* > model.safetensors`; the manifest's checksum verifies
the join). Tested on the CPU at a few updates (`--device cpu`,
tests/test_byte_fusion_gpu_script.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path

import torch

from models.bundle import LoadedBundle
from models.data import read_lines
from models.evaluate import evaluate
from models.results import eval_records, git_state
from models.tokenizer import ByteTokenizer, Tokenizer
from models.train import TrainConfig, TrainData
from models.translator import DecodeOptions, Translator

sys.path.insert(0, str(Path(__file__).resolve().parent))  # experiments/ is not a package
import device_return as shared  # noqa: E402

CPU_SENTENCES = 100  # test verses per system for the CPU decoding time, one thread, batch 1


def prepared(folder: Path) -> tuple[TrainData, Path, list[str]]:
    """A `ragmt data mix` folder's training files, its data directory and its test sets."""
    manifest = json.loads((folder / "manifest.json").read_text())
    noisy = [f"bible-noise{round(r * 100)}" for r in manifest.get("noise", [])]
    return TrainData.from_prepared(folder, "bible"), folder, ["bible", *noisy]


class Experiment:
    """One part's runs in a work directory, scored into `results.jsonl` as they finish."""

    def __init__(self, args: argparse.Namespace, small: Path, log) -> None:
        self.args, self.small, self.log = args, small, log
        self.git = git_state()
        self.results = small / "results.jsonl"

    def config(self, system: str, **budget: float | int) -> TrainConfig:
        cfg = json.loads((self.args.work / "configs" / f"{system}.json").read_text())
        cfg |= {"threads": 0, "max_hours": self.args.max_minutes / 60, **budget}
        if self.args.steps is not None:  # a test run: every budget a few updates
            cfg |= {"max_steps": self.args.steps, "max_epochs": 0}
        return TrainConfig.from_dict(cfg)

    def tokenizer(self, system: str, corpus: str) -> Tokenizer | ByteTokenizer:
        if system.startswith("byte"):
            return ByteTokenizer()
        return Tokenizer(self.args.work / "spm" / f"{corpus}.model")

    def train(
        self, run: str, data: TrainData, cfg: TrainConfig, tok, init: Path | None = None
    ) -> tuple[LoadedBundle, dict, float]:
        return shared.train_bundle(
            self.args.work / "runs" / run, data, cfg, tok, self.args.device, self.log, init
        )

    def score(
        self, label: str, trained: tuple[LoadedBundle, dict, float], where: Path,
        test_sets: list[str], pair: tuple[str, str], zero_shot: bool = False,
    ) -> None:  # fmt: skip
        """Score `pair` on `test_sets`; records carry the training seconds and updates."""
        loaded, state, seconds = trained
        translator = Translator.from_loaded(loaded, "none").for_pair(*pair, unseen=zero_shot)
        scored = evaluate(
            translator, where, test_sets, DecodeOptions(beam_size=self.args.beam, batch_size=64),
            hyp_dir=self.small / "hyps" / label.replace(" ", "_"), log=self.log,
        )  # fmt: skip
        decoding = {"beam": self.args.beam, "quantize": "none", "device": self.args.device,
                    "train_seconds": seconds, "updates": state["step"],
                    "epochs": state.get("epoch")}  # fmt: skip
        if zero_shot:
            decoding["zero_shot"] = {"trained_pairs": [list(p) for p in translator.card.pairs]}
        bundle = {"path": str(loaded.path), "sha256": loaded.manifest["files"]["model.safetensors"],
                  "architecture": loaded.manifest["architecture"],
                  "parameters": sum(p.numel() for p in loaded.model.parameters())}  # fmt: skip
        for record in eval_records(
            scored, system=label, split="test", bundle=bundle, decoding=decoding, store_dirs={},
            store_label=None, data_dir=where, languages=pair, git=self.git,
        ):  # fmt: skip
            with self.results.open("a") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.pack()

    def pack(self) -> None:
        """What is done so far into $OUT: a call cut off at its limit returns it."""
        shared.pack(self.small, self.args.out, f"byte-gpu-{self.args.part}")

    def cpu_decode(self, label: str, bundle: Path, where: Path, pair: tuple[str, str]) -> None:
        """Batch-1 greedy decoding time on this machine's CPU, one thread, with PyTorch's int8
        decoder for every system alike (the device has no ONNX Runtime, which serves the
        subword model here, and the byte models have no ONNX Runtime path)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            translator = Translator.from_bundle(bundle, quantize="int8").for_pair(*pair)
            lines = read_lines(where / "bible" / f"test.{pair[0]}")[:CPU_SENTENCES]
            options = DecodeOptions(beam_size=1, batch_size=1)
            translator.translate(lines[:3], options)  # warm-up
            times = []
            for line in lines:
                start = time.perf_counter()
                translator.translate([line], options)
                times.append(1000 * (time.perf_counter() - start))
        finally:
            torch.set_num_threads(threads)
        times.sort()
        record = {"system": label, "languages": list(pair), "sentences": len(times),
                  "p50_ms": round(times[len(times) // 2], 2),
                  "mean_ms": round(sum(times) / len(times), 2), "quantize": "int8",
                  "cpu": _cpu_name()}  # fmt: skip
        self.log(f"CPU decoding {label}: {record}")
        with (self.small / "cpu-decode.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        self.pack()


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def m2o(x: Experiment) -> None:
    data, where, test_sets = prepared(x.args.work / "data" / "m2o")
    seconds: dict[str, float] = {}
    for system in x.args.systems.split(","):
        trained = x.train(system, data, x.config(system, max_epochs=x.args.epochs),
                          x.tokenizer(system, "m2o"))  # fmt: skip
        seconds[system] = trained[2]
        if system in x.args.back.split(","):  # its weights in parts under the device's limit
            shared.split_bundle(trained[0].path, x.small / f"bundle-{system}", x.args.out,
                                prefix=f"{system}.")  # fmt: skip
        for pair in data.pairs:
            x.score(system, trained, where, test_sets, pair)
        x.cpu_decode(system, trained[0].path, where, data.pairs[0])
    if "subword" in seconds and "byte-ncf" in seconds:  # wall-clock matched: no epoch limit
        cfg = x.config("subword", max_epochs=0, max_steps=10**9,
                       max_hours=seconds["byte-ncf"] / 3600)  # fmt: skip
        if x.args.steps is not None:
            cfg = x.config("subword")
        label = "subword (byte-ncf's training time)"
        trained = x.train("subword-wallclock", data, cfg, x.tokenizer("subword", "m2o"))
        for pair in data.pairs:
            x.score(label, trained, where, test_sets, pair)


def transfer(x: Experiment) -> None:
    sizes = [int(n) for n in x.args.few_shot.split(",") if n]
    for pair in x.args.pairs.split(","):
        high, _, low = pair.partition(":")
        data, where, _ = prepared(x.args.work / "data" / f"{high}-en")
        few = {n: prepared(x.args.work / "data" / f"{low}-en-{n}") for n in sizes}
        low_where = few[sizes[0]][1]  # every few-shot folder holds the same test set
        for system in ("subword", "byte-ncf"):
            tok = x.tokenizer(system, f"{high}-en")
            run = f"{system}-{high}"
            base = x.train(run, data, x.config(system, max_epochs=x.args.transfer_epochs), tok)
            x.score(f"{system} {high}-en: {high}", base, where, ["bible"], (high, "en"))
            x.score(f"{system} {high}-en: {low} zero-shot", base, low_where, ["bible"],
                    (low, "en"), zero_shot=True)  # fmt: skip
            for n, (few_data, _, _) in few.items():
                cfg = x.config(system, max_epochs=0, max_steps=x.args.finetune_steps)
                tuned = x.train(f"{run}-{low}{n}", few_data, cfg, tok, init=base[0].path)
                x.score(f"{system} {high}-en + {n} {low}: {low}", tuned, low_where, ["bible"],
                        (low, "en"))  # fmt: skip


# The GPU width: the body SEEDS §1.3 gives every system (d 256, 4 heads, 6 encoder and 3 decoder
# layers, FFN 1024); the rest of each recipe as in the CPU configs, with larger batches.
GPU_MODEL = {"d_model": 256, "n_heads": 4, "d_ff": 1024}
GPU_TRAIN = {"max_tokens": 16384, "save_every": 500, "keep_checkpoints": 2}
CONFIGS = Path(__file__).resolve().parent.parent / "models" / "configs"


def prepare(args: argparse.Namespace) -> None:
    """The work directory a GPU call unpacks (data, SentencePiece models, configs, a few
    general test sentences for the CUDA check), packed with sacremoses's wheels: no training."""
    import shutil
    import subprocess

    from index_builder.prepare.multilingual import mix_bible
    from models.tokenizer import train_tokenizer

    work = args.pack / "byte-work"
    if work.exists():
        shutil.rmtree(work)
    data = work / "data"
    quiet = lambda _: None  # noqa: E731
    mix_bible(args.bible, data / "m2o", args.sources.split(","), ["en"], args.nt,
              args.test_verses, [0.05, 0.1], quiet)  # fmt: skip
    spm = work / "spm"
    spm.mkdir(parents=True)
    corpora = {"m2o": data / "m2o"}
    for pair in args.pairs.split(","):
        high, _, low = pair.partition(":")
        mix_bible(args.bible, data / f"{high}-en", [high], ["en"], False, args.test_verses,
                  None, quiet)  # fmt: skip
        corpora[f"{high}-en"] = data / f"{high}-en"
        for n in args.few_shot.split(","):
            mix_bible(args.bible, data / f"{low}-en-{n}", [low], ["en"], False, args.test_verses,
                      None, quiet, train_verses=int(n))  # fmt: skip
    for name, folder in corpora.items():  # each subword model from its training pairs only
        src, tgt = json.loads((folder / "manifest.json").read_text())["languages"].values()
        files = [(folder / "bible" / f"train.{src}", src), (folder / "bible" / f"train.{tgt}", tgt)]
        train_tokenizer(files, spm / f"{name}.model", vocab_size=args.vocab_size)
    (work / "configs").mkdir()
    for system in ("subword", "byte-none", "byte-ncf", "byte-wsf"):
        cfg = json.loads((CONFIGS / f"{system}-m2o.json").read_text())
        cfg["model"] |= GPU_MODEL
        (work / "configs" / f"{system}.json").write_text(json.dumps(cfg | GPU_TRAIN, indent=2))
    lines = read_lines(args.data / "general" / "test.en")[:50]
    (work / "general-test.en").write_text("".join(x + "\n" for x in lines))
    with tarfile.open(args.pack / "work.tar.xz", "w:xz") as tar:
        tar.add(work, arcname="byte-work")
    shutil.rmtree(work)
    if not args.no_wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "sacremoses", "--python-version",
             "3.12", "--only-binary=:all:", "--platform", "manylinux2014_x86_64", "--platform",
             "manylinux_2_17_x86_64", "-d", str(args.pack / "wheels")],
            check=True,
        )  # fmt: skip
    size = sum(f.stat().st_size for f in args.pack.rglob("*") if f.is_file())
    print(f"{args.pack}: {size / 2**20:.1f} MiB to carry")


def run(args: argparse.Namespace) -> None:
    small, log, close_log = shared.start(args.work, args.out, args.device, f"return-{args.part}")
    started = time.time()
    x = Experiment(args, small, log)
    try:
        if args.part == "m2o":
            sentences = (args.work / "general-test.en").read_text().splitlines()
            found = shared.cuda_check(small, sentences, log)
            (small / "cuda-check.json").write_text(json.dumps(found))
            x.pack()
        (m2o if args.part == "m2o" else transfer)(x)
    finally:
        log(f"part {args.part}: {time.time() - started:.0f} s")
        close_log()
        x.pack()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="here: the work directory and wheels to carry")
    prep.add_argument("--bible", type=Path, default=Path("data/bible"))
    prep.add_argument("--data", type=Path, default=Path("data/en-de"), help="CUDA check's text")
    prep.add_argument("--pack", type=Path, default=Path("runs/gpu-byte"))
    prep.add_argument("--sources", default="de,ru,hi,zh", help="many-to-English sources")
    prep.add_argument("--nt", action=argparse.BooleanOptionalAction, default=True,
                      help="many-to-English: New Testament training books only")  # fmt: skip
    prep.add_argument("--test-verses", type=int, default=300)
    prep.add_argument("--vocab-size", type=int, default=8000)
    prep.add_argument("--no-wheels", action="store_true", help="a test: no pip download")
    go = sub.add_parser("run", help="there: one part of the experiment")
    go.add_argument("--work", type=Path, required=True, help="the unpacked work directory")
    go.add_argument("--out", type=Path, required=True)
    go.add_argument("--part", choices=("m2o", "transfer"), required=True)
    go.add_argument("--systems", default="subword,byte-none,byte-ncf,byte-wsf")
    go.add_argument("--epochs", type=int, default=5)
    go.add_argument("--transfer-epochs", type=int, default=3)
    go.add_argument("--finetune-steps", type=int, default=500)
    go.add_argument("--max-minutes", type=float, default=2.0, help="cap on any one training")
    go.add_argument("--beam", type=int, default=4)
    go.add_argument("--return", dest="back", default="byte-ncf,byte-wsf",
                    help="m2o: systems whose weights come back")  # fmt: skip
    go.add_argument("--device", default="cuda", help="cuda, or cpu for a test here")
    go.add_argument("--steps", type=int, default=None, help="a test: every training this long")
    for p in (prep, go):
        p.add_argument("--pairs", default="ru:uk,es:pt", help="transfer: high:low sources")
        p.add_argument("--few-shot", default="1000,2000,3000,4000")
    args = ap.parse_args()
    (prepare if args.command == "prepare" else run)(args)


if __name__ == "__main__":
    main()
