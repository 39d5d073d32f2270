"""Run the service under uvicorn (the `ragmt serve` command calls `serve`)."""

from __future__ import annotations

import uvicorn

from service.app import create_app
from service.settings import Settings


def serve(settings: Settings | None = None) -> None:
    """Serve `create_app(settings)` on settings.host:settings.port until interrupted.

    One worker process: the engine serialises decoding, and each worker would hold its own
    copy of the model.
    """
    settings = settings if settings is not None else Settings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
