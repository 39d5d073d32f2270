"""`ragmt train`: token-batched, label-smoothed training with warm-up, checkpoints and resume.

A run directory holds the tokenizer, cached encoded data and `ckpt-<step>/` checkpoints
(safetensors + JSON, written atomically). Running the same command again resumes from the
newest checkpoint; the run ends at `max_steps`, `max_hours` or `max_epochs` and writes a bundle
made of the average of the last checkpoints.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import sacrebleu
import torch
import torch.nn.functional as F
from torch import nn

from models.artifacts import sha256_file
from models.bundle import load_bundle, save_bundle
from models.checkpoints import (
    average_checkpoints,
    checkpoints,
    load_weights,
    resume,
    save_and_prune,
    save_final,
)
from models.data import (
    EncodedCorpus,
    EncodedNeighbours,
    collate,
    encode_corpus,
    encode_neighbours,
    read_lines,
    read_neighbours,
    token_batches,
)
from models.devices import cpu_bf16_speedup
from models.registry import ARCHITECTURES, architecture, build_model
from models.semiparametric import Neighbours, SemiParametricConfig, from_transformer
from models.tokenizer import PAD_ID, ByteTokenizer, Tokenizer, tokenizer_id
from models.translator import TOKENIZER_FILE, DecodeOptions, Translator

Log = Callable[[str], None]
# Which directions an update of a duplex (CTC) model trains: "both" holds one batch of each;
# "forward" (source->target) or "backward" (target->source) trains a simplex model.
DIRECTIONS = ("both", "forward", "backward")
# The TrainConfig fields only the CTC trainer reads (models/train_reder.py).
CTC_ONLY = ("directions", "fba_weight", "cc_weight", "aux_after")
# The TrainConfig fields only models with per-language component scores read.
SCORED_ONLY = (
    "phase2_after", "sparsity_weight", "disparity_weight", "topk_weight", "score_lr_scale",
)  # fmt: skip


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides a training run; stored in every checkpoint and bundle."""

    arch: str = "transformer"
    model: dict[str, Any] = field(default_factory=dict)  # the architecture's config overrides
    max_tokens: int = 4096  # padded tokens per batch
    lr: float = 7e-4
    warmup: int = 4000
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    weight_decay: float = 0.0
    max_steps: int = 100_000
    max_hours: float = 0.0  # 0: no time limit
    max_epochs: int = 0  # whole passes over the data; 0: no limit (papers compare at equal epochs)
    max_len: int = 128  # longer training pairs (in sub-words) are dropped
    eval_every: int = 1000
    save_every: int = 1000
    keep_checkpoints: int = 6
    average_last: int = 5
    dev_sentences: int = 400  # dev BLEU during training: greedy, on this many sentences
    seed: int = 1
    bf16: bool = True  # bf16 autocast where it is faster (AVX-512 bf16/AMX CPUs, GPUs)
    threads: int = 0  # torch threads; 0 keeps torch's default
    neighbours: int = 0  # retrieved pairs per sentence fed to a memory model (0: none)
    # Share of training sentences whose memory also holds a damaged copy of their own pair
    # (`damaged_self`), which teaches the memory path to copy; retrieval never returns the
    # sentence itself (--exclude-self), so without it a usable span is rare early in training.
    self_neighbour_prob: float = 0.0
    self_neighbour_cut: float = 0.3  # share of each side of that copy cut out (one span)
    # CTC duplex models only (REDER, models/train_reder.py, SEEDS §3): the directions an update
    # trains (DIRECTIONS; None: "both" for a CTC model), the weights of the layer-wise
    # forward-backward agreement and the cycle-consistency losses (0: off; the paper uses 0.1,
    # its code 0.5), and the number of stage-1 updates (CTC alone) before those two switch on.
    directions: str | None = None
    fba_weight: float = 0.0
    cc_weight: float = 0.0
    aux_after: int = 0
    # Models that select components per language (sparse-transformer, SEEDS §2): the updates
    # of phase 1 (every component, sampled soft scores, loss + sparsity_weight * sparsity)
    # before phase 2 (each language's top-k, loss + disparity_weight * disparity +
    # topk_weight * top-k); the paper's weights are 0.1, 0.02 and 0.1.
    phase2_after: int = 0
    sparsity_weight: float = 0.0
    disparity_weight: float = 0.0
    topk_weight: float = 0.0
    # The scores' learning rate as a multiple of the schedule's. Adam moves a parameter by
    # about the learning rate per update whatever its gradient's size, so over a CPU-sized run
    # (600 updates of a warmed-up inverse-sqrt schedule) a score logit can move some 0.2 in
    # all: the pilot's scores stayed within 0.03 of their start and selected at chance.
    score_lr_scale: float = 1.0

    def __post_init__(self) -> None:
        self._check_scored()
        spec = ARCHITECTURES.get(self.arch)
        if spec is None or spec.decoding != "ctc":
            defaults = {f.name: f.default for f in fields(self)}
            given = [k for k in CTC_ONLY if getattr(self, k) != defaults[k]]
            if given:
                raise ValueError(
                    f"{', '.join(given)}: options of CTC duplex models (reder), not of {self.arch}"
                )
            return
        if self.directions is None:
            object.__setattr__(self, "directions", "both")
        if self.directions not in DIRECTIONS:
            raise ValueError(f"directions must be one of {DIRECTIONS}, got {self.directions!r}")
        for name in ("fba_weight", "cc_weight"):
            w = getattr(self, name)
            if isinstance(w, bool) or not isinstance(w, int | float) or w < 0:
                raise ValueError(f"{name} must be a number >= 0, got {w!r}")
        a = self.aux_after
        if isinstance(a, bool) or not isinstance(a, int) or a < 0:
            raise ValueError(f"aux_after must be an update count >= 0, got {a!r}")
        if (self.fba_weight or self.cc_weight) and not hasattr(spec.model, "reverse_states"):
            raise ValueError(
                f"{self.arch} is not reversible: the agreement and cycle losses (fba_weight, "
                "cc_weight) need a model that runs backwards (reder)"
            )

    def _check_scored(self) -> None:
        """The score options belong to a model with per-language scores, and are numbers."""
        spec = ARCHITECTURES.get(self.arch)
        defaults = {f.name: f.default for f in fields(self)}
        given = [k for k in SCORED_ONLY if getattr(self, k) != defaults[k]]
        if given and (spec is None or not hasattr(spec.model, "score_losses")):
            raise ValueError(
                f"{', '.join(given)}: options of models with per-language scores "
                f"(sparse-transformer), not of {self.arch}"
            )
        for name in SCORED_ONLY:
            w = getattr(self, name)
            if isinstance(w, bool) or not isinstance(w, int | float) or w < 0:
                raise ValueError(f"{name} must be a number >= 0, got {w!r}")
        if not self.score_lr_scale > 0:
            raise ValueError(f"score_lr_scale must be positive, got {self.score_lr_scale}")
        if not isinstance(self.phase2_after, int):
            raise ValueError(f"phase2_after must be an update count, got {self.phase2_after!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown training config key(s): {', '.join(unknown)}")
        return cls(**d)


@dataclass(frozen=True)
class TrainData:
    """File paths of a training run: train and dev, source and target."""

    train_src: Path
    train_tgt: Path
    dev_src: Path
    dev_tgt: Path
    source_lang: str
    target_lang: str
    data_manifest_hash: str = ""
    # `ragmt neighbours` output for train and dev (memory models only): one record per line
    train_neighbours: Path | None = None
    dev_neighbours: Path | None = None
    # the pairs the trained model serves; None: (source_lang, target_lang). A many-to-English
    # corpus mixes its sources in one file (source_lang "mul") and lists them here.
    pairs: tuple[tuple[str, str], ...] | None = None
    # Sequence-level distillation targets (CTC duplex models): one line per train_src line,
    # the teacher's translation of it into target_lang, and one per train_tgt line, the other
    # teacher's translation into source_lang. None: the raw pairs train that direction.
    kd_forward: Path | None = None
    kd_backward: Path | None = None
    # A multilingual corpus (`ragmt data mix`): each train and dev line's pair as `src-tgt`,
    # one of `pairs`; one side's file then mixes languages (named "mul").
    train_pairs: Path | None = None
    dev_pairs: Path | None = None

    @classmethod
    def from_prepared(cls, data: Path, domain: str, reverse: bool = False) -> TrainData:
        """The train and dev files of `domain` in a prepared directory (`ragmt data prepare`
        or `ragmt data mix`): its languages, its manifest's hash, and a multilingual
        directory's pairs and each line's pair. `reverse`: its target language as the source
        (a caller checks that the directory holds one pair)."""
        manifest_file = Path(data) / "manifest.json"
        manifest = json.loads(manifest_file.read_text())
        src, tgt = manifest["languages"]["source"], manifest["languages"]["target"]
        if reverse:
            src, tgt = tgt, src
        pairs = tuple((s, t) for s, t in manifest["pairs"]) if "pairs" in manifest else None
        d = Path(data) / domain
        line_pairs = {s: d / f"{s}.pairs" for s in ("train", "dev") if (d / f"{s}.pairs").is_file()}
        return cls(
            d / f"train.{src}", d / f"train.{tgt}", d / f"dev.{src}", d / f"dev.{tgt}", src, tgt,
            sha256_file(manifest_file), pairs=pairs,
            train_pairs=line_pairs.get("train"), dev_pairs=line_pairs.get("dev"),
        )  # fmt: skip


def served_pairs(data: TrainData, config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The (source, target) pairs a model trained on `data` with `config` (a stored
    TrainConfig dict) translates: the data's, or those of a duplex model's directions."""
    if data.pairs:
        return data.pairs
    forward = (data.source_lang, data.target_lang)
    backward = (data.target_lang, data.source_lang)
    by_directions = {
        None: (forward,),  # not a duplex model
        "forward": (forward,),
        "backward": (backward,),
        "both": (forward, backward),
    }
    return by_directions[config.get("directions")]


def inverse_sqrt(step: int, warmup: int, peak: float) -> float:
    """Linear warm-up to `peak` over `warmup` steps, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, eps: float) -> torch.Tensor:
    """Mean label-smoothed cross-entropy over non-pad target tokens; logits (B,T,V)."""
    return F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)),
        target.reshape(-1),
        ignore_index=PAD_ID,
        label_smoothing=eps,
    )


def damaged_self(
    src: list[int], tgt: list[int], cut: float, max_len: int, rng: random.Random
) -> tuple[list[int], list[int]]:
    """A training pair as a near-duplicate neighbour of itself: one random span of `cut` of its
    length removed from each side (independently), then each side cut to `max_len`."""

    def damage(ids: list[int]) -> list[int]:
        n = round(len(ids) * cut)
        if n == 0 or n >= len(ids):
            return ids[:max_len]
        at = rng.randrange(len(ids) - n + 1)
        return (ids[:at] + ids[at + n :])[:max_len]

    return damage(src), damage(tgt)


def batch_gate(model: nn.Module, tgt: torch.Tensor) -> float | None:
    """Mean memory gate of the last forward pass over real target positions of rows that had a
    memory, averaged over decoder layers (None: not a memory model, or no row had one)."""
    gated = [layer for layer in getattr(model, "decoder_layers", []) if hasattr(layer, "last_gate")]
    if not gated or gated[0].last_gate is None:
        return None
    mask = tgt.ne(PAD_ID) & gated[0].last_has_memory[:, None]  # (B, T)
    if not bool(mask.any()):
        return None
    return sum(float(layer.last_gate[mask].float().mean()) for layer in gated) / len(gated)


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def dev_bleu(
    translator: Translator,
    src: list[str],
    ref: list[str],
    beam: int = 1,
    neighbours: list[list[tuple[str, str]]] | None = None,
) -> float:
    options = DecodeOptions(beam_size=beam, batch_size=64)
    hyps = translator.translate(src, options, neighbours=neighbours)
    return sacrebleu.corpus_bleu(hyps, [ref]).score


def _warm_start(model: nn.Module, init: Path, arch: str, log: Log) -> str:
    """Start from a trained bundle's weights; return their hash.

    The same architecture and model config: fine-tuning (e.g. on an adaptation domain). A
    transformer bundle into a memory model: the baseline's weights, the memory path new.
    """
    bundle = load_bundle(init)
    source = bundle.manifest["architecture"]
    if source == arch:
        theirs, ours = asdict(bundle.model.config), asdict(model.config)
        if theirs != ours:
            diff = sorted(k for k in ours if theirs.get(k) != ours[k])
            raise ValueError(f"--init {init}: its model config differs from this one in {diff}")
        model.load_state_dict(bundle.model.float().state_dict())
        log(f"fine-tuning {init}")
    elif getattr(model, "uses_memory", False) and source == "transformer":
        model.load_state_dict(from_transformer(bundle.model.float(), model.config).state_dict())
        log(f"warm start from {init}")
    else:
        raise ValueError(
            f"--init fine-tunes a bundle of the same architecture or warm-starts a memory model "
            f"from a transformer bundle; got {arch} from {source}"
        )
    return bundle.manifest["files"]["model.safetensors"]


# Budgets and numeric speed settings may change on resume; what shapes the model, the data
# order or the schedule may not.
RESUME_FREE = frozenset({"max_steps", "max_hours", "max_epochs", "bf16", "threads"})


def open_run(run: Path, cfg: TrainConfig) -> None:
    """Create (or reopen) `run` and store its config, refusing a config that differs from the
    one it was started with in more than RESUME_FREE; set threads and seed every RNG."""
    run.mkdir(parents=True, exist_ok=True)
    cfg_file = run / "train_config.json"
    if cfg_file.is_file():
        old = json.loads(cfg_file.read_text())
        if old != json.loads(json.dumps(asdict(cfg))):
            diff = {k for k in old if old[k] != asdict(cfg).get(k)}
            if diff - RESUME_FREE:
                raise ValueError(f"{run} was started with a different config: {sorted(diff)}")
    cfg_file.write_text(json.dumps(asdict(cfg), indent=2))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)


def new_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with the Transformer's betas and eps; the schedule sets its learning rate, times
    each group's `lr_scale` (a model's per-language scores: `score_lr_scale`)."""
    scores = [p for n, p in model.named_parameters() if n.startswith("scores.")]
    ids = {id(p) for p in scores}
    groups = [{"params": [p for p in model.parameters() if id(p) not in ids], "lr_scale": 1.0}]
    if scores:
        groups.append({"params": scores, "lr_scale": cfg.score_lr_scale})
    return torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=cfg.weight_decay
    )


def begin(
    run: Path,
    model: nn.Module,
    cfg: TrainConfig,
    model_cfg: dict[str, Any],
    device: torch.device,
    init: Path | None,
    log: Log,
) -> tuple[torch.optim.AdamW, dict[str, Any]]:
    """The optimizer and the run's state: resumed from its newest checkpoint, else fresh
    (from `init`'s weights when given)."""
    log(f"model {cfg.arch}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    opt = new_optimizer(model, cfg)
    state: dict[str, Any] = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "history": []}
    resumed = resume(run, model, opt, device, log)
    if resumed is not None:
        state = resumed
    elif init is not None:
        state["init_weights_sha256"] = _warm_start(model, init, cfg.arch, log)
    state["model_config"] = model_cfg
    state["arch"] = cfg.arch
    return opt, state


def train_autocast(cfg: TrainConfig, device: torch.device, log: Log) -> torch.autocast:
    """bf16 autocast where the config asks for it and it is faster than fp32 here."""
    use_bf16 = cfg.bf16
    if use_bf16 and device.type == "cpu" and (speedup := cpu_bf16_speedup()) < 1.0:
        log(f"bf16 autocast off: a bf16 matmul runs {1 / speedup:.0f}x slower than fp32 here")
        use_bf16 = False
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)


def train(
    run: Path,
    data: TrainData,
    cfg: TrainConfig,
    tokenizer: Tokenizer | ByteTokenizer,
    log: Log = print,
    init: Path | None = None,
) -> dict[str, Any]:
    """Train (or resume) in `run`; return the final state. Does not write the bundle.

    `init`: a baseline bundle whose weights start a memory model (used on a fresh run only).
    A CTC (duplex) architecture trains in `models.train_reder`.
    """
    if architecture(cfg.arch).decoding == "ctc":
        from models.train_reder import train_reder  # it builds on this module's pieces

        return train_reder(run, data, cfg, tokenizer, log=log, init=init)
    if data.kd_forward is not None or data.kd_backward is not None:
        raise ValueError(
            f"distillation files are read by the CTC duplex trainer (reder), not by {cfg.arch}: "
            "train on the teacher's output as the target file instead"
        )
    open_run(run, cfg)
    device = _device()

    log("encoding training data")
    corpus: EncodedCorpus = encode_corpus(
        tokenizer,
        data.train_src,
        data.train_tgt,
        data.source_lang,
        data.target_lang,
        cfg.max_len,
        cache_dir=run / "cache",
        pair_file=data.train_pairs,
        pairs=data.pairs or (),
    )
    log(f"{len(corpus)} training pairs, {int(corpus.tgt_lens.sum())} target tokens")
    dev_sets = dev_by_pair(data, cfg.dev_sentences)
    dev_src, dev_ref = dev_sets[0][1], dev_sets[0][2]
    train_nb: EncodedNeighbours | None = None
    dev_nb: list[list[tuple[str, str]]] | None = None
    if cfg.neighbours:
        if data.train_neighbours is None or data.dev_neighbours is None:
            raise ValueError("config sets neighbours: train and dev neighbour files are needed")
        log(f"encoding neighbours ({cfg.neighbours} per sentence)")
        n_lines = len(read_lines(data.train_src))
        train_nb = encode_neighbours(
            tokenizer,
            data.train_neighbours,
            n_lines,
            data.source_lang,
            data.target_lang,
            cfg.neighbours,
            # cut as decoding cuts: to the memory model's width (its config's or the default)
            cfg.model.get("max_neighbour_len", SemiParametricConfig.max_neighbour_len),
            cache_dir=run / "cache",
        )
        found = read_neighbours(data.dev_neighbours, len(read_lines(data.dev_src)), cfg.neighbours)
        dev_nb = [[(n["source"], n["target"]) for n in f] for f in found[: cfg.dev_sentences]]
        log(f"{len(train_nb.src)} training neighbours, {len(train_nb.src) / n_lines:.2f} per line")

    model_cfg = {"vocab_size": tokenizer.vocab_size, "max_len": cfg.max_len + 2, **cfg.model}
    config_fields = {f.name for f in fields(architecture(cfg.arch).config)}
    if data.pairs and "languages" in config_fields and "languages" not in cfg.model:
        model_cfg["languages"] = languages_of(data.pairs)  # every language the data holds
    model = build_model(cfg.arch, model_cfg).to(device)
    pair_langs = _pair_languages(model, data)
    scored = hasattr(model, "score_losses")
    if scored:  # each side's scores are trained for the languages that side reads
        known = list(model.config.languages)
        pairs = data.pairs or ((data.source_lang, data.target_lang),)
        enc_langs = sorted({known.index(s) for s, _ in pairs})
        dec_langs = sorted({known.index(t) for _, t in pairs})
    memory = bool(getattr(model, "uses_memory", False))
    if memory != bool(cfg.neighbours):
        raise ValueError(f"{cfg.arch}: neighbours must be > 0 exactly for a memory model")
    if memory and cfg.neighbours > model.config.max_neighbours:
        raise ValueError(f"neighbours {cfg.neighbours} > max_neighbours of the model config")
    opt, state = begin(run, model, cfg, model_cfg, device, init, log)

    translator = Translator(model, tokenizer, data.source_lang, data.target_lang)
    autocast = train_autocast(cfg, device, log)
    started = time.time()
    deadline = started + cfg.max_hours * 3600 if cfg.max_hours else math.inf
    window_tokens, window_loss, window_start = 0, 0.0, time.time()
    window_gates: list[float] = []
    step = state["step"]
    nb_rng = random.Random(cfg.seed * 7919 + step)  # the damaged self-neighbours' draws
    epochs_left = (lambda: state["epoch"] < cfg.max_epochs) if cfg.max_epochs else (lambda: True)
    while step < cfg.max_steps and time.time() < deadline and epochs_left():
        batches = token_batches(corpus, cfg.max_tokens, seed=cfg.seed * 1000 + state["epoch"])
        for b in range(state["batch_in_epoch"], len(batches)):
            if step >= cfg.max_steps or time.time() >= deadline:
                break
            model.train()
            src, tin, tout = (t.to(device) for t in collate(corpus, batches[b]))
            nb = None
            if train_nb is not None:
                lines = corpus.lines[batches[b]]
                found = [train_nb.of(int(i)) for i in lines]
                if cfg.self_neighbour_prob > 0:
                    width = model.config.max_neighbour_len
                    for row, j in enumerate(batches[b]):
                        if nb_rng.random() < cfg.self_neighbour_prob:
                            own = damaged_self(
                                corpus.src(int(j)).tolist(), corpus.tgt(int(j)).tolist(),
                                cfg.self_neighbour_cut, width, nb_rng,
                            )  # fmt: skip
                            kept = found[row][: cfg.neighbours - 1]
                            kept.insert(nb_rng.randrange(len(kept) + 1), own)
                            found[row] = kept
                nb = Neighbours.from_lists(found, PAD_ID)
            lr = inverse_sqrt(step + 1, cfg.warmup, cfg.lr)
            for g in opt.param_groups:
                g["lr"] = lr * g.get("lr_scale", 1.0)
            if scored:
                model.set_phase(1 if step < cfg.phase2_after else 2)
            with autocast:
                if pair_langs is not None:  # (2, B) each row's source and target language
                    rows = torch.from_numpy(corpus.pairs[batches[b]])
                    logits = model(src, tin, pair_langs.index_select(0, rows).T.to(device))
                else:
                    logits = model(src, tin) if nb is None else model(src, tin, nb)
            ce = label_smoothed_loss(logits, tout, cfg.label_smoothing)
            loss = ce
            if scored:
                aux = model.score_losses(enc_langs, dec_langs)
                if step < cfg.phase2_after:
                    loss = loss + cfg.sparsity_weight * aux["sparsity"]
                else:
                    loss = loss + cfg.disparity_weight * aux["disparity"]
                    loss = loss + cfg.topk_weight * aux["topk"]
            if (gate := batch_gate(model, tout)) is not None:
                window_gates.append(gate)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
            opt.step()
            step += 1
            state["step"], state["batch_in_epoch"] = step, b + 1
            ntok = int((tout != PAD_ID).sum())
            window_tokens += ntok
            window_loss += ce.item() * ntok
            if step % 100 == 0:
                elapsed = time.time() - window_start
                tps = window_tokens / max(elapsed, 1e-9)
                steps_left = cfg.max_steps - step
                if cfg.max_epochs:  # this epoch's batches left, then whole epochs of as many
                    in_epochs = (cfg.max_epochs - state["epoch"]) * len(batches) - (b + 1)
                    steps_left = min(steps_left, in_epochs)
                left = min(steps_left * elapsed / 100, max(deadline - time.time(), 0))
                gate = f" gate {sum(window_gates) / len(window_gates):.3f}" if window_gates else ""
                if scored:
                    gate += f" phase {model.phase} " + " ".join(
                        f"{k} {v.item():.4f}" for k, v in aux.items()
                    )
                log(
                    f"step {step} epoch {state['epoch']} loss {window_loss / window_tokens:.3f} "
                    f"lr {lr:.2e} {tps:.0f} tgt tok/s{gate} ETA {left / 60:.0f} min"
                )
                window_tokens, window_loss, window_start = 0, 0.0, time.time()
                window_gates = []
            if step % cfg.eval_every == 0:
                model.eval()
                if len(dev_sets) == 1:
                    bleu = dev_bleu(translator, dev_src, dev_ref, neighbours=dev_nb)
                    state["history"].append({"step": step, "dev_bleu_greedy": round(bleu, 2)})
                else:  # each pair's own dev verses; the mean is what the log follows
                    by_pair = {
                        f"{s}-{t}": round(dev_bleu(Translator(model, tokenizer, s, t), ps, pr), 2)
                        for (s, t), ps, pr in dev_sets
                    }
                    bleu = sum(by_pair.values()) / len(by_pair)
                    state["history"].append(
                        {"step": step, "dev_bleu_greedy": round(bleu, 2), "by_pair": by_pair}
                    )
                n_dev = sum(len(d[1]) for d in dev_sets)
                log(f"step {step} dev BLEU (greedy, {n_dev} sentences) {bleu:.2f}")
            if step % cfg.save_every == 0:
                save_and_prune(run, step, model, opt, state, cfg.keep_checkpoints)
        else:
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    save_final(run, step, model, opt, state)
    log(f"stopped at step {step} after {(time.time() - started) / 60:.1f} min")
    return state


def languages_of(pairs: tuple[tuple[str, str], ...]) -> list[str]:
    """Every language of `pairs`, sources first, in order of first appearance."""
    out: list[str] = []
    for lang in [s for s, _ in pairs] + [t for _, t in pairs]:
        if lang not in out:
            out.append(lang)
    return out


def dev_by_pair(data: TrainData, n: int) -> list[tuple[tuple[str, str], list[str], list[str]]]:
    """(pair, sources, references) of the dev lines training scores: the first `n`, or for a
    multilingual corpus the first n / pairs of each pair's own lines."""
    src, ref = read_lines(data.dev_src), read_lines(data.dev_tgt)
    if data.dev_pairs is None or not data.pairs:
        return [((data.source_lang, data.target_lang), src[:n], ref[:n])]
    names = read_lines(data.dev_pairs)
    if len(names) != len(src):
        raise ValueError(f"{data.dev_pairs}: {len(names)} lines for a dev set of {len(src)}")
    each = max(1, n // len(data.pairs))
    out = []
    for s, t in data.pairs:
        rows = [i for i, name in enumerate(names) if name == f"{s}-{t}"][:each]
        if rows:
            out.append(((s, t), [src[i] for i in rows], [ref[i] for i in rows]))
    return out


def _pair_languages(model: nn.Module, data: TrainData) -> torch.Tensor | None:
    """`(pairs, 2)` language indices of each pair of a multilingual corpus, for a model told
    the pair (`directional`); None where the model reads no languages or the data is one pair.
    A corpus with several target languages needs such a model: ValueError otherwise."""
    if data.train_pairs is None or not data.pairs:
        return None
    if not getattr(model, "directional", False):
        if len({t for _, t in data.pairs}) > 1:
            raise ValueError(
                "the data translates into several languages: the model must be told the target "
                "(sparse-transformer; with sparse [] it is the dense multilingual model)"
            )
        return None  # many-to-one: the model reads the source as it comes
    known = list(model.config.languages)
    missing = sorted({x for p in data.pairs for x in p} - set(known))
    if missing:
        raise ValueError(f"the model's languages {known} lack {missing} of the data's pairs")
    return torch.tensor([[known.index(s), known.index(t)] for s, t in data.pairs])


# What may differ between runs averaged into one bundle: what may change on resume, plus their
# seeds and bookkeeping, not the recipe (model, data, schedule): the average is one recipe's.
SOUP_FREE = RESUME_FREE | {"seed", "eval_every", "save_every", "keep_checkpoints"}


def _check_soup(
    runs: list[Path],
    groups: list[list[Path]],
    states: list[dict[str, Any]],
    configs: list[dict[str, Any]],
    tokenizer: Tokenizer | ByteTokenizer,
    average_last: int,
) -> None:
    """Refuse to average runs that are not one recipe from one start at one budget.

    Why: weights of independently initialised runs do not average into a model; runs started
    from the same bundle and trained alike for a short while do (a "model soup")."""
    first, tok_sha = runs[0], tokenizer_id(tokenizer)
    for r, g, s, c in zip(runs, groups, states, configs, strict=True):
        if len(g) != len(groups[0]):  # each run weighs alike
            raise ValueError(
                f"{r} has {len(g)} of the last {average_last} checkpoints, {first} {len(groups[0])}"
            )
        if "init_weights_sha256" not in s:
            raise ValueError(f"{r} was not started from a bundle (--init): only runs started "
                             "from one bundle can be averaged")  # fmt: skip
        if s["init_weights_sha256"] != states[0]["init_weights_sha256"]:
            raise ValueError(f"{r} started from other weights than {first}")
        if (s["arch"], s["model_config"]) != (states[0]["arch"], states[0]["model_config"]):
            raise ValueError(f"{r} has another architecture or model config than {first}")
        if s["step"] != states[0]["step"]:
            raise ValueError(f"{r} ends at step {s['step']}, {first} at {states[0]['step']}: "
                             "average runs of one budget")  # fmt: skip
        if (r / TOKENIZER_FILE).is_file() and sha256_file(r / TOKENIZER_FILE) != tok_sha:
            raise ValueError(f"{r} has another tokenizer")
        differ = sorted(k for k in c.keys() | configs[0].keys()
                        if c.get(k) != configs[0].get(k) and k not in SOUP_FREE)  # fmt: skip
        if differ:
            raise ValueError(f"{r} differs from {first} in {differ}: only {sorted(SOUP_FREE)} may")


def finalize(
    run: Path | list[Path],
    out: Path,
    data: TrainData,
    tokenizer: Tokenizer | ByteTokenizer,
    average_last: int,
    dtype: str = "float16",
    eval_scores: dict[str, Any] | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Average the last checkpoints of `run` and write a model bundle to `out`.

    With several runs (one recipe from one bundle, other seeds) the last `average_last`
    checkpoints of each are averaged alike: a uniform soup, recorded run by run."""
    runs = [Path(r) for r in run] if isinstance(run, list) else [Path(run)]
    if not runs:
        raise ValueError("no run to average")
    groups = [checkpoints(r)[-average_last:] for r in runs]
    for r, g in zip(runs, groups, strict=True):
        if not g:
            raise ValueError(f"{r} has no checkpoints")
    states = [json.loads((g[-1] / "state.json").read_text()) for g in groups]
    configs = [json.loads((r / "train_config.json").read_text()) for r in runs]
    if len(runs) > 1:
        _check_soup(runs, groups, states, configs, tokenizer, average_last)
    state, ckpts = states[0], [p for g in groups for p in g]
    model = build_model(state["arch"], state["model_config"])
    load_weights(model, average_checkpoints(ckpts))
    names = [p.name if len(runs) == 1 else f"{p.parent.name}/{p.name}" for p in ckpts]
    log(f"averaged {names}")
    training: dict[str, Any] = {
        "config": configs[0],
        "steps": state["step"],
        "epochs": state["epoch"],
        "averaged_checkpoints": names,
        "dev_history": state["history"],
        "tokenizer_sha256": tokenizer_id(tokenizer),  # "bytes" for a byte model
        # The weights it started from (--init), so a fine-tuned bundle names its parent; the
        # training pairs a CTC model could not emit (skipped, counted per direction).
        **{k: state[k] for k in ("init_weights_sha256", "infeasible") if k in state},
    }
    if len(runs) > 1:
        training["runs"] = [
            {"run": r.name, "seed": c["seed"], "steps": s["step"], "epochs": s["epoch"],
             "averaged_checkpoints": [p.name for p in g], "dev_history": s["history"]}
            for r, g, s, c in zip(runs, groups, states, configs, strict=True)
        ]  # fmt: skip
    byte_level = isinstance(tokenizer, ByteTokenizer)
    pairs = served_pairs(data, configs[0])
    with open(data.train_src, "rb") as f:
        sentences = sum(1 for _ in f)
    # what a user reads to know what the model knows: its domain (the train file's directory,
    # e.g. "general" or "bible") and size
    trained_on = {
        "data_sha256": data.data_manifest_hash,
        "domains": {data.train_src.parent.name: sentences},
    }
    # a train split with literal masks (`ragmt data mask-literals`): the model knows them
    data_manifest = data.train_src.parent.parent / "manifest.json"
    if data_manifest.is_file():
        masks = json.loads(data_manifest.read_text(encoding="utf-8")).get("literal_masks")
        if masks is not None:
            trained_on["literal_masks"] = masks
    return save_bundle(
        out,
        model,
        state["arch"],
        languages={"source": pairs[0][0], "target": pairs[0][1]},
        pairs=pairs,
        extra_files={} if byte_level else {TOKENIZER_FILE: tokenizer.model_file},
        tokenizer="bytes" if byte_level else "sentencepiece",
        training_data=data.data_manifest_hash,
        trained_on=trained_on,
        eval_scores=eval_scores,
        extra_manifest={"training": training},
        dtype=dtype,
    )


__all__ = [
    "ARCHITECTURES",
    "CTC_ONLY",
    "DIRECTIONS",
    "SOUP_FREE",
    "TrainConfig",
    "TrainData",
    "finalize",
    "inverse_sqrt",
    "label_smoothed_loss",
    "served_pairs",
    "train",
]
