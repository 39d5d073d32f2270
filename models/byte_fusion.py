"""Byte-level translation with local byte fusion (Sreedhar et al., ACL 2023; `../shared/SEEDS.md`
§1): UTF-8 bytes in and out, no vocabulary to maintain, one model for many scripts.

One architecture, `ByteFusionTransformer`, whose config chooses:

- `embedding`: "dense" (a learned 260 x d table, scaled by sqrt(d)) or "onehot" (the released
  LOBEF variant of Shaham & Levy's embeddingless model: a frozen one-hot input in the first 260
  of d >= 260 coordinates, a constant sqrt(d) scale, a learned untied output projection);
- `fusion` between `fusion_layers` shallow encoder layers and the rest:
  "none" (the vanilla byte Transformer);
  "ncf" (n-gram convolutional fusion): for n = 2..4 a convolution of kernel n and stride n over
  the shallow output, right-padded with zeros to a multiple of n, each output repeated n times
  in place and cut to the input length, mixed with the shallow output itself (n = 1, as in the
  released code) by four unconstrained learned scalars;
  "wsf" (word-based self-attention fusion): the shallow layers attend only within each word
  (a block-diagonal mask over true word spans, every byte seeing itself: the paper's version,
  not the released code's, which shifts spans and masks the diagonal).

Word rule (`word_groups`): a word is a maximal run of bytes without ASCII whitespace; each
whitespace byte is a word of its own; in scripts without word spaces each character of
U+3000-U+9FFF (CJK punctuation, kana, CJK ideographs) is a word of its own, so Chinese and
Japanese verses are not one block. Padding is zeroed before the convolutions and each pad
position attends only to itself in the word layers, so a sentence encodes the same alone and in
a batch. The decoder is the Transformer's, over bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.layers import EncoderState
from models.tokenizer import BYTE_OFFSET
from models.transformer import Transformer, TransformerConfig

__all__ = [
    "EMBEDDINGS",
    "FUSIONS",
    "NGRAMS",
    "ByteFusionConfig",
    "ByteFusionTransformer",
    "repeat_cut",
    "word_groups",
]

FUSIONS = ("none", "ncf", "wsf")
EMBEDDINGS = ("dense", "onehot")
NGRAMS = (2, 3, 4)  # convolution widths of nCF; n = 1 is the shallow output itself
_WHITESPACE = tuple(b + BYTE_OFFSET for b in b" \t\n\r")
_CJK_LEADS = (0xE3 + BYTE_OFFSET, 0xE9 + BYTE_OFFSET)  # UTF-8 lead bytes of U+3000-U+9FFF


@dataclass(frozen=True)
class ByteFusionConfig(TransformerConfig):
    vocab_size: int = 256 + BYTE_OFFSET
    max_len: int = 1024
    fusion: str = "none"  # "none" | "ncf" | "wsf"
    fusion_layers: int = 2  # shallow encoder layers before the fusion (L_s or L_w)
    embedding: str = "dense"  # "dense" | "onehot"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {self.fusion!r}")
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {self.embedding!r}")
        if self.fusion != "none" and not 1 <= self.fusion_layers < self.enc_layers:
            raise ValueError(
                f"fusion_layers must leave layers on both sides: 1..{self.enc_layers - 1}, "
                f"got {self.fusion_layers}"
            )
        if self.embedding == "onehot":
            if self.d_model < self.vocab_size:
                raise ValueError(
                    f"one-hot embeddings need d_model >= vocab_size ({self.vocab_size}), "
                    f"got {self.d_model}"
                )
            if self.tie_embeddings:
                raise ValueError("one-hot embeddings have a learned, untied output layer")


def repeat_cut(f: Tensor, n: int, length: int) -> Tensor:
    """`f (B, ceil(N/n), D)` -> `(B, N, D)` with row i = f[i // n]: each n-gram's vector at
    every byte it covers."""
    return f.repeat_interleave(n, dim=1)[:, :length]


def word_groups(src: Tensor, pad_id: int) -> Tensor:
    """Per position `(B, S)` the id of its word (see the module's word rule); every pad
    position gets a group of its own. Two positions may attend to each other in the word
    layers exactly when their ids are equal."""
    b, s = src.shape
    pad = src.eq(pad_id)
    byte = src - BYTE_OFFSET
    space = torch.zeros_like(pad)
    for w in _WHITESPACE:
        space |= src.eq(w)
    char_start = ~((byte >= 0x80) & (byte <= 0xBF))  # not a UTF-8 continuation byte
    lead_cjk = (src >= _CJK_LEADS[0]) & (src <= _CJK_LEADS[1]) & char_start
    # each position's character (the last character start at or before it), and whether that
    # character is a CJK one
    char_index = (torch.cumsum(char_start.long(), dim=1) - 1).clamp(min=0)  # (B, S)
    rows = torch.arange(b, device=src.device)[:, None].expand(b, s)
    per_char = torch.zeros_like(pad)
    per_char[rows[char_start], char_index[char_start]] = lead_cjk[char_start]
    cjk = torch.gather(per_char, 1, char_index)
    prev_space = F.pad(space, (1, 0))[:, :s]
    prev_cjk = F.pad(cjk, (1, 0))[:, :s]
    first = torch.zeros_like(pad)
    first[:, 0] = True
    new_word = char_start & (first | space | prev_space | cjk | prev_cjk)
    groups = torch.cumsum(new_word.long(), dim=1)  # 1.. within a row
    pad_groups = -(torch.arange(s, device=src.device) + 1).expand(b, s)  # one per pad position
    return torch.where(pad, pad_groups, groups)


class ByteFusionTransformer(Transformer):
    """A byte-level encoder-decoder; `config.fusion` adds local byte fusion to the encoder."""

    def __init__(self, config: ByteFusionConfig) -> None:
        super().__init__(config)
        c = config
        if c.embedding == "onehot":
            del self.embed  # a fixed matrix, not a parameter: nothing to train or decay
            self.register_buffer("onehot", torch.eye(c.vocab_size, c.d_model), persistent=False)
            self.onehot[c.pad_id].zero_()
        if c.fusion == "ncf":
            self.convs = nn.ModuleList(
                nn.Conv1d(c.d_model, c.d_model, kernel_size=n, stride=n) for n in NGRAMS
            )
            self.mix = nn.Linear(1 + len(NGRAMS), 1, bias=False)  # lambda_1..lambda_4
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As the Transformer's; the fusion's convolutions and mixing scalars keep PyTorch's
        default initialisation, as in the released code."""
        embed = getattr(self, "embed", None)
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not getattr(self, "mix", None):
                if embed is None or module.weight is not embed.weight:
                    nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if embed is not None:
            nn.init.normal_(embed.weight, mean=0.0, std=self.config.d_model**-0.5)
            with torch.no_grad():
                embed.weight[self.config.pad_id].zero_()
        if self.config.fusion == "ncf" and hasattr(self, "mix"):
            for conv in self.convs:
                conv.reset_parameters()
            self.mix.reset_parameters()

    def _embed(self, tokens: Tensor, offset: int = 0) -> Tensor:
        if self.config.embedding == "dense":
            return super()._embed(tokens, offset)
        x = self.onehot[tokens] * self.embed_scale  # constant scale (the released variant)
        x = x + self.positions(tokens.size(1), offset).to(x.dtype)
        return self.dropout(x)

    def fuse_ngrams(self, x: Tensor, src_pad: Tensor) -> Tensor:
        """nCF: the shallow output `x (B, N, D)` mixed with its n-gram convolutions."""
        x = x.masked_fill(src_pad[:, :, None], 0.0)  # padding never enters a window
        n_len = x.size(1)
        branches = [x]
        for n, conv in zip(NGRAMS, self.convs, strict=True):
            padded = F.pad(x, (0, 0, 0, (-n_len) % n))  # right-pad to a multiple of n
            f = conv(padded.transpose(1, 2)).transpose(1, 2)  # (B, ceil(N/n), D)
            branches.append(repeat_cut(f, n, n_len))
        return self.mix(torch.stack(branches, dim=-1)).squeeze(-1)  # (B, N, D)

    def encode(self, src: Tensor, source: EncoderState | None = None) -> EncoderState:
        c = self.config
        if source is not None or c.fusion == "none":
            return super().encode(src, source)
        src_pad = src.eq(c.pad_id)
        x = self._embed(src)
        shallow = self.encoder_layers[: c.fusion_layers]
        deep = self.encoder_layers[c.fusion_layers :]
        if c.fusion == "wsf":
            groups = word_groups(src, c.pad_id)
            blocked = groups[:, :, None].ne(groups[:, None, :])  # (B, S, S) True: other word
            for layer in shallow:
                x = layer(x, blocked)
        else:
            for layer in shallow:
                x = layer(x, src_pad)
            x = self.fuse_ngrams(x, src_pad)
        for layer in deep:
            x = layer(x, src_pad)
        return EncoderState(memory=self.encoder_norm(x), src_pad=src_pad)
