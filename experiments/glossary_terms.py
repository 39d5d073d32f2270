"""Glossaries enforced when decoding: how often the glossary's target terms are used, and what
the glossary costs where it has nothing to say.

The glossary is built from the training data alone, never from a test reference: the short UI
strings of the general train split (origins desktop-ui and libreoffice-ui), accelerator marks
(`_`, `~`, `&` before a letter) and trailing ellipses and colons removed, pairs of one to three
words on each side (letters and hyphens only), source and target different; a source becomes a
term when it occurs at least `--min-count` times and its most frequent target accounts for at
least `--min-share` of them (a consistent translation), unless it is an English function word.

On a test set (software-docs, whose help text names LibreOffice's UI, by default): sentences
holding at least one glossary term and sentences holding none, at most `--per-condition` each
(seeded sample), are translated through the one pipeline with and without the glossary, with
the domain's memory (a store built from its train split) unless `--no-memory`. Reported:

- term use: per (sentence, glossary target) the target is in the output, case-insensitively
  (an inflected or compounded form counts: "Objekts", "3D-Objekt"); also as a whole word only;
  beside it the same rate for the references (how often the human translators used the
  glossary's word), and the output's rate on the pairs whose reference uses it;
- the share of sentences with terms whose own translation already used them all (kept as it
  was; the others get the masked translation with the terms restored);
- BLEU and chrF (sacreBLEU, signatures recorded) of both sentence sets with and without.

    python experiments/glossary_terms.py --data /work/datawork/data/en-de \
        --results experiments/results/glossary.jsonl
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models.data import read_lines  # noqa: E402

UI_ORIGINS = ("desktop-ui", "libreoffice-ui")
FUNCTION_WORDS = frozenset(
    "a an and are as at be but by for from has have he her his i if in into is it its my no nor "
    "not of off on or our out over she so than that the their them then there these they this "
    "those to up us was we were what when where which who why will with you your yes ok all any "
    "each few more most other some such only own same too very can just do does did done".split()
)
SHOWN = (  # printed per run
    "term_use_pct",
    "term_use_whole_word_pct",
    "term_use_where_reference_uses_pct",
    "reference_term_use_pct",
    "own_translation_kept_pct",
    "bleu",
    "chrf",
)
_ACCEL = re.compile(r"[_&](?=\w)|~")
_TAIL = re.compile(r"(?:\.\.\.|…|:)+$")
_WORDS = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*(?: [^\W\d_]+(?:-[^\W\d_]+)*){0,2}")


def _clean(text: str) -> str:
    return " ".join(_TAIL.sub("", _ACCEL.sub("", text).strip()).split())


def build_glossary(data: Path, min_count: int, min_share: float):
    """The glossary of the module's docstring, from `data`/general's train split."""
    from models.glossary import Glossary, Term

    origins = [line.split("\t")[0] for line in read_lines(data / "general" / "train.origin")]
    sources = read_lines(data / "general" / "train.en")
    targets = read_lines(data / "general" / "train.de")
    seen: dict[str, Counter[str]] = defaultdict(Counter)
    spelled: dict[str, Counter[str]] = defaultdict(Counter)
    for origin, en, de in zip(origins, sources, targets, strict=True):
        if origin not in UI_ORIGINS:
            continue
        en, de = _clean(en), _clean(de)
        if not (_WORDS.fullmatch(en) and _WORDS.fullmatch(de)) or en.casefold() == de.casefold():
            continue
        key = en.casefold()
        if len(key) < 3 or key in FUNCTION_WORDS:
            continue
        seen[key][de] += 1
        spelled[key][en] += 1
    terms = []
    for key, found in seen.items():
        total = sum(found.values())
        target, top = found.most_common(1)[0]
        if total >= min_count and top / total >= min_share:
            terms.append(Term(spelled[key].most_common(1)[0][0], target))
    return Glossary(tuple(terms))


def _uses(text: str, target: str) -> bool:
    """The target term is in `text`, in any case (inflected and compounded forms count)."""
    return target.casefold() in text.casefold()


def _uses_word(text: str, target: str) -> bool:
    """The target term is a whole word of `text`, in any case: stricter than `_uses`."""
    return re.search(rf"(?<!\w){re.escape(target)}(?!\w)", text, re.IGNORECASE) is not None


def term_use(
    sources: list[str], outputs: list[str], references: list[str], glossary
) -> dict[str, int]:
    """Counts over (sentence, glossary target) pairs: all of them, those the output uses, those
    the reference uses, and those both use; and the sentences whose output uses all of theirs."""
    n = dict.fromkeys(("pairs", "used", "used_word", "in_reference", "used_in_reference"), 0)
    n["whole"] = 0
    for source, output, reference in zip(sources, outputs, references, strict=True):
        wanted = {target for _, _, target in glossary.find(source)}
        used = {t for t in wanted if _uses(output, t)}
        in_ref = {t for t in wanted if _uses(reference, t)}
        n["pairs"] += len(wanted)
        n["used"] += len(used)
        n["used_word"] += sum(_uses_word(output, t) for t in wanted)
        n["in_reference"] += len(in_ref)
        n["used_in_reference"] += len(used & in_ref)
        n["whole"] += used == wanted
    return n


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 2) if whole else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--domain", default="software-docs", help="the test set's domain")
    ap.add_argument("--model", type=Path, help="bundle (default: the served one)")
    ap.add_argument("--per-condition", type=int, default=300)
    ap.add_argument("--min-count", type=int, default=3)
    ap.add_argument("--min-share", type=float, default=0.7)
    ap.add_argument("--no-memory", action="store_true", help="decode without retrieval")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--results", type=Path, help="append records here (JSON Lines)")
    ap.add_argument("--write-glossary", type=Path, help="write the glossary as TSV here")
    args = ap.parse_args()

    import sacrebleu
    import torch

    from index_builder.corpus import Pair
    from index_builder.retrieval.encoder import bundle_sha256
    from index_builder.retrieval.serving import retrieve_with, store_encoder
    from index_builder.store import build_store, load_retriever, open_store
    from models import pipeline
    from models.bundle import load_bundle
    from models.literals import keeps
    from models.results import FORMAT, append_record, data_info, git_state
    from models.translator import DEFAULT_BUNDLE, DecodeOptions, Translator

    torch.set_num_threads(args.threads)
    git = git_state()
    glossary = build_glossary(args.data, args.min_count, args.min_share)
    print(f"glossary: {len(glossary)} terms, version {glossary.version}", flush=True)
    if args.write_glossary:
        args.write_glossary.write_text(
            "".join(f"{t.source}\t{t.target}\n" for t in glossary.terms), encoding="utf-8"
        )

    sources = read_lines(args.data / args.domain / "test.en")
    references = read_lines(args.data / args.domain / "test.de")
    with_terms = [i for i, s in enumerate(sources) if glossary.find(s)]
    without = [i for i, s in enumerate(sources) if not glossary.find(s)]
    rng = random.Random(args.seed)
    sets = {
        "with-terms": sorted(rng.sample(with_terms, min(args.per_condition, len(with_terms)))),
        "without-terms": sorted(rng.sample(without, min(args.per_condition, len(without)))),
    }
    print(
        f"{args.domain} test: {len(with_terms)} of {len(sources)} sentences hold a term",
        flush=True,
    )

    bundle = load_bundle(args.model or DEFAULT_BUNDLE)
    translator = Translator.from_loaded(bundle, "auto")
    options = DecodeOptions()
    retrieve, memory = None, None
    workdir = tempfile.TemporaryDirectory()
    if not args.no_memory:
        train = zip(
            read_lines(args.data / args.domain / "train.en"),
            read_lines(args.data / args.domain / "train.de"),
            strict=True,
        )
        t0 = time.perf_counter()
        path = build_store([Pair(s, t) for s, t in train], args.domain, "idf-ngram",
                           Path(workdir.name))  # fmt: skip
        store = open_store(path)
        retriever = load_retriever(store, store_encoder(store.manifest, bundle, None))
        retrieve = retrieve_with(translator, retriever)
        memory = {"method": "idf-ngram", "from": f"{args.domain}/train", "pairs": len(store.pairs)}
        print(f"memory: {memory} built in {time.perf_counter() - t0:.0f} s", flush=True)

    model = {
        "path": str(args.model or DEFAULT_BUNDLE),
        "sha256": bundle_sha256(bundle.manifest),
        "architecture": bundle.manifest.get("architecture"),
    }
    for name, picked in sets.items():
        texts = [sources[i] for i in picked]
        refs = [references[i] for i in picked]
        for applied in (False, True):
            t0 = time.perf_counter()
            prepared = pipeline.prepare(
                translator, texts, options, retrieve, False, glossary if applied else None
            )
            decoded = pipeline.decode(
                translator, prepared.sentences, options, prepared.pairs, prepared.encodings
            )
            outputs = [o.text for o in pipeline.finish(prepared, decoded)]
            seconds = time.perf_counter() - t0
            segments, masked = prepared.seg.segments, prepared.masked or []
            own = [  # a sentence with terms whose own translation used them all: kept
                keeps(segments[i], decoded[i].text, masked[i])
                for i in prepared.variants
                if masked[i].terms
            ]
            bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
            bleu = bleu_metric.corpus_score(outputs, [refs])
            chrf = chrf_metric.corpus_score(outputs, [refs])
            n = term_use(texts, outputs, refs, glossary)
            record = {
                "format": FORMAT,
                "kind": "glossary-terms",
                "domain": args.domain,
                "split": "test",
                "sentences_set": name,
                "glossary": applied,
                "sentences": len(texts),
                "term_pairs": n["pairs"],
                "term_use_pct": _pct(n["used"], n["pairs"]),
                "term_use_whole_word_pct": _pct(n["used_word"], n["pairs"]),
                "sentences_all_terms_pct": _pct(n["whole"], len(texts)) if n["pairs"] else None,
                "reference_term_use_pct": _pct(n["in_reference"], n["pairs"]),
                # of the pairs whose reference uses the glossary's word: the output does too
                "term_use_where_reference_uses_pct": _pct(
                    n["used_in_reference"], n["in_reference"]
                ),
                "own_translation_kept_pct": _pct(sum(own), len(own)) if applied else None,
                "decoded_sentences": len(prepared.sentences),
                "bleu": round(bleu.score, 2),
                "chrf": round(chrf.score, 2),
                "signatures": {
                    "bleu": str(bleu_metric.get_signature()),
                    "chrf": str(chrf_metric.get_signature()),
                },
                "seconds": round(seconds, 1),
                "glossary_info": {
                    "version": glossary.version,
                    "terms": len(glossary),
                    "from": "general/train " + "+".join(UI_ORIGINS),
                    "min_count": args.min_count,
                    "min_share": args.min_share,
                },
                "decoding": {
                    "beam_size": options.beam_size,
                    "length_penalty": options.length_penalty,
                    "neighbours_k": options.neighbours_k if retrieve is not None else None,
                    "keep_literals": options.keep_literals,
                    "threads": args.threads,
                },
                "memory": memory,
                "model": model,
                "data": data_info(args.data, args.domain, "test", "en", "de"),
                "seed": args.seed,
                "git": git,
            }
            print(f"{name:14} glossary {'on ' if applied else 'off'}:", end=" ")
            print(", ".join(f"{k} {record[k]}" for k in SHOWN), f"({seconds:.0f} s)", flush=True)
            if args.results:
                append_record(args.results, record)
    workdir.cleanup()


if __name__ == "__main__":
    main()
