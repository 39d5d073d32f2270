"""REDER, the reversible duplex Transformer (Zheng et al., NeurIPS 2021; `../shared/SEEDS.md` §3):
one network that translates x→y when run one way and y→x when run the other, decoded with CTC.

Structure (as the released code, `zhengzx-nlp/REDER`):

- The state is two halves of width d, H = [H1; H2]. A reversible layer (RevNet) has a regular
  form, H1' = H1 + SAN(H2), H2' = H2 + FFN(H1'), and an exact reverse form by subtraction,
  H2 = H2' - FFN(H1'), H1 = H1' - SAN(H2). SAN and FFN are pre-norm (LayerNorm without affine
  parameters) with dropout on their output; the FFN uses GELU; SAN is relative self-attention
  (Shaw et al. 2018) with learned relative embeddings on the keys only, one table of
  (2·max_rel + 1) x head_dim per attention module shared by its heads: logits q·(k + r_ij).
- One *language end* per language: `layers_per_end` layers with parameters of their own. With
  `inner_order` "sf" (the code's default) x→y runs the x end in regular form, layers 1..n,
  then the y end in reverse form, layers n..1; y→x swaps the roles. The executed stack is a
  palindrome, so the y→x network is the exact inverse of the x→y one. "fs" (the paper's "first
  half in reverse form") runs the source end in reverse form n..1, then the target end in
  regular form 1..n; it is just as palindromic.
- Input: ids upsampled in place ×`upsample` (x1 x1 x2 x2 …, the padding mask with them), the
  embedding scaled by sqrt(d) plus learned absolute positions (over frames), duplicated into
  [e; e], then one ActNorm shared by all languages (data-initialised on the first batch).
- Output: ActNorm reversed, the two halves averaged, projected by the tied embedding matrix;
  log-softmax over the vocabulary plus the CTC blank (`blank_id`, by default an extra row at
  index `vocab_size`, so the embedding has vocab_size + 1 rows and the blank can also be fed as
  input, as the aligned targets of the forward-backward agreement loss are).

Dropout replay. A training-mode pass must be invertible exactly (forward-backward agreement
re-runs layers with the masks of an earlier pass), so no dropout here draws from torch's global
RNG. Every dropout site (the input, and each SAN and FFN output of each layer of each language
end) has a fixed stream number, and a pass takes one integer `seed`: a site's mask is drawn
from a fresh `torch.Generator` seeded with a mix of (seed, stream). Masks therefore depend only
on the seed, the site and the shape; the same site gets the same mask whichever direction or
form runs it, so a reverse pass with the forward pass's seed undoes it exactly. A training
pass given no seed draws one from torch's RNG and leaves it in `Reder.last_seed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models import ctc
from models.layers import POSITIONS, StrictConfig, make_positions

__all__ = [
    "INNER_ORDERS",
    "ActNorm",
    "RederConfig",
    "Reder",
    "ReversibleLayer",
    "SeededDropout",
    "TwoWay",
]

INNER_ORDERS = ("sf", "fs")  # "sf": source end regular first (code); "fs": reverse first (paper)
_SEED_RANGE = 2**62


@dataclass(frozen=True)
class RederConfig(StrictConfig):
    """Every size and id REDER needs; stored verbatim in model bundles.

    `d_model` is the width of one half (the embedding width); the reversible state is twice it.
    `max_len` is the longest input in tokens; the position table covers `upsample * max_len`
    frames. `blank_id` None means an extra vocabulary row at `vocab_size` (resolved at
    construction, so a stored config always names the id).
    """

    vocab_size: int  # the tokenizer's; the blank may add one row
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    layers_per_end: int = 3
    dropout: float = 0.1
    max_rel: int = 32  # relative key distances are clipped to [-max_rel, max_rel]
    positions: str = "learned"  # "learned" | "sinusoidal" absolute positions over frames
    max_len: int = 256
    upsample: int = 2  # frames per input token
    languages: tuple[str, ...] = ("en", "de")  # one language end each
    inner_order: str = "sf"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    blank_id: int | None = None

    def __post_init__(self) -> None:
        ints = ("vocab_size", "d_model", "n_heads", "d_ff", "layers_per_end", "max_rel")
        ints += ("max_len", "upsample", "pad_id", "bos_id", "eos_id")
        for name in ints:
            value = getattr(self, name)
            # bool is an int subclass; a JSON `true` must not pass as a layer count.
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be int, got {value!r}")
        if not isinstance(self.dropout, int | float) or isinstance(self.dropout, bool):
            raise ValueError(f"dropout must be float, got {self.dropout!r}")
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "layers_per_end", "upsample"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_rel < 1:
            raise ValueError(f"max_rel must be positive, got {self.max_rel}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.max_len < 1:
            raise ValueError(f"max_len must be positive, got {self.max_len}")
        if self.positions not in POSITIONS:
            raise ValueError(
                f"positions must be one of {sorted(POSITIONS)}, got {self.positions!r}"
            )
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        if self.inner_order not in INNER_ORDERS:
            raise ValueError(f"inner_order must be one of {INNER_ORDERS}, got {self.inner_order!r}")
        langs = self.languages
        if isinstance(langs, str) or not all(isinstance(x, str) for x in langs):
            raise ValueError(f"languages must be a list of language codes, got {langs!r}")
        langs = tuple(langs)  # a JSON list becomes the tuple the field holds
        if len(langs) < 2 or len(set(langs)) != len(langs):
            raise ValueError(f"languages must be at least two distinct codes, got {list(langs)}")
        if any(not x or "." in x for x in langs):
            raise ValueError(f"a language code must be non-empty and without '.', got {langs}")
        object.__setattr__(self, "languages", langs)
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < self.vocab_size:
                raise ValueError(f"{name} {value} is outside the vocabulary [0, {self.vocab_size})")
        if len(set(ids.values())) != 3:
            raise ValueError(f"pad_id, bos_id and eos_id must differ, got {ids}")
        blank = self.vocab_size if self.blank_id is None else self.blank_id
        if not isinstance(blank, int) or isinstance(blank, bool):
            raise ValueError(f"blank_id must be int or null, got {blank!r}")
        if not 0 <= blank <= self.vocab_size or blank in ids.values():
            raise ValueError(
                f"blank_id must be a non-special id in [0, {self.vocab_size}] "
                f"({self.vocab_size}: an extra row), got {blank}"
            )
        object.__setattr__(self, "blank_id", blank)

    @property
    def n_labels(self) -> int:
        """Rows of the embedding and width of the output: the vocabulary plus an extra blank."""
        return max(self.vocab_size, self.blank_id + 1)


# --------------------------------------------------------------------------- blocks


class SeededDropout(nn.Module):
    """Dropout whose mask is a function of (pass seed, this site's stream, shape) only.

    It is the identity in evaluation mode and with `seed` None (a pass without dropout).
    """

    def __init__(self, p: float, stream: int) -> None:
        super().__init__()
        self.p = p
        self.stream = stream

    def mask(self, like: Tensor, seed: int) -> Tensor:
        """The scaled keep-mask (0 or 1/(1-p)) for a tensor shaped as `like`, in its dtype."""
        g = torch.Generator(device=like.device)
        g.manual_seed((seed * 1_000_003 + self.stream) % 2**63)
        keep = torch.empty(like.shape, device=like.device).bernoulli_(1.0 - self.p, generator=g)
        return (keep / (1.0 - self.p)).to(like.dtype)  # drawn in fp32: same bits in any dtype

    def forward(self, x: Tensor, seed: int | None) -> Tensor:
        if seed is None or self.p == 0.0 or not self.training:
            return x
        return x * self.mask(x, seed)


class ActNorm(nn.Module):
    """Per-feature affine y = (x + bias) * exp(log_scale) with an exact inverse.

    Data-dependent init on the first batch it sees: bias = -mean and log_scale = -log std over
    the non-pad positions, so that batch comes out with zero mean and unit std per feature.
    `initialized` is a buffer, so a saved model never re-initialises on load.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(features))
        self.log_scale = nn.Parameter(torch.zeros(features))
        self.register_buffer("initialized", torch.tensor(False))

    @torch.no_grad()
    def initialize(self, x: Tensor, keep: Tensor) -> None:
        """x `(B, T, F)`, keep `(B, T)` True at real (non-pad) positions."""
        v = x[keep].float()  # (N, F)
        if v.size(0) == 0:
            raise ValueError("ActNorm cannot be initialised on a batch of padding only")
        std = v.std(dim=0, unbiased=False).clamp_min(1e-6)  # a constant feature stays finite
        self.bias.copy_(-v.mean(dim=0))
        self.log_scale.copy_(-std.log())
        self.initialized.fill_(True)

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        """x `(B, T, F)` -> `(B, T, F)`; `keep` `(B, T)` selects the positions of the init."""
        if not self.initialized:
            if keep is None:
                keep = torch.ones(x.shape[:-1], dtype=torch.bool, device=x.device)
            self.initialize(x, keep)
        return (x + self.bias) * self.log_scale.exp()

    def reverse(self, y: Tensor) -> Tensor:
        """The exact inverse: multiply by exp(-log_scale), no epsilon (the code's +1e-6 on the
        divisor breaks exactness at small scales)."""
        return y * torch.exp(-self.log_scale) - self.bias


class RelativeSelfAttention(nn.Module):
    """Multi-head self-attention with relative key embeddings (Shaw et al. 2018, keys only).

    logits_ij = q_i · (k_j + r[clip(j - i)]) / sqrt(head_dim), one table r of
    (2·max_rel + 1) x head_dim shared by the heads; padded keys are masked.
    """

    def __init__(self, d_model: int, n_heads: int, max_rel: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.max_rel = max_rel
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.rel_keys = nn.Embedding(2 * max_rel + 1, self.d_head)  # N(0, 1) as in the code

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape  # (B, T, D) -> (B, H, T, Dh)
        return x.view(b, t, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        """x `(B, T, D)`, pad `(B, T)` True at padding -> `(B, T, D)`."""
        b, t, d = x.shape
        q, k, v = (self._split(p(x)) for p in (self.q_proj, self.k_proj, self.v_proj))
        pos = torch.arange(t, device=x.device)
        rel = (pos[None, :] - pos[:, None]).clamp(-self.max_rel, self.max_rel) + self.max_rel
        content = q @ k.transpose(-1, -2)  # (B, H, T, T)
        # q·r_ij without a (T, T, Dh) tensor: q against every table row, then pick per (i, j)
        by_distance = q @ self.rel_keys.weight.to(q.dtype).t()  # (B, H, T, 2·max_rel + 1)
        relative = by_distance.gather(-1, rel.expand(b, self.n_heads, t, t))
        logits = (content + relative) * self.d_head**-0.5
        # finfo.min, not -inf: a row of padding only gets finite (ignored) values, never NaN
        logits = logits.masked_fill(pad[:, None, None, :], torch.finfo(logits.dtype).min)
        out = logits.softmax(dim=-1) @ v  # (B, H, T, Dh)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, d))


class ReversibleLayer(nn.Module):
    """One RevNet layer on [H1; H2]: `forward` is the regular form, `reverse` its inverse."""

    def __init__(self, cfg: RederConfig, stream: int) -> None:
        super().__init__()
        d = cfg.d_model
        self.attn_norm = nn.LayerNorm(d, elementwise_affine=False)
        self.attn = RelativeSelfAttention(d, cfg.n_heads, cfg.max_rel)
        self.attn_dropout = SeededDropout(cfg.dropout, stream)
        self.ffn_norm = nn.LayerNorm(d, elementwise_affine=False)
        self.ffn = nn.Sequential(nn.Linear(d, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, d))
        self.ffn_dropout = SeededDropout(cfg.dropout, stream + 1)

    def san(self, h: Tensor, pad: Tensor, seed: int | None) -> Tensor:
        """Pre-norm self-attention branch `(B, T, D)` (no residual)."""
        return self.attn_dropout(self.attn(self.attn_norm(h), pad), seed)

    def feed_forward(self, h: Tensor, seed: int | None) -> Tensor:
        """Pre-norm GELU feed-forward branch `(B, T, D)` (no residual)."""
        return self.ffn_dropout(self.ffn(self.ffn_norm(h)), seed)

    def forward(self, h: Tensor, pad: Tensor, seed: int | None = None) -> Tensor:
        """Regular form: `(B, T, 2D)` -> `(B, T, 2D)`."""
        h1, h2 = h.chunk(2, dim=-1)
        h1 = h1 + self.san(h2, pad, seed)
        h2 = h2 + self.feed_forward(h1, seed)
        return torch.cat([h1, h2], dim=-1)

    def reverse(self, h: Tensor, pad: Tensor, seed: int | None = None) -> Tensor:
        """Reverse form, the inverse of `forward` given the same mask and seed."""
        h1, h2 = h.chunk(2, dim=-1)
        h2 = h2 - self.feed_forward(h1, seed)
        h1 = h1 - self.san(h2, pad, seed)
        return torch.cat([h1, h2], dim=-1)


# --------------------------------------------------------------------------- model


class TwoWay:
    """What every model that translates both ways between `config.languages` with seeded
    dropout shares (REDER, its multitask baseline): naming a direction, a pass's seed, and
    CTC log-probs from its `forward_states` and `project`."""

    directional = True  # `ctc_log_probs` takes the pair: decoding passes the one requested
    config: RederConfig
    training: bool
    last_seed: int | None

    def direction(self, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
        """(source, target) with the defaults filled in; ValueError for unknown or equal ones."""
        langs = self.config.languages
        source = langs[0] if source_lang is None else source_lang
        target = next(x for x in langs if x != source) if target_lang is None else target_lang
        for lang in (source, target):
            if lang not in langs:
                raise ValueError(f"unknown language {lang!r}; this model has {list(langs)}")
        if source == target:
            raise ValueError(f"source and target language are both {source!r}")
        return source, target

    def _seed(self, seed: int | None) -> int | None:
        """The dropout seed of a pass: None without dropout; drawn (and kept) when not given."""
        if not self.training or self.config.dropout == 0.0:
            return None
        if seed is None:
            seed = int(torch.randint(0, _SEED_RANGE, ()).item())
        self.last_seed = seed
        return seed

    def ctc_log_probs(
        self, src: Tensor, source_lang: str | None = None, target_lang: str | None = None
    ) -> tuple[Tensor, Tensor]:
        """src `(B, S)` right-padded ids -> (log-probs `(B, T, n_labels)`, valid frames `(B,)`),
        T = upsample·S; the frames of a row are upsample x its token count (the model's
        `forward_states` and `project`)."""
        states = self.forward_states(src, source_lang, target_lang)  # type: ignore[attr-defined]
        lengths = src.ne(self.config.pad_id).sum(dim=1) * self.config.upsample
        return self.project(states[-1]), lengths  # type: ignore[attr-defined]

    def forward(
        self, src: Tensor, source_lang: str | None = None, target_lang: str | None = None
    ) -> tuple[Tensor, Tensor]:
        """Same as `ctc_log_probs`."""
        return self.ctc_log_probs(src, source_lang, target_lang)


class Reder(TwoWay, nn.Module):
    """The duplex model: one language end per language, a shared embedding and ActNorm.

    Directions are named by languages; None means `languages[0]` for the source and, for the
    target, the first other language. States are `(B, T, 2D)` over T = frames (upsampled).
    """

    def __init__(self, config: RederConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed_scale = math.sqrt(c.d_model)
        self.embed = nn.Embedding(c.n_labels, c.d_model, padding_idx=c.pad_id)
        self.positions = make_positions(c.positions, c.upsample * c.max_len, c.d_model)
        self.input_dropout = SeededDropout(c.dropout, stream=0)
        n = c.layers_per_end
        self.ends = nn.ModuleDict(
            {
                lang: nn.ModuleList(ReversibleLayer(c, 1 + 2 * (i * n + j)) for j in range(n))
                for i, lang in enumerate(c.languages)
            }
        )
        self.actnorm = ActNorm(2 * c.d_model)  # one for all languages, as the code
        self.last_seed: int | None = None  # the dropout seed of the last training pass
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq's defaults as the released model gets them: embeddings N(0, d^-1/2) (pad
        zero), attention projections Xavier-uniform with zero bias, FFN and relative keys
        PyTorch's defaults."""
        for module in self.modules():
            if isinstance(module, RelativeSelfAttention):
                for proj in (module.q_proj, module.k_proj, module.v_proj, module.out_proj):
                    nn.init.xavier_uniform_(proj.weight)
                    nn.init.zeros_(proj.bias)
        nn.init.normal_(self.embed.weight, mean=0.0, std=self.config.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[self.config.pad_id].zero_()

    # ----------------------------------------------------------------- pieces

    def frames(self, tokens: Tensor, *, upsample: bool = True) -> tuple[Tensor, Tensor]:
        """tokens `(B, S)` right-padded -> (frame ids `(B, T)`, padding `(B, T)` True at pad),
        T = upsample·S, or T = S with `upsample` False (input that is frames already)."""
        pad = tokens.eq(self.config.pad_id)
        if not upsample:
            return tokens, pad
        k = self.config.upsample
        return ctc.upsample(tokens, pad, k)

    def embed_frames(self, ids: Tensor, pad: Tensor, *, seed: int | None = None) -> Tensor:
        """Frame ids `(B, T)` -> H_0 `(B, T, 2D)`: ActNorm([e; e]), e = sqrt(d)·embed + pos."""
        x = self.embed(ids) * self.embed_scale + self.positions(ids.size(1)).to(self.embed.weight)
        x = self.input_dropout(x, self._seed(seed))
        return self.actnorm(torch.cat([x, x], dim=-1), ~pad)

    def logits(self, h: Tensor) -> Tensor:
        """Final state `(B, T, 2D)` -> logits `(B, T, n_labels)`: ActNorm reversed, halves
        averaged (the code's form; the paper's concatenation is this x 2), tied output."""
        h1, h2 = self.actnorm.reverse(h).chunk(2, dim=-1)
        return F.linear((h1 + h2) / 2, self.embed.weight)

    def project(self, h: Tensor) -> Tensor:
        """Final state `(B, T, 2D)` -> log-probs `(B, T, n_labels)` in fp32."""
        return torch.log_softmax(self.logits(h).float(), dim=-1)

    def _plan(self, source_lang: str, target_lang: str) -> list[tuple[ReversibleLayer, bool]]:
        """(layer, regular form?) in execution order for source→target: a palindrome."""
        src, tgt = self.ends[source_lang], self.ends[target_lang]
        ahead, back = range(len(src)), range(len(src) - 1, -1, -1)
        if self.config.inner_order == "sf":
            return [(src[i], True) for i in ahead] + [(tgt[i], False) for i in back]
        return [(src[i], False) for i in back] + [(tgt[i], True) for i in ahead]

    # ----------------------------------------------------------------- passes

    def transform(
        self,
        h: Tensor,
        pad: Tensor,
        source_lang: str | None = None,
        target_lang: str | None = None,
        *,
        seed: int | None = None,
    ) -> list[Tensor]:
        """Run the source→target stack from state h `(B, T, 2D)`: states [H_0 = h, ..., H_L]."""
        plan = self._plan(*self.direction(source_lang, target_lang))
        seed = self._seed(seed)
        states = [h]
        for layer, regular in plan:
            h = layer(h, pad, seed) if regular else layer.reverse(h, pad, seed)
            states.append(h)
        return states

    def invert(
        self,
        h_final: Tensor,
        pad: Tensor,
        source_lang: str | None = None,
        target_lang: str | None = None,
        *,
        seed: int | None = None,
    ) -> list[Tensor]:
        """Run the source→target stack backwards from its last state H_L, each layer in the
        opposite form; states indexed as `transform`'s, [H_0, ..., H_L = h_final]. Inverts a
        training pass exactly when given that pass's seed."""
        plan = self._plan(*self.direction(source_lang, target_lang))
        seed = self._seed(seed)
        h, states = h_final, [h_final]
        for layer, regular in reversed(plan):
            h = layer.reverse(h, pad, seed) if regular else layer(h, pad, seed)
            states.append(h)
        return states[::-1]

    def forward_states(
        self,
        src: Tensor,
        source_lang: str | None = None,
        target_lang: str | None = None,
        *,
        upsample: bool = True,
        seed: int | None = None,
    ) -> list[Tensor]:
        """src `(B, S)` -> the states [H_0, ..., H_L] `(B, T, 2D)` of source→target.

        H_0 is after ActNorm, H_L before `project`; the frame padding is `frames(src)[1]`.
        """
        source, target = self.direction(source_lang, target_lang)
        ids, pad = self.frames(src, upsample=upsample)
        seed = self._seed(seed)
        return self.transform(
            self.embed_frames(ids, pad, seed=seed), pad, source, target, seed=seed
        )

    def reverse_states(
        self,
        tgt: Tensor,
        source_lang: str | None = None,
        target_lang: str | None = None,
        *,
        upsample: bool = False,
        seed: int | None = None,
    ) -> list[Tensor]:
        """The target→source pass over target-language input (by default frames already, e.g.
        the best CTC alignment of a reference), its states reversed so entry l pairs with
        `forward_states(...)[l]` (layer-wise forward-backward agreement)."""
        source, target = self.direction(source_lang, target_lang)
        ids, pad = self.frames(tgt, upsample=upsample)
        seed = self._seed(seed)
        h = self.embed_frames(ids, pad, seed=seed)
        return self.transform(h, pad, target, source, seed=seed)[::-1]
