"""Literal-text preservation: a check set made from the test sets, and how much of it survives.

Real test sentences get literal tokens inserted (URLs, e-mail addresses, file paths, numbers,
placeholders, emoji, inline markup around a word); a translation preserves a sentence when
every inserted token is in it exactly as often as in the source, and a markup pair keeps its
order. Measured through the one pipeline with literal masking on and off, with each domain's
store when given. The model's own share (every mask written exactly once before restoration)
is reported beside the final one, so the restoration's part shows.

    python experiments/literal_preservation.py --data data/en-de --stores data/stores \
        --per-domain 100 --results experiments/results/literals.jsonl

The check set is drawn with a fixed seed; `--write-checkset DIR` writes it out.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models.data import read_lines  # noqa: E402

DOMAINS = ("general", "bible", "medical", "software-docs")
# Realistic literals of each kind; drawn with the seed.
POOL: dict[str, list[str]] = {
    "url": [
        "https://example.org/docs",
        "https://wiki.debian.org/NetworkConfiguration",
        "http://localhost:8080/api/v1/status",
        "www.example.com/help?id=42",
    ],
    "email": ["help@example.com", "j.doe+tickets@mail.example.org", "admin@localhost.localdomain"],
    "path": ["/etc/ragmt/config.yaml", "~/Documents/report.odt", "./configure", "/var/log/syslog"],
    "number": ["42", "3.14", "1,024", "12:30", "2026", "75%"],
    "placeholder": ["%s", "%d", "%1$s", "%1", "{name}", "{0}", "$HOME", "${USER}", "%APPDATA%"],
    "template": [  # named printf and template placeholders of localisation files
        "%(name)s",
        "%(count)d",
        "{{ name }}",
        "{{limit}}",
        "{% if user %}",
        "%{name}",
        "%<count>d",
        "{count, number}",
    ],
    "emoji": ["😀", "👍", "🎉", "⚠️", "👩‍💻"],
    "markup": ["<b>", "<i>", '<a href="https://example.org">', "<code>"],
}
_CLOSE = re.compile(r"<([a-z]+)")


def make_checkset(
    sentences: list[str], n: int, rng: random.Random
) -> list[tuple[str, list[str], str]]:
    """`n` sentences of at least four words, each with one or two literals inserted at word
    boundaries: (text, the inserted tokens, their kinds joined by +)."""
    usable = [s for s in sentences if len(s.split()) >= 4]
    out = []
    for s in rng.sample(usable, min(n, len(usable))):
        words = s.split()
        kinds = rng.sample(sorted(POOL), rng.randint(1, 2))
        tokens: list[str] = []
        for kind in kinds:
            token = rng.choice(POOL[kind])
            if kind == "markup":  # around one word, as inline markup is
                i = rng.randrange(len(words))
                close = f"</{_CLOSE.match(token).group(1)}>"  # type: ignore[union-attr]
                words[i] = f"{token}{words[i]}{close}"
                tokens += [token, close]
            else:
                words.insert(rng.randrange(len(words) + 1), token)
                tokens.append(token)
        out.append((" ".join(words), tokens, "+".join(kinds)))
    return out


def preserved(source: str, output: str, tokens: list[str]) -> bool:
    """Every token as often in `output` as in `source`, each markup pair opened before it
    is closed."""
    if any(output.count(t) != source.count(t) for t in tokens):
        return False
    pairs = [(a, b) for a, b in zip(tokens, tokens[1:], strict=False) if a.startswith("<")]
    pairs = [(a, b) for a, b in pairs if b.startswith("</")]
    return all(output.index(a) < output.index(b) for a, b in pairs)


def _hollow_pct(rows: list[int], sources: list[str], outputs: list[str]) -> float:
    """Percent of `rows` whose output holds a tag pair left empty (`tag_pairs.hollow`)."""
    from models.tag_pairs import hollow

    return round(100 * sum(hollow(sources[i], outputs[i]) for i in rows) / max(1, len(rows)), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--stores", type=Path, help="each domain's active store (default: none)")
    ap.add_argument("--model", type=Path, help="bundle (default: the served one)")
    ap.add_argument("--per-domain", type=int, default=100)
    ap.add_argument(
        "--mask-first",
        action="store_true",
        help="decode a sentence with literals once, masked (a model trained on the masks)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--system", help="a label for the records (default: none)")
    ap.add_argument("--results", type=Path, help="append records here (JSON Lines)")
    ap.add_argument("--write-checkset", type=Path, help="write the check set's TSV here")
    args = ap.parse_args()

    from index_builder.retrieval.encoder import bundle_sha256
    from index_builder.retrieval.serving import retrieve_with, store_encoder
    from index_builder.store import load_retriever, open_store
    from models import pipeline
    from models.bundle import load_bundle
    from models.literals import MARKED_WORDS, MASK_OUT, keeps_literals
    from models.results import FORMAT, append_record, git_state
    from models.translator import DEFAULT_BUNDLE, DecodeOptions, Translator

    git = git_state()
    bundle = load_bundle(args.model or DEFAULT_BUNDLE)
    translator = Translator.from_loaded(bundle, "auto")
    rng = random.Random(args.seed)
    rows = []
    for domain in DOMAINS:
        checks = make_checkset(read_lines(args.data / domain / "test.en"), args.per_domain, rng)
        if args.write_checkset:
            args.write_checkset.mkdir(parents=True, exist_ok=True)
            (args.write_checkset / f"{domain}.tsv").write_text(
                "".join(f"{t}\t{' '.join(k)}\t{kind}\n" for t, k, kind in checks),
                encoding="utf-8",
            )
        retrieve = None
        if args.stores is not None:
            store = open_store(args.stores / domain)
            retriever = load_retriever(store, store_encoder(store.manifest, bundle, None))
            retrieve = retrieve_with(translator, retriever)
        texts = [t for t, _, _ in checks]
        for keep in (False, True):
            options = replace(DecodeOptions(), keep_literals=keep, mask_first=args.mask_first)
            prepared = pipeline.prepare(translator, texts, options, retrieve)
            decoded = pipeline.decode(
                translator, prepared.sentences, options, prepared.pairs, prepared.encodings
            )
            outputs = [o.text for o in pipeline.finish(prepared, decoded)]
            unrepaired = [o.text for o in pipeline.finish(prepared, decoded, repair_markup=False)]
            ok = [preserved(t, o, k) for (t, k, _), o in zip(checks, outputs, strict=True)]
            marked = [i for i, (t, _, _) in enumerate(checks) if MARKED_WORDS.search(t)]
            by_kind: dict[str, list[bool]] = {}
            for (_, _, kinds), good in zip(checks, ok, strict=True):
                for kind in kinds.split("+"):
                    by_kind.setdefault(kind, []).append(good)
            record = {
                "format": FORMAT,
                "kind": "literal-preservation",
                "domain": domain,
                "keep_literals": keep,
                **({"mask_first": True} if args.mask_first else {}),
                "store": args.stores is not None,
                "sentences": len(checks),
                "preserved_pct": round(100 * sum(ok) / max(1, len(ok)), 2),
                "by_kind_pct": {
                    k: round(100 * sum(v) / len(v), 1) for k, v in sorted(by_kind.items())
                },
                # sentences with a tag pair around words, and the share of them whose pair
                # came back empty (German moved the word) before and after `tag_pairs.repair`
                "repair_markup": True,  # `finish` repairs hollow pairs (records before: null)
                "marked_sentences": len(marked),
                "hollow_unrepaired_pct": _hollow_pct(marked, texts, unrepaired),
                "hollow_pct": _hollow_pct(marked, texts, outputs),
                "seed": args.seed,
                "model": str(args.model or DEFAULT_BUNDLE),
                "model_sha256": bundle_sha256(bundle.manifest),
                **({"system": args.system} if args.system else {}),
                "git": git,
            }
            if keep and prepared.masked is not None:
                segments = prepared.seg.segments  # per sentence: did its own translation keep all?
                if not args.mask_first:  # (decoded as it is only without --mask-first)
                    own = [keeps_literals(segments[i], decoded[i].text) for i in prepared.variants]
                    record["own_translation_kept_pct"] = round(100 * sum(own) / max(1, len(own)), 2)
                copied = [  # the masked copies: did the model write each mask once?
                    sorted(int(x) for x in MASK_OUT.findall(decoded[prepared.masked_at(j)].text))
                    == list(range(1, len(prepared.masked[i].literals) + 1))
                    for j, i in enumerate(prepared.variants)
                ]
                record["model_copied_masks_pct"] = round(100 * sum(copied) / max(1, len(copied)), 2)
            rows.append(record)
            print(
                f"{domain:14} literals {'masked' if keep else 'as is '}: "
                f"{record['preserved_pct']:6.2f}% preserved "
                f"(own {record.get('own_translation_kept_pct', '-')}, "
                f"masks copied {record.get('model_copied_masks_pct', '-')}) "
                f"{record['by_kind_pct']} hollow pairs {record['hollow_unrepaired_pct']}% -> "
                f"{record['hollow_pct']}% of {len(marked)}",
                flush=True,
            )
            if args.results:
                append_record(args.results, record)


if __name__ == "__main__":
    main()
