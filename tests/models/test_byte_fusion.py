"""Local byte fusion (models/byte_fusion.py): the byte round trip, one-hot embeddings, nCF's
shapes and mixing, batch invariance, the word mask of WSF, and a toy byte task learned."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models.byte_fusion import (
    NGRAMS,
    ByteFusionConfig,
    ByteFusionTransformer,
    repeat_cut,
    word_groups,
)
from models.data import pad_batch
from models.decoding import beam_search, greedy
from models.registry import build_model
from models.tokenizer import BOS_ID, EOS_ID, PAD_ID, ByteTokenizer
from tests.toy_architectures import TOY_TASK, toy_pairs

pytestmark = pytest.mark.unit

TOK = ByteTokenizer()
# Verses in 1-, 2- and 3-byte scripts, one with a zero-width joiner, two without word spaces.
VERSES = [
    "Im Anfang schuf Gott die Himmel und die Erde.",
    "В начале сотворил Бог небо и землю.",
    "आदि में परमेश्वर ने आकाश और पृथ्वी की सृष्टि की। क्‍या",
    "起初，神创造天地。",
    "はじめに神は天と地とを創造された。",
]
SMALL = dict(d_model=32, n_heads=2, enc_layers=3, dec_layers=1, d_ff=64, dropout=0.0)


def model(**overrides: object) -> ByteFusionTransformer:
    torch.manual_seed(0)
    return ByteFusionTransformer(ByteFusionConfig(**{**SMALL, **overrides})).eval()


def batch(texts: list[str]) -> torch.Tensor:
    return pad_batch([TOK.encode(t, "xx") for t in texts])


def test_bytes_round_trip_and_a_cut_character_drops_only_itself() -> None:
    for verse in VERSES:
        assert TOK.decode(TOK.encode(verse, "xx")) == verse
    ids = TOK.encode("Gott 神", "de")
    assert TOK.decode(ids[:-1]) == "Gott \ufffd"  # the broken last character only
    assert TOK.decode(ids[:-3]) == "Gott "


def test_one_hot_embeddings_are_fixed_and_not_parameters() -> None:
    with pytest.raises(ValueError, match="d_model >= vocab_size"):
        ByteFusionConfig(embedding="onehot", tie_embeddings=False, d_model=256, n_heads=4)
    with pytest.raises(ValueError, match="untied"):
        ByteFusionConfig(embedding="onehot", d_model=288, n_heads=4)
    m = model(embedding="onehot", tie_embeddings=False, d_model=264, n_heads=2)
    names = {n for n, _ in m.named_parameters()}
    assert not any("embed" in n for n in names) and "onehot" not in m.state_dict()
    x = m.onehot
    assert x.shape == (260, 264) and not x.requires_grad
    assert torch.equal(x[PAD_ID], torch.zeros(264))
    for v in (1, 4, 100, 259):
        assert x[v].sum() == 1 and x[v, v] == 1
    scaled = m._embed(torch.tensor([[100]])) - m.positions(1, 0)
    assert torch.allclose(scaled[0, 0, 100], torch.tensor(math.sqrt(264)))


@pytest.mark.parametrize("length", [1, 5, 12, 13])
def test_ngram_outputs_repeat_in_place_and_are_cut_to_the_input_length(length: int) -> None:
    m = model(fusion="ncf")
    x = torch.randn(2, length, 32)
    for n, conv in zip(NGRAMS, m.convs, strict=True):
        padded = F.pad(x, (0, 0, 0, (-length) % n))
        f = conv(padded.transpose(1, 2)).transpose(1, 2)
        assert f.shape[1] == math.ceil(length / n)
        assert padded.shape[1] - length == ((-length) % n)  # zeros only when N % n != 0
        out = repeat_cut(f, n, length)
        assert out.shape[1] == length
        for i in range(length):
            assert torch.equal(out[:, i], f[:, i // n])


def test_one_hot_mixing_weights_select_one_branch_exactly() -> None:
    m = model(fusion="ncf")
    assert sum(p.numel() for p in m.mix.parameters()) == 4
    x = torch.randn(2, 7, 32)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    for branch in range(4):
        with torch.no_grad():
            m.mix.weight.copy_(F.one_hot(torch.tensor([branch]), 4).float())
        fused = m.fuse_ngrams(x, pad)
        if branch == 0:
            expected = x
        else:
            n = NGRAMS[branch - 1]
            conv = m.convs[branch - 1]
            f = conv(F.pad(x, (0, 0, 0, (-7) % n)).transpose(1, 2)).transpose(1, 2)
            expected = repeat_cut(f, n, 7)
        assert torch.equal(fused, expected)


@pytest.mark.parametrize("fusion", ["none", "ncf", "wsf"])
def test_a_sentence_encodes_the_same_alone_and_in_a_batch(fusion: str) -> None:
    m = model(fusion=fusion)
    alone = m.encode(batch(VERSES[:1])).memory[0]
    together = m.encode(batch(VERSES)).memory[0, : alone.size(0)]
    assert (alone - together).abs().max() < 1e-5


def test_word_layers_equal_encoding_each_word_alone() -> None:
    m = model(fusion="wsf", fusion_layers=2, enc_layers=3)
    text = "In the beginning God created"
    src = batch([text])
    x = m._embed(src)  # positions are absolute: each word keeps its offsets
    blocked = (lambda g: g[:, :, None].ne(g[:, None, :]))(word_groups(src, PAD_ID))
    whole = x
    for layer in m.encoder_layers[:2]:
        whole = layer(whole, blocked)
    groups = word_groups(src, PAD_ID)[0]
    for g in groups.unique():
        span = (groups == g).nonzero()[:, 0]
        assert torch.equal(span, torch.arange(span[0], span[-1] + 1))  # contiguous
        part = x[:, span]
        for layer in m.encoder_layers[:2]:
            part = layer(part, torch.zeros(1, len(span), dtype=torch.bool))
        assert (part - whole[:, span]).abs().max() < 1e-5


def test_word_rule_for_separators_and_scripts_without_spaces() -> None:
    def words(text: str) -> list[str]:
        src = batch([text, text + " and more"])  # the first row is padded
        groups = word_groups(src, PAD_ID)[0].tolist()
        out: dict[int, list[int]] = {}
        for i, g in zip(src[0].tolist(), groups, strict=True):
            if i != PAD_ID:
                out.setdefault(g, []).append(i - 4)
        return [bytes(b).decode() for b in out.values()]

    assert words("In the  beginning, God") == ["In", " ", "the", " ", "beginning,", " ", "God"]
    assert words("起初，神创造天地。") == list("起初，神创造天地。")
    assert words("はじめに神は天と") == list("はじめに神は天と")
    assert words("आदि में") == ["आदि", " ", "में"]
    groups = word_groups(batch(["ab", "abcd"]), PAD_ID)[0]
    assert groups[2] != groups[3] and groups[2] < 0  # each pad position its own group


@pytest.mark.parametrize(
    "config",
    [
        {"fusion": "none"},
        {"fusion": "ncf"},
        {"fusion": "wsf"},
        {"fusion": "ncf", "embedding": "onehot", "tie_embeddings": False, "d_model": 264},
    ],
)
def test_one_step_lowers_the_loss_and_the_fusion_gets_gradients(config: dict) -> None:
    m = model(**config).train()
    src = batch(VERSES)
    tgt = [TOK.encode(t, "en") for t in VERSES]
    tgt_in, tgt_out = pad_batch([[BOS_ID, *t] for t in tgt]), pad_batch([[*t, EOS_ID] for t in tgt])
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)

    def loss() -> torch.Tensor:
        logits = m(src, tgt_in)
        return F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD_ID)

    first = loss()
    first.backward()
    if config["fusion"] == "ncf":
        assert m.mix.weight.grad.abs().sum() > 0
        assert all(c.weight.grad.abs().sum() > 0 for c in m.convs)
    opt.step()
    assert loss() < first


def test_registered_and_rebuilt_from_its_config() -> None:
    m = model(fusion="wsf")
    again = build_model("byte-fusion", m.config.to_dict())
    assert type(again) is ByteFusionTransformer and again.config == m.config


def test_a_byte_model_learns_a_toy_task_in_seconds() -> None:
    """Upper-casing through nCF (about 25 s on 2 cores): greedy and beam search exactly right
    on held-out words."""
    torch.manual_seed(0)
    m = ByteFusionTransformer(
        ByteFusionConfig(
            d_model=64, n_heads=4, enc_layers=2, dec_layers=1, d_ff=128, dropout=0.0,
            fusion="ncf", fusion_layers=1, max_len=64,
        )
    )  # fmt: skip
    held_out = ["quixotic", "vex", "hello world", "jumping", "abc", "zebra"]
    pairs = [p for p in toy_pairs(5000, seed=3) if p[0] not in held_out]
    steps = 400
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50, max(0.02, (steps - s) / (0.6 * steps)))
    )
    m.train()
    for step in range(steps):
        rows = pairs[(step * 64) % len(pairs) :][:64]
        src = batch([s for s, _ in rows])
        tgt = [TOK.encode(t, "en") for _, t in rows]
        tgt_in = pad_batch([[BOS_ID, *t] for t in tgt])
        tgt_out = pad_batch([[*t, EOS_ID] for t in tgt])
        loss = F.cross_entropy(
            m(src, tgt_in).transpose(1, 2), tgt_out, ignore_index=PAD_ID, label_smoothing=0.1
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    m.eval()
    src = batch(held_out)
    expected = [TOY_TASK(w) for w in held_out]
    assert [TOK.decode(h) for h in greedy(m, src, 1.0, 2)] == expected
    assert [TOK.decode(h) for h in beam_search(m, src, 3, 1.0, 1.0, 2)] == expected
