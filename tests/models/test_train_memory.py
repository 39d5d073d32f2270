"""Training a memory model through `train`: warm start, neighbour files, resume, bundle.

The task can only be solved by reading the neighbours: "house" translates as "haus" or as
"heim", decided per sentence, and the sentence's retrieved pair (another sentence with
"house") shows which. A baseline can only guess; a memory model must follow its memory.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import models.train
from models.bundle import load_bundle
from models.data import read_neighbours
from models.evaluate import evaluate
from models.tokenizer import train_tokenizer
from models.train import TrainConfig, TrainData, damaged_self, finalize, train
from models.translator import DecodeOptions, Translator
from tests.toy import LEXICON, gloss

pytestmark = pytest.mark.integration

TINY = {"d_model": 64, "n_heads": 4, "enc_layers": 2, "dec_layers": 2, "d_ff": 128, "dropout": 0.0}
VARIANTS = ("haus", "heim")


def _pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(source, target, variant) with "house" in every second sentence."""
    rng = random.Random(seed)
    words = sorted(w for w in LEXICON if w != "house")
    out = []
    for i in range(n):
        sent = [rng.choice(words) for _ in range(rng.randint(2, 4))]
        variant = ""
        if i % 2 == 0:
            sent.insert(rng.randint(0, len(sent)), "house")
            variant = rng.choice(VARIANTS)
        src = " ".join(sent)
        out.append((src, gloss(src).replace("haus", variant or "haus"), variant))
    return out


def _write(folder: Path, split: str, pairs: list[tuple[str, str, str]]) -> None:
    (folder / f"{split}.en").write_text("".join(p[0] + "\n" for p in pairs))
    (folder / f"{split}.de").write_text("".join(p[1] + "\n" for p in pairs))


def _neighbours(path: Path, queries, pool, seed: int, flip: bool = False) -> None:
    """One retrieved pool pair per query: another "house" sentence with the same variant
    (the other variant with `flip`); sentences without "house" get an unrelated pair."""
    rng = random.Random(seed)
    by_variant = {v: [i for i, p in enumerate(pool) if p[2] == v] for v in VARIANTS}
    with path.open("w") as fh:
        for i, (src, _, variant) in enumerate(queries):
            if variant:
                want = VARIANTS[1 - VARIANTS.index(variant)] if flip else variant
                j = rng.choice([j for j in by_variant[want] if pool[j][0] != src])
            else:
                j = rng.randrange(len(pool))
            nb = {"pair_id": j, "source": pool[j][0], "target": pool[j][1], "score": 1.0}
            fh.write(json.dumps({"id": i, "source": src, "neighbours": [nb]}) + "\n")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("memtask")
    train_p, dev_p, test_p = _pairs(3000, 1), _pairs(40, 2), _pairs(80, 3)
    for split, pairs in (("train", train_p), ("dev", dev_p), ("test", test_p)):
        _write(root, split, pairs)
    _neighbours(root / "train.nb.jsonl", train_p, train_p, 4)
    _neighbours(root / "dev.nb.jsonl", dev_p, train_p, 5)
    _neighbours(root / "test.nb.jsonl", test_p, train_p, 6)
    _neighbours(root / "test.flip.jsonl", test_p, train_p, 7, flip=True)
    tok = train_tokenizer(
        [(root / "train.en", "en"), (root / "train.de", "de")], root / "spm.model", 300
    )
    data = TrainData(
        root / "train.en", root / "train.de", root / "dev.en", root / "dev.de", "en", "de", "toy",
        root / "train.nb.jsonl", root / "dev.nb.jsonl",
    )  # fmt: skip
    base_cfg = TrainConfig(
        model=TINY, max_tokens=768, lr=3e-3, warmup=60, max_steps=300, eval_every=10**6,
        save_every=100, average_last=1, dev_sentences=20, bf16=False,
    )  # fmt: skip
    train(root / "base", data, base_cfg, tok, log=lambda s: None)
    finalize(root / "base", root / "base-bundle", data, tok, average_last=1, dtype="float32")
    return root, data, tok, test_p


def _mem_cfg(steps: int) -> TrainConfig:
    return TrainConfig(
        arch="semiparametric", model={**TINY, "max_neighbours": 4, "max_neighbour_len": 16},
        max_tokens=768, lr=2e-3, warmup=30, max_steps=steps, eval_every=100, save_every=50,
        average_last=1, dev_sentences=20, bf16=False, neighbours=2,
    )  # fmt: skip


def _follows(hyps: list[str], pairs, variant_of) -> float:
    rows = [(h, variant_of(p[2])) for h, p in zip(hyps, pairs, strict=True) if p[2]]
    return sum(v in h.split() for h, v in rows) / len(rows)


def _nb(path: Path, n: int) -> list[list[tuple[str, str]]]:
    return [[(x["source"], x["target"]) for x in f] for f in read_neighbours(path, n, 4)]


def test_memory_model_learns_to_follow_its_neighbours(task) -> None:
    root, data, tok, test_p = task
    logs: list[str] = []
    state = train(
        root / "mem", data, _mem_cfg(400), tok, log=logs.append, init=root / "base-bundle"
    )
    assert any("warm start" in m for m in logs)
    assert (
        state["init_weights_sha256"]
        == load_bundle(root / "base-bundle").manifest["files"]["model.safetensors"]
    )
    assert [h["step"] for h in state["history"]] == [100, 200, 300, 400]
    finalize(root / "mem", root / "mem-bundle", data, tok, average_last=1, dtype="float32")
    manifest = load_bundle(root / "mem-bundle").manifest
    assert manifest["architecture"] == "semiparametric"
    assert manifest["training"]["init_weights_sha256"] == state["init_weights_sha256"]

    mem = Translator.from_bundle(root / "mem-bundle")
    base = Translator.from_bundle(root / "base-bundle")
    assert mem.uses_memory and not base.uses_memory
    src = [p[0] for p in test_p]
    same, flipped = _nb(root / "test.nb.jsonl", len(src)), _nb(root / "test.flip.jsonl", len(src))
    opts = DecodeOptions(beam_size=4)
    out = mem.translate_detailed(src, opts, neighbours=same, gates=True)
    assert _follows([t.text for t in out], test_p, lambda v: v) >= 0.9
    flip = VARIANTS.__getitem__
    flipped_hyps = mem.translate(src, opts, neighbours=flipped)
    assert _follows(flipped_hyps, test_p, lambda v: flip(1 - VARIANTS.index(v))) >= 0.8
    # The baseline cannot know: it is right about half the time, whatever the neighbours.
    assert _follows(base.translate(src, opts, neighbours=same), test_p, lambda v: v) <= 0.75
    gates = [t.gate for t in out]
    assert all(g is not None and 0.0 < g < 1.0 for g in gates)
    # Evaluation with a neighbour source reports the gate and the retrieval time.
    by_src = {
        x: [SimpleNamespace(source=a, target=b) for a, b in nb]
        for x, nb in zip(src, same, strict=True)
    }
    hyp_dir = root / "eval-hyps"
    res = evaluate(mem, root, ["."], opts, hyp_dir=hyp_dir, log=lambda s: None,
                   retrieve_for=lambda d: lambda s, k: ([by_src[x] for x in s], None))  # fmt: skip
    assert 0.0 < res["."]["gate_mean"] < 1.0 and res["."]["neighbours_per_sentence"] == 1.0
    # Provenance beside the hypotheses: per sentence, the pairs it read and its gate.
    lines = (hyp_dir / "..test.neighbours.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert [r["neighbours"] for r in records] == [[list(p) for p in nb] for nb in same]
    mean = sum(r["gate"] for r in records) / len(records)
    assert mean == pytest.approx(res["."]["gate_mean"], abs=1e-4)
    assert "retrieval_seconds" in res["."] and res["."]["bleu"] > 80
    # Without neighbours the memory model still translates the rest of the sentence.
    plain = mem.translate(src, opts)
    rest = [p for p in test_p if not p[2]]
    exact = sum(h == p[1] for h, p in zip(plain, test_p, strict=True) if not p[2])
    assert exact >= 0.9 * len(rest)


def test_memory_training_resumes_exactly(task, tmp_path: Path) -> None:
    root, data, tok, _ = task
    init = root / "base-bundle"
    quiet = lambda s: None  # noqa: E731
    train(tmp_path / "a", data, _mem_cfg(60), tok, log=quiet, init=init)
    train(tmp_path / "b", data, _mem_cfg(30), tok, log=quiet, init=init)
    train(tmp_path / "b", data, _mem_cfg(60), tok, log=quiet, init=init)
    from safetensors.torch import load_file

    wa = load_file(str(tmp_path / "a" / "ckpt-0000060" / "model.safetensors"))
    wb = load_file(str(tmp_path / "b" / "ckpt-0000060" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


@pytest.mark.unit
def test_damaged_self_cuts_one_span_from_each_side() -> None:
    rng = random.Random(0)
    src, tgt = list(range(10)), list(range(100, 120))
    for _ in range(20):
        s, t = damaged_self(src, tgt, 0.3, 64, rng)
        assert len(s) == 7 and len(t) == 14
        for orig, got in ((src, s), (tgt, t)):  # the original minus one contiguous span
            n = len(orig) - len(got)
            assert any(orig[:a] + orig[a + n :] == got for a in range(len(orig) - n + 1))
    assert damaged_self([1], [3], 0.3, 64, rng) == ([1], [3])  # too short to cut
    assert damaged_self(list(range(40)), [3], 0.0, 16, rng) == (list(range(16)), [3])


def test_self_neighbours_join_the_memory_and_the_gate_is_logged(
    task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, data, tok, _ = task
    seen: list = []
    own_targets: list = []
    from_lists, collate = models.train.Neighbours.from_lists, models.train.collate

    def spy_nb(pairs, pad_id):
        seen.append(pairs)
        return from_lists(pairs, pad_id)

    def spy_collate(corpus, idx):
        own_targets.append([corpus.tgt(int(i)).tolist() for i in idx])
        return collate(corpus, idx)

    monkeypatch.setattr(models.train.Neighbours, "from_lists", spy_nb)
    monkeypatch.setattr(models.train, "collate", spy_collate)
    cfg = TrainConfig(**{**_mem_cfg(100).__dict__, "self_neighbour_prob": 1.0, "eval_every": 10**6})
    logs: list[str] = []
    train(tmp_path / "s", data, cfg, tok, log=logs.append, init=root / "base-bundle")
    step_log = next(m for m in logs if m.startswith("step 100 "))
    assert 0.0 < float(step_log.split(" gate ")[1].split()[0]) < 1.0
    assert len(seen) == len(own_targets) == 100
    for pairs, targets in zip(seen[:5], own_targets[:5], strict=True):
        for row, tgt in zip(pairs, targets, strict=True):
            assert 1 <= len(row) <= cfg.neighbours
            n = round(len(tgt) * cfg.self_neighbour_cut)  # its own target, one span cut out
            cut = [tgt[:a] + tgt[a + n :] for a in range(len(tgt) - n + 1)] if n else [tgt]
            assert any(t in cut for _, t in row)


def test_memory_training_refuses_missing_or_mismatched_neighbours(task, tmp_path: Path) -> None:
    root, data, tok, _ = task
    quiet = lambda s: None  # noqa: E731
    no_files = TrainData(*[getattr(data, f) for f in ("train_src", "train_tgt", "dev_src")],
                         data.dev_tgt, "en", "de")  # fmt: skip
    with pytest.raises(ValueError, match="neighbour files are needed"):
        train(tmp_path / "x", no_files, _mem_cfg(5), tok, log=quiet)
    short = tmp_path / "short.jsonl"
    short.write_text("".join(data.train_neighbours.read_text().splitlines(True)[:10]))
    bad = TrainData(**{**data.__dict__, "train_neighbours": short})
    with pytest.raises(ValueError, match="10 records for a corpus of 3000 lines"):
        train(tmp_path / "y", bad, _mem_cfg(5), tok, log=quiet)
    with pytest.raises(ValueError, match="exactly for a memory model"):
        cfg = TrainConfig(**{**_mem_cfg(5).__dict__, "arch": "transformer", "model": TINY})
        train(tmp_path / "z", data, cfg, tok, log=quiet)
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text('{"id": 0, "neighbours": []}\nnot json\n')
    with pytest.raises(ValueError, match=r"garbled.jsonl:2: not a neighbours record"):
        read_neighbours(garbled, 2, 4)


def test_long_neighbours_are_cut_to_the_models_width(task, tmp_path: Path) -> None:
    """Retrieved pairs longer than `max_neighbour_len` (16 here) train after being cut, as
    decoding cuts them; a full-length cut (max_len) made the model refuse the batch."""
    root, data, tok, _ = task
    lines = data.train_neighbours.read_text().splitlines()
    long_src = " ".join(["red house"] * 30)  # ~60 tokens per side
    with (tmp_path / "long.jsonl").open("w") as fh:
        for line in lines:
            rec = json.loads(line)
            rec["neighbours"].append(
                {"pair_id": 0, "source": long_src, "target": gloss(long_src), "score": 0.5}
            )
            fh.write(json.dumps(rec) + "\n")
    long = TrainData(**{**data.__dict__, "train_neighbours": tmp_path / "long.jsonl"})
    train(tmp_path / "run", long, _mem_cfg(3), tok, log=lambda s: None, init=root / "base-bundle")
    assert (tmp_path / "run" / "ckpt-0000003").is_dir()


def _bude(target: str) -> str:
    return " ".join("bude" if w in VARIANTS else w for w in target.split())


def test_fine_tuning_starts_from_the_bundle_and_learns_the_domain(task, tmp_path: Path) -> None:
    """`init` with a bundle of the same architecture fine-tunes it: step 0 is the bundle
    itself, and a domain where "house" is always "bude" (never seen) is learned in a few steps."""
    root, _, tok, _ = task
    domain = [(s, _bude(t), v and "bude") for s, t, v in _pairs(600, 8)]
    test = [(s, _bude(t), v and "bude") for s, t, v in _pairs(60, 9)]
    _write(tmp_path, "train", domain)
    _write(tmp_path, "dev", test[:20])
    data = TrainData(tmp_path / "train.en", tmp_path / "train.de", tmp_path / "dev.en",
                     tmp_path / "dev.de", "en", "de", "toy")  # fmt: skip
    init = root / "base-bundle"
    cfg = TrainConfig(
        model=TINY, max_tokens=768, lr=1e-3, warmup=5, max_steps=0, eval_every=10**6,
        save_every=20, average_last=1, dev_sentences=20, bf16=False,
    )  # fmt: skip
    logs: list[str] = []
    train(tmp_path / "ft", data, cfg, tok, log=logs.append, init=init)
    assert any("fine-tuning" in m for m in logs)
    finalize(tmp_path / "ft", tmp_path / "ft0", data, tok, average_last=1, dtype="float32")
    same = load_bundle(tmp_path / "ft0").model.state_dict()
    for k, v in load_bundle(init).model.state_dict().items():
        assert torch.equal(same[k], v), k

    src = [p[0] for p in test]
    bude = lambda hyps: _follows(hyps, test, lambda v: "bude")  # noqa: E731
    before = bude(Translator.from_bundle(init).translate(src, DecodeOptions(beam_size=4)))
    train(tmp_path / "ft", data, TrainConfig(**{**cfg.__dict__, "max_steps": 60}), tok,
          log=lambda s: None, init=init)  # fmt: skip
    finalize(tmp_path / "ft", tmp_path / "ft60", data, tok, average_last=1, dtype="float32")
    tuned = Translator.from_bundle(tmp_path / "ft60")
    after = bude(tuned.translate(src, DecodeOptions(beam_size=4)))
    assert before == 0.0 and after >= 0.9, (before, after)

    wider = TrainConfig(**{**cfg.__dict__, "model": {**TINY, "d_ff": 256}})
    with pytest.raises(ValueError, match=r"model config differs from this one in \['d_ff'\]"):
        train(tmp_path / "wide", data, wider, tok, log=lambda s: None, init=init)
