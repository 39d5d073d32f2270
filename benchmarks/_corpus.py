"""A silver translation memory of real text that ships with the repository: its English prose
(README, docs, docstrings) with German from the committed baseline, for benchmarks that need
real sentences on a machine without prepared corpora."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from index_builder.corpus import Pair

ROOT = Path(__file__).resolve().parents[1]


def repo_sentences(root: Path = ROOT) -> list[str]:
    """English prose shipped in the repository, one distinct sentence each: README and docs
    paragraphs, docstrings. Real technical text, the kind a software-docs memory holds."""
    paragraphs: list[str] = []
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        fence, lines = False, []
        for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
            s = line.strip()
            if s.startswith("```"):
                fence = not fence
                continue
            if not s or fence or s.startswith(("#", "|", ">", "<")):  # a paragraph ends
                if lines:
                    paragraphs.append(" ".join(lines))
                lines = []
                continue
            lines.append(re.sub(r"^([-*+]|\d+\.)\s+", "", s))
    for pkg in ("models", "index_builder", "service", "benchmarks", "experiments", "tests"):
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(
                    node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
                ):
                    doc = ast.get_docstring(node)
                    paragraphs += [" ".join(p.split()) for p in (doc or "").split("\n\n")]
    out = []
    for para in paragraphs:
        para = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", para).replace("`", "").replace("**", "")
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", para):
            s = s.strip()
            prose = sum(c.isalpha() or c == " " for c in s) > 0.85 * len(s)
            code = re.search(r"[{}$=<>]|https?:|::|\w/\w|\w\.\w+\(", s)
            if 4 <= len(s.split()) <= 30 and prose and not code:
                out.append(s)
    return list(dict.fromkeys(out))


def repo_corpus() -> list[Pair]:
    """The repository's sentences with German from the committed baseline (greedy, batches of
    64, every core: the replicas have not started yet)."""
    import torch

    from models.translator import BASELINE_BUNDLE, DecodeOptions, Translator

    torch.set_num_threads(os.cpu_count() or 1)
    sources = repo_sentences()
    translator = Translator.from_bundle(BASELINE_BUNDLE)
    targets = translator.translate(sources, DecodeOptions(beam_size=1, batch_size=64))
    pairs = zip(sources, targets, strict=True)
    return [Pair(s, t.strip(), "repository") for s, t in pairs if t.strip()]
