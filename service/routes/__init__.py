"""HTTP routers: thin functions over the engine, the domain manager and the job queue."""

from __future__ import annotations

from service.schemas import ErrorResponse

# Documented error bodies of routes (all share ErrorResponse).
ERRORS = {s: {"model": ErrorResponse} for s in (400, 401, 403, 404, 413, 422, 429, 500, 503)}
