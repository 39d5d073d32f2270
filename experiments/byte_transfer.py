"""Zero-shot and few-shot cross-lingual transfer, subword against Byte-nCF (issue 30's second
experiment; `../shared/SEEDS.md` §1.3): train each system on a high-resource language into
English (the subword vocabulary learnt from that pair alone), score it on a related
low-resource language it never saw (zero-shot), then fine-tune it on 1k/2k/3k/4k verses of
that language and score it again. One self-describing record per score (`ragmt eval
--results`); a second run redoes nothing that is done.

    python experiments/byte_transfer.py --bible data/bible --work runs/transfer \\
        --pairs ru:uk,es:pt --systems subword,byte-ncf \\
        --results experiments/results/byte-transfer.jsonl

Every system trains with its `models/configs/<system>-m2o.json` (`--config-dir`), the budget
overridden here: `--base-epochs` on the high-resource pair (or `--base-steps`, updates per
system, for equal parts of an epoch: systems whose batches hold different numbers of verses;
or `--base-hours`, hours of training per system, for a wall-clock-matched comparison, its run
directory named by those hours so it sits beside the same system's epoch-bound run),
`--finetune-steps` updates on each few-shot set (the paper: 50K and 5K steps; SEEDS: 500
fine-tuning steps on the CPU). `--noise 0.05,0.1` also scores the high-resource model on
copies of its test sources with that share of characters mistyped (the issue's robustness
experiment; the references are unchanged). `--few-shot ""` scores zero-shot only.
`--max-tokens` and `--threads` replace every training's batch size and torch threads; `--tag`
ends every score's system label (a second budget of the same systems, say, in a copy of the
run directories, which resume from their newest checkpoints). The test
sets are the Bible's held-out books (`--test-verses` of them), which no training split holds;
the few-shot verses are one seeded sample, so the 1,000 are among the 2,000
(`ragmt data mix --train-verses`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CONFIGS = Path(__file__).resolve().parent.parent / "models" / "configs"


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def derived_config(base: Path, out: Path, **budget: object) -> Path:
    """`base` with its budget replaced (None removes a field), written to `out`."""
    cfg = json.loads(base.read_text())
    for key, value in budget.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cfg, indent=2) + "\n")
    return out


def by_system(spec: str, systems: list[str], flag: str, kind: type = int) -> dict[str, int | float]:
    """`--base-steps` or `--base-hours`: "" (epochs decide), "N" for every system, or
    "system=N,..."; N a positive `kind`."""
    if not spec:
        return {}

    def value(text: str, part: str) -> int | float:
        try:
            n = kind(text)
        except ValueError:
            n = 0
        if not n > 0:
            raise SystemExit(f"{flag}: {part!r} is not system=N, N > 0, for one of {systems}")
        return n

    if "=" not in spec:
        return dict.fromkeys(systems, value(spec, spec))
    out = {}
    for part in spec.split(","):
        name, _, n = part.partition("=")
        if name not in systems:
            raise SystemExit(f"{flag}: {part!r} is not system=N, N > 0, for one of {systems}")
        out[name] = value(n, part)
    return out


def base_budget(
    system: str, epochs: int, steps: dict[str, int], hours: dict[str, float]
) -> tuple[dict[str, object], str]:
    """The base training's budget fields and its run directory's suffix: whole epochs, or
    updates (a part of an epoch), or hours of training (wall-clock matched), one of them."""
    if system in steps and system in hours:
        raise SystemExit(f"{system}: --base-steps and --base-hours both name it; give one")
    if system in hours:
        return {"max_epochs": None, "max_steps": 10**9, "max_hours": hours[system]}, (
            f"-{hours[system]:g}h"
        )
    if system in steps:  # a part of an epoch: equal verses, not whole passes
        return {"max_epochs": None, "max_steps": steps[system]}, ""
    return {"max_epochs": epochs, "max_steps": 10**9}, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bible", type=Path, required=True, help="ragmt data prepare --bible")
    ap.add_argument("--work", type=Path, required=True, help="data, runs and reports go here")
    ap.add_argument("--pairs", default="ru:uk,es:pt", help="high:low source languages")
    ap.add_argument("--systems", default="subword,byte-ncf")
    ap.add_argument("--few-shot", default="1000,2000,3000,4000", help="low-resource verses")
    ap.add_argument("--test-verses", type=int, default=300)
    ap.add_argument("--base-epochs", type=int, default=1)
    ap.add_argument(
        "--base-steps",
        default="",
        help="updates on the HRL pair instead of epochs: N for every system, or system=N,...",
    )
    ap.add_argument(
        "--base-hours",
        default="",
        help="hours of training on the HRL pair instead (wall-clock matched): H or system=H,...",
    )
    ap.add_argument("--finetune-steps", type=int, default=500)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--config-dir", type=Path, default=CONFIGS)
    ap.add_argument("--vocab-size", type=int, default=8000, help="subword: the HRL pair's")
    ap.add_argument("--seed", type=int, default=1, help="the few-shot sample's")
    ap.add_argument("--noise", default="", help="rates of noisy copies of the HRL test, 0.05,0.1")
    ap.add_argument("--threads", type=int, default=0, help="torch threads a training; 0: default")
    ap.add_argument("--max-tokens", type=int, default=0, help="a batch's; 0: the config's")
    ap.add_argument("--tag", default="", help="appended to every score's system label")
    ap.add_argument("--results", type=Path, required=True)
    args = ap.parse_args()
    ragmt = [sys.executable, "-m", "service.cli"]
    sizes = [int(n) for n in args.few_shot.split(",") if n]
    systems = args.systems.split(",")
    base_steps = by_system(args.base_steps, systems, "--base-steps")
    base_hours = by_system(args.base_hours, systems, "--base-hours", float)
    data = args.work / "data"

    def mix(source: str, out: Path, *extra: str) -> Path:
        if not (out / "manifest.json").is_file():
            run([*ragmt, "data", "mix", "--bible", str(args.bible), "--from", source,
                 "--to", "en", "--out", str(out), "--test-verses", str(args.test_verses),
                 *extra])  # fmt: skip
        return out

    def score(
        bundle: Path, where: Path, source: str, label: str, zero_shot: bool, domains: str = "bible"
    ) -> None:
        report = args.work / "eval" / label.replace(" ", "_")
        if report.with_suffix(".json").is_file():
            return  # scored on an earlier run
        run([*ragmt, "eval", "--model", str(bundle), "--data", str(where), "--domains", domains,
             "--source-lang", source, *(["--zero-shot"] if zero_shot else []),
             "--beam", str(args.beam), "--results", str(args.results), "--system", label,
             "--out", str(report)])  # fmt: skip

    def train(where: Path, config: Path, run_dir: Path, kind: str, init: Path | None) -> Path:
        bundle = run_dir / "bundle"
        if not (bundle / "manifest.json").is_file():
            cmd = ["train", "--data", str(where), "--domain", "bible", "--config", str(config),
                   "--run", str(run_dir), "--out", str(bundle), "--vocab-size",
                   str(args.vocab_size)]  # fmt: skip
            cmd += ["--tokenizer", "bytes" if kind == "byte" else "sentencepiece"]
            cmd += ["--init", str(init)] if init is not None else []
            run([*ragmt, *cmd])
        return bundle

    for pair in args.pairs.split(","):
        high, _, low = pair.partition(":")
        noise = ["--noise", args.noise] if args.noise else []
        high_data = mix(high, data / f"{high}-en", *noise)
        few = {n: mix(low, data / f"{low}-en-{n}", "--train-verses", str(n),
                      "--seed", str(args.seed)) for n in sizes}  # fmt: skip
        low_test = mix(low, data / f"{low}-en-test", "--train-verses", "1")  # its test set
        for system in systems:
            kind = system.partition("-")[0]
            base_cfg = args.config_dir / f"{system}-m2o.json"
            cfgs = args.work / "configs"
            shared = {"threads": args.threads} if args.threads else {}
            if args.max_tokens:  # every training alike, fine-tuning too
                shared["max_tokens"] = args.max_tokens
            budget, suffix = base_budget(system, args.base_epochs, base_steps, base_hours)
            base = derived_config(base_cfg, cfgs / f"{system}{suffix}-base.json", **budget,
                                  **shared)  # fmt: skip
            tune = derived_config(base_cfg, cfgs / f"{system}-finetune.json",
                                  max_epochs=None, max_steps=args.finetune_steps,
                                  **shared)  # fmt: skip
            runs = args.work / "runs"
            bundle = train(high_data, base, runs / f"{system}-{high}{suffix}", kind, None)
            test_sets = ["bible"] + [f"bible-noise{round(float(r) * 100)}"
                                     for r in args.noise.split(",") if r]  # fmt: skip
            name = f"{system}{suffix} {high}-en"  # the hours, where they bound it
            score(bundle, high_data, high, f"{name}: {high}{args.tag}", False,
                  ",".join(test_sets))  # fmt: skip
            score(bundle, low_test, low, f"{name}: {low} zero-shot{args.tag}", True)
            for n in sizes:
                tuned = train(
                    few[n], tune, runs / f"{system}-{high}{suffix}-{low}{n}", kind, bundle
                )
                score(tuned, low_test, low, f"{name} + {n} {low}: {low}{args.tag}", False)


if __name__ == "__main__":
    main()
