"""The internal form of a parallel corpus: a list of aligned pairs with their provenance."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pair:
    """One aligned sentence pair.

    `origin` names where it came from (a source label such as ``wesnoth`` or a file name) and
    `doc` the unit that must stay together when splitting (a book, a help file, a catalog), so
    that dev/test never share a document with train.
    """

    source: str
    target: str
    origin: str = ""
    doc: str = ""


class CorpusError(ValueError):
    """Bad corpus input; the message names the file and, where known, the line."""
