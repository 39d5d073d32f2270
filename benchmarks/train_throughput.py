"""Training throughput (target tokens/s) of the baseline config, fp32 against bf16 autocast.

Measured side by side in one run on the same batches of the prepared `general` corpus:
    python -m benchmarks.train_throughput --data data/en-de
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks._common import machine
from models.data import collate, encode_corpus, token_batches
from models.registry import build_model
from models.tokenizer import Tokenizer
from models.train import label_smoothed_loss

CONFIG = Path(__file__).resolve().parent.parent / "models/configs/transformer-en-de.json"


def run(corpus, batches, model_cfg: dict, bf16: bool, device: torch.device) -> float:
    torch.manual_seed(0)
    model = build_model("transformer", model_cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98))
    tokens, elapsed = 0, 0.0
    for i, idx in enumerate(batches):
        src, tin, tout = (t.to(device) for t in collate(corpus, idx))
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tin)
        loss = label_smoothed_loss(logits, tout, 0.1)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 3:  # warm-up steps are not timed
            elapsed += time.perf_counter() - start
            tokens += int((tout != 0).sum())
    return tokens / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--tokenizer", type=Path, default=Path("models/baseline_bundle/spm.model"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    device = torch.device(args.device)
    tok = Tokenizer(args.tokenizer)
    cfg = json.loads(CONFIG.read_text())
    d = args.data / "general"
    corpus = encode_corpus(tok, d / "train.en", d / "train.de", "en", "de", 128)
    batches = token_batches(corpus, cfg["max_tokens"], seed=0)[: args.steps + 3]
    model_cfg = {"vocab_size": tok.vocab_size, "max_len": 130, **cfg["model"]}
    print(f"machine: {machine()}")
    print(
        f"model: {model_cfg}; batches of <= {cfg['max_tokens']} padded tokens; "
        f"{args.steps} timed steps"
    )
    fp32 = run(corpus, batches, model_cfg, False, device)
    bf16 = run(corpus, batches, model_cfg, True, device)
    print(f"fp32:          {fp32:8.0f} target tokens/s")
    print(f"bf16 autocast: {bf16:8.0f} target tokens/s")
    print(f"ratio bf16/fp32: {bf16 / fp32:.2f}x")


if __name__ == "__main__":
    main()
