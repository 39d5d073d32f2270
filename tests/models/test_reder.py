"""REDER (models/reder.py): config, exact invertibility of every layer and of the duplex stack,
ActNorm, dropout replay, upsampling, CTC outputs, and one small model that learns a toy task in
both directions."""

from __future__ import annotations

import json
from importlib.resources import files

import pytest
import torch
import torch.nn.functional as F

from models.decoding import ctc_greedy
from models.reder import ActNorm, Reder, RederConfig, SeededDropout
from models.registry import architecture, build_model
from models.train import TrainConfig
from models.translator import Translator

pytestmark = pytest.mark.unit

# One thread: the test machine is small and shared, and more threads only contend.
torch.set_num_threads(1)

V = 20


def tiny(**overrides: object) -> Reder:
    """Random weights; max_rel 3 so the relative distances of the test batches are clipped."""
    kw: dict[str, object] = dict(
        vocab_size=V, d_model=32, n_heads=4, d_ff=64, layers_per_end=2, max_rel=3, max_len=16
    )
    kw.update(overrides)
    torch.manual_seed(0)
    return Reder(RederConfig(**kw)).eval()


def random_batch(lengths: list[int], width: int, seed: int = 0) -> torch.Tensor:
    """Right-padded rows of random real tokens (ids 3..V-1)."""
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        out[i, :n] = torch.randint(3, V, (n,), generator=g)
    return out


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------- config


def test_config_rejects_unknown_key_by_name() -> None:
    with pytest.raises(ValueError, match="layers_per_edn"):
        RederConfig.from_dict({"vocab_size": V, "layers_per_edn": 2})


def test_config_blank_defaults_to_an_extra_row_and_round_trips_through_json() -> None:
    cfg = RederConfig.from_dict({"vocab_size": V, "languages": ["de", "en"]})
    assert cfg.blank_id == V and cfg.n_labels == V + 1
    assert cfg.languages == ("de", "en")
    again = RederConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    inside = RederConfig(vocab_size=V, blank_id=3)  # a blank the tokenizer already has
    assert inside.n_labels == V


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"blank_id": 0}, "blank_id"),
        ({"blank_id": V + 1}, "blank_id"),
        ({"languages": ["en"]}, "languages"),
        ({"languages": ["en", "en"]}, "languages"),
        ({"inner_order": "ss"}, "inner_order"),
        ({"d_model": 30, "n_heads": 4}, "divisible"),
        ({"layers_per_end": True}, "layers_per_end"),
    ],
)
def test_config_rejects_bad_values(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RederConfig(vocab_size=V, **overrides)


def test_shipped_small_config_builds_the_6_8m_parameter_model() -> None:
    text = (files("models") / "configs" / "reder-small-en-de.json").read_text()
    train = TrainConfig.from_dict(json.loads(text))
    assert train.arch == "reder" and train.lr == 5e-4 and train.warmup == 1000
    cfg = RederConfig.from_dict({"vocab_size": 8000, "max_len": train.max_len + 2, **train.model})
    assert (cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.layers_per_end) == (256, 4, 1024, 3)
    assert (cfg.max_rel, cfg.upsample, cfg.languages) == (32, 2, ("en", "de"))
    n = sum(p.numel() for p in Reder(cfg).parameters())
    assert 6.7e6 < n < 6.95e6, n
    built = build_model("reder", {"vocab_size": 8000, "max_len": train.max_len + 2, **train.model})
    assert isinstance(built, Reder) and built.config == cfg
    assert architecture("reder").decoding == "ctc"


# --------------------------------------------------------------------------- blocks


def test_relative_attention_matches_a_direct_computation() -> None:
    """logits_ij = q_i·(k_j + r[clip(j-i)]) / sqrt(dh), padded keys ignored, heads share r."""
    model = tiny()
    attn = model.ends["en"][0].attn
    with torch.no_grad():
        attn.rel_keys.weight.normal_()
    b, t, d, h, dh, c = 2, 9, 32, 4, 8, 3
    x = torch.randn(b, t, d)
    pad = torch.zeros(b, t, dtype=torch.bool)
    pad[1, 6:] = True
    q = attn.q_proj(x).view(b, t, h, dh)
    k = attn.k_proj(x).view(b, t, h, dh)
    v = attn.v_proj(x).view(b, t, h, dh)
    out = torch.zeros(b, t, h, dh)
    for bi in range(b):
        for hi in range(h):
            for i in range(t):
                scores = []
                for j in range(t):
                    r = attn.rel_keys.weight[max(-c, min(c, j - i)) + c]
                    s = q[bi, i, hi] @ (k[bi, j, hi] + r) / dh**0.5
                    scores.append(s if not pad[bi, j] else torch.tensor(-float("inf")))
                w = torch.stack(scores).softmax(dim=0)
                out[bi, i, hi] = w @ v[bi, :, hi]
    expected = attn.out_proj(out.reshape(b, t, d))
    assert max_diff(attn(x, pad), expected) < 1e-5


def test_actnorm_inverse_is_exact_even_at_small_scales() -> None:
    norm = ActNorm(16)
    with torch.no_grad():
        norm.bias.normal_()
        norm.log_scale.copy_(torch.linspace(-9.0, 4.0, 16))  # scales 1e-4 .. 55
        norm.initialized.fill_(True)
    x = torch.randn(3, 7, 16)
    assert max_diff(norm.reverse(norm(x)), x) < 1e-5
    y = torch.randn(3, 7, 16)
    assert max_diff(norm(norm.reverse(y)), y) < 1e-4  # scale 55 magnifies rounding a little


def test_actnorm_initialises_on_non_pad_positions_of_the_first_batch_and_keeps_it() -> None:
    norm = ActNorm(8)
    x = torch.randn(4, 6, 8) * torch.arange(1.0, 9.0) + 5.0
    keep = torch.ones(4, 6, dtype=torch.bool)
    keep[1, 3:] = keep[3, 1:] = False
    x[~keep] = 1e4  # padding far off: it must not enter the statistics
    y = norm(x, keep)
    real = y[keep]
    assert real.mean(dim=0).abs().max().item() < 1e-5
    assert (real.std(dim=0, unbiased=False) - 1).abs().max().item() < 1e-5
    state = norm.state_dict()
    assert bool(state["initialized"])
    loaded = ActNorm(8)
    loaded.load_state_dict(state)
    other = torch.randn(2, 5, 8)
    assert torch.equal(loaded(other), norm(other))  # loaded: no re-initialisation on new data


def test_seeded_dropout_masks_replay_by_seed() -> None:
    drop = SeededDropout(0.3, stream=7)
    x = torch.ones(4, 5, 6)
    a, b, c = drop(x, 11), drop(x, 11), drop(x, 12)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert 0.5 < a.eq(0).float().mean().item() / 0.3 < 1.5
    assert torch.equal(drop(x.double(), 11), a.double())  # same bits in any dtype
    assert not torch.equal(SeededDropout(0.3, stream=8)(x, 11), a)  # sites differ
    assert torch.equal(drop(x, None), x)
    assert torch.equal(drop.eval()(x, 11), x)


def test_upsampling_repeats_each_token_and_its_padding_in_place() -> None:
    model = tiny(upsample=3)
    src = random_batch([4, 2], 4)
    ids, pad = model.frames(src)
    assert ids.shape == (2, 12) and pad.shape == (2, 12)
    for r in range(3):
        assert torch.equal(ids[:, r::3], src)
        assert torch.equal(pad[:, r::3], src.eq(0))
    assert pad.sum(dim=1).tolist() == [0, 6]
    same, same_pad = model.frames(src, upsample=False)
    assert torch.equal(same, src) and torch.equal(same_pad, src.eq(0))


# --------------------------------------------------------------------------- invertibility


def padded_states(model: Reder, dtype: torch.dtype = torch.float32):
    """A padded batch through the model: (states en→de, frame padding)."""
    model = model.to(dtype)
    src = random_batch([7, 4, 1], 7, seed=3)
    _, pad = model.frames(src)
    return model.forward_states(src, "en", "de"), pad


def test_every_layer_inverts_within_1e_5_with_padding() -> None:
    model = tiny()
    states, pad = padded_states(model)
    h = states[0]
    for lang in ("en", "de"):
        for layer in model.ends[lang]:
            out = layer(h, pad)
            assert max_diff(out, h) > 0.1  # the layer does something to undo
            assert max_diff(layer.reverse(out, pad), h) < 1e-5
            assert max_diff(layer(layer.reverse(h, pad), pad), h) < 1e-5


@pytest.mark.parametrize("order", ["sf", "fs"])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_the_whole_stack_inverts(order: str, dtype: torch.dtype, tol: float) -> None:
    model = tiny(inner_order=order)
    states, pad = padded_states(model, dtype)
    assert len(states) == 2 * model.config.layers_per_end + 1
    assert max_diff(states[-1], states[0]) > 1.0
    back = model.invert(states[-1], pad, "en", "de")
    for forward, inverted in zip(states, back, strict=True):
        assert max_diff(forward, inverted) < tol


@pytest.mark.parametrize("order", ["sf", "fs"])
def test_the_other_direction_undoes_this_one(order: str) -> None:
    """Duplex identity: de→en on en→de's last state (before ActNorm reverse / projection)
    passes through en→de's states backwards and returns H_0, ActNorm([e(x); e(x)])."""
    model = tiny(inner_order=order, languages=("en", "de", "fr"))
    states, pad = padded_states(model, torch.float64)
    back = model.transform(states[-1], pad, "de", "en")
    for forward, backward in zip(states, back[::-1], strict=True):
        assert max_diff(forward, backward) < 1e-10
    ids, _ = model.frames(random_batch([7, 4, 1], 7, seed=3))
    assert max_diff(back[-1], model.embed_frames(ids, pad)) < 1e-10
    # not any other way back: a third language's end does not undo this direction
    assert max_diff(model.transform(states[-1], pad, "fr", "en")[-1], states[0]) > 0.1


def test_reverse_states_align_with_the_inverse_pass() -> None:
    """reverse_states runs de→en from target frames, listed so entry l is en→de's layer l."""
    model = tiny().double()
    frames = random_batch([8, 6], 8, seed=5)
    frames[0, 1::2] = V  # blanks, as in a best CTC alignment
    pad = frames.eq(0)
    rev = model.reverse_states(frames, "en", "de")
    h_final = model.embed_frames(frames, pad)
    assert max_diff(rev[-1], h_final) == 0.0
    inv = model.invert(h_final, pad, "en", "de")
    for a, b in zip(rev, inv, strict=True):
        assert max_diff(a, b) < 1e-10


def test_training_pass_replays_its_dropout_and_inverts_exactly() -> None:
    model = tiny(dropout=0.3).double().train()
    src = random_batch([7, 4, 1], 7, seed=3)
    _, pad = model.frames(src)
    a = model.forward_states(src, seed=123)
    b = model.forward_states(src, seed=123)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert max_diff(model.forward_states(src, seed=124)[-1], a[-1]) > 0.1
    fresh = model.forward_states(src)  # a drawn seed, kept for the replay
    again = model.forward_states(src, seed=model.last_seed)
    assert torch.equal(fresh[-1], again[-1])
    back = model.invert(a[-1], pad, seed=123)
    for forward, inverted in zip(a, back, strict=True):
        assert max_diff(forward, inverted) < 1e-10
    wrong = model.invert(a[-1], pad, seed=124)
    assert max_diff(wrong[0], a[0]) > 0.1  # the masks matter: another seed does not invert
    model.eval()
    assert model.forward_states(src, seed=123)[-1].shape == a[-1].shape


# --------------------------------------------------------------------------- CTC outputs


def test_ctc_log_probs_shapes_normalisation_lengths_and_direction() -> None:
    model = tiny()
    src = random_batch([5, 3, 1], 5)
    log_probs, lengths = model.ctc_log_probs(src)
    assert log_probs.shape == (3, 10, V + 1) and log_probs.dtype == torch.float32
    assert (log_probs.exp().sum(dim=-1) - 1).abs().max().item() < 1e-5
    assert lengths.tolist() == [10, 6, 2]
    explicit, _ = model.ctc_log_probs(src, "en", "de")
    assert torch.equal(log_probs, explicit)
    other, _ = model.ctc_log_probs(src, "de", "en")
    assert max_diff(other, log_probs) > 0.01
    with pytest.raises(ValueError, match="xx"):
        model.ctc_log_probs(src, "xx", "de")


def test_padding_does_not_change_a_sentence() -> None:
    model = tiny()
    src = random_batch([6, 3], 6)
    model.ctc_log_probs(src)  # initialises ActNorm on the batch
    batched, _ = model.ctc_log_probs(src)
    alone, _ = model.ctc_log_probs(src[1:, :3])
    assert max_diff(batched[1, :6], alone[0]) < 1e-5


# --------------------------------------------------------------------------- toy task

TOKENS = list(range(3, V))  # real tokens; pad 0, bos 1, eos 2, blank V
PERM = dict(zip(TOKENS, TOKENS[5:] + TOKENS[:5], strict=True))  # the "en"→"de" word map


def toy_batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(en, de, lengths): random "en" rows of 3..8 tokens and their word-for-word "de"."""
    lengths = torch.randint(3, 9, (n,), generator=g)
    en = torch.zeros(n, 8, dtype=torch.long)
    for i, k in enumerate(lengths.tolist()):
        en[i, :k] = torch.tensor(TOKENS)[torch.randint(0, len(TOKENS), (k,), generator=g)]
    de = en.clone().apply_(lambda t: PERM.get(t, t))
    return en, de, lengths


def greedy(model: Reder, src: torch.Tensor, source: str, target: str) -> list[list[int]]:
    """Best path: argmax per frame, repeats merged, blanks (and pad/BOS/EOS) dropped."""
    log_probs, lengths = model.ctc_log_probs(src, source, target)
    drop = {V, 0, 1, 2}
    out = []
    for frames, n in zip(log_probs.argmax(-1).tolist(), lengths.tolist(), strict=True):
        merged = [x for i, x in enumerate(frames[:n]) if i == 0 or x != frames[i - 1]]
        out.append([x for x in merged if x not in drop])
    return out


def test_one_model_learns_a_word_map_in_both_directions() -> None:
    torch.manual_seed(0)
    model = Reder(
        RederConfig(
            vocab_size=V, d_model=32, n_heads=2, d_ff=64, layers_per_end=1, max_rel=4,
            dropout=0.0, max_len=8,
        )
    )  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    model.train()
    for _ in range(300):
        en, de, lengths = toy_batch(32, g)
        loss = 0.0
        for src, tgt, s, t in ((en, de, "en", "de"), (de, en, "de", "en")):  # both each update
            log_probs, frames = model.ctc_log_probs(src, s, t)
            loss = loss + F.ctc_loss(
                log_probs.transpose(0, 1), tgt, frames, lengths, blank=V, zero_infinity=True
            )
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    en, de, lengths = toy_batch(200, torch.Generator().manual_seed(99))  # held out
    refs_de = [row[:k] for row, k in zip(de.tolist(), lengths.tolist(), strict=True)]
    refs_en = [row[:k] for row, k in zip(en.tolist(), lengths.tolist(), strict=True)]
    # some held-out rows repeat a token: CTC must put a blank between the two
    assert sum(any(a == b for a, b in zip(r, r[1:], strict=False)) for r in refs_de) >= 20
    with torch.no_grad():
        hyp_de = greedy(model, en, "en", "de")
        hyp_en = greedy(model, de, "de", "en")
        assert ctc_greedy(model, en) == hyp_de  # the shared decoder reads the default direction
        assert ctc_greedy(model, de, ("de", "en")) == hyp_en  # and is told the other
        # the translator passes the pair it serves: one model, both directions
        words = WordIds()
        texts_en = [words.decode(r) for r in refs_en[:50]]
        texts_de = [words.decode(r) for r in refs_de[:50]]
        to_de = Translator(model, words, "en", "de", decoding="ctc").translate(texts_en)
        to_en = Translator(model, words, "de", "en", decoding="ctc").translate(texts_de)
        assert to_de == [words.decode(h) for h in hyp_de[:50]]
        assert to_en == [words.decode(h) for h in hyp_en[:50]]
    acc_de = sum(h == r for h, r in zip(hyp_de, refs_de, strict=True)) / len(refs_de)
    acc_en = sum(h == r for h, r in zip(hyp_en, refs_en, strict=True)) / len(refs_en)
    assert acc_de >= 0.95 and acc_en >= 0.95, (acc_de, acc_en)


class WordIds:
    """The toy's tokenizer: token k is the word "wk" (what a Translator needs of one)."""

    vocab_size = V

    def normalize(self, text: str, lang: str) -> str:
        return " ".join(text.split())

    def encode(self, text: str, lang: str) -> list[int]:
        return [int(w[1:]) for w in text.split()]

    def encode_batch(self, texts: list[str], lang: str) -> list[list[int]]:
        return [self.encode(t, lang) for t in texts]

    def decode(self, ids: list[int]) -> str:
        return " ".join(f"w{i}" for i in ids)
