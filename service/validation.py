"""What the service accepts: limits on a request, checked before any work, as 422s that name the
field and the limit. The translation options themselves (beam, length penalty, sentence
splitting, neighbours per sentence) are one `DecodeOptions`, the library's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from models.translator import FORMATS, DecodeOptions
from service.errors import InvalidInput


@dataclass(frozen=True)
class Limits:
    max_texts: int = 64
    max_chars: int = 2000
    max_beam_size: int = 8
    options: DecodeOptions = field(default_factory=DecodeOptions)  # a request's defaults


def over_limit(field: str, limit: str, limits: Limits) -> InvalidInput:
    """e.g. "texts: exceeds max_texts=64", naming the field and the limit."""
    value = getattr(limits, limit)
    return InvalidInput(
        f"{field}: exceeds {limit}={value}",
        code="limit_exceeded",
        field=field,
        limit=limit,
        max=value,
    )


def check_texts(texts: Sequence[str], limits: Limits) -> None:
    """The limits on a batch of texts (count, length, valid Unicode); 422 when over."""
    if not texts:
        raise InvalidInput("texts must not be empty", field="texts")
    if len(texts) > limits.max_texts:
        raise over_limit("texts", "max_texts", limits)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidInput(f"texts.{i}: must be a string", field=f"texts.{i}")
        if len(text) > limits.max_chars:
            raise over_limit(f"texts.{i}", "max_chars", limits)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # e.g. a lone surrogate from a JSON "\ud800" escape
            raise InvalidInput(
                f"texts.{i}: text is not valid Unicode", field=f"texts.{i}"
            ) from None


def request_options(
    limits: Limits, beam_size: int | None, text_format: str = "text"
) -> DecodeOptions:
    """The service's options with a request's beam size (within `max_beam_size`) and the
    format of its texts ("text" or "html")."""
    if text_format not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}", field="format")
    options = (
        limits.options
        if text_format == limits.options.format
        else replace(limits.options, format=text_format)
    )
    if beam_size is None:
        return options
    if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size < 1:
        raise InvalidInput("beam_size must be a positive integer", field="beam_size")
    if beam_size > limits.max_beam_size:
        raise over_limit("beam_size", "max_beam_size", limits)
    return replace(options, beam_size=beam_size)
