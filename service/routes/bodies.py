"""JSON request bodies: how deep they nest is checked before anything parses them.

Python's `json` parser and pydantic's validators recurse once per level of nesting, so a body
like `[[[[...]]]]` thousands deep exhausts the stack (a RecursionError, a 500) long before the
body-size limit. No request of this API nests more than a few levels, so deeper bodies are
refused with a 422 first, by a scan that counts brackets without recursing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from itertools import accumulate
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from service.errors import InvalidInput

MAX_JSON_DEPTH = 32  # arrays and objects; a translation request needs 2

_ESCAPED = re.compile(r"\\.", re.DOTALL)  # an escaped character inside a string, e.g. \"
_BRACKETS = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in `text` (brackets inside strings do not count).

    Linear in the length, no recursion, exact for valid JSON; what it makes of invalid JSON
    does not matter, as the parser refuses that anyway.
    """
    outside = "".join(_ESCAPED.sub("", text).split('"')[::2])  # even pieces: between strings
    steps = map(_STEP.__getitem__, _BRACKETS.findall(outside))
    return max(accumulate(steps), default=0)


def check_json_depth(raw: bytes | str) -> None:
    """422 (limit_exceeded, field body) when `raw` nests deeper than MAX_JSON_DEPTH."""
    text = raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw), "replace")
    opening = text.count("[") + text.count("{")  # few brackets (most bodies): cannot be deep
    if opening > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise InvalidInput(
            f"body: nested deeper than max_json_depth={MAX_JSON_DEPTH}",
            code="limit_exceeded",
            field="body",
            limit="max_json_depth",
            max=MAX_JSON_DEPTH,
        )


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI would parse a body of this type as JSON (none given counts)."""
    if not content_type:
        return True
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class JsonBodyRoute(APIRoute):
    """A route whose JSON body is depth-checked before FastAPI parses and validates it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def checked(request: Request) -> Response:
            if _is_json(request.headers.get("content-type")):
                check_json_depth(await request.body())  # cached: FastAPI reads it again
            return await handler(request)

        return checked
