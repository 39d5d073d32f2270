"""Run the service under uvicorn (the `ragmt serve` command calls `serve`)."""

from __future__ import annotations

from types import FrameType

import uvicorn
from fastapi import FastAPI

from service.app import create_app
from service.settings import Settings


class DrainingServer(uvicorn.Server):
    """On SIGTERM/SIGINT: /readyz turns 503 and new requests are refused at once, while
    uvicorn lets in-flight requests finish before the lifespan shuts down."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._app.state.service.draining = True
        super().handle_exit(sig, frame)


def serve(settings: Settings | None = None) -> None:
    """Serve `create_app(settings)` on settings.host:settings.port until SIGTERM/SIGINT.

    One worker process: the engine serialises decoding, and each worker would hold its own
    copy of the model (replicas share state through Redis instead).
    """
    settings = settings if settings is not None else Settings()
    app = create_app(settings)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info")
    DrainingServer(config, app).run()
