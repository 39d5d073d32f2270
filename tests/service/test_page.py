"""The web page at `/` and the docs at `/docs`, driven in a real headless browser: Debian's
chromium launched by Playwright (never a browser Playwright downloads), against a real
`ragmt serve` with the committed model, an admin key and a fresh stores directory.

Every request the browser makes to another host is aborted and recorded, and every test ends
with none recorded and no script error or Content-Security-Policy violation on the page. Each test
builds the domains it reads, so that any of them runs alone or on any xdist worker.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.routes.page import DOCS_FILES, PAGE_DIR, PAGE_FILES, docs_dir
from service.settings import Settings
from tests.browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, PHONE
from tests.service.conftest import ragmt_serve

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "semiparametric_bundle"
ADMIN = "page-admin-key"
FAILED_RESOURCE = "Failed to load resource: the server responded with a status of 4"
MANUALS = [
    ("Click OK to close the dialog.", "Klicken Sie auf OK, um den Dialog zu schließen."),
    ("The file could not be saved.", "Die Datei konnte nicht gespeichert werden."),
    ("Save the document before printing.", "Speichern Sie das Dokument vor dem Drucken."),
    ("The printer is not responding.", "Der Drucker antwortet nicht."),
]
# The retrievers' token view (index_builder/retrieval/text.py), with character offsets.
TOKEN = re.compile(r"\w+(?:['\u2019]\w+)*|[^\w\s]")


def tmx(pairs: list[tuple[str, str]]) -> str:
    units = "".join(
        f'<tu><tuv xml:lang="en-US"><seg>{s}</seg></tuv><tuv xml:lang="de-DE"><seg>{t}</seg>'
        "</tuv></tu>\n"
        for s, t in pairs
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header srclang="en-US" '
        'datatype="plaintext" segtype="sentence" adminlang="en" o-tmf="none" '
        f'creationtool="ragmt-test" creationtoolversion="1"/><body>\n{units}</body></tmx>\n'
    )


def span_text(text: str, span: list[int]) -> str:
    """The characters of `text` that the token range `span` covers."""
    toks = list(TOKEN.finditer(text))
    return text[toks[span[0]].start() : toks[span[1] - 1].end()]


# --- the server and the browser -------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `ragmt serve` of the committed model on a free port; yields its base URL."""
    work = tmp_path_factory.mktemp("page-server")
    settings = {
        "RAGMT_MODEL_PATH": str(MODEL),
        "RAGMT_STORES_DIR": str(work / "stores"),
        "RAGMT_ADMIN_KEY": ADMIN,
        "RAGMT_INSTALL_MEMORIES": "0",
    }
    with ragmt_serve(work, settings) as (base, _):
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, launched by Playwright."""
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (ragmt[test])")
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


class Watched:
    """A page, and what it did that no test may leave behind: requests to another host
    (aborted), uncaught script errors, console errors (CSP violations among them)."""

    def __init__(self, browser: Any, base: str, viewport: dict[str, int] = LAPTOP) -> None:
        self.base = base
        self.context = browser.new_context(viewport=viewport)
        self.outside: list[str] = []
        self.errors: list[str] = []
        self.context.route("**/*", self._guard)
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _console(self, message: Any) -> None:
        # an API error the page shows is logged by chromium as a failed resource: not a fault
        if message.type == "error" and not message.text.startswith(FAILED_RESOURCE):
            self.errors.append(message.text)

    def _guard(self, route: Any) -> None:
        url = route.request.url
        if url.startswith((self.base + "/", "data:", "blob:")):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    watched = Watched(browser, server)
    yield watched.page
    errors, outside = watched.errors, watched.outside
    watched.close()
    assert outside == [], f"requests to other hosts: {outside}"
    assert errors == [], f"errors on the page: {errors}"


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


# --- what a user does ------------------------------------------------------------------------


def enter_admin_key(page: Any, key: str = ADMIN) -> None:
    page.click("#keys summary")
    page.fill("#admin-key", key)
    page.click("#keys-save")
    expect(page.locator("#keys-state")).to_have_text("admin")


def translate(page: Any, text: str, domain: str | None = None, neighbours: bool = False) -> dict:
    """Type `text`, press Translate; the API's answer the page received."""
    if domain is not None:
        expect(page.locator(f"#domain option[value='{domain}']")).to_have_count(1)
        page.select_option("#domain", domain)
    page.set_checked("#show-neighbours", neighbours)
    page.fill("#text", text)
    with page.expect_response(lambda r: r.url.endswith("/v1/translate")) as answer:
        page.click("#translate-button")
    assert answer.value.status == 200, answer.value.text()
    body = answer.value.json()
    expect(page.locator("#translation")).to_have_text(
        "\n".join(r["translation"] for r in body["results"])
    )
    return body


def confirm(page: Any) -> None:
    expect(page.locator("#confirm")).to_be_visible()
    page.click("#confirm-ok")


def upload(page: Any, path: Path, domain: str) -> str:
    """Upload a corpus in the management view and wait for its build; its version."""
    page.fill("#upload-domain", domain)
    page.set_input_files("#upload-file", str(path))
    page.click("#upload-send")
    expect(page.locator("#job")).to_have_attribute("data-state", "done", timeout=90_000)
    expect(page.locator("#job-progress")).to_have_js_property("value", 1)
    expect(page.locator("#job-status")).to_contain_text("built version")
    version = page.get_attribute("#job-activate", "data-version")
    assert version and version in page.inner_text("#job-status")
    return version


def domain_info(base: str, domain: str) -> dict:
    resp = httpx.get(f"{base}/v1/domains/{domain}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def finished(base: str, job: dict) -> str:
    """Wait for a build job (an upload or a fold) to finish; the version it built."""
    admin = {"X-Admin-Key": ADMIN}
    deadline = time.monotonic() + 90
    while job["state"] in ("queued", "running"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
        job = httpx.get(f"{base}/v1/jobs/{job['id']}", headers=admin).json()
    assert job["state"] == "done", job
    return job["result"]["version"]


def version_of(base: str, domain: str, pairs: list[tuple[str, str]]) -> str:
    """A store version of `pairs` built for `domain` through the API, not activated."""
    admin = {"X-Admin-Key": ADMIN}
    corpus = "".join(f"{s}\t{t}\n" for s, t in pairs).encode()
    files = {"file": ("corpus.tsv", corpus, "text/plain")}
    job = httpx.post(f"{base}/v1/domains/{domain}/corpora", headers=admin, files=files).json()
    return finished(base, job)


def built(base: str, domain: str, pairs: list[tuple[str, str]]) -> str:
    """`domain` serving a store of `pairs`, built and activated through the API (once per
    server); its version. Each test has domains of its own: xdist may run them anywhere."""
    info = httpx.get(f"{base}/v1/domains/{domain}")
    if info.status_code == 200 and info.json()["active_version"]:
        return info.json()["active_version"]
    admin = {"X-Admin-Key": ADMIN}
    version = version_of(base, domain, pairs)
    body = {"version": version}
    resp = httpx.post(f"{base}/v1/domains/{domain}/activate", headers=admin, json=body)
    assert resp.status_code == 200, resp.text
    return version


# --- the tests, in the order a user meets the page ------------------------------------------


def test_translates_a_sentence(page: Any, server: str) -> None:
    page.goto(server + "/")
    assert page.title().startswith("ragmt")
    expect(page.locator("#model option")).to_have_count(2)  # default, and the one model
    body = translate(page, "The file could not be saved.")
    (result,) = body["results"]
    direct = httpx.post(f"{server}/v1/translate", json={"texts": ["The file could not be saved."]})
    assert result["translation"] == direct.json()["results"][0]["translation"]
    assert "Datei" in result["translation"]
    expect(page.locator("#fact-model")).to_have_text("semiparametric_bundle")
    expect(page.locator("#fact-version")).to_have_text("none (no memory)")
    expect(page.locator("#neighbours")).to_be_hidden()


def test_upload_a_tmx_watch_its_build_and_activate_it(
    page: Any, server: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "manuals.tmx"
    corpus.write_text(tmx(MANUALS), encoding="utf-8")
    page.goto(server + "/#manage")
    expect(page.locator("#view-manage")).to_be_visible()
    enter_admin_key(page)
    version = upload(page, corpus, "handbook")
    info = domain_info(server, "handbook")
    assert info["versions"] == [version] and info["active_version"] is None
    card = page.locator("article[data-domain='handbook']")
    expect(card.locator("[data-state]")).to_have_text("inactive")
    expect(card.locator(f"tr[data-version='{version}']")).to_contain_text("4 pairs")
    page.click("#job-activate")
    confirm(page)
    expect(card.locator("[data-state]")).to_have_text("active")
    info = domain_info(server, "handbook")
    assert (info["state"], info["active_version"], info["pairs"]) == ("active", version, 4)
    expect(card.locator(f"tr[data-version='{version}']")).to_contain_text("4 pairs")
    assert ADMIN not in page.url  # the key travels in headers only, and is not stored
    assert page.evaluate("() => [localStorage.length, sessionStorage.length]") == [0, 0]
    page.reload()
    expect(page.locator("#keys-state")).to_have_text("none")


def test_neighbours_show_the_matched_spans(page: Any, server: str) -> None:
    page.goto(server + "/")
    text = "Click OK to save the file."
    version = built(server, "manuals", MANUALS)
    page.goto(server + "/")  # again: the domain list is read when the page loads
    body = translate(page, text, domain="manuals", neighbours=True)
    (result,) = body["results"]
    assert result["store_version"] == version
    expect(page.locator("#fact-version")).to_have_text(version)
    assert 0.0 <= float(page.inner_text("#fact-gate")) <= 1.0
    items = page.locator("#neighbour-groups li.neighbour")
    expect(items).to_have_count(len(result["neighbours"]))
    assert {n["source"] for n in result["neighbours"]} <= {s for s, _ in MANUALS}
    for i, n in enumerate(result["neighbours"]):
        item = items.nth(i)
        expect(item.locator(".source")).to_contain_text(n["source"])
        expect(item.locator(".target")).to_contain_text(n["target"])
        if n["span"] is not None:  # the query's words in the matched range, highlighted
            expect(item.locator(".query mark")).to_have_text(span_text(text, n["span"]))
    first = items.nth(0)
    assert result["neighbours"][0]["source"] == "Click OK to close the dialog."
    # in the neighbour, the words of its matched n-gram that the query shares
    expect(first.locator(".source mark")).to_have_text(["Click OK to", "the"])


def test_management_rolls_back_and_deletes(page: Any, server: str, tmp_path: Path) -> None:
    first = built(server, "guide", MANUALS)
    corpus = tmp_path / "more.tsv"
    more = [
        *MANUALS,
        ("Open the file.", "Öffnen Sie die Datei."),
        ("Close the window.", "Schließen Sie das Fenster."),
    ]
    corpus.write_text("".join(f"{s}\t{t}\n" for s, t in more), encoding="utf-8")
    page.goto(server + "/#manage")
    enter_admin_key(page)
    second = upload(page, corpus, "guide")
    card = page.locator("article[data-domain='guide']")
    card.locator(f"tr[data-version='{second}'] [data-action='activate']").click()
    confirm(page)
    expect(page.locator("#domains-status")).to_contain_text(f"version {second} active")
    expect(card.locator(f"tr[data-version='{second}']")).to_contain_text("active")
    assert domain_info(server, "guide")["active_version"] == second
    card.get_by_role("button", name=re.compile("^Roll guide back")).click()
    confirm(page)
    expect(page.locator("#domains-status")).to_contain_text(f"rolled back to {first}")
    assert domain_info(server, "guide")["active_version"] == first
    card.locator(f"tr[data-version='{second}'] [data-action='delete']").click()
    expect(page.locator("#confirm-text")).to_contain_text(second)
    page.click("#confirm-cancel")  # cancelled: nothing happens
    assert second in domain_info(server, "guide")["versions"]
    card.locator(f"tr[data-version='{second}'] [data-action='delete']").click()
    confirm(page)
    expect(card.locator(f"tr[data-version='{second}']")).to_have_count(0)
    assert domain_info(server, "guide")["versions"] == [first]


SIZE = re.compile(r"^(\d+(?:\.\d)?) (B|KiB|MiB|GiB)")


def test_version_details_show_each_versions_pairs(page: Any, server: str) -> None:
    paths = httpx.get(f"{server}/openapi.json").json()["paths"]
    if "/v1/domains/{domain}/memory/fold" not in paths:
        pytest.skip("memory folds (POST /v1/domains/{domain}/memory/fold) are not served yet")
    first = built(server, "shelf", MANUALS)
    if "version_info" not in domain_info(server, "shelf"):
        pytest.skip("GET /v1/domains/{domain} reports no version_info yet")
    more = [*MANUALS, ("Open the file.", "Öffnen Sie die Datei."), ("Close it.", "Schließen.")]
    second = version_of(server, "shelf", more)  # built, not activated
    admin = {"X-Admin-Key": ADMIN}
    pair = {"source": "The scanner is out of paper.", "target": "Der Scanner hat kein Papier mehr."}
    added = httpx.post(f"{server}/v1/domains/shelf/memory", headers=admin, json=pair)
    assert added.status_code == 201, added.text
    seq = added.json()["edit"]["seq"]
    fold = httpx.post(f"{server}/v1/domains/shelf/memory/fold", headers=admin)
    assert fold.status_code == 202, fold.text
    third = finished(server, fold.json())  # the first, with the edit folded in
    info = domain_info(server, "shelf")
    by_version = {v["version"]: v for v in info["version_info"]}
    assert sorted(by_version) == sorted(info["versions"]) == sorted({first, second, third})
    pairs = {first: len(MANUALS), second: len(more), third: len(MANUALS) + 1}
    assert {v: i["pairs"] for v, i in by_version.items()} == pairs
    assert (by_version[third]["folded_from"], by_version[third]["edits_through"]) == (first, seq)

    page.goto(server + "/#manage")
    card = page.locator("article[data-domain='shelf']")
    expect(card.locator("tr[data-version]")).to_have_count(3)
    for version, vi in by_version.items():
        row = card.locator(f"tr[data-version='{version}']")
        expect(row.locator("td.pairs")).to_contain_text(f"{pairs[version]} pairs")
        expect(row.locator("td.pairs")).to_contain_text(vi["method"])
        expect(row.locator("td.built time")).to_have_attribute("datetime", vi["built_at"])
        # the size on disk, for people: within rounding of the service's byte count
        expect(row.locator("td.size")).to_have_attribute("title", f"{vi['size_bytes']} bytes")
        shown = SIZE.match(row.locator("td.size").inner_text())
        assert shown, row.locator("td.size").inner_text()
        scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[shown[2]]
        assert abs(float(shown[1]) * scale - vi["size_bytes"]) <= 0.05 * vi["size_bytes"]
        folded = row.locator(".folded")
        if version == third:
            expect(folded).to_have_text(f"folded from {first} through edit {seq}")
        else:
            expect(folded).to_have_count(0)
    expect(card.locator(f"tr[data-version='{first}'] .badge.active")).to_have_text("active")


def test_errors_show_the_services_message(page: Any, server: str) -> None:
    page.goto(server + "/#manage")
    enter_admin_key(page, "wrong-key")
    page.fill("#upload-domain", "manuals")
    page.set_input_files(
        "#upload-file", files=[{"name": "x.tsv", "mimeType": "text/plain", "buffer": b"a\tb\n"}]
    )
    page.click("#upload-send")
    expect(page.locator("#upload-error")).to_have_text("wrong admin key")


def test_an_added_pair_is_retrieved_in_the_next_translation(page: Any, server: str) -> None:
    paths = httpx.get(f"{server}/openapi.json").json()["paths"]
    if "/v1/domains/{domain}/memory" not in paths:
        pytest.skip("memory edits (POST /v1/domains/{domain}/memory) are not served yet")
    built(server, "support", MANUALS)
    page.goto(server + "/")
    enter_admin_key(page)
    text = "The scanner is out of paper."
    before = translate(page, text, domain="support", neighbours=True)["results"][0]
    assert all(n["origin"] == "store" for n in before["neighbours"])
    page.click("#memory-panel summary")
    expect(page.locator("#memory-source")).to_have_value(text)  # prefilled from the input
    expect(page.locator("#memory-target")).to_have_value(before["translation"])
    page.fill("#memory-target", "Der Scanner hat kein Papier mehr.")
    page.click("#memory-add")
    expect(page.locator("#memory-status")).to_contain_text("Added to support's memory")
    after = translate(page, text, domain="support", neighbours=True)["results"][0]
    added = [n for n in after["neighbours"] if n["origin"] == "edit"]
    assert [(n["source"], n["target"]) for n in added] == [
        (text, "Der Scanner hat kein Papier mehr.")
    ]
    item = page.locator("li.neighbour[data-origin='edit']")
    expect(item).to_have_count(1)
    expect(item.locator(".badge.edit")).to_have_text("edit")
    expect(item.locator(".source")).to_contain_text(text)
    # folded into a new version from the management view: the pair is in the store itself
    page.goto(server + "/#manage")
    card = page.locator("article[data-domain='support']")
    expect(card).to_contain_text("1 edit, 1 not folded (+1 −0 pairs)")
    card.locator("[data-action='fold']").click()
    confirm(page)
    expect(page.locator("#job")).to_have_attribute("data-state", "done", timeout=90_000)
    folded = page.get_attribute("#job-activate", "data-version")
    page.click("#job-activate")
    confirm(page)
    expect(page.locator("#domains-status")).to_have_text(f"support: version {folded} active.")
    info = domain_info(server, "support")
    assert info["active_version"] == folded
    assert (info["pairs"], info["edits"]["pending"]) == (len(MANUALS) + 1, 0)


def test_memory_search_finds_a_pair_and_corrects_it(page: Any, server: str) -> None:
    paths = httpx.get(f"{server}/openapi.json").json()["paths"]
    if "/v1/domains/{domain}/memory" not in paths:
        pytest.skip("memory edits (GET /v1/domains/{domain}/memory) are not served yet")
    built(server, "lookup", MANUALS)
    admin = {"X-Admin-Key": ADMIN}
    source, target = "The scanner is out of paper.", "Der Scanner hat kein Papier mehr."
    pair = {"source": source, "target": target}
    added = httpx.post(f"{server}/v1/domains/lookup/memory", headers=admin, json=pair)
    assert added.status_code == 201, added.text
    key = added.json()["edit"]["key"]
    page.goto(server + "/")
    enter_admin_key(page)
    expect(page.locator("#domain option[value='lookup']")).to_have_count(1)
    page.select_option("#domain", "lookup")
    page.click("#search-panel summary")
    results = page.locator("#search-results li")
    # the box empty: the domain's newest edits, here the one just added
    expect(page.locator("#search-title")).to_have_text("Newest edits")
    expect(results).to_have_count(1)
    expect(results.first).to_have_attribute("data-key", key)
    expect(results.first.locator(".badge")).to_have_text("added")
    expect(results.first.locator(".source")).to_contain_text(source)

    query = "printer is out of paper"
    page.fill("#search-query", query)
    page.click("#search-send")
    expect(page.locator(f"#search-results[data-query='{query}']")).to_have_count(1)
    params = {"q": query, "limit": 20}
    found = httpx.get(f"{server}/v1/domains/lookup/memory", params=params).json()["pairs"]
    assert found[0]["key"] == key and found[0]["origin"] == "edit"
    assert any(n["origin"] == "store" for n in found)  # "The printer is not responding."
    expect(page.locator("#search-title")).to_have_text(f"Best matches for “{query}”")
    expect(results).to_have_count(len(found))
    for i, n in enumerate(found):
        row = results.nth(i)
        expect(row).to_have_attribute("data-key", n["key"])
        expect(row.locator(".badge")).to_have_text(n["origin"])  # edit, or store
        expect(row.locator(".source")).to_contain_text(n["source"])
        expect(row.locator(".target")).to_contain_text(n["target"])
        expect(row.locator("[data-action]")).to_have_count(2)  # Correct, Delete

    # corrected from the results: the memory form takes it, the results show the change
    results.first.locator("[data-action='correct']").click()
    expect(page.locator("#memory-source")).to_have_value(source)
    expect(page.locator("#memory-target")).to_have_value(target)
    expect(page.locator("#memory-target")).to_be_focused()
    fixed = "Im Scanner ist kein Papier mehr."
    page.fill("#memory-target", fixed)
    page.click("#memory-add")
    expect(page.locator("#memory-status")).to_contain_text("Corrected in lookup's memory")
    after = httpx.get(f"{server}/v1/domains/lookup/memory", params=params).json()["pairs"]
    assert (after[0]["source"], after[0]["target"]) == (source, fixed)
    assert target not in [n["target"] for n in after]
    expect(results.first).to_have_attribute("data-key", after[0]["key"])
    expect(results.first.locator(".target")).to_have_text("Target" + fixed)
    expect(results).to_have_count(len(after))

    # the box emptied: the correction is the newest edit; the pair it replaced has no buttons
    page.fill("#search-query", "")
    expect(page.locator("#search-title")).to_have_text("Newest edits")
    expect(results).to_have_count(2)
    expect(results.nth(0)).to_have_attribute("data-op", "correct")
    expect(results.nth(0)).to_have_attribute("data-key", after[0]["key"])
    expect(results.nth(1)).to_have_attribute("data-key", key)
    expect(results.nth(1).locator("[data-action]")).to_have_count(0)
    # deleted from there: gone from the memory
    results.nth(0).locator("[data-action='delete']").click()
    confirm(page)
    expect(page.locator("#search-status")).to_have_text(
        f"Deleted pair {after[0]['key']} from lookup's memory."
    )
    expect(results).to_have_count(3)
    expect(results.nth(0)).to_have_attribute("data-op", "delete")
    gone = httpx.get(f"{server}/v1/domains/lookup/memory", params=params).json()["pairs"]
    assert source not in [n["source"] for n in gone]


def test_a_glossary_term_is_used(page: Any, server: str) -> None:
    paths = httpx.get(f"{server}/openapi.json").json()["paths"]
    if "/v1/domains/{domain}/glossary/terms" not in paths:
        pytest.skip("glossaries (PUT /v1/domains/{domain}/glossary/terms) are not served yet")
    built(server, "terms", MANUALS)
    page.goto(server + "/")
    enter_admin_key(page)
    text = "The printer is not responding."
    before = translate(page, text, domain="terms")["results"][0]
    assert "Druckgerät" not in before["translation"]
    page.click("#glossary-panel summary")
    page.fill("#term-source", "printer")
    page.fill("#term-target", "Druckgerät")
    page.click("#term-add")
    expect(page.locator("#glossary-terms tr")).to_have_count(1)
    expect(page.locator("#glossary-terms tr td").first).to_have_text("printer")
    after = translate(page, text, domain="terms")["results"][0]
    assert "Druckgerät" in after["translation"]
    expect(page.locator("#fact-glossary")).to_have_text(after["glossary_version"])
    page.click("#glossary-terms button")
    confirm(page)
    expect(page.locator("#glossary-terms tr")).to_have_count(0)


def test_a_glossary_file_is_imported_and_used(page: Any, server: str) -> None:
    paths = httpx.get(f"{server}/openapi.json").json()["paths"]
    if "/v1/domains/{domain}/glossary" not in paths:
        pytest.skip("glossary imports (POST /v1/domains/{domain}/glossary) are not served yet")
    built(server, "imports", MANUALS)
    page.goto(server + "/")
    enter_admin_key(page)
    text = "The printer is not responding."
    before = translate(page, text, domain="imports")["results"][0]
    assert "Druckgerät" not in before["translation"]
    page.click("#glossary-panel summary")
    expect(page.locator("#glossary-status")).to_have_text("No terms yet.")
    # a file with a bad row: the service's own message, nothing imported
    bad = b"source,target\nprinter\n"
    refused = httpx.post(
        f"{server}/v1/domains/imports/glossary",
        headers={"X-Admin-Key": ADMIN},
        files={"file": ("bad.csv", bad, "text/csv")},
    )
    assert refused.status_code == 422, refused.text
    page.set_input_files(
        "#glossary-file", files=[{"name": "bad.csv", "mimeType": "text/csv", "buffer": bad}]
    )
    page.click("#glossary-import-send")
    expect(page.locator("#glossary-import-status")).to_have_text(refused.json()["error"]["message"])
    expect(page.locator("#glossary-terms tr")).to_have_count(0)

    terms = "source,target,note\nprinter,Druckgerät,UI term\nspooler,Druckwarteschlange,\n"
    page.set_input_files(
        "#glossary-file",
        files=[{"name": "terms.csv", "mimeType": "text/csv", "buffer": terms.encode()}],
    )
    with page.expect_response(
        lambda r: r.url.endswith("/v1/domains/imports/glossary") and r.request.method == "POST"
    ) as answer:
        page.click("#glossary-import-send")
    out = answer.value.json()
    assert (out["domain"], out["count"], out["changed"], out["skipped"]) == ("imports", 2, 2, 0)
    expect(page.locator("#glossary-import-status")).to_have_text(
        "terms.csv merged: 2 terms changed; imports's glossary has 2 terms"
        f" (version {out['version']})."
    )
    glossary = httpx.get(f"{server}/v1/domains/imports/glossary").json()
    assert glossary["version"] == out["version"]
    rows = page.locator("#glossary-terms tr")
    expect(rows).to_have_count(len(glossary["terms"]))
    for i, t in enumerate(glossary["terms"]):
        cells = [t["source"], t["target"], t["note"], "Delete"]
        expect(rows.nth(i).locator("td")).to_have_text(cells)
    assert {(t["source"], t["target"]) for t in glossary["terms"]} == {
        ("printer", "Druckgerät"),
        ("spooler", "Druckwarteschlange"),
    }
    after = translate(page, text, domain="imports")["results"][0]
    assert "Druckgerät" in after["translation"]
    assert after["glossary_version"] == out["version"]
    expect(page.locator("#fact-glossary")).to_have_text(out["version"])


def test_glossary_off_gives_the_plain_translation(page: Any, server: str) -> None:
    paths = httpx.get(f"{server}/openapi.json").json()["paths"]
    if "/v1/domains/{domain}/glossary/terms" not in paths:
        pytest.skip("glossaries (PUT /v1/domains/{domain}/glossary/terms) are not served yet")
    built(server, "plain", MANUALS)
    text = "The printer is not responding."
    body = {"texts": [text], "domain": "plain", "glossary": False}
    plain = httpx.post(f"{server}/v1/translate", json=body).json()["results"][0]
    assert "Druckgerät" not in plain["translation"]
    term = {"source": "printer", "target": "Druckgerät"}
    headers = {"X-Admin-Key": ADMIN}
    put = httpx.put(f"{server}/v1/domains/plain/glossary/terms", headers=headers, json=term)
    assert put.status_code == 200, put.text
    page.goto(server + "/")
    expect(page.locator("#apply-glossary")).to_be_checked()
    used = translate(page, text, domain="plain")["results"][0]
    assert "Druckgerät" in used["translation"]
    expect(page.locator("#fact-glossary-row")).to_be_visible()

    page.uncheck("#apply-glossary")
    page.fill("#text", text)
    with page.expect_response(lambda r: r.url.endswith("/v1/translate")) as answer:
        page.click("#translate-button")
    assert answer.value.request.post_data_json["glossary"] is False
    (off,) = answer.value.json()["results"]
    assert off["translation"] == plain["translation"]
    assert "glossary_version" not in off
    expect(page.locator("#translation")).to_have_text(plain["translation"])
    expect(page.locator("#fact-glossary-row")).to_be_hidden()

    page.check("#apply-glossary")  # on again: the request says nothing, the term is back
    page.fill("#text", text)
    with page.expect_response(lambda r: r.url.endswith("/v1/translate")) as answer:
        page.click("#translate-button")
    assert "glossary" not in answer.value.request.post_data_json
    expect(page.locator("#translation")).to_have_text(used["translation"])


PO = """msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Language: de\\n"

#: src/save.c:12
msgid "The file could not be saved."
msgstr ""

msgid "Cancel"
msgstr "Abbrechen"
"""


def test_a_po_file_is_translated_and_downloaded(page: Any, server: str, tmp_path: Path) -> None:
    paths = httpx.get(f"{server}/openapi.json").json()["paths"]
    if "/v1/files" not in paths:
        pytest.skip("file translation (POST /v1/files) is not served yet")
    po = tmp_path / "app.po"
    po.write_text(PO, encoding="utf-8")
    page.goto(server + "/")
    page.click("#file-panel summary")
    page.set_input_files("#file-input", str(po))
    page.click("#file-send")
    link = page.locator("#file-download")
    expect(link).to_be_visible(timeout=60_000)
    expect(page.locator("#file-progress")).to_have_js_property("value", 1)
    expect(page.locator("#file-status")).to_have_text("Done: 1 unit filled (po).")
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "app.po"
    got = Path(download.value.path()).read_text(encoding="utf-8")
    direct = httpx.post(f"{server}/v1/translate", json={"texts": ["The file could not be saved."]})
    filled = direct.json()["results"][0]["translation"]
    assert got == PO.replace('msgstr ""\n\nmsgid "Cancel"', f'msgstr "{filled}"\n\nmsgid "Cancel"')


def test_keyboard_alone(page: Any, server: str) -> None:
    page.goto(server + "/")
    page.keyboard.press("Tab")
    expect(page.locator(".skip")).to_be_focused()  # first stop: skip to the content
    page.focus("#text")
    page.keyboard.type("The printer is not responding.")
    with page.expect_response(lambda r: r.url.endswith("/v1/translate")) as answer:
        page.keyboard.press("Control+Enter")
    expected = answer.value.json()["results"][0]["translation"]
    expect(page.locator("#translation")).to_have_text(expected)
    page.focus("#text")
    page.keyboard.press("Tab")
    expect(page.locator("#translate-button")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator("#show-neighbours")).to_be_focused()
    page.keyboard.press("Space")  # neighbours asked for: translated again, now with them
    expect(page.locator("#neighbours")).to_be_visible()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#translate-busy")).to_be_hidden()
    expect(page.locator("#translation")).to_have_text(expected)


def test_reads_at_phone_width(browser: Any, server: str) -> None:
    watched = Watched(browser, server, PHONE)
    page = watched.page
    try:
        page.goto(server + "/")
        translate(page, "The file could not be saved.")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= PHONE["width"]  # nothing wider than the screen: no sideways scrolling
        text_box = page.locator("#text").bounding_box()
        out_box = page.locator("#translation").bounding_box()
        assert out_box["y"] > text_box["y"] + text_box["height"]  # stacked, not side by side
        page.goto(server + "/#manage")
        expect(page.locator("#upload-form")).to_be_visible()
        assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    finally:
        watched.close()
    assert watched.outside == [] and watched.errors == []


def test_docs_work_offline(browser: Any, server: str) -> None:
    watched = Watched(browser, server)
    page = watched.page
    try:
        page.goto(server + "/docs")
        tags = page.locator(".opblock-tag-section h3")
        expect(tags.first).to_be_visible(timeout=30_000)
        names = [t.split("\n")[0].strip() for t in tags.all_inner_texts()]
        assert names[:2] == ["translate", "domains"] and "management" in names
        expect(page.locator("h3#operations-tag-management")).to_contain_text("admin key")
        page.get_by_role("button", name="Authorize").first.click()
        dialog = page.locator(".modal-ux")
        for scheme in ("AdminKey", "ApiKey", "Bearer"):
            expect(dialog).to_contain_text(scheme)
        page.goto(server + "/redoc")
        expect(page.locator("h1").first).to_contain_text("ragmt translation service")
    finally:
        watched.close()
    assert watched.outside == []
    # ReDoc's footer logo is an image on its CDN: refused by the policy, never requested
    assert all("cdn.redoc.ly" in e for e in watched.errors), watched.errors


# --- without a browser ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    absent = tmp_path_factory.mktemp("page") / "absent"
    return TestClient(create_app(Settings(model_path=absent)))  # routes only


EXTERNAL = re.compile(r"""(?:src|href|url|spec-url)\s*[=:]\s*["']?\s*(?:https?:)?//""", re.I)


@pytest.mark.integration
@pytest.mark.parametrize("path", ["/", "/docs", "/redoc", "/docs/oauth2-redirect"])
def test_pages_name_no_other_host(client: TestClient, path: str) -> None:
    resp = client.get(path)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    assert not EXTERNAL.search(resp.text), EXTERNAL.search(resp.text)
    policy = resp.headers["content-security-policy"]
    assert policy.startswith("default-src 'self';") and "http" not in policy
    assert resp.headers["x-content-type-options"] == "nosniff"


@pytest.mark.integration
def test_the_pages_own_files_name_no_other_host() -> None:
    for name in ["index.html", *PAGE_FILES]:
        text = (PAGE_DIR / name).read_text(encoding="utf-8")
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\b)", text), name


@pytest.mark.integration
def test_assets_are_served_from_the_package(client: TestClient) -> None:
    """Every asset the pages name is served, byte for byte, with its type; nothing else is."""
    html = client.get("/").text + client.get("/docs").text + client.get("/redoc").text
    named = set(re.findall(r'(?:src|href)="/static/([^"]+)"', html))
    for name in PAGE_FILES:  # the modules app.js imports
        text = (PAGE_DIR / name).read_text(encoding="utf-8")
        named |= set(re.findall(r'^import .*? from "\./([^"]+)";', text, re.M | re.S))
    assert named == set(PAGE_FILES) | set(DOCS_FILES)
    assert set(PAGE_FILES) | {"index.html"} == {p.name for p in PAGE_DIR.iterdir()}
    for name, media_type in {**PAGE_FILES, **DOCS_FILES}.items():
        resp = client.get(f"/static/{name}")
        folder = PAGE_DIR if name in PAGE_FILES else docs_dir()
        assert resp.status_code == 200 and resp.content == (folder / name).read_bytes(), name
        assert resp.headers["content-type"] == media_type
    for name in ("app.py", "..%2Fapp.py", "index.j2", "LICENSE"):
        resp = client.get(f"/static/{name}")
        assert (resp.status_code, resp.json()["error"]["code"]) == (404, "not_found")
