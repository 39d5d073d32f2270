"""The HTTP application: `create_app(settings)` wires settings, engine, routes and errors.

Nothing heavy happens at import or in `create_app`; the lifespan loads the model. A bundle
that is missing or fails verification leaves the app up but not ready (/readyz 503).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.engine import Limits, TranslationEngine
from service.errors import (
    BadRequest,
    NotReady,
    PayloadTooLarge,
    error_response,
    install_error_handlers,
)
from service.schemas import (
    ErrorResponse,
    InfoResponse,
    StatusResponse,
    TranslateRequest,
    TranslateResponse,
)
from service.settings import Settings


def get_engine(request: Request) -> TranslationEngine:
    return request.app.state.engine


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


EngineDep = Annotated[TranslationEngine, Depends(get_engine)]
SettingsDep = Annotated[Settings, Depends(get_settings)]

_ERRORS = {s: {"model": ErrorResponse} for s in (400, 404, 413, 422, 500, 503)}
router = APIRouter()


@router.post("/v1/translate", response_model=TranslateResponse, responses=_ERRORS)
async def translate(body: TranslateRequest, engine: EngineDep) -> TranslateResponse:
    return TranslateResponse.from_result(await engine.translate_batch(body.to_engine()))


@router.get("/livez", response_model=StatusResponse)
async def livez() -> StatusResponse:
    return StatusResponse(status="ok")


@router.get("/readyz", response_model=StatusResponse, responses={503: {"model": ErrorResponse}})
async def readyz(engine: EngineDep) -> StatusResponse:
    if not engine.ready:
        raise NotReady(engine.not_ready_reason or "not ready")
    return StatusResponse(status="ready")


@router.get("/info", response_model=InfoResponse)
async def info(engine: EngineDep, settings: SettingsDep) -> InfoResponse:
    return InfoResponse.of(engine, settings.max_body_bytes)


class BodySizeLimit:
    """Refuse bodies over `max_bytes` with 413: by Content-Length, then by the bytes received.

    The body is read here (it is small by construction) and replayed to the app.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = PayloadTooLarge(
            f"request body exceeds {self.max_bytes} bytes",
            limit="max_body_bytes",
            max=self.max_bytes,
        )
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                return await error_response(BadRequest("invalid Content-Length"))(
                    scope, receive, send
                )
            if int(declared) > self.max_bytes:
                return await error_response(too_large)(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await error_response(too_large)(scope, receive, send)
            more = message.get("more_body", False)
        replay: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    engine: TranslationEngine = app.state.engine
    await anyio.to_thread.run_sync(engine.load_default, app.state.settings.bundle_path)
    yield


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; the model loads when the lifespan starts (not here, not at import)."""
    settings = settings if settings is not None else Settings()
    limits = Limits(
        max_texts=settings.max_texts,
        max_chars=settings.max_chars,
        beam_size=settings.beam_size,
        max_beam_size=settings.max_beam_size,
    )
    app = FastAPI(title="ragmt translation service", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.engine = TranslationEngine(limits, device=settings.device)
    app.include_router(router)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    return app
