"""experiments/ast_selection.py: each language's selected blocks, their overlaps and budgets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models.bundle import save_bundle
from models.sparse_transformer import SparseTransformer, SparseTransformerConfig
from tests.experiment_scripts import load

pytestmark = pytest.mark.unit

ast_selection = load("ast_selection")


def test_jaccard_of_selections() -> None:
    a = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    b = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    assert ast_selection.jaccard(a, a) == 1.0
    assert ast_selection.jaccard(a, b) == pytest.approx((1.0 + 0.0) / 2)


def _pick(*blocks: int, n: int = 8) -> torch.Tensor:
    """One group's 0/1 selection of `blocks` out of n."""
    return torch.zeros(n).index_fill_(0, torch.tensor(blocks), 1.0)


def test_a_gap_no_random_selection_reaches_is_unlikely_by_chance() -> None:
    first, second = _pick(0, 1, 2, 3), _pick(4, 5, 6, 7)
    masks = {  # related pairs identical in 3 layers, zh shares nothing with es or ru
        "es": torch.stack([first] * 3), "pt": torch.stack([first] * 3),
        "ru": torch.stack([first] * 3), "uk": torch.stack([first] * 3),
        "zh": torch.stack([second] * 3),
    }  # fmt: skip
    gap, p = ast_selection.chance_of_gap(masks, k=4, draws=5000)
    assert gap == 1.0
    assert p == round(1 / 5001, 4)  # only the observation itself reaches it


def test_a_gap_of_zero_is_what_chance_gives_half_the_time_or_more() -> None:
    same = torch.stack([_pick(0, 1, 2, 3)] * 3)
    masks = dict.fromkeys(["es", "pt", "ru", "uk", "zh"], same)
    gap, p = ast_selection.chance_of_gap(masks, k=4, draws=5000)
    assert gap == 0.0 and 0.5 <= p <= 0.75  # the null gap is symmetric about 0, ties count


def test_random_selections_give_a_p_below_alpha_about_alpha_of_the_time() -> None:
    g = torch.Generator().manual_seed(1)
    ps = []
    for _ in range(100):
        picks = torch.rand(5, 3, 8, generator=g).topk(4, dim=-1).indices
        sel = torch.zeros(5, 3, 8).scatter_(-1, picks, 1.0)
        masks = dict(zip(["es", "pt", "ru", "uk", "zh"], sel, strict=True))
        ps.append(ast_selection.chance_of_gap(masks, k=4, draws=1000)[1])
    assert 0 <= sum(p <= 0.1 for p in ps) <= 22  # 10 expected; binomial(100, 0.1) < 22 w.p. 0.999


def test_no_gap_without_both_kinds_of_pair() -> None:
    same = torch.stack([_pick(0, 1, 2, 3)] * 3)
    assert ast_selection.chance_of_gap({"es": same, "pt": same, "ru": same}, k=4) is None


def _toy_bundle(path: Path) -> torch.Tensor:
    """A bundle of an en -> es, pt, zh model in which es and pt pick the same two of four
    blocks and zh the other two; returns its decoder scores."""
    langs = ("en", "es", "pt", "zh")
    torch.manual_seed(0)
    model = SparseTransformer(SparseTransformerConfig(
        vocab_size=300, d_model=16, n_heads=2, enc_layers=1, dec_layers=2, d_ff=32,
        languages=langs, sparse=("ffn",), sides=("decoder",), ffn_blocks=4, ffn_active=2,
    ))  # fmt: skip
    with torch.no_grad():
        mu = model.scores["decoder_ffn"]
        mu.copy_(
            torch.tensor([[0.0, 0, 0, 0], [3, 2, -1, -2], [3, 2, -1, -2], [-2, -1, 2, 3]])[:, None]
        )
    pairs = [("en", t) for t in langs[1:]]
    save_bundle(
        path, model, "sparse-transformer", languages={"source": "en", "target": "es"},
        pairs=pairs, tokenizer="bytes",
    )  # fmt: skip
    return mu


def test_selection_of_a_bundle(tmp_path: Path) -> None:
    mu = _toy_bundle(tmp_path / "b")
    r = ast_selection.selection(tmp_path / "b")
    assert r["selected"]["es"] == [[0, 1], [0, 1]] and r["selected"]["zh"] == [[2, 3], [2, 3]]
    assert r["jaccard"] == {"es-pt": 1.0, "es-zh": 0.0, "pt-zh": 0.0}
    assert r["related"] == {"es-pt": 1.0} and r["unrelated"] == {"es-zh": 0.0}
    assert r["related_gap"] == 1.0 and r["related_gap_p"] < 0.01  # 2 of 4 twice, same pick
    assert r["expected_active"]["es"][0] == pytest.approx(
        float(torch.sigmoid(mu[1, 0].detach()).sum()), abs=0.01
    )
    svg = ast_selection.heat_map(r, "toy")
    assert svg.startswith("<svg") and svg.count("<rect") == 9


def test_selection_of_a_training_checkpoint_knows_its_phase(tmp_path: Path) -> None:
    """The budget where phase 1 ends is read from a checkpoint, before any bundle exists."""
    import json

    from models.checkpoints import save_checkpoint

    langs = ("en", "es", "pt", "zh")
    config = dict(
        vocab_size=300, d_model=16, n_heads=2, enc_layers=1, dec_layers=2, d_ff=32,
        languages=langs, sparse=("ffn",), sides=("decoder",), ffn_blocks=4, ffn_active=2,
    )  # fmt: skip
    model = SparseTransformer(SparseTransformerConfig(**config))
    with torch.no_grad():
        model.scores["decoder_ffn"].fill_(-1.0)  # a budget below k: 4 sigma(-1) = 1.08
        model.scores["decoder_ffn"][1, :, 3] = 4.0
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text(json.dumps({"phase2_after": 700}))
    state = {"step": 600, "arch": "sparse-transformer", "model_config": config}
    opt = torch.optim.AdamW(model.parameters())
    r = ast_selection.checkpoint_selection(save_checkpoint(run, 600, model, opt, state))
    assert (r["update"], r["phase"]) == (600, 1)
    assert [blocks[-1] for blocks in r["selected"]["es"]] == [3, 3]
    assert r["expected_active"]["pt"] == [pytest.approx(4 * 0.2689, abs=0.01)] * 2
    assert ast_selection.summary(r)["expected_active_max_gap"] == pytest.approx(
        2 - 4 * 0.2689, abs=0.01
    )


def test_heads_and_layers_are_selected_and_compared_too(tmp_path: Path) -> None:
    langs = ("en", "es", "pt", "zh")
    torch.manual_seed(0)
    model = SparseTransformer(SparseTransformerConfig(
        vocab_size=300, d_model=16, n_heads=4, enc_layers=1, dec_layers=4, d_ff=32,
        languages=langs, sparse=("ffn", "heads", "layers"), sides=("decoder",), ffn_blocks=4,
        ffn_active=2, heads_active=3, dec_layers_active=2,
    ))  # fmt: skip
    with torch.no_grad():
        model.scores["decoder_heads"].copy_(  # (languages, layers, heads): zh drops head 0
            torch.tensor([[0.0, 0, 0, 0], [1, 2, 3, -1], [1, 2, 3, -1], [-1, 2, 3, 1]])[:, None]
        )
        model.scores["decoder_layers"].copy_(
            torch.tensor([[0.0, 0, 0, 0], [2, 1, -1, -2], [2, -1, 1, -2], [-2, -1, 1, 2]])
        )
    save_bundle(
        tmp_path / "b", model, "sparse-transformer", languages={"source": "en", "target": "es"},
        pairs=[("en", t) for t in langs[1:]], tokenizer="bytes",
    )  # fmt: skip
    r = ast_selection.selection(tmp_path / "b")
    heads, layers = r["kinds"]["heads"], r["kinds"]["layers"]
    assert heads["selected"]["es"] == [[0, 1, 2]] * 4 and heads["selected"]["zh"] == [[1, 2, 3]] * 4
    assert heads["jaccard"]["es-pt"] == 1.0 and heads["jaccard"]["es-zh"] == 0.5  # 2 of 4 heads
    assert heads["budget_k"] == 3 and heads["blocks"] == 4
    assert layers["selected"] == {"es": [[0, 1]], "pt": [[0, 2]], "zh": [[2, 3]]}
    assert layers["jaccard"] == {"es-pt": 0.3333, "es-zh": 0.0, "pt-zh": 0.3333}  # 4 places
    assert layers["budget_k"] == 2 and len(layers["expected_active"]["es"]) == 1
    assert r["selected"] == r["kinds"]["ffn"]["selected"]  # the blocks stay at the top level
    results = tmp_path / "results.jsonl"
    results.touch()
    ast_selection.add_summaries(results, {"all-sparse": r})
    from models.results import read_records

    record = read_records(results)[0]
    assert set(record["other_kinds"]) == {"heads", "layers"}
    assert record["other_kinds"]["layers"]["related"] == {"es-pt": 0.3333}


def test_means_average_each_systems_latest_record_per_language() -> None:
    def rec(system: str, lang: str, bleu: float) -> dict:
        return {
            "kind": "eval", "split": "test", "system": system, "bleu": bleu, "chrf": 2 * bleu,
            "languages": {"source": "en", "target": lang}, "bundle": {"sha256": system},
        }  # fmt: skip

    records = [rec("dense", "de", 10), rec("dense", "zh", 20), rec("dense", "de", 12),
               rec("sparse", "de", 11), {"kind": "paired-bootstrap"}]  # fmt: skip
    by_system = {r["system"]: r for r in ast_selection.means(records)}
    assert by_system["dense"]["bleu"] == 16.0 and by_system["dense"]["averaged"] == ["de", "zh"]
    assert by_system["sparse"]["chrf"] == 22.0
    assert by_system["dense"]["languages"] == {"source": "en", "target": "mean"}


def test_summaries_are_written_once(tmp_path: Path) -> None:
    from models.results import FORMAT, append_record, read_records

    results = tmp_path / "results.jsonl"
    record = {"format": FORMAT, "kind": "eval", "split": "test", "system": "dense", "bleu": 3.0,
              "chrf": 9.0, "languages": {"source": "en", "target": "de"},
              "bundle": {"sha256": "x"}}  # fmt: skip
    append_record(results, record)
    found = {"ffn-sparse": {"bundle": "b", "budget_k": 2, "blocks": 4, "jaccard_mean": 0.5,
                            "related": {}, "unrelated": {}, "jaccard": {},
                            "expected_active": {"de": [2.0, 2.5]}}}  # fmt: skip
    ast_selection.add_summaries(results, found)
    ast_selection.add_summaries(results, found)  # again: nothing new
    kinds = [r["kind"] for r in read_records(results)]
    assert kinds == ["eval", "ast-selection", "eval-mean"]
    selection = read_records(results)[1]
    assert selection["expected_active_mean"] == 2.25 and selection["expected_active_max_gap"] == 0.5


def test_a_label_names_the_records_not_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--label ", 5 epochs"`: the records say "ffn-sparse, 5 epochs", as the run's evaluation
    records do; the figure keeps the run folder's name."""
    from models.results import FORMAT, append_record, read_records

    work = tmp_path / "work"
    _toy_bundle(work / "ffn-sparse" / "bundle")
    results = work / "results.jsonl"
    append_record(results, {"format": FORMAT, "kind": "eval", "split": "test", "bleu": 3.0,
                            "chrf": 9.0, "system": "ffn-sparse, 5 epochs",
                            "bundle": {"sha256": "x"},
                            "languages": {"source": "en", "target": "es"}})  # fmt: skip
    monkeypatch.setattr("sys.argv", [
        "ast_selection.py", "--work", str(work), "--out", str(work / "selection.json"),
        "--figures", str(work / "figures"), "--label", ", 5 epochs", "--results", str(results),
    ])  # fmt: skip
    ast_selection.main()
    systems = {(r["kind"], r["system"]) for r in read_records(results)}
    assert ("ast-selection", "ffn-sparse, 5 epochs") in systems
    assert ("eval-mean", "ffn-sparse, 5 epochs") in systems
    assert (work / "figures" / "ffn-sparse-overlap.svg").is_file()


def test_a_results_file_not_there_yet_is_said_not_silently_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any evaluation record exists there are no means to add; the run says so and
    creates nothing, so the experiment may call it before its first score."""
    work, results = tmp_path / "work", tmp_path / "missing.jsonl"
    _toy_bundle(work / "ffn-sparse" / "bundle")
    monkeypatch.setattr("sys.argv", [
        "ast_selection.py", "--work", str(work), "--out", str(tmp_path / "selection.json"),
        "--results", str(results),
    ])  # fmt: skip
    ast_selection.main()
    assert f"no records written: {results} does not exist yet" in capsys.readouterr().err
    assert not results.exists() and (tmp_path / "selection.json").is_file()
