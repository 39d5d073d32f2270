"""The CLI and the service apply one set of rules: where stores live, which domain names are
valid, what a blank text gives, and the same translation for the same input."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from typer.testing import CliRunner

from service.app import create_app
from service.cli import app as cli
from service.engine import TranslationRequest
from service.settings import Settings
from tests.service.conftest import running
from tests.toy import gloss, toy_pairs

pytestmark = pytest.mark.integration

runner = CliRunner()
TEXTS = ["one two. Red tree.", "", "   ", "blue house", "three"]


def _corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "toy.tsv"
    corpus.write_text("".join(f"{s}\t{t}\n" for s, t in toy_pairs(60, seed=5)), encoding="utf-8")
    return corpus


def test_cli_and_service_agree_on_stores_domains_blanks_and_output(
    bundle: Path, tmp_path: Path
) -> None:
    env = {"RAGMT_STORES_DIR": str(tmp_path / "stores")}
    # A store built without --out lands where the service reads: RAGMT_STORES_DIR.
    build = ["build-store", "--domain", "toy", "--corpus", str(_corpus(tmp_path))]
    res = runner.invoke(cli, [*build, "--method", "idf-sentence"], env=env)
    assert res.exit_code == 0, res.output
    assert Path(res.stdout.strip()).parent == tmp_path / "stores" / "toy"

    # The CLI reads it without --stores, blank lines stay blank in place.
    args = ["translate", "--model", str(bundle), "--domain", "toy", "--beam", "4"]
    res = runner.invoke(cli, args, input="\n".join(TEXTS) + "\n", env=env)
    assert res.exit_code == 0, res.output
    by_cli = res.stdout.splitlines()
    assert by_cli[0] and by_cli[1:] == ["", "", gloss("blue house"), gloss("three")]

    # The service, configured by the same variable, serves the same domain and the same output.
    os.environ.update(env)
    try:
        settings = Settings(model_path=bundle, beam_size=4)
    finally:
        for k in env:
            os.environ.pop(k)
    assert settings.store_root == tmp_path / "stores"

    async def through_the_service() -> tuple[list[str], list[str], httpx.Response]:
        service = create_app(settings)
        async with running(service) as c:
            resp = await c.post("/v1/translate", json={"texts": TEXTS, "domain": "toy"})
            bad = await c.post("/v1/translate", json={"texts": ["one"], "domain": "Legal.v2"})
            engine = service.state.engine
            direct = await engine.translate_batch(TranslationRequest(TEXTS, domain="toy"))
        assert resp.status_code == 200, resp.text
        http = [r["translation"] for r in resp.json()["results"]]
        assert {r["store_version"] for r in resp.json()["results"]} == {
            (tmp_path / "stores" / "toy" / "ACTIVE").read_text().strip()
        }
        return http, [r.translation for r in direct.results], bad

    by_http, by_python, bad = anyio.run(through_the_service)
    assert by_http == by_cli == by_python

    # One domain-name rule: the CLI, the settings and the API all refuse "Legal.v2".
    assert bad.status_code == 404 and bad.json()["error"]["code"] == "unknown_domain"
    bad_build = ["build-store", "--domain", "Legal.v2", *build[3:], "--method", "idf-sentence"]
    res = runner.invoke(cli, bad_build, env=env)
    assert res.exit_code == 2 and "invalid domain name 'Legal.v2'" in res.output
    assert not (tmp_path / "stores" / "Legal.v2").exists()
    res = runner.invoke(cli, [*args[:3], "--domain", "Legal.v2"], input="one\n", env=env)
    assert res.exit_code == 2 and "invalid domain name 'Legal.v2'" in res.output
    with pytest.raises(ValueError, match="invalid domain name 'Legal.v2'"):
        Settings(domains="toy,Legal.v2")


def _ragmt() -> str:
    return str(Path(sys.executable).parent / "ragmt")


@pytest.mark.system
@pytest.mark.parametrize(
    ("args", "env", "stdin", "needle"),
    [
        (["translate", "-i", "no-such-file.txt"], {}, b"", "--input no-such-file.txt: no such"),
        (["translate"], {}, b"one\n\xff\n", "standard input: invalid UTF-8 at byte 4 (line 2)"),
        (["eval", "--data", "nowhere"], {}, b"", "no prepared data for general"),
        (["serve"], {"RAGMT_STORE_DIR": "/srv"}, b"", "did you mean RAGMT_STORES_DIR?"),
        (["serve"], {"RAGMT_PORT": "eighty"}, b"", "invalid settings: RAGMT_PORT"),
    ],
)
def test_cli_errors_are_one_line_without_a_traceback(
    tmp_path: Path, args: list[str], env: dict[str, str], stdin: bytes, needle: str
) -> None:
    res = subprocess.run(
        [_ragmt(), *args], input=stdin, capture_output=True, cwd=tmp_path,
        env={**os.environ, **env}, timeout=120,
    )  # fmt: skip
    err = res.stderr.decode()
    assert res.returncode == 2, err
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.unit
def test_an_unexpected_failure_is_one_line_and_names_the_traceback_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import models.bundle
    from service import cli as cli_module

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the disk went away\nsecond line")

    monkeypatch.setattr(models.bundle, "load_bundle", broken)
    monkeypatch.setattr(sys, "argv", ["ragmt", "translate", "--model", "x"])
    with pytest.raises(SystemExit) as exit_info:
        cli_module.main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "error: RuntimeError: the disk went away (rerun with --traceback for the details)"
    )
    monkeypatch.setattr(sys, "argv", ["ragmt", "--traceback", "translate", "--model", "x"])
    with pytest.raises(RuntimeError, match="disk went away"):
        cli_module.main()


@pytest.mark.system
def test_version_and_help_speak_to_users() -> None:
    from importlib.metadata import version

    out = subprocess.run([_ragmt(), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"ragmt {version('ragmt')}"
    helped = subprocess.run([_ragmt(), "--help"], capture_output=True, text=True, timeout=60)
    assert "retrieval-augmented machine translation" in helped.stdout
    assert "It lives in" not in helped.stdout and "service/" not in helped.stdout


@pytest.mark.system
def test_translate_at_a_terminal_answers_each_line_as_it_is_typed(bundle: Path) -> None:
    """Typed at a terminal, a line is translated when entered, not at the end of input."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [_ragmt(), "translate", "--model", str(bundle)],
        stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(follower)
    try:
        answers = []
        for line in ("one two", "blue house"):
            os.write(leader, (line + "\n").encode())
            ready, _, _ = select.select([proc.stdout], [], [], 90)
            assert ready, f"no answer to {line!r} while input stays open"
            answers.append(proc.stdout.readline().decode().rstrip("\n"))
        assert answers == [gloss("one two"), gloss("blue house")]
        os.write(leader, b"\x04")  # Ctrl-D: end of input
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        os.close(leader)
