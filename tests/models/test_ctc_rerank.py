"""A CTC model's prefix beam search re-ranked by an autoregressive teacher (models.decoding:
ctc_nbest, sequence_scores, ctc_rerank; `Translator.with_teacher`, `DecodeOptions.ctc_beam`)."""

from __future__ import annotations

import pytest
import torch

from models.ctc import prefix_beam_search
from models.decoding import ctc_greedy, ctc_nbest, ctc_rerank, sequence_scores
from models.ort_ctc import OrtCtc
from models.reder import Reder, RederConfig
from models.tokenizer import Tokenizer
from models.transformer import Transformer, TransformerConfig
from models.translator import DecodeOptions, Translator

pytestmark = pytest.mark.unit

PAIR = ("en", "de")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _reder(vocab: int) -> Reder:
    torch.manual_seed(0)
    cfg = RederConfig(vocab_size=vocab, d_model=32, n_heads=4, d_ff=64, layers_per_end=1,
                      max_rel=3, max_len=32, dropout=0.0)  # fmt: skip
    model = Reder(cfg).eval()
    with torch.no_grad():
        model.embed.weight[cfg.blank_id] *= 0.2  # fewer blank frames: longer candidates
    model(_sources(vocab))  # ActNorm's data-dependent init
    return model


def _teacher(vocab: int, seed: int = 1) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=vocab, d_model=32, n_heads=4, d_ff=64, enc_layers=1,
                            dec_layers=1, dropout=0.0)  # fmt: skip
    return Transformer(cfg).eval()


def _sources(vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    src = torch.zeros(4, 6, dtype=torch.long)
    for i, n in enumerate([6, 3, 5, 2]):
        src[i, :n] = torch.randint(4, vocab, (n,), generator=g)
    return src


def test_sequence_scores_are_the_stepwise_log_probs_averaged_over_tokens_and_eos() -> None:
    teacher = _teacher(30)
    src = _sources(30)
    hyps = [[5, 6, 7], [], [9, 10, 11, 12, 13], [4]]
    batched = sequence_scores(teacher, src, hyps)
    for i, hyp in enumerate(hyps):  # one row at a time, token by token through the cache
        state = teacher.encode(src[i : i + 1])
        cache = teacher.init_cache(state)
        last, total = torch.tensor([teacher.config.bos_id]), 0.0
        with torch.no_grad():
            for token in [*hyp, teacher.config.eos_id]:
                total += teacher.decode_step(last, state, cache)[0, token].item()
                last = torch.tensor([token])
        assert batched[i].item() == pytest.approx(total / (len(hyp) + 1), abs=1e-5)


def test_the_teacher_picks_among_the_ctc_nbest() -> None:
    vocab = 30
    model, src = _reder(vocab), _sources(vocab)
    nbest = ctc_nbest(model, src, PAIR, beam=6)
    assert all(len(n) > 1 for n in nbest)
    # without a teacher: CTC's own best labelling, which a lone prefix search agrees with
    log_probs, lengths = model.ctc_log_probs(src, *PAIR)
    lp = log_probs.detach().clone()
    lp[..., [0, 1, 2]] = float("-inf")  # pad, BOS, EOS are never emitted
    alone = prefix_beam_search(lp[1], int(lengths[1]), model.config.blank_id, beam=6)
    assert [h for h, _ in alone] == [h for h, _ in nbest[1]]
    assert [s for _, s in alone] == pytest.approx([s for _, s in nbest[1]])
    assert ctc_rerank(model, src, PAIR, 6) == [n[0][0] for n in nbest]

    chosen = ctc_rerank(model, src, PAIR, 6, teacher=_teacher(vocab))
    differs = 0
    for i, candidates in enumerate(nbest):
        scores = [sequence_scores(_teacher(vocab), src[i : i + 1], [h]).item()
                  for h, _ in candidates]  # fmt: skip
        assert chosen[i] == candidates[scores.index(max(scores))][0]
        differs += chosen[i] != candidates[0][0]
    assert differs > 0  # the teacher overruled CTC somewhere: the test can tell them apart


def test_translator_reranks_with_its_teacher_only_when_asked(toy_tokenizer: Tokenizer) -> None:
    vocab = toy_tokenizer.vocab_size
    model = _reder(vocab)
    reder = Translator(model, toy_tokenizer, *PAIR, decoding="ctc")
    teacher = Translator(_teacher(vocab), toy_tokenizer, *PAIR)
    texts = ["red house", "two blue tree", "green", "one two three four five"]
    greedy = reder.translate(texts, DecodeOptions())
    ranked = reder.with_teacher(teacher)
    assert ranked.translate(texts, DecodeOptions()) == greedy  # ctc_beam 1: greedy
    src = torch.zeros(len(texts), 12, dtype=torch.long)
    for i, t in enumerate(texts):
        ids = toy_tokenizer.encode(t, "en")
        src[i, : len(ids)] = torch.tensor(ids)
    want = [toy_tokenizer.decode(h) for h in ctc_rerank(model, src, PAIR, 5, teacher.model)]
    assert ranked.translate(texts, DecodeOptions(ctc_beam=5, batch_size=8)) == want
    assert ctc_greedy(model, src, PAIR) != ctc_rerank(model, src, PAIR, 5, teacher.model)
    # the n-best comes from the float model's log-probs when ONNX Runtime decodes greedily
    fast = Translator(OrtCtc(model, "ort"), toy_tokenizer, *PAIR, decoding="ctc")
    assert fast.with_teacher(teacher).translate(texts, DecodeOptions(ctc_beam=5)) == want
    assert set(ranked.teachers) == {PAIR} and not reder.teachers  # kept per pair, on a copy


def test_with_teacher_refuses_what_does_not_fit(toy_tokenizer: Tokenizer) -> None:
    vocab = toy_tokenizer.vocab_size
    reder = Translator(_reder(vocab), toy_tokenizer, *PAIR, decoding="ctc")
    teacher = Translator(_teacher(vocab), toy_tokenizer, *PAIR)
    with pytest.raises(ValueError, match="must be autoregressive"):
        teacher.with_teacher(teacher)
    with pytest.raises(ValueError, match="the teacher translates de->fr; the model does not"):
        reder.with_teacher(Translator(_teacher(vocab), toy_tokenizer, "de", "fr"))
    with pytest.raises(ValueError, match="vocabulary is not the model's"):
        bytes_teacher = Translator(_teacher(vocab), _bytes(), *PAIR)
        reder.with_teacher(bytes_teacher)
    with pytest.raises(ValueError, match="ctc_beam"):
        DecodeOptions(ctc_beam=0)


def _bytes():
    from models.tokenizer import ByteTokenizer

    return ByteTokenizer()
