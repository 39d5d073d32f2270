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


def test_quick_start_serves_a_translation_literally() -> None:
    """Run the README's serve command as written (in a shell, from the repo root), then send
    the README's own curl request body and expect German from the committed default bundle."""
    import json
    import os
    import signal
    import socket
    import subprocess
    import time
    import urllib.request

    serve = next(b.strip() for b in _bash_blocks() if "ragmt serve" in b)
    curl = next(b for b in _bash_blocks() if "/v1/translate" in b)
    body = re.search(r"-d '(\{.*?\})'", curl, flags=re.S).group(1)
    with socket.socket() as s:  # a free port, so a running server elsewhere does not matter
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAGMT_PORT": str(port), "PIP_QUIET": "1"}
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
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
