"""REDER's training loop (`ragmt train` with a CTC duplex architecture; SEEDS §3, issue 29).

Every update holds one token-batch of each direction in use ("both": x→y and y→x, as the
reference code's round-robin datasets; "forward"/"backward": a simplex model of one). Per
direction, on a batch (x, y):

- CTC: the model upsamples x ×k; pairs CTC cannot emit at all (y needs more frames than k·|x|:
  U plus its repeated neighbours > k·N) leave the batch before the pass and are counted, per
  direction and cumulatively, in the log and in the bundle's manifest (the paper filters them,
  the code hides them behind `zero_infinity`). `ctc.ctc_loss` with the config's smoothing.
- FBA (from update `aux_after` on, `fba_weight` > 0): a* = the best CTC alignment of y under
  the current forward log-probs (no gradient), blank at blank states, as 2|x| frames; the
  reverse direction runs on a* without upsampling, with the dropout seed of the forward pass,
  and its states pair layer by layer with the forward ones: `fba_loss`.
- CC (from update `aux_after` on, `cc_weight` > 0): ŷ = the forward best path, collapsed as
  the paper's Γ⁻¹ (merge repeats, then drop blanks, `ctc.collapse`; the reference code keeps
  blanks); the reverse direction reads ŷ (upsampled again) and takes a CTC loss against x. ŷ is
  integers, so no gradient passes the argmax: CC trains the reverse pass on the model's own
  forward output.

Loss = Σ_directions [ctc + fba_weight·fba + cc_weight·cc]; each direction is back-propagated
as soon as it is computed (the reference code's way, the gradients add up as the sum's would)
and one optimizer step follows. The rest is the Transformer's path in `models.train`: run
directory and its config, inverse-sqrt warm-up, AdamW, bf16 autocast, checkpoints with the RNG
(dropout seeds are drawn from torch's RNG, so a resumed run continues exactly), resume,
averaging and the bundle, which lists the pairs of the directions trained and decodes by CTC.

ActNorm initialises itself from the data on the first forward pass of a fresh run (the first
batch of the first direction): bias = −mean, log-scale = −log std. Its `initialized` flag is a
buffer saved with the weights, so neither a resumed run nor a loaded bundle initialises again.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models import ctc
from models.checkpoints import save_and_prune, save_final
from models.data import EncodedCorpus, collate, encode_corpus, pad_batch, read_lines, token_batches
from models.registry import architecture, build_model
from models.tokenizer import PAD_ID, ByteTokenizer, Tokenizer
from models.train import (
    Log,
    TrainConfig,
    TrainData,
    _device,
    begin,
    dev_bleu,
    inverse_sqrt,
    open_run,
    train_autocast,
)
from models.translator import Translator

__all__ = [
    "DirectionLosses",
    "check_distillation",
    "cycle_loss",
    "direction_losses",
    "fba_loss",
    "train_reder",
]

LOG_EVERY = 100  # updates between two log lines, as the Transformer's loop


@dataclass
class Direction:
    """One trained direction: its languages, its encoded training pairs and its dev set."""

    source: str
    target: str
    corpus: EncodedCorpus
    dev_src: list[str]
    dev_ref: list[str]
    translator: Translator | None = None  # greedy CTC decoding of this direction (dev BLEU)

    @property
    def name(self) -> str:
        return f"{self.source}-{self.target}"


@dataclass
class DirectionLosses:
    """What one direction's batch gave: the weighted total to back-propagate and its parts."""

    total: Tensor  # () ctc + fba_weight·fba + cc_weight·cc, 0 (no graph) without a pair
    ctc: float = 0.0
    fba: float | None = None  # None: not computed (stage 1 or weight 0)
    cc: float | None = None
    pairs: int = 0  # pairs in the CTC loss
    infeasible: int = 0  # pairs CTC cannot emit, left out
    cycle_infeasible: int = 0  # rows whose x the reverse pass cannot emit from 2|ŷ| frames
    tgt_tokens: int = 0


@dataclass
class _Window:
    """Each direction's losses at the updates since the last log line: ctc is the unsmoothed
    CTC term per target token, fba and cc as they enter the total (before their weights)."""

    losses: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    tokens: int = 0
    start: float = field(default_factory=time.time)

    def add(self, name: str, out: DirectionLosses) -> None:
        parts = self.losses.setdefault(name, {"ctc": [], "fba": [], "cc": []})
        if out.pairs:
            parts["ctc"].append(out.ctc)
        for key, value in (("fba", out.fba), ("cc", out.cc)):
            if value is not None:
                parts[key].append(value)
        self.tokens += out.tgt_tokens

    def summary(self) -> str:
        def mean(xs: list[float]) -> str:
            return f"{sum(xs) / len(xs):.3f}" if xs else "-"

        return " | ".join(
            f"{name} ctc {mean(p['ctc'])} fba {mean(p['fba'])} cc {mean(p['cc'])}"
            for name, p in self.losses.items()
        )


def check_distillation(data: TrainData) -> None:
    """Each distillation file must have one line per line of the file it translates; a
    ValueError naming both files otherwise."""
    for kd, source in ((data.kd_forward, data.train_src), (data.kd_backward, data.train_tgt)):
        if kd is None:
            continue
        if not Path(kd).is_file():
            raise ValueError(f"distillation file {kd} does not exist")
        n, m = len(read_lines(kd)), len(read_lines(source))
        if n != m:
            raise ValueError(
                f"distillation file {kd} has {n} lines, {source} has {m}: it must hold one "
                "translation per line of the file it translates"
            )


def _directions(data: TrainData, cfg: TrainConfig) -> list[tuple[str, str, Path, Path, Path, Path]]:
    """(source, target, train source, train target, dev source, dev reference) per direction
    in use; a direction trains on its own distillation targets where given (the paper's best
    setting: x→y on the x→y teacher's output, y→x on the y→x teacher's)."""
    forward = (data.source_lang, data.target_lang, data.train_src,
               data.kd_forward or data.train_tgt, data.dev_src, data.dev_tgt)  # fmt: skip
    backward = (data.target_lang, data.source_lang, data.train_tgt,
                data.kd_backward or data.train_src, data.dev_tgt, data.dev_src)  # fmt: skip
    return {"both": [forward, backward], "forward": [forward], "backward": [backward]}[
        cfg.directions
    ]


# --------------------------------------------------------------------------- losses


def fba_loss(forward: list[Tensor], backward: list[Tensor], pad: Tensor) -> Tensor:
    """Layer-wise forward-backward agreement (the reference code's `cos_distance_loss`): the
    cosine distance (1 − cos(→H_l, sg(←H_l)))/2 of each frame's states, averaged over the
    L + 1 layers, then over each row's real frames, then over the batch.

    forward, backward: [H_0 .. H_L] `(B, T, 2D)` each, entry l of one paired with entry l of
    the other; pad `(B, T)` True at padding. The backward states are a target: no gradient
    reaches them (stop-gradient, as the paper).
    """
    if len(forward) != len(backward):
        raise ValueError(f"{len(forward)} forward states but {len(backward)} backward ones")
    fwd = torch.stack(forward, dim=2).float()  # (B, T, L+1, 2D)
    bwd = torch.stack(backward, dim=2).detach().float()
    dist = (1.0 - F.cosine_similarity(fwd, bwd, dim=-1)) / 2  # (B, T, L+1)
    per_frame = dist.mean(dim=-1).masked_fill(pad, 0.0)  # (B, T)
    frames = (~pad).sum(dim=1).clamp_min(1)  # (B,)
    return (per_frame.sum(dim=1) / frames).mean()


def cycle_loss(
    model: nn.Module,
    log_probs: Tensor,
    frame_lengths: Tensor,
    x: Tensor,
    source: str,
    target: str,
    label_smoothing: float,
    seed: int | None = None,
) -> tuple[Tensor | None, int]:
    """Cycle consistency for a source→target batch: ŷ, the best path of the forward
    log-probs collapsed as the paper's Γ⁻¹ (repeats merged, blanks dropped), is translated back
    by the reverse direction (upsampled again) and scored by CTC against x.

    log_probs `(B, T, V)` with frame_lengths `(B,)`: the forward pass's; only their argmax is
    read, so no gradient flows back through them. x `(B, S)` right-padded. Rows whose x needs
    more frames than ŷ gives are left out. Returns (the loss, None when no row is left; the
    number of rows left out).
    """
    c = model.config
    special = (c.pad_id, c.bos_id, c.eos_id)
    decoded = ctc.best_path(log_probs.detach(), frame_lengths, c.blank_id, special)
    decoded = [row[: c.max_len] for row in decoded]  # the position table's reach
    y_hat = pad_batch(decoded).to(x.device)  # (B, S')
    x_lengths = x.ne(c.pad_id).sum(dim=1)
    ok = ctc.feasible(y_hat.ne(c.pad_id).sum(dim=1), x, x_lengths, c.upsample)  # (B,)
    skipped = int((~ok).sum())
    if not bool(ok.any()):
        return None, skipped
    y_hat, x, x_lengths = _trim(y_hat[ok], c.pad_id), x[ok], x_lengths[ok]
    states = model.forward_states(y_hat, target, source, seed=seed)
    back = model.project(states[-1])  # (B', T', V)
    back_lengths = y_hat.ne(c.pad_id).sum(dim=1) * c.upsample
    loss, _ = ctc.ctc_loss(back, back_lengths, x, x_lengths, c.blank_id, label_smoothing)
    return loss, skipped


def _trim(ids: Tensor, pad: int) -> Tensor:
    """Right-padded ids `(B, S)` without the columns that are padding in every row."""
    width = max(1, int(ids.ne(pad).sum(dim=1).max())) if ids.size(0) else 1
    return ids[:, :width]


def _seed() -> int:
    """A dropout seed for one pass, drawn from torch's RNG (saved in every checkpoint)."""
    return int(torch.randint(0, 2**62, ()).item())


def direction_losses(
    model: nn.Module,
    src: Tensor,
    tgt: Tensor,
    source: str,
    target: str,
    cfg: TrainConfig,
    aux: bool,
) -> DirectionLosses:
    """One direction's losses on a batch: src `(B, S)`, tgt `(B, U)` right-padded, no
    BOS/EOS. `aux`: the auxiliary losses are on (stage 2)."""
    c = model.config
    src_lengths, tgt_lengths = src.ne(c.pad_id).sum(dim=1), tgt.ne(c.pad_id).sum(dim=1)
    ok = ctc.feasible(src_lengths, tgt, tgt_lengths, c.upsample)  # (B,)
    infeasible = int((~ok).sum())
    if not bool(ok.any()):
        return DirectionLosses(torch.zeros((), device=src.device), infeasible=infeasible)
    if infeasible:
        src, tgt = _trim(src[ok], c.pad_id), _trim(tgt[ok], c.pad_id)
        src_lengths, tgt_lengths = src_lengths[ok], tgt_lengths[ok]
    seed = _seed() if model.training else None
    states = model.forward_states(src, source, target, seed=seed)  # [H_0 .. H_L] (B, T, 2D)
    log_probs = model.project(states[-1])  # (B, T, V) fp32
    frame_lengths = src_lengths * c.upsample
    loss, stats = ctc.ctc_loss(
        log_probs, frame_lengths, tgt, tgt_lengths, c.blank_id, cfg.label_smoothing
    )
    out = DirectionLosses(
        loss, ctc=float(stats.ctc), pairs=stats.pairs, infeasible=infeasible,
        tgt_tokens=int(tgt_lengths.sum()),
    )  # fmt: skip
    if aux and cfg.fba_weight > 0:
        a_star, _ = ctc.best_alignment(
            log_probs.detach(), frame_lengths, tgt, tgt_lengths, c.blank_id, fill=c.pad_id
        )  # (B, T): blank or a target token per frame, padding past 2|x|
        with torch.no_grad():  # a target: computing it without a graph is the stop-gradient
            backward = model.reverse_states(a_star, source, target, upsample=False, seed=seed)
        fba = fba_loss(states, backward, a_star.eq(c.pad_id))
        out.total = out.total + cfg.fba_weight * fba
        out.fba = float(fba.detach())
    if aux and cfg.cc_weight > 0:
        cc, out.cycle_infeasible = cycle_loss(
            model, log_probs, frame_lengths, src, source, target, cfg.label_smoothing,
            seed=_seed() if model.training else None,
        )  # fmt: skip
        if cc is not None:
            out.total = out.total + cfg.cc_weight * cc
            out.cc = float(cc.detach())
    return out


# --------------------------------------------------------------------------- the loop


def train_reder(
    run: Path,
    data: TrainData,
    cfg: TrainConfig,
    tokenizer: Tokenizer | ByteTokenizer,
    log: Log = print,
    init: Path | None = None,
) -> dict[str, Any]:
    """Train (or resume) a CTC duplex model in `run`; return the final state. Does not write
    the bundle (`models.train.finalize` does, as for every architecture).

    `init`: a bundle of the same architecture and model config to fine-tune (fresh run only).
    """
    if cfg.neighbours:
        raise ValueError(f"{cfg.arch} reads no retrieved pairs: neighbours must be 0")
    if data.pairs:
        raise ValueError(f"a duplex model trains one language pair, not the pairs {data.pairs}")
    check_distillation(data)
    open_run(run, cfg)
    device = _device()

    plan = _directions(data, cfg)
    for name, kd in (("forward", data.kd_forward), ("backward", data.kd_backward)):
        if kd is not None and not any(p[3] == kd for p in plan):
            log(f"{kd}: not read, directions {cfg.directions} does not train the {name} one")
    directions = []
    for source, target, src_file, tgt_file, dev_src, dev_ref in plan:
        log(f"encoding training data {source}->{target} ({src_file.name} -> {tgt_file.name})")
        corpus = encode_corpus(
            tokenizer, src_file, tgt_file, source, target, cfg.max_len, cache_dir=run / "cache"
        )
        log(f"{source}->{target}: {len(corpus)} pairs, {int(corpus.tgt_lens.sum())} target tokens")
        dev = [read_lines(f)[: cfg.dev_sentences] for f in (dev_src, dev_ref)]
        directions.append(Direction(source, target, corpus, *dev))

    model_cfg = {
        "vocab_size": tokenizer.vocab_size,
        "max_len": cfg.max_len + 2,
        "languages": [data.source_lang, data.target_lang],
        **cfg.model,
    }
    model = build_model(cfg.arch, model_cfg).to(device)
    langs = model.config.languages
    if data.source_lang not in langs or data.target_lang not in langs:
        raise ValueError(
            f"the model config's languages {list(langs)} lack one of the data's "
            f"{data.source_lang}, {data.target_lang}"
        )
    if model.config.pad_id != PAD_ID:
        raise ValueError(f"the model's pad_id must be the tokenizer's ({PAD_ID})")
    opt, state = begin(run, model, cfg, model_cfg, device, init, log)
    counts = state.setdefault("infeasible", {})
    for d in directions:
        counts.setdefault(d.name, {"pairs": 0, "cycle": 0})
    if cfg.fba_weight or cfg.cc_weight:
        log(f"auxiliary losses (fba {cfg.fba_weight}, cc {cfg.cc_weight}) "
            f"from update {cfg.aux_after + 1} on")  # fmt: skip

    for d in directions:  # the served path: one greedy CTC pass, the direction passed on
        decoding = architecture(cfg.arch).decoding
        d.translator = Translator(model, tokenizer, d.source, d.target, decoding=decoding)
    autocast = train_autocast(cfg, device, log)
    started = time.time()
    deadline = started + cfg.max_hours * 3600 if cfg.max_hours else math.inf
    window = _Window()
    step = state["step"]
    epochs_left = (lambda: state["epoch"] < cfg.max_epochs) if cfg.max_epochs else (lambda: True)
    while step < cfg.max_steps and time.time() < deadline and epochs_left():
        # One batch list per direction; an epoch is a pass over the longest, the shorter ones
        # start again from their first batch (as fairseq's RoundRobinZipDatasets).
        seed = cfg.seed * 1000 + state["epoch"]
        epoch_batches = [
            token_batches(d.corpus, cfg.max_tokens, seed=seed + 10**6 * i)
            for i, d in enumerate(directions)
        ]
        n_batches = max(len(b) for b in epoch_batches)
        for b in range(state["batch_in_epoch"], n_batches):
            if step >= cfg.max_steps or time.time() >= deadline:
                break
            model.train()
            lr = inverse_sqrt(step + 1, cfg.warmup, cfg.lr)
            for g in opt.param_groups:
                g["lr"] = lr
            aux = step >= cfg.aux_after
            opt.zero_grad(set_to_none=True)
            for d, batches in zip(directions, epoch_batches, strict=True):
                src, tgt_in, _ = collate(d.corpus, batches[b % len(batches)])
                tgt = tgt_in[:, 1:]  # y without BOS: CTC emits the target's tokens only
                with autocast:
                    out = direction_losses(
                        model, src.to(device), tgt.to(device), d.source, d.target, cfg, aux
                    )
                if out.total.requires_grad:
                    out.total.backward()
                counts[d.name]["pairs"] += out.infeasible
                counts[d.name]["cycle"] += out.cycle_infeasible
                window.add(d.name, out)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
            opt.step()
            step += 1
            state["step"], state["batch_in_epoch"] = step, b + 1
            if step % LOG_EVERY == 0:
                elapsed = time.time() - window.start
                left = min((cfg.max_steps - step) * elapsed / LOG_EVERY,
                           max(deadline - time.time(), 0))  # fmt: skip
                log(
                    f"step {step} epoch {state['epoch']} {window.summary()} lr {lr:.2e} "
                    f"{window.tokens / max(elapsed, 1e-9):.0f} tgt tok/s "
                    f"infeasible {_counts(counts)} ETA {left / 60:.0f} min"
                )
                window = _Window()
            if step % cfg.eval_every == 0:
                model.eval()
                bleu = {d.name: round(dev_bleu(d.translator, d.dev_src, d.dev_ref), 2)
                        for d in directions}  # fmt: skip
                state["history"].append({"step": step, "dev_bleu_greedy": bleu})
                shown = ", ".join(f"{k} {v:.2f}" for k, v in bleu.items())
                log(f"step {step} dev BLEU (greedy CTC, {len(directions[0].dev_src)} "
                    f"sentences) {shown}")  # fmt: skip
            if step % cfg.save_every == 0:
                save_and_prune(run, step, model, opt, state, cfg.keep_checkpoints)
        else:
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    save_final(run, step, model, opt, state)
    log(f"stopped at step {step} after {(time.time() - started) / 60:.1f} min; "
        f"infeasible pairs skipped so far {_counts(counts)}")  # fmt: skip
    return state


def _counts(counts: dict[str, dict[str, int]]) -> str:
    """'en-de 3 (cycle 12), de-en 0 (cycle 4)': pairs CTC could not emit, each time their
    batch came, and cycle-consistency rows left out."""
    return ", ".join(f"{k} {v['pairs']} (cycle {v['cycle']})" for k, v in counts.items())
