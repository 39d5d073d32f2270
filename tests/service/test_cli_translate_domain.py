"""`ragmt translate --domain`: the active store of a domain feeds the model's memory."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from index_builder.corpus import Pair
from index_builder.store import build_store, set_active
from service.cli import app
from tests.toy import gloss, toy_pairs

pytestmark = pytest.mark.integration

runner = CliRunner()


def _stores(tmp_path: Path) -> Path:
    pairs = [Pair(s, t) for s, t in toy_pairs(50, seed=11)]
    version = build_store(pairs, "toy", "idf-sentence", tmp_path / "stores")
    set_active(tmp_path / "stores", "toy", version.name)
    return tmp_path / "stores"


def test_translate_with_a_domain_store(bundle: Path, tmp_path: Path) -> None:
    stores = _stores(tmp_path)
    args = ["translate", "--model", str(bundle), "--domain", "toy", "--stores", str(stores)]
    res = runner.invoke(app, args, input="one two\nred tree\n")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [gloss("one two"), gloss("red tree")]
    # The tiny bundle is a plain Transformer: the user is told the store cannot change it.
    assert "no retrieval memory" in res.output


def test_translate_refuses_an_unknown_domain(bundle: Path, tmp_path: Path) -> None:
    stores = _stores(tmp_path)
    args = ["translate", "--model", str(bundle), "--domain", "nope", "--stores", str(stores)]
    res = runner.invoke(app, args, input="one\n")
    assert res.exit_code == 2
    assert "no store for domain 'nope'" in res.output


def test_translate_refuses_a_damaged_store(bundle: Path, tmp_path: Path) -> None:
    stores = _stores(tmp_path)
    version = next(p for p in (stores / "toy").iterdir() if p.is_dir())
    victim = next(p for p in version.iterdir() if p.suffix == ".npy")
    victim.write_bytes(victim.read_bytes()[:-3])
    args = ["translate", "--model", str(bundle), "--domain", "toy", "--stores", str(stores)]
    res = runner.invoke(app, args, input="one\n")
    assert res.exit_code == 2
    assert "sha256" in res.output or "checksum" in res.output, res.output


def test_eval_with_stores_refuses_a_model_without_memory(bundle: Path, tmp_path: Path) -> None:
    stores = _stores(tmp_path)
    args = ["eval", "--model", str(bundle), "--data", str(tmp_path), "--stores", str(stores)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert "no retrieval memory" in " ".join(res.output.split())  # rich wraps long lines
    res = runner.invoke(app, ["eval", "--model", str(bundle), "--store", "toy"])
    assert res.exit_code == 2
    assert "--store needs --stores" in res.output
