"""The Adaptive Sparse Transformer (SEEDS §2.4): scores, masks, sub-network extraction, losses,
language conditioning, and a toy two-language task learned with different sub-networks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from models.decoding import beam_search, greedy
from models.layers import FeedForward
from models.registry import build_model
from models.sparse_transformer import (
    SparseTransformer,
    SparseTransformerConfig,
    _encoder_layer,
    _feed_forward,
    disparity_loss,
    gumbel_sigmoid,
    sparsity_loss,
    top_k_mask,
    topk_loss,
)
from models.tokenizer import BOS_ID, PAD_ID, ByteTokenizer
from models.transformer import Transformer, TransformerConfig
from tests.toy_architectures import SPARSE_HELD_OUT, SPARSE_TASKS, train_toy_sparse

pytestmark = pytest.mark.unit

torch.set_num_threads(1)
TOK = ByteTokenizer()
LANGS = ("en", "up", "next")


def config(**kw: object) -> SparseTransformerConfig:
    base = dict(
        vocab_size=TOK.vocab_size, d_model=32, n_heads=4, enc_layers=2, dec_layers=2, d_ff=64,
        dropout=0.0, max_len=48, languages=LANGS, sparse=("heads", "ffn", "layers"),
        sides=("encoder", "decoder"), ffn_blocks=4, ffn_active=2, heads_active=3,
        enc_layers_active=1, dec_layers_active=1,
    )  # fmt: skip
    base.update(kw)
    return SparseTransformerConfig(**base)


def model(seed: int = 0, **kw: object) -> SparseTransformer:
    torch.manual_seed(seed)
    m = SparseTransformer(config(**kw))
    with torch.no_grad():  # distinct scores, so each language selects its own components
        for mu in m.scores.values():
            mu.normal_(0.0, 1.0)
    return m


def batch(texts: list[str]) -> Tensor:
    seqs = [TOK.encode(t, "en") for t in texts]
    out = torch.zeros(len(seqs), max(map(len, seqs)), dtype=torch.long)
    for i, seq in enumerate(seqs):
        out[i, : len(seq)] = torch.tensor(seq)
    return out


def pad_batch(seqs: list[list[int]]) -> Tensor:
    out = torch.full((len(seqs), max(map(len, seqs))), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s)
    return out


def languages(pairs: list[tuple[str, str]]) -> Tensor:
    """`(2, B)` language indices of (source, target) names."""
    return torch.tensor([[LANGS.index(s) for s, _ in pairs], [LANGS.index(t) for _, t in pairs]])


SRC = batch(["hello", "abc de", "xyz"])
TGT_IN = pad_batch([[BOS_ID, *TOK.encode(t, "en")] for t in ["HELLO", "ABC DE", "XYZ"]])


def test_config_checks_name_the_field() -> None:
    with pytest.raises(ValueError, match="sparse must be drawn from"):
        config(sparse=("ffn", "experts"))
    with pytest.raises(ValueError, match="does not split into 5 blocks"):
        config(ffn_blocks=5)
    with pytest.raises(ValueError, match="heads_active must be an integer in 1..4"):
        config(heads_active=5)
    with pytest.raises(ValueError, match="dec_layers_active"):
        config(dec_layers_active=0)
    with pytest.raises(ValueError, match="languages has a repeated entry"):
        config(languages=("en", "de", "en"))
    c = SparseTransformerConfig.from_dict({**config().to_dict(), "languages": ["en", "up", "next"]})
    assert c.languages == LANGS and c == config()  # a JSON list is stored as the tuple
    again = build_model("sparse-transformer", c.to_dict())
    assert type(again) is SparseTransformer and again.config == c


def test_all_scores_one_is_the_plain_transformer_exactly() -> None:
    """Every component kept (k = all): the masked model and the extracted sub-network give the
    plain Transformer's logits with the same weights, to the last bit."""
    m = model(ffn_active=4, heads_active=4, enc_layers_active=2, dec_layers_active=2)
    plain = Transformer(TransformerConfig(**{
        k: v for k, v in m.config.to_dict().items() if k in TransformerConfig.__dataclass_fields__
    }))  # fmt: skip
    missing, unexpected = plain.load_state_dict(m.state_dict(), strict=False)
    assert not missing and {k.split(".")[0] for k in unexpected} == {"lang_tags", "scores"}
    with torch.no_grad():  # the target tag the plain model has is its BOS embedding
        m.lang_tags.weight.copy_(m.embed.weight[BOS_ID].expand(len(LANGS), -1))
    langs = languages([("en", "up")] * 3)
    plain.eval()
    want = plain(SRC, TGT_IN)
    m.train()  # the masked model with hard scores (phase 2; dropout 0)
    assert torch.equal(m(SRC, TGT_IN, langs), want)
    m.eval()  # the extracted sub-network
    assert torch.equal(m(SRC, TGT_IN, langs), want)


def test_an_ffn_block_score_selects_exactly_that_block() -> None:
    torch.manual_seed(1)
    ffn = FeedForward(config()).eval()
    x = torch.randn(2, 5, 32)
    for k in range(4):
        blocks = F.one_hot(torch.tensor([k, k]), 4).float()  # (B, K)
        cols = slice(16 * k, 16 * (k + 1))
        alone = F.relu(x @ ffn.fc1.weight[cols].T + ffn.fc1.bias[cols]) @ ffn.fc2.weight[:, cols].T
        torch.testing.assert_close(
            _feed_forward(ffn, x, blocks), alone + ffn.fc2.bias, atol=1e-6, rtol=0
        )
    none = _feed_forward(ffn, x, torch.zeros(2, 4))  # no block: the bias alone, exactly
    assert torch.equal(none, ffn.fc2.bias.expand_as(none))


def test_a_layer_with_score_zero_is_the_identity_and_one_the_plain_layer() -> None:
    m = model()
    layer = m.encoder_layers[0].eval()
    x = torch.randn(3, 6, 32)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[0, 4:] = True
    assert torch.equal(_encoder_layer(layer, x, pad, {"layers": torch.zeros(3)}), x)
    torch.testing.assert_close(
        _encoder_layer(layer, x, pad, {"layers": torch.ones(3)}), layer(x, pad), atol=1e-6, rtol=0
    )


def test_top_k_returns_exactly_k_and_is_deterministic() -> None:
    mu = torch.tensor([[0.3, 0.9, 0.3, -1.0, 0.3], [0.0, 0.0, 0.0, 0.0, 0.0]])
    for k in range(1, 6):
        mask = top_k_mask(mu, k)
        assert mask.sum(dim=-1).tolist() == [k, k]
        assert torch.equal(mask, top_k_mask(mu.clone(), k))
    assert top_k_mask(mu, 2).tolist() == [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0]]  # ties: lower index
    m = model()
    for side in ("encoder", "decoder"):
        masks = m.masks(side)
        assert masks["heads"].sum(-1).eq(3).all() and masks["ffn"].sum(-1).eq(2).all()
        assert masks["layers"].sum(-1).eq(1).all()
    with pytest.raises(ValueError, match="k must be in 1..5"):
        top_k_mask(mu, 6)


@pytest.mark.parametrize("tau", [0.5, 5.0])
def test_gumbel_sigmoid_hard_samples_are_one_with_probability_sigma_mu(tau: float) -> None:
    mu = torch.tensor([-2.0, -0.5, 0.0, 0.7, 3.0])
    g = torch.Generator().manual_seed(7)
    draws = torch.stack([gumbel_sigmoid(mu, tau, generator=g) for _ in range(100_000)])
    share = (draws > 0.5).float().mean(dim=0)
    torch.testing.assert_close(share, torch.sigmoid(mu), atol=0.005, rtol=0)


def test_straight_through_is_zero_one_forward_with_the_soft_gradient() -> None:
    mu = torch.tensor([-1.0, 0.2, 1.5], requires_grad=True)
    weights = torch.tensor([1.0, -2.0, 3.0])
    hard = gumbel_sigmoid(mu, 2.0, hard=True, generator=torch.Generator().manual_seed(3))
    assert set(hard.tolist()) <= {0.0, 1.0}
    (hard * weights).sum().backward()
    grad_hard = mu.grad.clone()
    mu.grad = None
    soft = gumbel_sigmoid(mu, 2.0, generator=torch.Generator().manual_seed(3))
    (soft * weights).sum().backward()
    torch.testing.assert_close(grad_hard, mu.grad)


def test_score_losses_on_toy_scores() -> None:
    p = torch.linspace(0.01, 0.99, 981)
    values = torch.stack([sparsity_loss(x.view(1, 1, 1)) for x in p])
    assert abs(float(p[values.argmin()]) - 1 / (2 * math.e)) < 1e-3  # one-sided KL's minimum
    disjoint = torch.tensor([[[1.0, 1.0, 0.0, 0.0]], [[0.0, 0.0, 1.0, 1.0]]])  # (N, groups, i)
    assert float(disparity_loss(disjoint)) == 0.0
    shared = torch.tensor([[[1.0, 1.0, 0.0, 0.0]], [[1.0, 0.0, 1.0, 0.0]]])
    assert float(disparity_loss(shared)) == pytest.approx(0.25)  # one of four shared
    assert float(disparity_loss(disjoint[:1])) == 0.0  # one language shares with nobody
    assert float(topk_loss(disjoint, 2)) == 0.0
    assert float(topk_loss(torch.full((2, 3, 4), 0.5), 1)) == pytest.approx(1.0)
    m = model()
    losses = m.score_losses()
    assert set(losses) == {"sparsity", "disparity", "topk"}
    assert all(v.requires_grad and v.item() > 0 for v in losses.values())


def test_extracted_subnetwork_gives_the_masked_models_log_probs() -> None:
    """For every pair the cut-out network matches the masked model within 1e-5, and holds
    only its share of the parameters."""
    m = model()
    full = sum(
        p.numel() for stack in (m.encoder_layers, m.decoder_layers) for p in stack.parameters()
    )
    for target in ("up", "next", "en"):
        langs = languages([("en", target)] * 3)
        m.train()  # masked, hard top-k (dropout 0)
        masked = torch.log_softmax(m(SRC, TGT_IN, langs), dim=-1)
        m.eval()
        extracted = torch.log_softmax(m(SRC, TGT_IN, langs), dim=-1)
        torch.testing.assert_close(extracted, masked, atol=1e-5, rtol=0)
        active = m.active_parameters("en", target) - sum(
            p.numel() for n in (m.encoder_norm, m.decoder_norm) for p in n.parameters()
        )
        assert active < full / 2  # one of two layers per stack, 3 of 4 heads, 2 of 4 blocks


def test_incremental_decoding_matches_teacher_forcing_both_ways() -> None:
    m = model().eval()
    langs = ("en", "next")
    with torch.inference_mode():
        full = torch.log_softmax(m(SRC, TGT_IN, m.language_ids(langs, 3, SRC.device)), dim=-1)
        for extracted in (True, False):
            if not extracted:  # a batch mixing pairs runs the masked model in evaluation too
                m._extracted.clear()
            state = m.encode(SRC, languages=langs)
            cache = m.init_cache(state)
            steps = [m.decode_step(TGT_IN[:, t], state, cache) for t in range(TGT_IN.size(1))]
            torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=0)


def test_swapping_languages_in_a_batch_swaps_the_masks() -> None:
    m = model()
    m.train()
    a = m.row_scores("decoder", torch.tensor([1, 2]))
    b = m.row_scores("decoder", torch.tensor([2, 1]))
    for kind in ("heads", "ffn", "layers"):
        assert torch.equal(a[kind][0], b[kind][1]) and torch.equal(a[kind][1], b[kind][0])
        assert not torch.equal(a[kind][0], a[kind][1])  # the two languages differ here
    # the encoder reads the source language, the decoder the target language
    mixed = languages([("en", "up"), ("up", "next")])
    src = SRC[:2]
    m.eval()
    one = m.encode(src[:1], languages=("en", "up")).memory
    two = m.encode(src[1:], languages=("up", "next")).memory
    both = m.encode(src, languages=mixed).memory  # mixed pairs: the masked model
    torch.testing.assert_close(both[:1, : one.size(1)], one, atol=1e-5, rtol=0)
    torch.testing.assert_close(both[1:, : two.size(1)], two, atol=1e-5, rtol=0)


def test_unknown_language_is_named() -> None:
    with pytest.raises(ValueError, match="not 'fr'"):
        model().eval().encode(SRC, languages=("en", "fr"))


def test_two_languages_learn_their_tasks_with_different_subnetworks() -> None:
    """English -> "up" (upper-casing) and English -> "next" (each letter's successor) from one
    model with decoder feed-forward sparsity (the main experiment's), phase 1 then phase 2 with
    the losses (c_s 0.1, c_d 0.02, c_t 0.1); both held-out sets exactly right, and the two
    languages keep different feed-forward blocks (about 12 s; passed for seeds 0-3, where with
    head sparsity too seed 1 had not learned upper-casing in these steps)."""
    m = train_toy_sparse()
    held_out = SPARSE_HELD_OUT
    m.eval()
    src = batch(held_out)
    for target, task in SPARSE_TASKS.items():
        want = [task(w) for w in held_out]
        got = greedy(m, src, 1.0, 2, languages=("en", target))
        assert [TOK.decode(h) for h in got] == want, target
        beams = beam_search(m, src, 3, 1.0, 1.0, 2, languages=("en", target))
        assert [TOK.decode(h) for h in beams] == want, target
    blocks = m.masks("decoder")["ffn"]  # (languages, layers, blocks)
    assert not torch.equal(blocks[LANGS.index("up")], blocks[LANGS.index("next")])
    assert m.config.languages == LANGS
