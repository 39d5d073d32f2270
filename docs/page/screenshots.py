"""Screenshots of the web page for the README: `python docs/page/screenshots.py`.

Starts `ragmt serve` with the committed model (models/semiparametric_bundle) on a free port and
a fresh stores directory, builds a small `manuals` domain from a TMX through the API, then
drives Debian's chromium (Playwright, headless) at laptop (1366x860) and phone (390x844)
width: a real translation with its neighbours, and the management view after an upload.
Writes translate-laptop.png, translate-phone.png and manage-laptop.png beside this file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import expect, sync_playwright

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the browser settings below

from tests.browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, PHONE  # noqa: E402

MODEL = ROOT / "models" / "semiparametric_bundle"
ADMIN = "screenshot-admin-key"
TEXT = "Click OK to save the file.\nThe printer is not responding."
PAIRS = [
    ("Click OK to close the dialog.", "Klicken Sie auf OK, um den Dialog zu schließen."),
    ("The file could not be saved.", "Die Datei konnte nicht gespeichert werden."),
    ("Save the document before printing.", "Speichern Sie das Dokument vor dem Drucken."),
    ("The printer is not responding.", "Der Drucker antwortet nicht."),
    ("Check that the printer is switched on.", "Prüfen Sie, ob der Drucker eingeschaltet ist."),
]


def tmx(pairs: list[tuple[str, str]]) -> str:
    units = "".join(
        f'<tu><tuv xml:lang="en"><seg>{s}</seg></tuv><tuv xml:lang="de"><seg>{t}</seg></tuv></tu>\n'
        for s, t in pairs
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header srclang="en" '
        'datatype="plaintext" segtype="sentence" adminlang="en" o-tmf="none" '
        f'creationtool="ragmt-docs" creationtoolversion="1"/><body>\n{units}</body></tmx>\n'
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(stores: Path, port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "RAGMT_MODEL_PATH": str(MODEL),
        "RAGMT_STORES_DIR": str(stores),
        "RAGMT_ADMIN_KEY": ADMIN,
        "RAGMT_PORT": str(port),
        "RAGMT_INSTALL_MEMORIES": "0",
    }
    env.pop("RAGMT_REDIS_URL", None)
    code = "from service.cli import app; app(prog_name='ragmt')"
    proc = subprocess.Popen([sys.executable, "-c", code, "serve"], env=env, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise SystemExit("ragmt serve stopped")
        try:
            if httpx.get(f"{base}/readyz").status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.terminate()
            raise SystemExit("ragmt serve never became ready")
        time.sleep(0.3)


def shoot(browser, base: str, corpus: Path) -> None:
    for name, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
        context = browser.new_context(viewport=viewport)
        page = context.new_page()
        page.goto(base + "/")
        expect(page.locator("#domain option[value='manuals']")).to_have_count(1)
        page.select_option("#domain", "manuals")
        page.check("#show-neighbours")
        page.fill("#text", TEXT)
        page.click("#translate-button")
        expect(page.locator("#neighbours")).to_be_visible(timeout=60_000)
        page.screenshot(path=HERE / f"translate-{name}.png", full_page=name == "laptop")
        context.close()
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.goto(base + "/#manage")
    page.click("#keys summary")
    page.fill("#admin-key", ADMIN)
    page.click("#keys-save")
    page.fill("#upload-domain", "manuals")
    page.set_input_files("#upload-file", str(corpus))
    page.click("#upload-send")
    expect(page.locator("#job")).to_have_attribute("data-state", "done", timeout=60_000)
    page.screenshot(path=HERE / "manage-laptop.png", full_page=True)
    context.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = free_port()
        proc = serve(work / "stores", port)
        base = f"http://127.0.0.1:{port}"
        try:
            admin = {"X-Admin-Key": ADMIN}
            first = work / "manuals.tmx"
            first.write_text(tmx(PAIRS[:4]), encoding="utf-8")
            files = {"file": ("manuals.tmx", first.read_bytes(), "application/xml")}
            job = httpx.post(f"{base}/v1/domains/manuals/corpora", headers=admin, files=files)
            job = job.json()
            while job["state"] in ("queued", "running"):
                time.sleep(0.3)
                job = httpx.get(f"{base}/v1/jobs/{job['id']}", headers=admin).json()
            version = job["result"]["version"]
            body = {"version": version}
            httpx.post(f"{base}/v1/domains/manuals/activate", headers=admin, json=body)
            second = work / "manuals-2.tmx"  # the upload the management view shows
            second.write_text(tmx(PAIRS), encoding="utf-8")
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                shoot(browser, base, second)
                browser.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    for png in sorted(HERE.glob("*.png")):
        print(f"{png.relative_to(ROOT)}: {png.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
