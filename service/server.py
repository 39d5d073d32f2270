"""Run the service under uvicorn (the `ragmt serve` command calls `serve`)."""

from __future__ import annotations

import asyncio
import copy
import socket
import time
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.app import create_app
from service.settings import Settings


class DrainingServer(uvicorn.Server):
    """SIGTERM/SIGINT drain within `drain_timeout_s`, answering all the while.

    At the first signal /readyz turns 503 and new requests are answered 503 (draining, with
    Retry-After), so a proxy or client moves on, while the listener stays open and in-flight
    requests finish. Once none is left, or the drain timeout has passed, uvicorn shuts down
    and cancels whatever still runs: the whole stop takes at most the drain timeout (plus the
    decoding step in progress), within compose's grace period. A second signal stops at once.
    """

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        service = self._app.state.service
        if self._drain is not None or self._loop is None:  # a second signal: stop now
            self.config.timeout_graceful_shutdown = 0
            super().handle_exit(sig, frame)
            return
        timeout = service.settings.drain_timeout_s
        service.draining = True
        service.drain_deadline = time.monotonic() + timeout
        self._loop.call_soon_threadsafe(self._start_drain, sig, service.drain_deadline)

    def _start_drain(self, sig: int, deadline: float) -> None:
        self._drain = asyncio.get_running_loop().create_task(self._drained(sig, deadline))

    async def _drained(self, sig: int, deadline: float) -> None:
        """Wait for the requests in flight (new ones are answered 503 at once), then exit."""
        while self.server_state.tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # What is left is cancelled when the remaining time is up.
        self.config.timeout_graceful_shutdown = max(0.0, deadline - time.monotonic())
        super().handle_exit(sig, None)


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


class HeaderDeadline(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for a request's headers.

    uvicorn times out idle keep-alive connections, but a connection that trickles its header
    lines (or sends part of them and stops) holds a socket and a file descriptor forever.
    Here the headers must be complete within `header_timeout_s` of the connection opening or
    of the previous response ending; else the connection is closed. (Bodies have their own
    idle timeout: service.middleware.)
    """

    header_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def _arm(self) -> None:
        waiting_since = self.cycle  # a new request replaces it once its headers are parsed
        self.loop.call_later(self.header_timeout_s, self._late, waiting_since)

    def _late(self, waiting_since: object) -> None:
        if self.cycle is waiting_since and not self.transport.is_closing():
            self.transport.close()


def uvicorn_config(app: FastAPI, settings: Settings, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration of the service (the header deadline included); `options`
    add to uvicorn's own (tests pass log_level, port)."""
    protocol = type("Http", (HeaderDeadline,), {"header_timeout_s": settings.header_timeout_s})
    base = {"host": settings.host, "port": settings.port, "http": protocol}
    return uvicorn.Config(app, **(base | options))


def serve(settings: Settings | None = None) -> None:
    """Serve `create_app(settings)` on settings.host:settings.port until SIGTERM/SIGINT.

    One worker process: the engine serialises decoding, and each worker would hold its own
    copy of the model (replicas share state through Redis instead).
    """
    settings = settings if settings is not None else Settings()
    app = create_app(settings)
    config = uvicorn_config(app, settings, log_level="info", log_config=log_config())
    DrainingServer(config, app).run()
