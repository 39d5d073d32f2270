"""The README's commands are the ones CI and newcomers run."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_ci_runs_the_readme_test_command_in_a_virtualenv_it_builds() -> None:
    test_cmds = [b.strip() for b in _bash_blocks() if "pytest" in b]
    assert len(test_cmds) == 1, test_cmds
    lines = test_cmds[0].splitlines()
    assert lines[0] == "python3 -m venv .venv && . .venv/bin/activate"
    assert "'.[test]'" in lines[-1] and "[dev]" not in lines[-1]
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
    start = ci.index(lines[0])
    assert ci[start : start + len(lines)] == lines
    assert "rm -rf .venv" in ci[:start]  # built afresh, never reused


def test_readme_serve_command_installs_only_what_serving_needs() -> None:
    serve = next(b.strip() for b in _bash_blocks() if "ragmt serve" in b).splitlines()
    assert serve[0] == "python3 -m venv .venv && . .venv/bin/activate"
    assert serve[1] == "pip install torch==2.13.0 -e . && ragmt serve"


def test_every_package_the_code_imports_is_declared() -> None:
    """Third-party imports of the packages come from the core dependencies (or an extra named
    for the feature: gpu, ray), those of the tests from the core and the test extra, and those
    of the benchmarks and experiments from the core and any extra."""
    import ast
    import sys
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    import_names = {
        "pyyaml": "yaml", "faiss_cpu": "faiss", "faiss_gpu_cu12": "faiss",
        "lingua_language_detector": "lingua", "python_multipart": "multipart",
    }  # fmt: skip

    def provided(requirements: list[str]) -> set[str]:
        names = {
            re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].lower().replace("-", "_") for d in requirements
        }
        return {import_names.get(n, n) for n in names}

    def imported(folder: str) -> set[str]:
        used: set[str] = set()
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    used |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    used.add(node.module.split(".")[0])
        own = {"models", "index_builder", "service", "tests", "benchmarks", "experiments"}
        own |= {p.stem for p in (ROOT / "experiments").glob("*.py")}  # scripts import siblings
        return used - own - set(sys.stdlib_module_names) - {"__future__"}

    core = provided(project["dependencies"])
    everything = provided([d for group in extras.values() for d in group]) | core
    features = provided(extras["gpu"] + extras["ray"])
    for folder in ("models", "index_builder", "service"):
        assert imported(folder) - core - features == set(), folder
    assert imported("tests") - core - provided(extras["test"]) == set()
    for folder in ("benchmarks", "experiments"):
        assert imported(folder) - everything == set(), folder


def test_quick_start_serves_a_translation_literally() -> None:
    """Run the README's serve command as written (in a shell, from the repo root), then send
    the README's own curl request body and expect German from the committed default bundle.

    The install before `&&` is the one `.ci/run` has just made (its text is checked above): run
    again here it would remove and re-create the package while tests on the other workers
    start `ragmt` processes."""
    import json
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    # The install-and-serve line, in the virtualenv this suite runs in (the README creates and
    # activates it on the line before); the command after the install.
    line = next(b for b in _bash_blocks() if "ragmt serve" in b).strip().splitlines()[-1]
    install, serve = (part.strip() for part in line.split("&&"))
    assert install == "pip install torch==2.13.0 -e ." and serve == "ragmt serve"
    curl = next(b for b in _bash_blocks() if "/v1/translate" in b)
    body = re.search(r"-d '(\{.*?\})'", curl, flags=re.S).group(1)
    with socket.socket() as s:  # a free port, so a running server elsewhere does not matter
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    venv_bin = os.path.dirname(sys.executable)
    env = {**os.environ, "RAGMT_PORT": str(port)}
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env.pop("RAGMT_REDIS_URL", None)
    proc = subprocess.Popen(
        ["bash", "-c", serve], cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the quick-start server never became ready"
            time.sleep(1)
        req = urllib.request.Request(
            f"{base}/v1/translate", data=body.encode(), headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            result = json.loads(r.read())
        text = result["results"][0]["translation"]
        assert "Datei" in text, result
        # German->English is served too, by the committed German->English baseline
        back = {"texts": ["Die Datei konnte nicht gespeichert werden."], "source_lang": "de",
                "target_lang": "en"}  # fmt: skip
        req = urllib.request.Request(
            f"{base}/v1/translate", data=json.dumps(back).encode(),
            headers={"content-type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=60) as r:
            result = json.loads(r.read())
        assert result["results"][0]["model"] == "baseline_de_en_bundle", result
        assert "file" in result["results"][0]["translation"].lower(), result
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    # The start says what is served, in the project's own log lines.
    started = proc.stdout.read().decode(errors="replace")
    for line in (
        "ragmt.service: model semiparametric_bundle: semiparametric en->de",
        "ragmt.service: model baseline_de_en_bundle: transformer de->en",
        f"ragmt.service: stores directory {ROOT / 'data' / 'stores'}",
        "ragmt.service: domain general: no store, translated without retrieval",
        "ragmt.service: management routes off (RAGMT_ADMIN_KEY unset); client API keys off",
        "torch threads",
    ):
        assert line in started, started[-3000:]
