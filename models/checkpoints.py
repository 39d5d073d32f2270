"""Training checkpoints: `ckpt-<step>/` directories of weights, optimizer state and the RNG
(safetensors + JSON, written atomically), resumed exactly and averaged into a bundle's weights.
Shared by every trainer (`models.train`, `models.train_reder`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from models.artifacts import atomic_directory

__all__ = [
    "average_checkpoints",
    "checkpoints",
    "load_weights",
    "resume",
    "save_and_prune",
    "save_checkpoint",
    "save_final",
]

Log = Callable[[str], None]
RNG_KEY = "__rng__::torch"


def _optimizer_tensors(opt: torch.optim.Optimizer, model: nn.Module) -> dict[str, torch.Tensor]:
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for group in opt.param_groups:
        for p in group["params"]:
            for k, v in opt.state.get(p, {}).items():
                if torch.is_tensor(v):
                    out[f"{names[id(p)]}::{k}"] = v.detach().clone().contiguous()
    return out


def _load_optimizer(
    opt: torch.optim.Optimizer, model: nn.Module, tensors: dict[str, torch.Tensor]
) -> None:
    params = dict(model.named_parameters())
    for key, value in tensors.items():
        if key == RNG_KEY:
            torch.set_rng_state(value)
            continue
        name, k = key.split("::")
        opt.state[params[name]][k] = value.to(params[name].device)


def _unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """State dict without aliases (tied embeddings appear once), contiguous for safetensors."""
    seen: dict[int, str] = {}
    out = {}
    for name, t in model.state_dict().items():
        ptr = t.data_ptr()
        if ptr in seen:
            continue
        seen[ptr] = name
        out[name] = t.detach().cpu().contiguous()
    return out


def save_checkpoint(
    run: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer, state: dict[str, Any]
) -> Path:
    final = run / f"ckpt-{step:07d}"
    with atomic_directory(final) as tmp:
        save_file(_unique_state(model), str(tmp / "model.safetensors"))
        tensors = _optimizer_tensors(opt, model)
        tensors[RNG_KEY] = torch.get_rng_state()  # dropout masks continue exactly on resume
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "state.json").write_text(json.dumps(state, indent=2))
    return final


def checkpoints(run: Path) -> list[Path]:
    return sorted(p for p in run.glob("ckpt-*") if (p / "state.json").is_file())


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights of several checkpoints (a cheap ensemble)."""
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        for k, v in load_file(str(p / "model.safetensors")).items():
            total[k] = total.get(k, 0) + v.float()
    return {k: v / len(paths) for k, v in total.items()}


def load_weights(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # tied aliases are absent from `weights` but share storage with a loaded tensor
    state = model.state_dict()
    really_missing = [
        m for m in missing if not any(state[m].data_ptr() == state[k].data_ptr() for k in weights)
    ]
    if really_missing or unexpected:
        raise ValueError(f"checkpoint mismatch: missing {really_missing}, unexpected {unexpected}")


def resume(
    run: Path, model: nn.Module, opt: torch.optim.Optimizer, device: torch.device, log: Log
) -> dict[str, Any] | None:
    """Load the newest checkpoint of `run` (weights, optimizer, RNG) and return its state;
    None when the run has none."""
    existing = checkpoints(run)
    if not existing:
        return None
    last = existing[-1]
    load_weights(model, load_file(str(last / "model.safetensors"), device=str(device)))
    _load_optimizer(opt, model, load_file(str(last / "optimizer.safetensors")))
    state = json.loads((last / "state.json").read_text())
    log(f"resumed from {last.name} (step {state['step']})")
    return state


def save_and_prune(
    run: Path,
    step: int,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int,
) -> None:
    """A checkpoint at `step`; only the newest `keep` stay."""
    save_checkpoint(run, step, model, opt, state)
    for old in checkpoints(run)[:-keep]:
        shutil.rmtree(old)


def save_final(
    run: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """A checkpoint at the step the run stopped at, unless the newest one is there already."""
    if not checkpoints(run) or checkpoints(run)[-1].name != f"ckpt-{step:07d}":
        save_checkpoint(run, step, model, opt, state)
