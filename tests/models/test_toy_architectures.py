"""The toy architectures learn their task and decode it exactly; CTC's collapsing rule."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from models.decoding import beam_search, ctc_greedy, greedy
from models.registry import architecture, build_model
from models.tokenizer import ByteTokenizer
from tests.toy_architectures import (
    TOY_TASK,
    ToyAR,
    ToyCTC,
    ToyCTCConfig,
    register_toys,
    toy_pairs,
    train_toy_ar,
    train_toy_ctc,
)

pytestmark = pytest.mark.unit

# One thread: the test machine is small and shared, and more threads only contend.
torch.set_num_threads(1)

TOK = ByteTokenizer()
TRAIN = toy_pairs(300, seed=1)
# Unseen sources of every length, doubled letters and two words among them.
HELD_OUT = [
    s
    for s in ["abc", "jumping", "zzz", "hello world", "quixotic", "vex", "bookkeeper", "fly by"]
    if s not in {src for src, _ in TRAIN}
]


def batch(texts: list[str]) -> Tensor:
    """Right-padded byte ids `(B, S)` of `texts`."""
    seqs = [TOK.encode(t, "src") for t in texts]
    out = torch.zeros(len(seqs), max(map(len, seqs)), dtype=torch.long)
    for i, seq in enumerate(seqs):
        out[i, : len(seq)] = torch.tensor(seq)
    return out


@pytest.fixture(scope="module")
def toy_ar() -> ToyAR:
    return train_toy_ar(TRAIN)


@pytest.fixture(scope="module")
def toy_ctc() -> ToyCTC:
    return train_toy_ctc(TRAIN)


def test_toy_pairs_are_deterministic_and_follow_the_task() -> None:
    pairs = toy_pairs(50, seed=3)
    assert pairs == toy_pairs(50, seed=3) != toy_pairs(50, seed=4)
    assert all(tgt == TOY_TASK(src) == src.upper() for src, tgt in pairs)
    assert all(3 <= len(w) <= 8 and w.islower() for src, _ in pairs for w in src.split())
    assert any(" " in src for src, _ in pairs)


def test_ar_greedy_and_beam_search_get_held_out_words_exactly(toy_ar: ToyAR) -> None:
    src = batch(HELD_OUT)  # mixed lengths: rows finish at different steps and are dropped
    want = [TOY_TASK(s) for s in HELD_OUT]
    assert [TOK.decode(t) for t in greedy(toy_ar, src)] == want
    assert [TOK.decode(t) for t in beam_search(toy_ar, src, beam_size=3)] == want


def test_ar_decode_step_matches_forward(toy_ar: ToyAR) -> None:
    src = batch(["abc", "hello"])
    tgt_in = torch.tensor([[1, 69, 70, 71, 2, 0], [1, 76, 73, 80, 80, 83]])
    with torch.inference_mode():
        full = torch.log_softmax(toy_ar(src, tgt_in), dim=-1)
        state = toy_ar.encode(src)
        cache = toy_ar.init_cache(state)
        steps = [toy_ar.decode_step(tgt_in[:, t], state, cache) for t in range(tgt_in.size(1))]
    torch.testing.assert_close(torch.stack(steps, dim=1), full)


def test_ctc_gets_held_out_words_exactly(toy_ctc: ToyCTC) -> None:
    got = ctc_greedy(toy_ctc, batch(HELD_OUT))
    assert [TOK.decode(t) for t in got] == [TOY_TASK(s) for s in HELD_OUT]


def test_ctc_log_probs_upsample_each_source_token() -> None:
    model = ToyCTC(ToyCTCConfig(upsample=2))
    log_probs, lengths = model.ctc_log_probs(batch(["abc", "hello"]))
    assert log_probs.shape == (2, 10, ByteTokenizer.vocab_size)
    assert lengths.tolist() == [6, 10]
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(2, 10))


class FixedFrames(nn.Module):
    """A 'model' whose CTC frames are given: argmax labels and valid lengths per row."""

    config = ToyCTCConfig()

    def __init__(self, labels: list[list[int]], lengths: list[int]) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))  # decoding reads the device off a parameter
        self.labels, self.lengths = torch.tensor(labels), torch.tensor(lengths)

    def ctc_log_probs(self, src: Tensor) -> tuple[Tensor, Tensor]:
        one_hot = nn.functional.one_hot(self.labels, self.config.vocab_size).float()
        return torch.log_softmax(one_hot * 10, dim=-1), self.lengths


def test_ctc_greedy_merges_repeats_and_keeps_blank_separated_doubles() -> None:
    _, a, b, c = 3, 10, 11, 12  # blank (3) is written `_` below
    model = FixedFrames(
        [
            [a, a, 3, a, b, b, 3, 3],  # a a _ a b b _ _ -> a a b
            [3, c, c, 3, c, 3, a, b],  # _ c c _ c _ | a b: last two frames past the length
            [2, a, 1, a, 0, 3, 3, 3],  # special ids never come out; they still split repeats
        ],
        lengths=[8, 6, 8],
    )
    assert ctc_greedy(model, torch.ones(3, 4, dtype=torch.long)) == [[a, a, b], [c, c], [a, a]]


def test_registering_twice_is_fine_and_rebuilds_equal_configs() -> None:
    register_toys()
    register_toys()
    assert architecture("toy-ar").decoding == "autoregressive"
    assert architecture("toy-ctc").decoding == "ctc"
    cfg = ToyCTCConfig(d_model=16, upsample=3)
    model = build_model("toy-ctc", cfg.to_dict())
    assert isinstance(model, ToyCTC) and model.config == cfg
    with pytest.raises(ValueError, match="'blanc'"):
        build_model("toy-ctc", {**cfg.to_dict(), "blanc": 3})
