"""The Adaptive Sparse Transformer (Gong, Li & Genzel 2021; `../shared/SEEDS.md` §2): one
multilingual model in which every language selects its own attention heads, feed-forward blocks
and layers, so English into many languages costs one small network per language.

Each language l has one logit mu per component of each sparse kind: attention heads (alpha; H per
layer), feed-forward blocks (beta; the inner width d_ff split into `ffn_blocks` blocks of equal
width) and whole layers (gamma). Encoder components read the scores of the source language,
decoder components those of the target language (`sides` names which stacks are sparse). A
score weighs its component's output: the heads' outputs before the output projection, the
blocks' ReLU outputs before the second projection (masking those rows of W2 alone removes a
block; one factor, not beta on both W1 and W2, which would square a soft score), the sublayers
of a layer in pre-norm form (x + gamma * sublayer(LN(x))), so a layer with gamma 0 is exactly the
identity and one with gamma 1 the plain layer.

Scores (`set_phase`, as the paper's Algorithm 1):
- phase 1 (training, all components computed): a soft Gumbel-sigmoid sample
  sigma((mu + g1 - g2) / tau) per language and batch; the paper says the score weighs the
  component's output, hence soft, where Li et al.'s code takes a straight-through hard one;
- phase 2 (training) and inference: hard top-k by mu per language and group (k heads of each
  layer, k blocks of each layer, k layers of each stack), ties to the lower index; in training
  with a straight-through gradient from sigma(mu) (forward exactly 0/1);
- in evaluation mode a batch of one language pair runs that pair's extracted sub-network
  (`subnetwork`): the selected heads' rows of W_Q/W_K/W_V and columns of W_O, the selected
  blocks' columns of W1 and b1 and rows of W2, the selected layers; unselected components cost
  nothing. Equal to the masked model to float rounding (tests).

The target language is also told to the decoder as its first input: a learned tag embedding per
language stands in for BOS (SEEDS §2.3, needed by a dense multilingual baseline: `sparse` empty
is that baseline, the same code and tags).

Losses on the scores, p = sigma(mu) (`score_losses`; the paper's formulas were lost, SEEDS
§2.1 [R]): sparsity, the one-sided KL to the 0.5 prior of Li et al., mean p (log p - log 0.5)
(least at p = 1/(2e): it pulls scores down); disparity, the mean over language pairs and groups
of the overlap sum_i p_l,i p_l',i / N (0 when languages select disjoint components); top-k, the
mean over languages and groups of (sum_i p_i - k)^2 (0 at exactly k active).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.layers import (
    DecoderCache,
    DecoderLayer,
    EncoderLayer,
    EncoderState,
    FeedForward,
    MultiHeadAttention,
)
from models.transformer import Transformer, TransformerConfig

__all__ = [
    "KINDS",
    "SIDES",
    "SparseState",
    "SparseTransformer",
    "SparseTransformerConfig",
    "disparity_loss",
    "gumbel_sigmoid",
    "sparsity_loss",
    "top_k_mask",
    "topk_loss",
]

KINDS = ("heads", "ffn", "layers")  # the component kinds a language may select
SIDES = ("encoder", "decoder")  # encoder: source-language scores; decoder: target-language


@dataclass(frozen=True)
class SparseTransformerConfig(TransformerConfig):
    """The Transformer's sizes plus the languages and what each selects.

    `ffn_active`, `heads_active` and `*_layers_active` are the budget k of each group: blocks
    per layer, heads per layer, layers per stack (None: all of that stack's layers).
    """

    languages: tuple[str, ...] = ("en", "de")
    sparse: tuple[str, ...] = ("ffn",)  # of KINDS; () is the dense multilingual model
    sides: tuple[str, ...] = ("decoder",)  # of SIDES
    ffn_blocks: int = 8
    ffn_active: int = 4
    heads_active: int = 3
    enc_layers_active: int | None = None
    dec_layers_active: int | None = None
    temperature: float = 5.0  # tau of the phase-1 Gumbel-sigmoid (Li et al.'s default)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, allowed in (("languages", None), ("sparse", KINDS), ("sides", SIDES)):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(x, str) for x in value):
                raise ValueError(f"{name} must be a list of strings, got {value!r}")
            value = tuple(value)  # a JSON list becomes the tuple the field holds
            if len(set(value)) != len(value):
                raise ValueError(f"{name} has a repeated entry: {list(value)}")
            if allowed is not None and set(value) - set(allowed):
                raise ValueError(f"{name} must be drawn from {list(allowed)}, got {list(value)}")
            object.__setattr__(self, name, value)
        if not self.languages or any(not x or "." in x for x in self.languages):
            raise ValueError(f"languages must be codes without '.', got {list(self.languages)}")
        if self.sparse and not self.sides:
            raise ValueError("sparse components need at least one of sides: encoder, decoder")
        if "ffn" in self.sparse and self.d_ff % self.ffn_blocks:
            raise ValueError(f"d_ff {self.d_ff} does not split into {self.ffn_blocks} blocks")
        budgets = {  # checked for the kinds that are sparse; the others' are not read
            "ffn_active": ("ffn", self.ffn_active, self.ffn_blocks),
            "heads_active": ("heads", self.heads_active, self.n_heads),
            "enc_layers_active": ("layers", self.enc_layers_active, self.enc_layers),
            "dec_layers_active": ("layers", self.dec_layers_active, self.dec_layers),
        }
        for name, (kind, k, n) in budgets.items():
            if kind not in self.sparse or k is None:
                continue
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
                raise ValueError(f"{name} must be an integer in 1..{n}, got {k!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")

    def budget(self, kind: str, side: str) -> int:
        """k: the components of one group that a language keeps."""
        if kind == "heads":
            return self.heads_active
        if kind == "ffn":
            return self.ffn_active
        layers = self.enc_layers if side == "encoder" else self.dec_layers
        active = self.enc_layers_active if side == "encoder" else self.dec_layers_active
        return layers if active is None else active


def gumbel_sigmoid(
    mu: Tensor, tau: float, hard: bool = False, generator: torch.Generator | None = None
) -> Tensor:
    """A relaxed Bernoulli(sigma(mu)) sample sigma((mu + g1 - g2) / tau), g ~ Gumbel(0, 1).

    g1 - g2 is Logistic(0, 1), so P(sample > 1/2) = sigma(mu) for any tau. `hard`: 0/1 in the
    forward pass with the soft sample's gradient (straight-through).
    """
    u = torch.rand((2, *mu.shape), generator=generator, device=mu.device).clamp_(1e-10, 1 - 1e-7)
    g = -torch.log(-torch.log(u))
    soft = torch.sigmoid((mu + g[0] - g[1]) / tau)
    if not hard:
        return soft
    # (soft - soft.detach()) is exactly 0: the forward value stays exactly 0 or 1
    return (soft > 0.5).to(soft.dtype) + (soft - soft.detach())


def top_k_mask(mu: Tensor, k: int) -> Tensor:
    """1.0 at the k largest entries of the last dim of `mu`, else 0.0; ties go to the lower
    index, so the selection is deterministic."""
    if not 1 <= k <= mu.size(-1):
        raise ValueError(f"k must be in 1..{mu.size(-1)}, got {k}")
    order = torch.argsort(-mu.detach(), dim=-1, stable=True)[..., :k]
    return torch.zeros_like(mu).scatter_(-1, order, 1.0)


@dataclass(frozen=True)
class SparseState(EncoderState):
    """The encoder state with each sentence's languages, by index into `config.languages`."""

    source_lang: Tensor  # (B,) long
    target_lang: Tensor  # (B,) long
    # the batch's one (source, target) pair, read once when encoding (every decoding step
    # picks its sub-network by it); None when its rows mix pairs (the masked model runs)
    pair: tuple[int, int] | None = None


Scores = dict[str, Tensor]  # kind -> per-row scores: heads (B, L, H), ffn (B, L, K), layers (B, L)


class SparseTransformer(Transformer):
    """Encoder-decoder whose components are weighed by per-language scores (module doc)."""

    directional = True  # `encode` takes the language pair: decoding passes the one requested

    def __init__(self, config: SparseTransformerConfig) -> None:
        super().__init__(config)
        c = config
        n = len(c.languages)
        self.lang_tags = nn.Embedding(n, c.d_model)  # the decoder's first input per target
        self.scores = nn.ParameterDict()  # "<side>_<kind>" -> mu (languages, ...)
        for side in c.sides if c.sparse else ():
            layers = c.enc_layers if side == "encoder" else c.dec_layers
            shape = {
                "heads": (layers, c.n_heads),
                "ffn": (layers, c.ffn_blocks),
                "layers": (layers,),
            }
            for kind in c.sparse:
                self.scores[f"{side}_{kind}"] = nn.Parameter(torch.zeros(n, *shape[kind]))
        self.phase = 2  # 1: soft sampled scores; 2: hard top-k (also what inference runs)
        self._extracted: dict[tuple[int, int], _Subnetwork] = {}
        nn.init.normal_(self.lang_tags.weight, mean=0.0, std=c.d_model**-0.5)

    # ------------------------------------------------------------------ languages and scores

    def language_ids(self, langs: tuple[str, str], rows: int, device: torch.device) -> Tensor:
        """`(2, rows)` indices of (source, target) language names."""
        known = self.config.languages
        for lang in langs:
            if lang not in known:
                raise ValueError(f"the model knows languages {list(known)}, not {lang!r}")
        ids = torch.tensor([known.index(lang) for lang in langs], device=device)
        return ids[:, None].expand(2, rows)

    def set_phase(self, phase: int) -> None:
        """1: every component weighed by a sampled soft score; 2: each language's top-k only."""
        if phase not in (1, 2):
            raise ValueError(f"phase must be 1 or 2, got {phase}")
        self.phase = phase

    def masks(self, side: str) -> dict[str, Tensor]:
        """Per language, the hard top-k selection of each kind on `side` (what inference runs):
        kind -> `(N, ...)` 0/1; empty where `side` is not sparse."""
        c = self.config
        out = {}
        for kind in c.sparse:
            mu = self.scores[f"{side}_{kind}"] if f"{side}_{kind}" in self.scores else None
            if mu is not None:
                out[kind] = top_k_mask(mu, c.budget(kind, side))
        return out

    def _language_scores(self, side: str) -> dict[str, Tensor]:
        """Per language `(N, ...)` scores of each kind on `side`, as the phase says."""
        c = self.config
        out = {}
        for kind in c.sparse:
            key = f"{side}_{kind}"
            if key not in self.scores:
                continue
            mu = self.scores[key]
            if self.training and self.phase == 1:
                out[kind] = gumbel_sigmoid(mu, c.temperature)
            else:
                hard = top_k_mask(mu, c.budget(kind, side))
                p = torch.sigmoid(mu)
                out[kind] = hard + (p - p.detach())  # exactly 0/1, sigma(mu)'s gradient
        return out

    def row_scores(self, side: str, langs: Tensor) -> Scores:
        """Scores of each kind for rows of languages `langs` `(B,)`."""
        return {k: s.index_select(0, langs) for k, s in self._language_scores(side).items()}

    def score_losses(
        self, encoder_langs: list[int] | None = None, decoder_langs: list[int] | None = None
    ) -> dict[str, Tensor]:
        """The sparsity, disparity and top-k losses over the scores of the languages each side
        is trained for (None: every language); zeros where nothing is sparse."""
        c = self.config
        zero = self.embed.weight.new_zeros(())
        losses = {"sparsity": zero, "disparity": zero, "topk": zero}
        parts: dict[str, list[Tensor]] = {name: [] for name in losses}
        for key, mu in self.scores.items():
            side, kind = key.split("_", 1)
            langs = encoder_langs if side == "encoder" else decoder_langs
            if langs is not None:
                mu = mu.index_select(0, torch.tensor(langs, device=mu.device))
            p = torch.sigmoid(mu).reshape(mu.size(0), -1, mu.size(-1))  # (N, groups, members)
            parts["sparsity"].append(sparsity_loss(p))
            parts["disparity"].append(disparity_loss(p))
            parts["topk"].append(topk_loss(p, c.budget(kind, side)))
        for name, values in parts.items():
            if values:
                losses[name] = torch.stack(values).mean()
        return losses

    # ------------------------------------------------------------------ the masked model

    def _tagged(self, tokens: Tensor, target: Tensor, offset: int = 0) -> Tensor:
        """Decoder inputs `(B, T)` embedded, BOS replaced by the target language's tag."""
        x = self.embed(tokens) * self.embed_scale
        tag = self.lang_tags(target)[:, None, :] * self.embed_scale  # (B, 1, D)
        x = torch.where(tokens.eq(self.config.bos_id)[:, :, None], tag.to(x.dtype), x)
        x = x + self.positions(tokens.size(1), offset).to(x.dtype)
        return self.dropout(x)

    def encode(
        self,
        src: Tensor,
        source: EncoderState | None = None,
        *,
        languages: tuple[str, str] | Tensor | None = None,
    ) -> SparseState:
        """src `(B, S)` and its languages: a (source, target) pair of names for the whole
        batch, or `(2, B)` indices row by row. None: the first and the last language of
        `config.languages`. `source`: this model's encoding of `src`, made earlier."""
        langs = self._languages(languages, src)
        pair = None
        if langs.numel() and bool((langs == langs[:, :1]).all()):
            pair = (int(langs[0, 0]), int(langs[1, 0]))
        if source is not None:
            base = super().encode(src, source)
        else:
            sub = self._subnetwork_for(pair)
            src_pad = src.eq(self.config.pad_id)
            x = self._embed(src)
            if sub is not None:
                for layer in sub.encoder_layers:
                    x = layer(x, src_pad)
            else:
                s = self.row_scores("encoder", langs[0])
                for i, layer in enumerate(self.encoder_layers):
                    x = _encoder_layer(layer, x, src_pad, _layer_scores(s, i))
            base = EncoderState(memory=self.encoder_norm(x), src_pad=src_pad)
        return SparseState(base.memory, base.src_pad, langs[0], langs[1], pair)

    def _languages(self, languages: tuple[str, str] | Tensor | None, src: Tensor) -> Tensor:
        if languages is None:
            languages = (self.config.languages[0], self.config.languages[-1])
        if isinstance(languages, Tensor):
            if languages.shape != (2, src.size(0)):
                raise ValueError(f"languages {tuple(languages.shape)} for {src.size(0)} rows")
            return languages.to(src.device)
        return self.language_ids(tuple(languages), src.size(0), src.device)

    def decode(self, tgt_in: Tensor, state: EncoderState) -> Tensor:
        """Teacher-forced: tgt_in `(B, T)` (BOS + target) -> logits `(B, T, V)`."""
        st = _sparse(state)
        x = self._tagged(tgt_in, st.target_lang)
        sub = self._subnetwork_for(st.pair)
        if sub is not None:
            for layer in sub.decoder_layers:
                x = layer(x, st)
        else:
            s = self.row_scores("decoder", st.target_lang)
            for i, layer in enumerate(self.decoder_layers):
                x = _decoder_layer(layer, x, st, None, _layer_scores(s, i))
        return self.output(self.decoder_norm(x))

    def forward(self, src: Tensor, tgt_in: Tensor, languages: Tensor | None = None) -> Tensor:
        """src `(B, S)`, tgt_in `(B, T)`, languages `(2, B)` indices -> logits `(B, T, V)`."""
        return self.decode(tgt_in, self.encode(src, languages=languages))

    def init_cache(self, state: EncoderState) -> DecoderCache:
        st = _sparse(state)
        sub = self._subnetwork_for(st.pair)
        layers = sub.decoder_layers if sub is not None else self.decoder_layers
        caches = [layer.init_cache(st) for layer in layers]
        return DecoderCache(layers=caches, per_sentence=frozenset(k for c in caches for k in c))

    def decode_step(self, last_tokens: Tensor, state: EncoderState, cache: DecoderCache) -> Tensor:
        """As `Transformer.decode_step`; rows `(B,)` may be K beams of each of G sentences."""
        st = _sparse(state)
        rows = last_tokens.size(0)
        per = rows // st.target_lang.size(0)
        target = st.target_lang.repeat_interleave(per)  # (B,) each row's sentence's language
        x = self._tagged(last_tokens[:, None], target, offset=cache.step)  # (B, 1, D)
        sub = self._subnetwork_for(st.pair)
        if sub is not None:
            for layer, layer_cache in zip(sub.decoder_layers, cache.layers, strict=True):
                x = layer(x, st, layer_cache)
        else:
            s = self.row_scores("decoder", target)
            for i, (layer, layer_cache) in enumerate(
                zip(self.decoder_layers, cache.layers, strict=True)
            ):
                x = _decoder_layer(layer, x, st, layer_cache, _layer_scores(s, i))
        cache.step += 1
        logits = self.output(self.decoder_norm(x[:, 0]))
        return torch.log_softmax(logits.float(), dim=-1)

    # ------------------------------------------------------------------ sub-networks

    def __copy__(self) -> SparseTransformer:
        """A shallow copy with sub-networks of its own: int8 decoding copies the model and
        swaps its decoder layers, whose cut-outs must not be the float model's."""
        other = self.__class__.__new__(self.__class__)
        other.__dict__ = self.__dict__.copy()
        other._extracted = {}
        return other

    def train(self, mode: bool = True) -> SparseTransformer:
        self._extracted.clear()  # weights are about to change (or did): extract again
        return super().train(mode)

    def load_state_dict(self, *args, **kwargs):  # noqa: ANN002, ANN003 - nn.Module's signature
        self._extracted.clear()
        return super().load_state_dict(*args, **kwargs)

    def _subnetwork_for(self, pair: tuple[int, int] | None) -> _Subnetwork | None:
        """In evaluation mode, the extracted sub-network of the batch's one language pair;
        None in training or for a batch mixing pairs (then the masked model runs)."""
        if self.training or not len(self.scores) or pair is None:
            return None
        if pair not in self._extracted:
            self._extracted[pair] = self.subnetwork(*pair)
        return self._extracted[pair]

    @torch.no_grad()
    def subnetwork(self, source: int, target: int) -> _Subnetwork:
        """The layers a (source, target) language pair runs, cut out of the weights: only its
        selected layers, heads and feed-forward blocks, as plain Transformer layers."""
        c = self.config
        out = []
        for side, lang, layers in (
            ("encoder", source, self.encoder_layers),
            ("decoder", target, self.decoder_layers),
        ):
            masks = {k: m[lang] for k, m in self.masks(side).items()} if side in c.sides else {}
            if not masks:  # a dense stack: the model's own layers, not copies
                out.append(nn.ModuleList(layers))
                continue
            kept = []
            for i, layer in enumerate(layers):
                if "layers" in masks and not bool(masks["layers"][i]):
                    continue
                kept.append(
                    _cut_layer(
                        layer,
                        masks["heads"][i] if "heads" in masks else None,
                        masks["ffn"][i] if "ffn" in masks else None,
                    )
                )
            stack = nn.ModuleList(kept)
            if any(_is_int8(m) for m in layers.modules()):  # int8 decoding: cut-outs int8 too
                _to_int8(stack)
            out.append(stack)
        return _Subnetwork(out[0], out[1])

    def active_parameters(self, source: str, target: str) -> int:
        """Parameters a pair runs, embeddings, tags and scores excluded (as the paper counts)."""
        ids = self.language_ids((source, target), 1, torch.device("cpu"))[:, 0].tolist()
        sub = self.subnetwork(*ids) if len(self.scores) else None
        stacks = (
            [sub.encoder_layers, sub.decoder_layers]
            if sub is not None
            else [self.encoder_layers, self.decoder_layers]
        )
        norms = [self.encoder_norm, self.decoder_norm]
        return sum(p.numel() for m in [*stacks, *norms] for p in m.parameters())


class _Subnetwork(nn.Module):
    """One language pair's cut-out encoder and decoder layers."""

    def __init__(self, encoder_layers: nn.ModuleList, decoder_layers: nn.ModuleList) -> None:
        super().__init__()
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers


def _sparse(state: EncoderState) -> SparseState:
    if not isinstance(state, SparseState):
        raise ValueError("a sparse model decodes states of its own encode (with languages)")
    return state


def _layer_scores(s: Scores, i: int) -> Scores:
    """Layer i's scores from the stack's `(B, L, ...)` ones."""
    return {k: v[:, i] for k, v in s.items()}


def _scaled(x: Tensor, gamma: Tensor | None) -> Tensor:
    """x `(B, T, D)` weighed by a per-row layer score `(B,)`."""
    return x if gamma is None else x * gamma[:, None, None].to(x.dtype)


def _attend(
    attn: MultiHeadAttention,
    h: Tensor,
    kv: tuple[Tensor, Tensor],
    mask: Tensor | None,
    causal: bool,
    heads: Tensor | None,
) -> Tensor:
    """Attention with each head's output weighed by its score `(B, H)` before W_O."""
    ctx = attn.context(attn.q_proj(h), kv, mask, causal)  # (B, T, D)
    if heads is not None:
        b, t, d = ctx.shape
        ctx = ctx.view(b, t, attn.n_heads, attn.d_head) * heads[:, None, :, None].to(ctx.dtype)
        ctx = ctx.reshape(b, t, d)
    return attn.out_proj(ctx)


def _feed_forward(ffn: FeedForward, x: Tensor, blocks: Tensor | None) -> Tensor:
    """The feed-forward with each block of hidden units weighed by its score `(B, K)`."""
    h = F.relu(ffn.fc1(x))  # (B, T, d_ff)
    if blocks is not None:
        b, t, d_ff = h.shape
        k = blocks.size(1)
        h = (h.view(b, t, k, d_ff // k) * blocks[:, None, :, None].to(h.dtype)).reshape(b, t, d_ff)
    return ffn.fc2(ffn.dropout(h))


def _encoder_layer(layer: EncoderLayer, x: Tensor, pad: Tensor, s: Scores) -> Tensor:
    """`EncoderLayer.forward` with scores: pre-norm, so gamma 0 leaves x exactly as it is."""
    gamma = s.get("layers")
    h = layer.self_attn_norm(x)
    a = _attend(layer.self_attn, h, layer.self_attn.project_kv(h), pad, False, s.get("heads"))
    x = x + _scaled(layer.dropout(a), gamma)
    f = _feed_forward(layer.ffn, layer.ffn_norm(x), s.get("ffn"))
    return x + _scaled(layer.dropout(f), gamma)


def _decoder_layer(
    layer: DecoderLayer,
    x: Tensor,
    state: EncoderState,
    cache: dict[str, Tensor] | None,
    s: Scores,
) -> Tensor:
    """`DecoderLayer.forward` with scores (self-attention, cross-attention, feed-forward)."""
    gamma, heads = s.get("layers"), s.get("heads")
    h = layer.self_attn_norm(x)
    k, v = layer.self_attn.project_kv(h)
    if cache is not None:
        if "self_k" in cache:
            k = torch.cat([cache["self_k"], k], dim=2)
            v = torch.cat([cache["self_v"], v], dim=2)
        cache["self_k"], cache["self_v"] = k, v
    a = _attend(layer.self_attn, h, (k, v), None, True, heads)
    x = x + _scaled(layer.dropout(a), gamma)
    h = layer.cross_attn_norm(x)
    if cache is not None:
        kv = (cache["cross_k"], cache["cross_v"])
    else:
        kv = layer.cross_attn.project_kv(state.memory)
    # beam rows share their sentence's keys/values: `context` groups the queries, and the
    # per-row head scores are the same for a sentence's beams
    a = _attend(layer.cross_attn, h, kv, state.src_pad, False, heads)
    x = x + _scaled(layer.dropout(a), gamma)
    f = _feed_forward(layer.ffn, layer.ffn_norm(x), s.get("ffn"))
    return x + _scaled(layer.dropout(f), gamma)


def _rows_of(linear: nn.Module, rows: Tensor) -> nn.Linear:
    """A new linear layer with output rows `rows` of `linear` (weight and bias)."""
    weight, bias = _float_weights(linear)
    out = nn.Linear(weight.size(1), rows.numel(), bias=bias is not None)
    out.weight.copy_(weight.index_select(0, rows))
    if bias is not None:
        out.bias.copy_(bias.index_select(0, rows))
    return out


def _columns_of(linear: nn.Module, cols: Tensor) -> nn.Linear:
    """A new linear layer reading only input columns `cols` of `linear` (bias kept)."""
    weight, bias = _float_weights(linear)
    out = nn.Linear(cols.numel(), weight.size(0), bias=bias is not None)
    out.weight.copy_(weight.index_select(1, cols))
    if bias is not None:
        out.bias.copy_(bias)
    return out


def _is_int8(module: nn.Module) -> bool:
    """Whether `module` is a dynamically quantized linear layer (`models.quantize`)."""
    return not isinstance(module, nn.Linear) and callable(getattr(module, "weight", None))


def _to_int8(stack: nn.ModuleList) -> None:
    """The float linear layers of cut-out layers made int8 as `models.quantize` makes them
    (per output channel; the layers' other int8 ones stay as they are)."""
    import warnings

    with warnings.catch_warnings():  # torch marks its eager quantization API as deprecated
        warnings.simplefilter("ignore")
        torch.ao.quantization.quantize_dynamic(
            stack,
            qconfig_spec={nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig},
            dtype=torch.qint8,
            inplace=True,
        )


def _float_weights(linear: nn.Module) -> tuple[Tensor, Tensor | None]:
    """(weight, bias) of a float or a dynamically quantized linear layer, in float."""
    if isinstance(linear, nn.Linear):
        return linear.weight.detach(), None if linear.bias is None else linear.bias.detach()
    weight, bias = linear.weight(), linear.bias()  # torch.ao dynamic quantized Linear
    return weight.dequantize(), bias


def _units(mask: Tensor, width: int) -> Tensor:
    """Indices of the units of the selected groups: mask `(G,)` 0/1, `width` units each."""
    groups = mask.nonzero().squeeze(1)
    return (groups[:, None] * width + torch.arange(width, device=mask.device)).reshape(-1)


def _cut_attention(attn: MultiHeadAttention, heads: Tensor | None) -> MultiHeadAttention:
    out = copy.deepcopy(attn)
    if heads is None:
        return out
    units = _units(heads, attn.d_head)
    out.q_proj = _rows_of(attn.q_proj, units)
    out.k_proj = _rows_of(attn.k_proj, units)
    out.v_proj = _rows_of(attn.v_proj, units)
    out.out_proj = _columns_of(attn.out_proj, units)
    out.n_heads = int(heads.sum())
    return out


def _cut_layer(layer: nn.Module, heads: Tensor | None, blocks: Tensor | None) -> nn.Module:
    """A copy of an encoder or decoder layer holding only the selected heads and blocks (the
    layer itself when it keeps all of them)."""
    if heads is None and blocks is None:
        return layer
    out = copy.deepcopy(layer)
    out.self_attn = _cut_attention(layer.self_attn, heads)
    if hasattr(layer, "cross_attn"):
        out.cross_attn = _cut_attention(layer.cross_attn, heads)
    if blocks is not None:
        units = _units(blocks, layer.ffn.fc1.out_features // blocks.numel())
        out.ffn.fc1 = _rows_of(layer.ffn.fc1, units)
        out.ffn.fc2 = _columns_of(layer.ffn.fc2, units)
    return out


def sparsity_loss(p: Tensor) -> Tensor:
    """Mean one-sided KL to the 0.5 prior, p (log p - log 0.5) (Li et al.); least at 1/(2e)."""
    return (p * (torch.log(p.clamp_min(1e-12)) - math.log(0.5))).mean()


def disparity_loss(p: Tensor) -> Tensor:
    """Mean over language pairs and groups of the overlap sum_i p_l,i p_l',i / N; `p`
    `(languages, groups, members)`. 0 with a single language."""
    n = p.size(0)
    if n < 2:
        return p.new_zeros(())
    overlap = torch.einsum("lgi,mgi->lmg", p, p) / p.size(-1)  # (N, N, groups)
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=p.device)
    return overlap[off_diagonal].mean()


def topk_loss(p: Tensor, k: int) -> Tensor:
    """Mean over languages and groups of (sum_i p_i - k)^2: 0 at exactly k active."""
    return ((p.sum(dim=-1) - k) ** 2).mean()
