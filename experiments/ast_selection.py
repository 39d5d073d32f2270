"""Which feed-forward blocks (and, where sparse, heads and layers) each language of a sparse
model keeps, and how much languages share (issue 31, SEEDS §2.3): for every sparse system of
an `experiments/ast-bible.sh` run,

- each target language's selected decoder blocks per layer (hard top-k, what it decodes with);
- the Jaccard overlap of every two languages' selections, averaged over layers, and the
  related pairs (es-pt, ru-uk) against unrelated ones (es-zh, ru-zh);
- the budget at the end: each language's expected active blocks per layer, sum of sigma(mu),
  against k (the top-k loss's target; without it, does the budget hold?);
- the same for the decoder's heads (per layer) and layers (of the stack) where those are
  sparse ("kinds" in the output; "other_kinds" in the record);
- how likely chance alone would make related pairs share that much more than unrelated ones:
  the one-sided p of the observed gap (mean related Jaccard minus mean unrelated) when every
  language picks its k of each group at random ("related_gap", "related_gap_p");
- a heat map of the overlaps as SVG, for the report;
- with `--results`, those as records ("ast-selection"), and each system's mean BLEU and chrF
  over the languages it was scored on ("eval-mean", target "mean"), so the report's tables and
  averages come from records.

    python experiments/ast_selection.py --work runs/ast-bible --out runs/ast-bible/selection.json \
        [--figures DIR] [--results runs/ast-bible/results.jsonl]
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path
from typing import Any

import torch

from models.bundle import load_bundle
from models.results import FORMAT, append_new_records, read_records

RELATED = (("es", "pt"), ("ru", "uk"))
UNRELATED = (("es", "zh"), ("ru", "zh"))


def jaccard(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean over layers of |A and B| / |A or B| of two `(layers, blocks)` 0/1 selections."""
    return float(layer_mean_jaccard(a, b))


def layer_mean_jaccard(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`jaccard` over any leading batch dimensions: `(..., layers, blocks)` -> `(...)`."""
    inter = (a * b).sum(dim=-1)
    union = ((a + b) > 0).float().sum(dim=-1).clamp_min(1)
    return (inter / union).mean(dim=-1)


def chance_of_gap(
    masks: dict[str, torch.Tensor], k: int, draws: int = 20000, seed: int = 0
) -> tuple[float, float] | None:
    """The related pairs' mean Jaccard minus the unrelated pairs', and how often languages
    that each pick k components of every group uniformly at random, independently, reach a
    gap at least as large (one-sided p, counting the observation as one draw). `masks` maps a
    language to its `(groups, components)` 0/1 selection; None where a pair is missing.
    One run's pattern is evidence only where this p is small."""
    related = [(a, b) for a, b in RELATED if a in masks and b in masks]
    unrelated = [(a, b) for a, b in UNRELATED if a in masks and b in masks]
    if not related or not unrelated:
        return None
    langs = sorted({lang for pair in related + unrelated for lang in pair})

    def gap(sel: dict[str, torch.Tensor]) -> torch.Tensor:  # sel: lang -> (..., groups, n)
        def mean_jaccard(pairs: list[tuple[str, str]]) -> torch.Tensor:
            return torch.stack([layer_mean_jaccard(sel[a], sel[b]) for a, b in pairs]).mean(0)

        return mean_jaccard(related) - mean_jaccard(unrelated)

    observed = float(gap({lang: masks[lang].float() for lang in langs}))
    groups, n = masks[langs[0]].shape
    g = torch.Generator().manual_seed(seed)
    picks = torch.rand(draws, len(langs), groups, n, generator=g).topk(k, dim=-1).indices
    random = torch.zeros(draws, len(langs), groups, n).scatter_(-1, picks, 1.0)
    null = gap({lang: random[:, i] for i, lang in enumerate(langs)})
    p = (1 + int((null >= observed - 1e-9).sum())) / (1 + draws)
    return round(observed, 4), round(p, 4)


def selection(bundle: Path) -> dict[str, Any]:
    """The decoder selections, overlaps and budgets of one sparse bundle: its feed-forward
    blocks' at the top level, and every sparse decoder kind's (ffn, heads, layers) under
    "kinds"."""
    loaded = load_bundle(bundle)
    model = loaded.model.float()
    if "decoder_ffn" not in model.scores:
        raise ValueError(f"{bundle} has no decoder feed-forward scores")
    targets = [t for _, t in loaded.manifest["pairs"]]
    kinds = {
        kind: kind_selection(model, kind, targets)
        for kind in model.config.sparse
        if f"decoder_{kind}" in model.scores
    }
    return {"bundle": str(bundle), **kinds["ffn"], "kinds": kinds}


def checkpoint_selection(checkpoint: Path) -> dict[str, Any]:
    """`selection` of a training checkpoint (`ckpt-NNNNNNN` of a run): the budget where
    phase 1 ends, before the top-k loss has acted, for the ablation's mechanics check."""
    from safetensors.torch import load_file

    from models.checkpoints import load_weights
    from models.registry import build_model

    state = json.loads((checkpoint / "state.json").read_text())
    model = build_model(state["arch"], state["model_config"])
    load_weights(model, load_file(str(checkpoint / "model.safetensors")))
    config = json.loads((checkpoint.parent / "train_config.json").read_text())
    targets = [lang for lang in model.config.languages if lang != "en"]
    found = kind_selection(model.float(), "ffn", targets)
    phase = 1 if state["step"] < config["phase2_after"] else 2
    return {"bundle": str(checkpoint), "update": state["step"], "phase": phase, **found}


def kind_selection(model: Any, kind: str, targets: list[str]) -> dict[str, Any]:
    """One kind's selections: per target language the chosen components of each decoder layer
    (heads, blocks) or of the stack (layers), the pairwise Jaccard overlaps, and the budget."""
    c = model.config
    masks = model.masks("decoder")[kind]  # (languages, layers, components) or (languages, layers)
    probs = torch.sigmoid(model.scores[f"decoder_{kind}"].detach())
    if kind == "layers":  # one group: the stack
        masks, probs = masks[:, None], probs[:, None]
    index = {lang: c.languages.index(lang) for lang in targets}
    overlap = {
        f"{a}-{b}": round(jaccard(masks[index[a]], masks[index[b]]), 4)
        for i, a in enumerate(targets)
        for b in targets[i + 1 :]
    }
    pairs = [(a, b) for i, a in enumerate(targets) for b in targets[i + 1 :]]

    def of(group: tuple[tuple[str, str], ...]) -> dict[str, float]:
        return {f"{a}-{b}": overlap[f"{a}-{b}"] for a, b in group if a in index and b in index}

    budget_k = c.budget(kind, "decoder")
    chance = chance_of_gap({lang: masks[i] for lang, i in index.items()}, budget_k)
    return {
        "budget_k": budget_k,
        "blocks": masks.size(-1),  # components per group
        "selected": {
            lang: [m.nonzero().squeeze(1).tolist() for m in masks[i]] for lang, i in index.items()
        },
        "expected_active": {
            lang: [round(float(p), 2) for p in probs[i].sum(dim=-1)] for lang, i in index.items()
        },
        "jaccard": overlap,
        "jaccard_mean": round(sum(overlap.values()) / max(1, len(pairs)), 4),
        "related": of(RELATED),
        "unrelated": of(UNRELATED),
        **({"related_gap": chance[0], "related_gap_p": chance[1]} if chance else {}),
    }


def heat_map(result: dict[str, Any], title: str) -> str:
    """An SVG table of the pairwise overlaps (darker: more shared)."""
    langs = list(result["selected"])
    cell, pad = 44, 60
    size = pad + cell * len(langs)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size + 10}" height="{size + 30}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="4" y="16">{html.escape(title)}</text>',
    ]
    for i, a in enumerate(langs):
        y = 30 + pad + cell * i
        parts.append(f'<text x="8" y="{y - cell / 2 + 4}">{a}</text>')
        parts.append(f'<text x="{pad + cell * i + 14}" y="{30 + pad - 8}">{a}</text>')
        for j, b in enumerate(langs):
            key = f"{a}-{b}" if f"{a}-{b}" in result["jaccard"] else f"{b}-{a}"
            value = 1.0 if a == b else result["jaccard"][key]
            shade = int(255 - 200 * value)
            parts.append(
                f'<rect x="{pad + cell * j}" y="{y - cell}" width="{cell}" height="{cell}" '
                f'fill="rgb({shade},{shade},255)" stroke="white"/>'
                f'<text x="{pad + cell * j + 8}" y="{y - cell / 2 + 4}">{value:.2f}</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def means(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per system, the mean BLEU and chrF of its test evaluations, one language each (the
    last record of a language counts); the languages it averages are listed."""
    latest: dict[str, dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("kind") == "eval" and r.get("split") == "test":
            latest.setdefault(r["system"], {})[r["languages"]["target"]] = r
    out = []
    for system, by_lang in latest.items():
        langs = sorted(by_lang)
        out.append({
            "format": FORMAT, "kind": "eval-mean", "system": system, "domain": "bible",
            "split": "test", "languages": {"source": "en", "target": "mean"},
            "averaged": langs,
            "bleu": round(sum(by_lang[x]["bleu"] for x in langs) / len(langs), 2),
            "chrf": round(sum(by_lang[x]["chrf"] for x in langs) / len(langs), 2),
            "bundle_sha256": sorted({by_lang[x]["bundle"]["sha256"] for x in langs}),
        })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="an ast-bible.sh work directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--figures", type=Path, default=None, help="write <system>-overlap.svg here")
    ap.add_argument("--results", type=Path, default=None, help="append the summary records")
    ap.add_argument("--label", default="", help="a suffix to each system's name in the records")
    ap.add_argument(
        "--checkpoint",
        nargs=2,
        action="append",
        default=[],
        metavar=("SYSTEM", "DIR"),
        help="also a training checkpoint of SYSTEM's run, as 'SYSTEM at update N'",
    )
    args = ap.parse_args()
    found: dict[str, Any] = {}
    for system, checkpoint in args.checkpoint:
        r = checkpoint_selection(Path(checkpoint))
        found[f"{system} at update {r['update']}"] = r
        print(f"{system} at update {r['update']} (phase {r['phase']}): {summary(r)}")
    for manifest in sorted(args.work.glob("*/bundle/manifest.json")):
        system = manifest.parent.parent.name
        if json.loads(manifest.read_text()).get("architecture") != "sparse-transformer":
            continue
        model_cfg = json.loads(manifest.read_text())["config"]
        if "ffn" not in model_cfg.get("sparse", []):
            continue
        name = system + args.label
        found[name] = r = selection(manifest.parent)
        for kind, k in r["kinds"].items():
            print(
                f"{name} {kind}: mean Jaccard {k['jaccard_mean']}; related {k['related']}; "
                f"unrelated {k['unrelated']}; gap {k.get('related_gap')} "
                f"(chance p {k.get('related_gap_p')})"
            )
        if args.figures is not None:  # files named by the run's folder, titles by the record's
            args.figures.mkdir(parents=True, exist_ok=True)
            svg = heat_map(r, f"{name}: shared decoder FFN blocks (Jaccard, mean over layers)")
            (args.figures / f"{system}-overlap.svg").write_text(svg)
            for kind in set(r["kinds"]) - {"ffn"}:
                what = "heads (mean over layers)" if kind == "heads" else "layers"
                svg = heat_map(r["kinds"][kind], f"{name}: shared decoder {what} (Jaccard)")
                (args.figures / f"{system}-{kind}-overlap.svg").write_text(svg)
    args.out.write_text(json.dumps(found, indent=2) + "\n")
    if args.results is not None and args.results.exists():
        add_summaries(args.results, found)
    elif args.results is not None:  # the means need its eval records: nothing to add yet
        print(f"no records written: {args.results} does not exist yet", file=sys.stderr)


def summary(r: dict[str, Any]) -> dict[str, Any]:
    """A kind's selection as a record's fields: overlaps and how far the budget held."""
    expected = [x for per_group in r["expected_active"].values() for x in per_group]
    return {
        "budget_k": r["budget_k"], "blocks": r["blocks"],
        "jaccard_mean": r["jaccard_mean"], "related": r["related"],
        "unrelated": r["unrelated"], "jaccard": r["jaccard"],
        **{k: r[k] for k in ("related_gap", "related_gap_p") if k in r},
        "expected_active_mean": round(sum(expected) / len(expected), 3),
        "expected_active_max_gap": round(max(abs(x - r["budget_k"]) for x in expected), 3),
    }  # fmt: skip


def add_summaries(path: Path, found: dict[str, Any]) -> None:
    """Append the selection and mean records to the results file `path`, each only once: a
    record equal to one already there but for its git state is not written again, so the
    experiment may run this after every system."""
    records = []
    for system, r in found.items():
        record = {"format": FORMAT, "kind": "ast-selection", "system": system,
                  "bundle": r["bundle"], **summary(r)}  # fmt: skip
        if "update" in r:
            record |= {"update": r["update"], "phase": r["phase"]}
        others = {k: summary(v) for k, v in r.get("kinds", {}).items() if k != "ffn"}
        records.append(record | ({"other_kinds": others} if others else {}))
    append_new_records(path, records + means(read_records(path)))


if __name__ == "__main__":
    main()
