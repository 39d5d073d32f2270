"""The native decoding step (models/native_step.py, models/native/step.cpp): its int8 products
are exactly the integer arithmetic they stand for, its step gives the float model's best tokens
under beam search's constraints, and "native-int8" still translates the toy task."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from models import native_step
from models.bundle import load_bundle
from models.decoding import RepeatBan, Repeats, beam_search
from models.ort_decoder import OrtDecoder, _cpu_flags
from models.quantize import resolve
from models.semiparametric import MEMORY_MODES, Neighbours, SemiParametricModel
from models.translator import DecodeOptions, Translator
from tests.models.step_case import BEAMS, both_started, both_steps, step_case, uneven_neighbours
from tests.toy import gloss, toy_pairs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("g++") is None and shutil.which("c++") is None,
        reason="no C++ compiler on this host: the native step cannot be built here",
    ),
]


def _reference(layer: native_step.Int8Linear, x: np.ndarray) -> np.ndarray:
    """What the kernels must compute: each row quantized to uint8 with its own scale and zero
    point, products summed exactly in int64, then scaled back."""
    lo = np.minimum(x.min(axis=1), 0.0)
    hi = np.maximum(x.max(axis=1), 0.0)
    scale = ((hi - lo) / np.float32(255)).astype(np.float32)
    scale[scale == 0] = 1.0
    zero = np.clip(np.rint(-lo / scale), 0, 255)
    q = np.clip(np.rint(x * (np.float32(1) / scale)[:, None]) + zero[:, None], 0, 255)
    n, k = layer.struct.n, layer.struct.k
    w = layer.weights[:n, :k].astype(np.int64)
    acc = q.astype(np.int64) @ w.T - zero[:, None].astype(np.int64) * w.sum(axis=1)
    y = (scale[:, None] * layer.scale[None, :n]) * acc.astype(np.float32)
    return y + (layer.bias if layer.bias is not None else 0.0)


def _arches() -> list[str]:
    """This CPU's build, and the AVX2 and portable kernels where this CPU runs them."""
    flags = _cpu_flags()
    arches = ["native", "x86-64"] if "sse2" in flags else ["native"]
    if {"avx2", "fma", "bmi2"} <= flags:
        arches.append("x86-64-v3")
    return arches


@pytest.mark.parametrize("arch", _arches())
@pytest.mark.parametrize("n, k", [(48, 64), (37, 30), (8000, 256), (16, 1024)])
def test_int8_products_are_the_integer_arithmetic(n: int, k: int, arch: str) -> None:
    """Each kernel this CPU can run (VNNI, AVX2, the portable loops); every row count the
    kernels block by (1-4, eight, and two to four left after eight), output and input counts
    that need padding, with and without a bias: the result equals the integer products done
    exactly, to float rounding; and the weights stay within what the build sums exactly (64
    on AVX2 without VNNI)."""
    rng = np.random.default_rng(n + k)
    limit = native_step.weight_limit(arch)
    assert limit == (64 if native_step.isa(arch) == "avx2" else 127)
    weight = rng.normal(size=(n, k)).astype(np.float32)
    bias = rng.normal(size=n).astype(np.float32)
    for b in (bias, None):
        layer = native_step.Int8Linear(weight, b, limit, arch)
        assert np.abs(layer.weights).max() == limit
        for rows in (1, 2, 3, 4, 5, 9, 11, 12):
            x = rng.normal(size=(rows, k)).astype(np.float32) * 3
            x[0, :3] = [0.0, 7.5, -2.25]
            got = layer(x)
            want = _reference(layer, x)
            assert np.allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max()), (rows, b)
    # int8 within 1% of the float product: the quantization is per row and per channel
    x = rng.normal(size=(4, k)).astype(np.float32)
    exact = x @ weight.T + bias
    int8 = native_step.Int8Linear(weight, bias, limit, arch)(x)
    rel = np.abs(int8 - exact).max() / np.abs(exact).max()
    assert rel < 0.03


def test_a_row_is_quantized_on_its_own() -> None:
    """A row's output does not depend on the other rows it is computed with."""
    rng = np.random.default_rng(3)
    layer = native_step.Int8Linear(rng.normal(size=(64, 32)).astype(np.float32), None, 127)
    x = rng.normal(size=(7, 32)).astype(np.float32)
    x[3] *= 100  # one loud row
    together = layer(x)
    for r in range(7):
        assert np.array_equal(together[r], layer(x[r : r + 1])[0])
    with pytest.raises(ValueError, match="rows of 32 inputs"):
        layer(x[:, :31])


def test_each_step_gives_the_float_models_best_tokens(memory_bundle: Path) -> None:
    """Step by step, beams sharing their sentence's keys/values, one sentence without a memory:
    the native step's best tokens are the float model's where the float model's choice is
    clear, their log-probs within int8's error, under the same constraints (pad and BOS
    never, the banned tokens never, EOS alone on a forced row); its gates too, and exactly 1
    for the sentence without a memory."""
    model, native, src, neighbours = step_case(memory_bundle, "cstm", "native-int8")
    # int8 in every product, the keys/values' included (at most 0.053 here with VNNI); weights
    # kept to 7 bits (an AVX2 build) have twice full int8's rounding step
    atol = 0.075 * 127 / native_step.weight_limit()
    k, n = BEAMS, 6
    rows = src.size(0) * k
    clear = 0
    with torch.inference_mode():
        states, caches, tokens = both_started(model, native, src, neighbours)
        for step in range(5):
            want, got_lp, got_ids, ban = both_steps(model, native, states, caches, tokens, step, n)
            want_lp, want_ids = want.topk(n, dim=-1)
            live = np.isfinite(got_lp)
            assert np.array_equal(live, np.isfinite(want_lp.numpy()))
            # each token's log-prob is the float model's, within int8's error
            at = want.gather(1, torch.from_numpy(np.where(live, got_ids, 0))).numpy()
            assert np.allclose(got_lp[live], at[live], atol=atol)
            assert (np.diff(np.where(live, got_lp, -1e30), axis=1) <= 0).all()  # best first
            margin = (want_lp[:, 0] - want_lp[:, 1]).numpy()
            sure = live[:, 1] & (margin > 0.1)
            assert np.array_equal(got_ids[sure, 0], want_ids.numpy()[sure, 0])
            clear += int(sure.sum())
            assert not np.isin(got_ids[live], [model.config.pad_id, model.config.bos_id]).any()
            assert not (got_ids[:, :, None] == ban.numpy()[:, None, :])[live].any()
            assert got_ids[step, 0] == model.config.eos_id and not live[step, 1:].any()
            gates = native.last_gates()[:, -1]
            assert torch.allclose(gates, model.last_gates()[:, -1], atol=0.02)
            assert torch.equal(gates[k : 2 * k], torch.ones(k))
            tokens = torch.randint(4, model.config.vocab_size, tokens.shape)
            # beam search's reordering: each sentence's beams continue one another
            beams = torch.stack([torch.randint(0, k, (k,)) + k * g for g in range(len(src))])
            caches = [c.reorder_beams(beams.flatten()) for c in caches]
    assert clear >= rows * 3  # the comparison of best tokens was not vacuous


def test_native_int8_translates_the_toy_task(bundle: Path, memory_bundle: Path) -> None:
    """On 200 toy sentences native-int8 says what float says nearly always and is right as
    often, give or take two; the memory model with neighbours too."""
    texts = [s for s, _ in toy_pairs(200, seed=99)]
    options = DecodeOptions(beam_size=4)
    loaded = load_bundle(bundle)
    fp32 = Translator.from_loaded(loaded, "ort")
    native = Translator.from_loaded(loaded, "native-int8")
    assert native.model.native_isa in ("avx512-vnni", "avx2", "portable")
    want, got = fp32.translate(texts, options), native.translate(texts, options)
    assert sum(a == b for a, b in zip(got, want, strict=True)) >= 194
    right = [sum(o == gloss(t) for o, t in zip(out, texts, strict=True)) for out in (want, got)]
    assert right[1] >= right[0] - 2, right
    # one at a time and greedy too
    alone = DecodeOptions(beam_size=1, batch_size=1)
    assert native.translate(texts[:20], alone) == fp32.translate(texts[:20], alone)

    memory = load_bundle(memory_bundle)
    pairs = toy_pairs(40, seed=5)
    neighbours = [[(s, gloss(s))] for s, _ in pairs]
    sources = [s for s, _ in pairs]
    fp32 = Translator.from_loaded(memory, "ort")
    native = Translator.from_loaded(memory, "native-int8")
    for nb in (neighbours, None):
        want = fp32.translate(sources, options, neighbours=nb)
        got = native.translate(sources, options, neighbours=nb)
        assert sum(a == b for a, b in zip(got, want, strict=True)) >= 38


def test_the_keys_store_grows_without_changing_a_step(bundle: Path) -> None:
    """A store that starts small and doubles (positions) or widens (rows) gives each step what
    a store large enough from the start gives, bit for bit, with rows reordered each step; and
    so does a step split between two threads (each row's arithmetic is its own)."""
    model = load_bundle(bundle).model
    step = native_step.NativeStep(model, memory=False)
    rng = np.random.default_rng(0)
    keys = [rng.normal(size=(2, step.heads, 5, step.d_head)).astype(np.float32)] * step.n_layers
    sentences = native_step.SentenceTensors(
        np.zeros((2, 5), dtype=np.float32),
        native_step.stack_keys(keys),
        native_step.stack_values(keys),
    )
    ban = np.zeros((4, 1), dtype=np.int64)
    stores = [native_step.SelfAttentionCache(step, 2, capacity=1), None, None]
    order = np.arange(4)
    for position in range(12):
        tokens = rng.integers(4, model.config.vocab_size, 4)
        outs = [
            step.step(tokens, position, order, ban, 5, sentences, s, threads)
            for s, threads in zip(stores, (1, 1, 2), strict=True)
        ]
        stores = [o[3] for o in outs]
        for other in outs[1:]:
            for a, b in zip(outs[0][:3], other[:3], strict=True):
                assert np.array_equal(a, b)
        order = rng.integers(0, 2, 4) + np.array([0, 0, 2, 2])
    assert stores[0].capacity == 16 and stores[0].store.shape[1] == 4


def test_a_sentence_reads_its_own_keys_only(bundle: Path) -> None:
    """A sentence padded to a longer one's keys (as in a batch) steps bit for bit as alone:
    its padding is passed over, not masked, so even NaN there changes nothing."""
    model = load_bundle(bundle).model
    step = native_step.NativeStep(model, memory=False)
    rng = np.random.default_rng(1)
    shape = (1, step.heads, 5, step.d_head)
    keys = [rng.normal(size=shape).astype(np.float32) for _ in range(step.n_layers)]
    values = [rng.normal(size=shape).astype(np.float32) for _ in range(step.n_layers)]

    def padded(parts: list[np.ndarray], width: int) -> list[np.ndarray]:
        out = []
        for p in parts:
            wide = np.full((*p.shape[:2], width, p.shape[3]), np.nan, dtype=np.float32)
            wide[:, :, :5] = p
            out.append(wide)
        return out

    outs = []
    for width in (5, 37):
        bias = np.full((1, width), -1e9, dtype=np.float32)
        bias[:, :5] = 0
        sentences = native_step.SentenceTensors(
            bias,
            native_step.stack_keys(padded(keys, width)),
            native_step.stack_values(padded(values, width)),
        )
        past, order, got = None, np.arange(4), []
        for position in range(3):
            tokens = np.array([1, 7, 9, 11]) + position
            *lp, past, _ = step.step(tokens, position, order, np.zeros((4, 1), np.int64), 5,
                                     sentences, past)  # fmt: skip
            got.append(lp)
            order = np.array([1, 0, 3, 2])
        outs.append(got)
    for a, b in zip(outs[0], outs[1], strict=True):
        assert np.isfinite(b[0]).all()  # the best log-probs: NaN in the padding never read
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(x, y)
    with pytest.raises(ValueError, match="keys first"):
        native_step.SentenceTensors(
            np.array([[0, -1e9, 0]], dtype=np.float32),
            native_step.stack_keys([k[:, :, :3] for k in keys]),
            native_step.stack_values([v[:, :, :3] for v in values]),
        )


def _repeats(vocab: int, src: torch.Tensor, seed: int) -> RepeatBan:
    """A repeat ban with case twins, words, separators, stops and word-less pieces drawn at
    random over a vocabulary, for `src`."""
    g = torch.Generator().manual_seed(seed)
    canon = torch.arange(vocab)
    twins = torch.randint(4, vocab, (vocab // 4, 2), generator=g)
    canon[twins[:, 0]] = canon[twins[:, 1]]
    canon = canon[canon]  # a twin's twin is itself
    mask = [torch.rand(vocab, generator=g) < p for p in (0.5, 0.1, 0.05, 0.9)]
    return Repeats(canon, mask[0], 4, mask[1], mask[2], mask[3]).ban(src, 0)


def test_the_native_repeat_ban_is_repeat_bans() -> None:
    """The native search's repeat ban bans what `RepeatBan.banned` bans, for histories over a
    few tokens (so that words and spans repeat), with and without each exemption."""
    vocab = 40
    src = torch.tensor([[5, 6, 7], [8, 9, 10], [11, 12, 13]])
    ban = _repeats(vocab, src, seed=3)
    ban.free = torch.tensor([[False, False], [True, False], [False, True]])
    tables = native_step.RepeatTables(ban, vocab)
    rng = np.random.default_rng(0)
    banned_somewhere = 0
    for _ in range(600):
        t = int(rng.integers(0, 16))
        history = rng.integers(4, 10, t).tolist()
        sentence = int(rng.integers(0, 3))
        found = ban.select(torch.tensor([sentence])).banned(np.array([history]).reshape(1, t), 1)
        want = set() if found is None else set(found[1].tolist())
        assert set(tables(history, sentence)) == want, (history, sentence)
        banned_somewhere += bool(want)
    assert banned_somewhere > 100  # the comparison was not vacuous


@pytest.mark.parametrize("memory", [True, False])
def test_the_native_beam_search_is_beam_search(memory_bundle: Path, memory: bool) -> None:
    """Beam search in one native call finds what beam search's Python loop over the native
    step finds, token for token and gate for gate: random weights (so that outputs repeat
    and the ban bites), length limits that force EOS, sentences finishing at different
    steps, 1 to 4 beams, with and without a memory."""
    model, _, src, neighbours = step_case(memory_bundle, "cstm", "ort")
    with torch.no_grad():  # EOS likely at every step: hypotheses of many lengths compete
        model.decoder_norm.bias.fill_(1.0)
        model.embed.weight[model.config.eos_id] = 3.0 / model.config.d_model
    native = OrtDecoder(model, "native-int8")
    src = torch.cat([src, torch.tensor([[13, 2, 0, 0]]), src[:1]])
    if memory:
        neighbours = Neighbours.from_lists(
            [[([5, 6], [7, 8, 9])], [], [([10], [11, 12]), ([13, 14], [15])], [([5], [6])],
             [([9, 9, 9], [9, 9])]],
            pad_id=0,
        )  # fmt: skip
    else:
        neighbours = None
    vocab = native.config.vocab_size
    settings = ((4, 2.0, 1.2, 10), (2, 1.0, 0.0, 3), (1, 0.0, 2.0, 5), (3, 2.0, 1.0, 0))
    lengths: set[int] = set()
    for beams, penalty, a, b in settings:
        found = []
        for native_search in (True, False):
            native.native_search = native_search
            gates: list[float | None] = []
            hyps = beam_search(
                native, src, beams, penalty, a, b, neighbours=neighbours,
                gates=gates if memory else None, repeats=_repeats(vocab, src, seed=beams),
            )  # fmt: skip
            found.append((hyps, gates))
        assert found[0] == found[1], beams
        lengths.update(len(h) for h in found[0][0])
        if memory:
            assert found[0][1][1] is None and all(g is not None for g in found[0][1][2:])
    assert len(lengths) >= 4, lengths  # the lengths' normalisation mattered


def test_the_native_encoder_computes_the_encoder_layers(bundle: Path) -> None:
    """The native source encoder gives the float layers' output within int8's error on each
    token; a sentence alone gives what it gives in a batch padded to a longer one, and on
    two threads what on one, bit for bit; padding that does not follow the tokens is refused."""
    model = load_bundle(bundle).model
    encoder = native_step.NativeEncoder(model)
    src = torch.tensor(
        [[5, 6, 7, 8, 9, 10, 11, 2], [9, 10, 2, 0, 0, 0, 0, 0], [4, 2, 0, 0, 0, 0, 0, 0]]
    )
    pad = src.eq(model.config.pad_id)
    with torch.inference_mode():
        x = model._embed(src)
        want = x
        for layer in model.encoder_layers:
            want = layer(want, pad)
    got = encoder(x.numpy(), pad.numpy())
    tokens = ~pad.numpy()
    err = np.abs(got[tokens] - want.numpy()[tokens]).max(axis=1)
    scale = np.abs(want.numpy()[tokens]).max(axis=1)
    assert (err <= 0.05 * scale).all(), err / scale
    alone = encoder(x[1:2, :3].numpy(), pad[1:2, :3].numpy())
    assert np.array_equal(alone[0], got[1, :3])
    assert np.array_equal(encoder(x.numpy(), pad.numpy(), threads=2), got)
    with pytest.raises(ValueError, match="padding must follow"):
        encoder(x.numpy(), np.flip(pad.numpy(), axis=1).copy())


def test_the_library_counts_the_arithmetic_it_does(bundle: Path) -> None:
    """`counts` (what benchmarks/arithmetic.py sets the time against) adds a product's rows x
    inputs x outputs, and for the source encoder each layer's products on every row of the
    batch (padding too) and its attention to each sentence's real tokens, on two threads as on
    one."""
    rng = np.random.default_rng(5)
    layer = native_step.Int8Linear(rng.normal(size=(40, 24)).astype(np.float32), None, 127)
    before = native_step.counts()
    layer(rng.normal(size=(7, 24)).astype(np.float32))
    assert np.subtract(native_step.counts(), before).tolist() == [7 * 24 * 40, 0]

    model = load_bundle(bundle).model
    cfg = model.config
    encoder = native_step.NativeEncoder(model)
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    pad = src.eq(cfg.pad_id)
    with torch.inference_mode():
        x = model._embed(src).numpy()
    per_token = 4 * cfg.d_model**2 + 2 * cfg.d_model * cfg.d_ff  # qkv, out, the feed-forward
    for threads in (1, 2):
        before = native_step.counts()
        encoder(x, pad.numpy(), threads=threads)
        products, attention = np.subtract(native_step.counts(), before).tolist()
        assert products == cfg.enc_layers * (5 + 5) * per_token
        assert attention == cfg.enc_layers * (5 * 5 + 5 * 3) * cfg.d_model * 2


@pytest.mark.parametrize("arch", _arches())
def test_the_native_keys_values_are_the_int8_projection_in_halves(
    memory_bundle: Path, arch: str
) -> None:
    """Every decoder layer's source (and memory) keys/values made natively are, bit for bit,
    each real row's int8 projection (`Int8Linear`) laid out by `stack_keys`/`stack_values`
    (whose conversion to halves is PyTorch's, to nearest even: so is the portable one here),
    zero past each sentence's keys; within int8's error of the float projection; the same
    on two threads; refused beyond the halves' range and with padding before tokens."""
    model = load_bundle(memory_bundle).model.eval()
    torch.manual_seed(1)
    x = torch.randn(3, 11, model.config.d_model) * 2
    x[0, 0, :4] = torch.tensor([1e-6, -3e-5, 6e-8, 0.0])  # half subnormals and zero
    pad = torch.arange(11) >= torch.tensor([11, 4, 0])[:, None]
    limit = native_step.weight_limit(arch)
    for attr in ("cross_attn", "memory_attn"):
        native = native_step.NativeKeysValues(model, attr, arch)
        kt, v = native(x.numpy(), pad.numpy())
        keys, values = [], []
        for layer in model.decoder_layers:
            a = getattr(layer, attr)
            w = torch.cat([a.k_proj.weight, a.v_proj.weight]).detach().numpy()
            b = torch.cat([a.k_proj.bias, a.v_proj.bias]).detach().numpy()
            y = native_step.Int8Linear(w, b, limit, arch)(x.reshape(-1, x.size(2)).numpy())
            y = (
                torch.from_numpy(y)
                .view(3, 11, 2, a.n_heads, a.d_head)
                .masked_fill(pad[:, :, None, None, None], 0.0)
            )
            keys.append(y[:, :, 0].transpose(1, 2).contiguous().numpy())
            values.append(y[:, :, 1].transpose(1, 2).contiguous().numpy())
            ref_k, ref_v = (t.detach() for t in a.project_kv(x))
            for g, n in enumerate((11, 4, 0)):
                got = kt[g, len(keys) - 1, :, :, :n].astype(np.float32).transpose(0, 2, 1)
                err = np.abs(got - ref_k[g, :, :n].numpy()).max(initial=0.0)
                assert err <= 0.03 * float(ref_k.abs().max()), (attr, g)
                err = np.abs(v[g, len(keys) - 1, :, :n] - ref_v[g, :, :n].numpy())
                assert err.max(initial=0.0) <= 0.03 * float(ref_v.abs().max()), (attr, g)
        assert np.array_equal(kt, native_step.stack_keys(keys))
        assert np.array_equal(v, native_step.stack_values(values))
        two = native(x.numpy(), pad.numpy(), threads=2)
        assert np.array_equal(two[0], kt) and np.array_equal(two[1], v)
    with pytest.raises(ValueError, match="beyond half precision"):
        native((x * 1e6).numpy(), pad.numpy())
    with pytest.raises(ValueError, match="padding must follow"):
        native(x.numpy(), np.flip(pad.numpy(), axis=1).copy())


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_the_native_memory_encoder_is_the_memory_encoder(memory_bundle: Path, mode: str) -> None:
    """Neighbours of very different lengths, a sentence without any: native-int8's memory
    (one C++ call, packed) is the float model's within int8's error, with the same padding;
    a sentence encoded alone gets the same memory bit for bit, and so do two threads; bad
    neighbours are refused with a reason."""
    config = dataclasses.replace(load_bundle(memory_bundle).model.config, memory_mode=mode)
    torch.manual_seed(1)
    model = SemiParametricModel(config).eval()
    native = OrtDecoder(model, "native-int8")
    src, neighbours, _ = uneven_neighbours(config, 7)
    with torch.inference_mode():
        want, got = model.encode(src, neighbours), native.encode(src, neighbours)
        assert torch.equal(got.retrieved_pad, want.retrieved_pad)
        assert torch.equal(got.has_memory, want.has_memory) and not bool(got.has_memory[3])
        real = ~want.retrieved_pad[..., None]  # the float model leaves padding unspecified
        err = ((got.retrieved - want.retrieved) * real).abs().max()
        assert err <= 0.05 * want.retrieved.abs().max(), err
        assert not got.retrieved[~real.expand_as(got.retrieved)].any()  # natively zeros
        alone = native.encode(src[5:6], Neighbours(neighbours.src[5:6], neighbours.tgt[5:6]))
        width = alone.retrieved.size(1)
        assert torch.equal(alone.retrieved[0], got.retrieved[5, :width])
        encoder = native._encoder.memory_encoder.encoder
        args = (
            neighbours.src.numpy(),
            neighbours.tgt.numpy(),
            got.memory.numpy(),
            got.src_pad.numpy(),
        )
        one, two = encoder(*args, threads=1), encoder(*args, threads=2)
        assert np.array_equal(one[0], two[0]) and np.array_equal(one[0], got.retrieved.numpy())
        flipped = np.flip(neighbours.tgt.numpy(), axis=2).copy()
        with pytest.raises(ValueError, match="right-padded"):
            encoder(args[0], flipped, *args[2:])
        wrong = neighbours.tgt.numpy().copy()
        wrong[0, 0, 0] = config.vocab_size
        with pytest.raises(ValueError, match="outside the vocabulary"):
            encoder(args[0], wrong, *args[2:])
        if mode == "cstm":
            no_source = neighbours.src.numpy().copy()
            no_source[0, 1] = config.pad_id
            with pytest.raises(ValueError, match="a target but an empty source"):
                encoder(no_source, *args[1:])


def test_bad_input_is_refused_with_a_reason(bundle: Path) -> None:
    """The C step checks what would read out of bounds, and says what was wrong."""
    model = load_bundle(bundle).model
    step = native_step.NativeStep(model, memory=False)
    h, dh = step.heads, step.d_head
    src = np.zeros((1, 5), dtype=np.float32)
    keys = [np.zeros((1, h, 5, dh), dtype=np.float32)] * step.n_layers
    sentences = native_step.SentenceTensors(
        src, native_step.stack_keys(keys), native_step.stack_values(keys)
    )
    tokens = np.array([1, 1], dtype=np.int64)
    ban = np.zeros((2, 1), dtype=np.int64)
    ok = step.step(tokens, 0, np.arange(2), ban, 3, sentences, None)
    assert ok[0].shape == (2, 3) and ok[3].length == 1 and ok[3].history.shape[0] == 2
    with pytest.raises(ValueError, match="position beyond"):
        step.step(tokens, 10_000, np.arange(2), ban, 3, sentences, None)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        step.step(np.array([1, 10**6]), 0, np.arange(2), ban, 3, sentences, None)
    with pytest.raises(ValueError, match="order entry outside"):
        step.step(tokens, 1, np.array([0, 5]), ban, 3, sentences, ok[3])
    with pytest.raises(ValueError, match="C-contiguous float32"):
        native_step.SentenceTensors(src.astype(np.float64), sentences.cross_kt, sentences.cross_v)
    with pytest.raises(ValueError, match="C-contiguous float16"):
        native_step.SentenceTensors(src, sentences.cross_kt.astype(np.float32), sentences.cross_v)
    with pytest.raises(ValueError, match="beyond half precision"):
        native_step.stack_values([np.full((1, h, 5, dh), 1e5, dtype=np.float32)])


def test_the_library_is_built_once_and_kept(tmp_path: Path, monkeypatch) -> None:
    """Built into the cache directory under a digest of its source, flags, compiler and CPU,
    and found there after; a host without a compiler gets a reason, not a crash."""
    monkeypatch.setenv(native_step.CACHE_ENV, str(tmp_path))
    compiler = native_step._compiler()
    assert compiler is not None
    built = native_step._build(compiler)
    assert built.parent == tmp_path and built.stat().st_size > 0
    when = built.stat().st_mtime_ns
    assert native_step._build(compiler) == built and built.stat().st_mtime_ns == when
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no half-written leftovers

    monkeypatch.setattr(native_step, "_loaded", {})
    monkeypatch.setattr(native_step, "_compiler", lambda: None)
    monkeypatch.delenv(native_step.ARCH_ENV, raising=False)
    runnable, why = native_step.available()
    assert not runnable and "no C++ compiler" in why


def test_auto_prefers_the_native_step_where_it_runs(bundle: Path, monkeypatch) -> None:
    """auto: native-int8 on the CPU for a model it runs, ort-int8 where it cannot be built."""
    model = load_bundle(bundle).model
    assert resolve("auto", "cpu", model) == "native-int8"
    monkeypatch.delenv(native_step.ARCH_ENV, raising=False)
    monkeypatch.setattr(native_step, "_loaded", {"native": "no C++ compiler (test)"})
    assert resolve("auto", "cpu", model) == "ort-int8"
    with pytest.raises(ValueError, match="no C\\+\\+ compiler"):
        OrtDecoder(model, "native-int8")
