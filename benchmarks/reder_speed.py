"""Greedy CTC decoding of a REDER bundle against an autoregressive teacher at beam 4, side by
side in one run on this CPU (issue 29's goal: at least 5x faster at batch 1):

    python -m benchmarks.reder_speed --reder BUNDLE [--teacher BUNDLE] --data data/en-de \
        [--domain bible] [--threads 1] [--results FILE]

Both translate the same test sources through the pipeline the service uses: one at a time
(p50/p95 latency) and in batches of 32 (target pieces per second). The teacher decodes with
beam 4: float PyTorch, ONNX Runtime int8, and as the service runs it (`auto`: the native
int8 step, `models.native_step`, where a C++ compiler builds it); REDER greedily (one
non-autoregressive pass, float PyTorch and ONNX Runtime int8, `models.ort_ctc`, which is
`auto` for it). Speed-ups are against REDER as the service runs it (ONNX Runtime int8).

Each system's arithmetic is counted too: the FLOPs of its products with weights in its float
PyTorch run over the batch-1 sentences (the PyTorch profiler), per sentence. Its int8 runs do the
same products. The teacher's FLOPs over REDER's bound the speed-up that running both at the
same arithmetic rate would give, whatever the engineering. Without `--reder`, a REDER of the
reference config's size with untrained weights stands in: a CTC pass costs the same whatever
the weights (its frames are twice the source's tokens), so its time is the trained model's,
and no BLEU is claimed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks._common import decode_speed, machine, run_fields, write_record
from models import pipeline
from models.bundle import load_bundle
from models.data import read_lines
from models.quantize import ort_model, resolve
from models.registry import build_model
from models.translator import BASELINE_BUNDLE, DecodeOptions, Translator

CONFIG = Path(__file__).resolve().parent.parent / "models" / "configs" / "reder-small-en-de.json"


def untrained_reder(teacher: Translator) -> Translator:
    """A REDER of the reference config's size over the teacher's vocabulary, weights untrained."""
    cfg = json.loads(CONFIG.read_text())["model"]
    model = build_model("reder", {"vocab_size": teacher.tokenizer.vocab_size, **cfg}).eval()
    with torch.inference_mode():  # ActNorm's data-dependent init, which training would do
        model(torch.randint(4, teacher.tokenizer.vocab_size, (8, 20)))
    return Translator(model, teacher.tokenizer, "en", "de", decoding="ctc")


# The products with weights (projections, feed-forwards, the output layer): attention's own
# products are left out for both systems (the teacher's run inside a fused kernel that no
# counter sees), a few percent at these lengths.
WEIGHT_PRODUCTS = ("aten::mm", "aten::addmm")


def matmul_mflop(translator: Translator, beam: int, sentences: list[str]) -> float:
    """MFLOPs of the products with weights (`WEIGHT_PRODUCTS`) per sentence of `translator`
    (a float PyTorch model) decoding `sentences` one at a time through the pipeline, as the
    batch-1 timing does; counted by the profiler, which sees inside inference mode."""
    one = DecodeOptions(beam_size=beam, batch_size=1)
    flops = 0
    for s in sentences:  # a profile a sentence: one over all of them held every event
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            pipeline.translate(translator, [s], one)
        flops += sum(e.flops for e in prof.key_averages() if e.key in WEIGHT_PRODUCTS)
    return flops / len(sentences) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reder", type=Path, default=None, help="a REDER bundle (default: untrained)")
    ap.add_argument("--teacher", type=Path, default=BASELINE_BUNDLE)
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--domain", default="bible")
    ap.add_argument("--latency-sentences", type=int, default=100)
    ap.add_argument("--throughput-sentences", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fields = run_fields("reder-speed")
    teacher_bundle = load_bundle(args.teacher)
    systems = {
        "teacher beam 4, float": (Translator.from_loaded(teacher_bundle, "none"), 4),
        "teacher beam 4, ort-int8": (Translator.from_loaded(teacher_bundle, "ort-int8"), 4),
    }
    served = resolve("auto", "cpu", teacher_bundle.model)
    if served not in ("none", "ort-int8"):  # native-int8 where the step library builds
        systems[f"teacher beam 4, {served} (served)"] = (
            Translator.from_loaded(teacher_bundle, served),
            4,
        )
    if args.reder is not None:
        reder_bundle, suffix = load_bundle(args.reder), ""
        reder = Translator.from_loaded(reder_bundle, "none").for_pair("en", "de")
        fast = Translator.from_loaded(reder_bundle, "ort-int8").for_pair("en", "de")
    else:
        reder, suffix = untrained_reder(systems["teacher beam 4, float"][0]), " (untrained weights)"
        fast = Translator(ort_model(reder.model, "ort-int8"), reder.tokenizer, "en", "de",
                          decoding="ctc")  # fmt: skip
    systems[f"REDER greedy, float{suffix}"] = (reder, 1)
    systems[f"REDER greedy, ort-int8{suffix}"] = (fast, 1)
    sentences = [s for s in read_lines(args.data / args.domain / "test.en") if s.strip()]
    latency, batch = sentences[: args.latency_sentences], sentences[: args.throughput_sentences]
    print(f"machine: {machine()}; {args.threads} thread(s); {args.domain} test, en->de")
    rows = {name: decode_speed(t, beam, latency, batch) for name, (t, beam) in systems.items()}
    reder_name = next(n for n in rows if n.startswith("REDER greedy, ort-int8"))
    # the same products whatever runs them: each float model's count stands for its int8 runs
    teacher_mflop = matmul_mflop(*systems["teacher beam 4, float"], latency)
    reder_mflop = matmul_mflop(*systems[f"REDER greedy, float{suffix}"], latency)
    print("| system | p50 ms | p95 ms | pieces/s | REDER ort-int8 speed-up (p50) | (pieces/s) "
          "| MFLOP a sentence | GFLOP/s, batch 1 |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        up_p50 = r["p50_ms"] / rows[reder_name]["p50_ms"]
        # a system that emitted no piece (an untrained model) has no rate to compare
        rate = r["pieces_per_s"]
        up_tps = rows[reder_name]["pieces_per_s"] / rate if rate else None
        mflop = teacher_mflop if name.startswith("teacher") else reder_mflop
        r |= {
            "reder_speedup_p50": up_p50,
            "reder_speedup_pieces": up_tps,
            "matmul_mflop_per_sentence": mflop,
            "arithmetic_ratio": mflop / reder_mflop,  # this system's products over REDER's
            "gflop_per_s_batch1": mflop / r["mean_ms"],  # the rate it runs them at, batch 1
        }
        print(
            f"| {name} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['pieces_per_s']:.0f} "
            f"| {up_p50:.1f}x | {'-' if up_tps is None else f'{up_tps:.1f}x'} | {mflop:.0f} "
            f"| {r['gflop_per_s_batch1']:.1f} |"
        )
        write_record(
            args.results, fields, system=name, threads=args.threads, domain=args.domain,
            latency_sentences=len(latency), throughput_sentences=len(batch),
            reder_bundle=str(args.reder) if args.reder else None,
            teacher_bundle=str(args.teacher), **r,
        )  # fmt: skip


if __name__ == "__main__":
    main()
