"""Transformer config validation, shapes, padding invariance and exact incremental decoding."""

from __future__ import annotations

import pytest
import torch

from models.layers import DecoderCache, EncoderState, MultiHeadAttention
from models.registry import ARCHITECTURES, build_model
from models.transformer import Transformer, TransformerConfig

pytestmark = pytest.mark.unit

# One thread: the test machine is small and shared, and more threads only contend.
torch.set_num_threads(1)

V = 20


def tiny(**overrides: object) -> Transformer:
    kw = dict(vocab_size=V, d_model=32, n_heads=4, enc_layers=2, dec_layers=2, d_ff=64)
    kw.update(overrides)
    torch.manual_seed(0)
    return Transformer(TransformerConfig(**kw)).eval()


def random_batch(lengths: list[int], width: int, seed: int = 0) -> torch.Tensor:
    """Right-padded rows of random real tokens (ids 3..V-1)."""
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        out[i, :n] = torch.randint(3, V, (n,), generator=g)
    return out


# --------------------------------------------------------------------------- config


def test_config_from_dict_rejects_unknown_key_by_name() -> None:
    with pytest.raises(ValueError, match="d_modle"):
        TransformerConfig.from_dict({"vocab_size": 10, "d_modle": 64})


def test_config_from_dict_reports_missing_vocab() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        TransformerConfig.from_dict({"d_model": 64})


def test_config_round_trips_through_dict() -> None:
    cfg = TransformerConfig(vocab_size=100, d_model=64, positions="learned", tie_embeddings=False)
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"d_model": 30, "n_heads": 4}, "divisible"),
        ({"positions": "rope"}, "positions"),
        ({"dropout": 1.0}, "dropout"),
        ({"attn_dropout": -0.1}, "attn_dropout"),
        ({"enc_layers": 0}, "enc_layers"),
        ({"bos_id": 0}, "must differ"),
        ({"eos_id": 50}, "eos_id"),
        ({"max_len": 1}, "max_len"),
        ({"d_model": True}, "d_model"),
        ({"n_heads": 2.0}, "n_heads"),
        ({"tie_embeddings": 1}, "tie_embeddings"),
        ({"vocab_size": 3}, "vocab_size"),
    ],
)
def test_config_rejects_bad_values(bad: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        TransformerConfig(**{"vocab_size": 20, "d_model": 32, **bad})


def test_registry_builds_and_names_known_architectures() -> None:
    model = build_model("transformer", {"vocab_size": V, "d_model": 16, "n_heads": 2})
    assert isinstance(model, Transformer)
    with pytest.raises(ValueError, match="transformer"):
        build_model("lstm", {"vocab_size": V})
    spec = ARCHITECTURES["transformer"]
    assert (spec.config, spec.model, spec.reads) == (TransformerConfig, Transformer, ())


# --------------------------------------------------------------------------- model


def test_shapes_and_state() -> None:
    model = tiny()
    src = random_batch([5, 3], width=6)
    tgt = random_batch([4, 2], width=4, seed=1)
    state = model.encode(src)
    assert isinstance(state, EncoderState)
    assert state.memory.shape == (2, 6, 32)
    assert state.src_pad.dtype == torch.bool
    assert state.src_pad.tolist()[1] == [False] * 3 + [True] * 3
    assert model(src, tgt).shape == (2, 4, V)
    assert model.decode(tgt, state).shape == (2, 4, V)
    picked = state.index_select(torch.tensor([1, 1, 0]))
    assert picked.memory.shape == (3, 6, 32)
    assert torch.equal(picked.src_pad[2], state.src_pad[0])


def test_init_ties_output_to_embedding_and_zeroes_pad() -> None:
    model = tiny()
    assert model.output.weight is model.embed.weight
    assert torch.count_nonzero(model.embed.weight[0]) == 0
    assert torch.count_nonzero(model.embed.weight[3]) > 0
    untied = tiny(tie_embeddings=False)
    assert untied.output.weight is not untied.embed.weight


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_padding_the_source_does_not_change_real_logits(positions: str) -> None:
    model = tiny(positions=positions)
    src = random_batch([5, 3, 6], width=6)
    padded = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    tgt = random_batch([4, 4, 4], width=4, seed=2)
    with torch.no_grad():
        a, b = model(src, tgt), model(padded, tgt)
        alone = model(src[1:2, :3], tgt[1:2])  # the short sentence with no padding at all
        mem_a, mem_b = model.encode(src).memory, model.encode(padded).memory
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(a[1:2], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(mem_a[0, :5], mem_b[0, :5], atol=1e-5, rtol=0)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_decode_step_matches_teacher_forcing(positions: str) -> None:
    model = tiny(positions=positions)
    src = random_batch([5, 2, 7], width=7)
    tgt_in = random_batch([6, 6, 6], width=6, seed=3)
    tgt_in[:, 0] = model.config.bos_id
    with torch.no_grad():
        state = model.encode(src)
        full = torch.log_softmax(model.decode(tgt_in, state), dim=-1)  # (B, T, V)
        cache = model.init_cache(state)
        assert isinstance(cache, DecoderCache)
        steps = [model.decode_step(tgt_in[:, t], state, cache) for t in range(tgt_in.size(1))]
    assert cache.step == tgt_in.size(1)
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=0)


def test_cache_reordering_follows_the_rows() -> None:
    model = tiny()
    src = random_batch([4, 6], width=6)
    tgt_in = random_batch([5, 5], width=5, seed=4)
    tgt_in[:, 0] = model.config.bos_id
    swapped = torch.tensor([1, 0])
    with torch.no_grad():
        state = model.encode(src)
        full = torch.log_softmax(model.decode(tgt_in, state), dim=-1)
        cache = model.init_cache(state)
        for t in range(3):
            model.decode_step(tgt_in[:, t], state, cache)
        # Swap the two sentences mid-sentence; decoding continues for the swapped rows.
        state, cache = state.index_select(swapped), cache.index_select(swapped)
        rest = [model.decode_step(tgt_in[swapped, t], state, cache) for t in range(3, 5)]
    torch.testing.assert_close(torch.stack(rest, 1), full[swapped, 3:5], atol=1e-5, rtol=0)


def test_positions_beyond_max_len_are_refused() -> None:
    model = tiny(max_len=8)
    with pytest.raises(ValueError, match="max_len"):
        model.encode(random_batch([9], width=9))


def test_training_mode_dropout_is_active_and_eval_is_deterministic() -> None:
    model = tiny(dropout=0.3)
    src, tgt = random_batch([5], width=5), random_batch([4], width=4, seed=5)
    with torch.no_grad():
        assert torch.equal(model(src, tgt), model(src, tgt))
        model.train()
        assert not torch.equal(model(src, tgt), model(src, tgt))


def test_attention_rows_sharing_keys_equal_rows_with_their_own_copy() -> None:
    """K consecutive query rows may read one key/value row (a sentence's beams): the result is
    that of giving each row its own copy; a causal or uneven grouping is refused."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    keys = torch.randn(3, 5, 16)
    pad = torch.tensor([[False] * 5, [False, False, True, True, True], [False] * 4 + [True]])
    query = torch.randn(6, 2, 16)  # 3 sentences x 2 rows, 2 positions each
    kv = attn.project_kv(keys)
    per_row = tuple(t.repeat_interleave(2, dim=0) for t in kv)
    with torch.no_grad():
        shared = attn(query, kv=kv, key_padding_mask=pad)
        copied = attn(query, kv=per_row, key_padding_mask=pad.repeat_interleave(2, dim=0))
    torch.testing.assert_close(shared, copied, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="cannot share"):
        attn(torch.randn(5, 1, 16), kv=kv)
    with pytest.raises(ValueError, match="causal"):
        attn(query, kv=kv, causal=True)
    with pytest.raises(ValueError, match="key padding"):
        attn(query, kv=kv, key_padding_mask=pad.repeat_interleave(2, dim=0))
