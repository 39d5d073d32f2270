"""Run the service under uvicorn (the `ragmt serve` command calls `serve`)."""

from __future__ import annotations

import copy
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG

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


def log_config(level: str = "info") -> dict[str, Any]:
    """uvicorn's logging, plus the project's own `ragmt.*` loggers (startup summary,
    activations, build jobs, failures) on the same stream and format."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["ragmt"] = {
        "()": "uvicorn.logging.DefaultFormatter",
        "fmt": "%(levelprefix)s %(name)s: %(message)s",
    }
    config["handlers"]["ragmt"] = {
        "formatter": "ragmt",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
    }
    config["loggers"]["ragmt"] = {"handlers": ["ragmt"], "level": level.upper(), "propagate": False}
    return config


def serve(settings: Settings | None = None) -> None:
    """Serve `create_app(settings)` on settings.host:settings.port until SIGTERM/SIGINT.

    One worker process: the engine serialises decoding, and each worker would hold its own
    copy of the model (replicas share state through Redis instead).
    """
    settings = settings if settings is not None else Settings()
    app = create_app(settings)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="info", log_config=log_config()
    )
    DrainingServer(config, app).run()
