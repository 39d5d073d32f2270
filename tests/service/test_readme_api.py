"""The README's "Using the API" section against the code: every curl example calls a route
that exists with that method, with the credentials and content type it needs, and bodies,
form fields and path parameters that the route accepts; every route has an example; every
setting named is a real one; and the "Adding a domain" walk-through runs as written (bash,
curl, jq) against a real `ragmt serve` process."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError

from service.app import create_app
from service.deps import require_admin
from service.routes.memory import memory_editor
from service.schemas import LibreDetectRequest, LibreTranslateRequest
from service.settings import Settings
from tests.service.conftest import ragmt_serve

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PORT = "localhost:8000"
# Example values of the shell variables the section's commands use.
VARIABLES = {
    "RAGMT_ADMIN_KEY": "0f3c9a",
    "JOB": "74260173b4814ea39090b6625b1bfc2e",
    "VERSION": "20261201T031712.255Z-a5a8a087",
    "OLD": "20261201T031845.722Z-290b7071",
    "TMX_VERSION": "20261201T032210.118Z-7d04c2e9",
    "KEY": "62cfa78569a84856",
    "FILE": "6f1d0c2a9b8e4f3a8d7c6b5a49382716",
}


def section(title: str = "## Using the API") -> str:
    """The README's text under `title`, up to the next heading of its level or above."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert lines.count(title) == 1, f"README has no single {title!r} section"
    level = len(title.split(" ", 1)[0])
    out, fenced = [], False
    for line in lines[lines.index(title) + 1 :]:
        fenced ^= line.startswith("```")
        heading = re.match(r"(#+) ", line)
        if not fenced and heading and len(heading.group(1)) <= level:
            break
        out.append(line)
    return "\n".join(out) + "\n"


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def logical_lines(block: str) -> list[str]:
    """Shell commands: backslash-newlines joined, newlines inside quotes kept."""
    lines, current, quote = [], [], None
    block = block.replace("\\\n", " ")
    for ch in block:
        if quote is None and ch in "'\"":
            quote = ch
        elif ch == quote:
            quote = None
        if ch == "\n" and quote is None:
            lines.append("".join(current))
            current = []
        else:
            current.append(ch)
    lines.append("".join(current))
    return [ln for ln in lines if ln.strip()]


@dataclass
class Curl:
    text: str
    method: str = "GET"
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    data: list[str] = field(default_factory=list)  # -d values
    form: list[tuple[str, str]] = field(default_factory=list)  # -F name=value

    @property
    def path(self) -> str:
        return urlsplit("http://" + self.url.removeprefix("http://")).path

    @property
    def json_body(self) -> bool:
        return self.headers.get("content-type", "").startswith("application/json")


def expand(word: str) -> str:
    """Shell variables replaced by example values; an unknown one fails the test."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in VARIABLES, f"README uses ${name}; add an example value to VARIABLES"
        return VARIABLES[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, word)


def parse_curl(words: list[str], text: str) -> Curl:
    curl, it = Curl(text), iter(words[1:])
    explicit = None
    for w in it:
        if w in ("-s", "-sS", "-S", "--silent"):
            continue
        if w in ("-o", "-w"):
            next(it)
        elif w == "-X":
            explicit = next(it)
        elif w == "-H":
            name, _, val = next(it).partition(":")
            curl.headers[name.strip().lower()] = val.strip()
        elif w in ("-d", "--data", "--data-raw", "--data-binary"):
            curl.data.append(next(it))
        elif w == "-F":
            name, _, val = next(it).partition("=")
            curl.form.append((name, val))
        elif w.startswith(PORT):
            assert not curl.url, f"two URLs in: {text}"
            curl.url = w
        else:
            raise AssertionError(f"unexpected curl argument {w!r} in: {text}")
    assert curl.url, f"no {PORT} URL in: {text}"
    curl.method = explicit or ("POST" if curl.data or curl.form else "GET")
    return curl


def curls(text: str) -> list[Curl]:
    out = []
    for block in bash_blocks(text):
        for line in logical_lines(block):
            lex = shlex.shlex(line, posix=True, punctuation_chars=True)
            lex.wordchars += "$:@%,+{}"
            words = list(lex)
            segments: list[list[str]] = [[]]
            for w in words:  # pipes, `;`, `$(...)`, redirections end a command
                if w and all(c in "();<>|&" for c in w):
                    segments.append([])
                else:
                    segments[-1].append(w)
            for seg in segments:
                if "curl" in seg:
                    out.append(parse_curl(seg[seg.index("curl") :], line))
    return out


def api_routes(routes: list[Any]) -> list[APIRoute]:
    """The API's routes, descending into included routers (newer FastAPI includes them
    lazily); FastAPI's own /docs and /openapi.json are not API routes."""
    out = []
    for r in routes:
        inner = getattr(r, "original_router", None)
        if inner is not None:
            out += api_routes(inner.routes)
        elif isinstance(r, APIRoute):
            out.append(r)
    return out


@pytest.fixture(scope="module")
def routes() -> list[APIRoute]:
    app = create_app(Settings(admin_key="x", stores_dir=Path("/nonexistent")))  # no lifespan
    found = api_routes(app.routes)
    assert len(found) >= 14, found
    return found


def route_of(curl: Curl, routes: list[APIRoute]) -> APIRoute:
    path = expand(curl.path)
    found = [r for r in routes if r.path_regex.fullmatch(path) and curl.method in r.methods]
    assert found, f"no route {curl.method} {path} (README: {curl.text})"
    return found[0]


def is_admin(route: APIRoute) -> bool:
    """Routes that take the admin key (memory edits also take a key with `edit` scope)."""
    return any(d.call in (require_admin, memory_editor) for d in route.dependant.dependencies)


def examples() -> list[Curl]:
    found = curls(section())
    assert len(found) >= 20, found
    return found


def test_the_parser_reads_curl_commands() -> None:
    """A known example parses into what curl would send (the other tests depend on it)."""
    text = """JOB=$(curl -s localhost:8000/v1/domains/d/corpora -H "X-Admin-Key: $K" \\
  -F file=@c.tsv | jq -r .id)
curl -s -X DELETE localhost:8000/v1/x -H 'a: b'; curl -s localhost:8000/y -d '{
  "texts": ["a b"]}'"""
    a, b, c = curls(f"```bash\n{text}\n```")
    assert (a.method, a.path, a.headers, a.form) == (
        "POST",
        "/v1/domains/d/corpora",
        {"x-admin-key": "$K"},
        [("file", "@c.tsv")],
    )
    assert (b.method, b.path, b.headers) == ("DELETE", "/v1/x", {"a": "b"})
    assert (c.method, c.path, json.loads(c.data[0])) == ("POST", "/y", {"texts": ["a b"]})


def test_every_example_calls_an_existing_route(routes: list[APIRoute]) -> None:
    for curl in examples():
        route_of(curl, routes)


def test_every_route_has_an_example(routes: list[APIRoute]) -> None:
    covered = {(route_of(c, routes).path, c.method) for c in examples()}
    api = [r for r in routes if r.include_in_schema]  # the page and /docs: see "The web page"
    missing = [(r.path, m) for r in api for m in r.methods if (r.path, m) not in covered]
    assert not missing, f"README 'Using the API' has no curl example of {missing}"


def test_management_examples_send_the_admin_key(routes: list[APIRoute]) -> None:
    admin = [c for c in examples() if is_admin(route_of(c, routes))]
    assert len(admin) >= 8
    for curl in admin:
        given = curl.headers.get("x-admin-key") or curl.headers.get("authorization", "")
        assert given.removeprefix("Bearer ") == "$RAGMT_ADMIN_KEY", curl.text
        assert "authorization" not in curl.headers or given.startswith("Bearer "), curl.text
    for curl in examples():  # and the others need none
        if not is_admin(route_of(curl, routes)):
            assert "x-admin-key" not in curl.headers, curl.text


LIBRE_BODIES = {"/translate": LibreTranslateRequest, "/detect": LibreDetectRequest}


def test_json_bodies_validate_against_the_request_schemas(routes: list[APIRoute]) -> None:
    seen = set()
    for curl in examples():
        route = route_of(curl, routes)
        if not curl.data:
            assert not curl.json_body, f"content-type without a body: {curl.text}"
            continue
        body = expand(" ".join(curl.data))
        if route.path in LIBRE_BODIES:  # LibreTranslate: JSON or a form, read by hand
            if curl.json_body:
                data: Any = json.loads(body)
            else:
                pairs = [kv for d in curl.data for kv in parse_qsl(expand(d))]
                data = {k: v for k, v in pairs}
                qs = [v for k, v in pairs if k == "q"]
                data["q"] = qs if len(qs) > 1 else qs[0]
            req = LIBRE_BODIES[route.path].model_validate(data)
            assert getattr(req, "format", "text") == "text", curl.text
            seen.add(route.path)
            continue
        assert curl.json_body, f"JSON body without content-type: {curl.text}"
        assert route.body_field is not None, f"{route.path} takes no JSON body: {curl.text}"
        model = route.body_field.field_info.annotation
        model.model_validate_json(body)  # strict schemas: the JSON as the server parses it
        seen.add(route.path)
    assert {"/v1/translate", "/translate", "/detect", "/v1/domains/{domain}/activate"} <= seen


def _validate_params(params: list[Any], values: dict[str, str], text: str) -> None:
    for p in params:
        if p.alias not in values:
            continue
        adapter = TypeAdapter(Annotated[p.field_info.annotation, p.field_info])
        try:
            adapter.validate_python(values[p.alias])
        except ValidationError as e:
            raise AssertionError(f"{p.alias}={values[p.alias]!r} refused in: {text}\n{e}") from e


def test_form_fields_and_path_parameters_are_accepted(routes: list[APIRoute]) -> None:
    uploads = 0
    for curl in examples():
        route = route_of(curl, routes)
        m = route.path_regex.fullmatch(expand(curl.path))
        assert m is not None
        _validate_params(route.dependant.path_params, m.groupdict(), curl.text)
        if not curl.form:
            continue
        uploads += 1
        names = {p.alias for p in route.dependant.body_params}
        fields = dict(curl.form)
        assert set(fields) <= names, f"unknown form fields {set(fields) - names}: {curl.text}"
        assert fields["file"].startswith("@"), curl.text
        if "target_file" in fields:
            assert fields["target_file"].startswith("@"), curl.text
        plain = {k: v for k, v in fields.items() if not v.startswith("@")}
        _validate_params(route.dependant.body_params, plain, curl.text)
    assert uploads >= 4


def test_every_setting_named_exists() -> None:
    names = set(re.findall(r"RAGMT_[A-Z0-9_]+", section()))
    fields = {f"RAGMT_{name.upper()}" for name in Settings.model_fields}
    assert names - fields == set(), f"not settings: {names - fields}"
    documented = {"RAGMT_STORES_DIR", "RAGMT_ADMIN_KEY", "RAGMT_API_KEYS", "RAGMT_REDIS_URL"}
    limits = {"RAGMT_MAX_TEXTS", "RAGMT_MAX_CHARS", "RAGMT_MAX_BODY_BYTES", "RAGMT_RATE_LIMIT"}
    assert documented | limits <= names


def test_settings_table_defaults_match_the_code() -> None:
    """Each numeric default the table states is the field's default."""
    rows = re.findall(r"^\| `(RAGMT_[^|]+)\| ([^|]+) \|", section(), flags=re.M)
    checked = 0
    for names, defaults in rows:
        keys = re.findall(r"RAGMT_([A-Z0-9_]+)", names)
        values = re.findall(r"`([^`]*)`", defaults)
        if not all(re.fullmatch(r"[0-9]+(\.[0-9]+)?", v) for v in values):
            continue
        if len(values) != len(keys):
            continue
        for key, value in zip(keys, values, strict=True):
            default = Settings.model_fields[key.lower()].default
            assert float(value) == float(default), f"RAGMT_{key}: README {value}, code {default}"
            checked += 1
    assert checked >= 14


# --- the walk-through, as written -----------------------------------------------------------


def _json_values(text: str) -> list[Any]:
    """The JSON documents curl printed one after another (no separators)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        value, i = decoder.raw_decode(text, i)
        out.append(value)
    return out


@contextmanager
def _server(bundle: Path, tmp_path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """A real `ragmt serve` on a free port, ready; yields the port and its environment."""
    settings = {
        "RAGMT_MODEL_PATH": str(bundle),
        "RAGMT_STORES_DIR": str(tmp_path / "stores"),
        "RAGMT_ADMIN_KEY": "walkthrough-key",
        "RAGMT_BEAM_SIZE": "1",
    }
    with ragmt_serve(tmp_path, settings) as (base, env):
        yield int(base.rsplit(":", 1)[1]), env


def _run_script(block: str, port: int, env: dict[str, str], work: Path) -> str:
    """`block` in bash as written (but for the port), failing on the first failed command."""
    script = "set -euo pipefail\n" + block.replace(PORT, f"localhost:{port}")
    work.mkdir(exist_ok=True)
    run = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-2000:]
    return run.stdout


NEEDS_TOOLS = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "curl", "jq")), reason="needs bash, curl and jq"
)


@pytest.mark.system
@NEEDS_TOOLS
def test_adding_a_domain_runs_as_written(bundle: Path, tmp_path: Path) -> None:
    (block,) = bash_blocks(section("### Adding a domain"))
    with _server(bundle, tmp_path) as (port, env):
        out = _run_script(block, port, env, tmp_path / "work")
    activated, translated, second, rolled_back, deleted, final = _json_values(out)
    first = activated["active_version"]
    assert activated["state"] == "active" and activated["pairs"] == 2
    result = translated["results"][0]
    assert (result["domain"], result["store_version"]) == ("manuals", first)
    assert {n["source"] for n in result["neighbours"]} == {
        "Click OK to close the dialog.",
        "The file could not be saved.",
    }
    old = second["active_version"]
    assert old != first and second["previous_version"] == first
    assert rolled_back["active_version"] == first
    assert deleted == {"domain": "manuals", "deleted": old}
    assert final["active_version"] == first and final["versions"] == [first]
    assert (tmp_path / "stores" / "manuals" / "ACTIVE").read_text().strip() == first


@pytest.mark.system
@NEEDS_TOOLS
def test_the_whole_api_section_runs_in_order_on_a_fresh_server(
    bundle: Path, tmp_path: Path
) -> None:
    """Every example of "Using the API", in the README's order, against a server with no
    store at all: each one succeeds (curl fails the script on any 4xx or 5xx), the first
    builds the domain the later ones use."""
    blocks = bash_blocks(section())
    assert "ragmt serve" in blocks[0]  # the server, started here with the same settings
    script = 'curl() { command curl --fail-with-body "$@"; }\n' + "\n".join(blocks[1:])
    with _server(bundle, tmp_path) as (port, env):
        out = _run_script(script, port, env, tmp_path / "work")
    assert '"error":{' not in out and '"state":"failed"' not in out, out[-3000:]
    assert "ragmt_queue_depth" in out  # the metrics example found its series
    manuals = tmp_path / "stores" / "manuals"
    manifests = {
        p.name: json.loads((p / "manifest.json").read_text())
        for p in manuals.iterdir()
        if (p / "manifest.json").is_file()
    }
    # the walk-through's first version (manuals.tsv, 2 pairs) serves again after the TMX
    # version was activated, rolled back and deleted
    active = manifests[(manuals / "ACTIVE").read_text().strip()]
    assert (active["method"], active["pairs"]) == ("idf-ngram", 2)
    assert all(m["method"] != "idf-sentence" for m in manifests.values())
