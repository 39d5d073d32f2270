"""The README's commands are the ones CI and newcomers run."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_ci_runs_the_readme_test_command() -> None:
    test_cmds = [b.strip() for b in _bash_blocks() if "pytest" in b]
    assert len(test_cmds) == 1, test_cmds
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    assert test_cmds[0] in ci.splitlines()


def test_readme_serve_command_uses_the_cli() -> None:
    serve = [b.strip() for b in _bash_blocks() if "ragmt serve" in b]
    assert serve and serve[0].startswith("pip install torch==2.13.0")
