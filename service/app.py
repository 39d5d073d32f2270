"""The HTTP application: `create_app(settings)` wires settings, engine, routes and errors.

Nothing heavy happens at import or in `create_app`; the lifespan connects the shared state
(Redis or in-process), loads the model, converges the domains' stores, and starts the
decoding batcher and (unless a separate worker is configured) the store-build worker. A
bundle that is missing or fails verification leaves the app up but not ready (/readyz 503).
On shutdown the app stops admitting, lets in-flight requests finish, then stops its tasks.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
import torch
from fastapi import FastAPI

from index_builder.memories import install_memories
from models.artifacts import ArtifactError
from models.translator import DecodeOptions
from service.backends import open_backends
from service.deps import Service, check_admin
from service.domains import GENERAL_DOMAIN, DomainManager
from service.engine import Limits, TranslationEngine
from service.errors import install_error_handlers
from service.metrics import Metrics
from service.middleware import RequestBodies
from service.result_cache import ResultCache
from service.routes import (
    OPENAPI_TAGS,
    domains,
    files,
    glossary,
    health,
    libretranslate,
    management,
    memory,
    page,
    translate,
)
from service.settings import DOMAIN_PATTERN, Settings
from service.shared import Backends
from service.threads import cpu_budget, torch_threads
from service.worker import run_worker

log = logging.getLogger("ragmt.service")

UPLOAD_PATH = r"/v1/domains/" + DOMAIN_PATTERN.strip("^$") + r"/corpora"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    service: Service = app.state.service
    settings, engine = service.settings, service.engine
    # a restarted lifespan starts afresh
    service.draining, service.drain_deadline, service.tasks = False, None, []
    injected = app.state.backends
    backends = injected if injected is not None else await open_backends(settings)
    service.backends = backends
    manager = DomainManager(
        settings.store_root,
        backends.registry,
        service.metrics,
        settings.domains,
        settings.reconcile_interval_s,
        gpu=engine.gpu_index,
        signing_key=settings.signing_key,
    )
    engine.domains = manager
    engine.results = ResultCache(backends.cache, settings.cache_ttl_s, service.metrics)
    torch.set_num_threads(torch_threads(settings.torch_threads, settings.replicas_per_host))
    await anyio.to_thread.run_sync(engine.load_models, settings.bundle_paths)
    for pair, name in settings.pair_defaults.items():
        try:
            engine.registry.set_default(pair, name)
        except ValueError as e:  # a setting that names the wrong model stops the start
            raise RuntimeError(f"RAGMT_DEFAULT_MODELS: {e}") from None
    await anyio.to_thread.run_sync(service.langid.load)
    if settings.install_memories:  # a fresh clone translates `general` with its memory
        await anyio.to_thread.run_sync(install_shipped, settings, engine)
    await manager.start()
    service.domains = manager
    for line in startup_summary(settings, engine, manager, backends_kind(settings, injected)):
        log.info("%s", line)
    stop = asyncio.Event()
    wait_s = settings.batch_wait_ms / 1000
    service.tasks.append(engine.start_batching(settings.queue_size, settings.batch_size, wait_s))
    if settings.run_worker:
        consumer = f"app-{os.getpid()}-{id(app):x}"
        service.tasks.append(
            asyncio.create_task(
                run_worker(
                    backends,
                    settings.store_root,
                    consumer,
                    stop,
                    model=settings.bundle_path,
                    signing_key=settings.signing_key,
                )
            )
        )
    # What the start loaded (torch's modules, the models, the stores) leaves the collector's
    # full passes, which the interpreter runs in the middle of whatever request is decoding:
    # with the served models and a store loaded, one pass took 74-95 ms on a 2-core host, and
    # next to nothing after this (python -m benchmarks.gc_pause).
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()  # a stopped app's objects are the collector's again
        service.draining = True
        left = settings.drain_timeout_s
        if service.drain_deadline is not None:  # the server drained already: what is left
            left = max(0.0, service.drain_deadline - time.monotonic())
        if not await manager.wait_idle(left):
            log.warning("shutting down with requests still in flight")
        stop.set()
        for task in service.tasks:
            task.cancel()
        await asyncio.gather(*service.tasks, return_exceptions=True)
        await manager.stop()
        if injected is None:  # injected backends belong to the caller
            await backends.close()


def install_shipped(settings: Settings, engine: Any) -> None:
    """Build the shipped memories the stores directory lacks (blocking; seconds). A stores
    directory that cannot take them (read-only, full) is logged and served as it is."""
    served = [pair for loaded in engine.models for pair in loaded.pairs]
    try:
        install_memories(
            settings.store_root,
            served,
            settings.domains,
            settings.signing_key,
            log=lambda line: log.info("%s", line),
        )
    except (OSError, ArtifactError, ValueError) as e:
        log.warning("shipped memory not installed in %s: %s", settings.store_root, e)


def backends_kind(settings: Settings, injected: Backends | None) -> str:
    if injected is not None:
        return "shared state: injected backends"
    if settings.redis_url is None:
        return "shared state: in-process (one replica; set RAGMT_REDIS_URL for several)"
    return f"shared state: Redis (key prefix {settings.redis_prefix})"


def startup_summary(
    settings: Settings, engine: TranslationEngine, manager: DomainManager, state: str
) -> list[str]:
    """What this replica serves, one fact a line: an operator reads it in the first log lines."""
    lines = []
    defaults = engine.registry.defaults
    for m in engine.models:
        card = m.card
        pairs = ", ".join(f"{s}->{t}" for s, t in card.pairs)
        size = f", {card.parameters / 1e6:.1f}M parameters" if card.parameters else ""
        memory = ", reads retrieved pairs" if m.uses_memory else ""
        default = [f"{s}->{t}" for (s, t), name in defaults.items() if name == m.name]
        serves = f", default for {', '.join(default)}" if default else ""
        lines.append(
            f"model {m.name}: {card.architecture} {pairs}, {card.decoding} decoding{size}"
            f"{memory}{serves} (weights {m.weights_sha256[:12]}"
            f"{'' if m.quantize == 'none' else ', ' + m.quantize}"
            f"{f' with {m.int8_weights} weights' if m.int8_weights else ''}"
            f"{f' and {m.native_isa} kernels' if m.native_isa else ''}, {m.path})"
        )
    for name, reason in engine.registry.failed.items():
        lines.append(f"model {name}: not served ({reason})")
    if not engine.models:
        lines.append(f"model: not loaded ({engine.not_ready_reason})")
    threads = torch.get_num_threads()
    share = (
        "as configured"
        if settings.torch_threads
        else f"of {cpu_budget()} CPUs, {settings.replicas_per_host} replicas per host"
    )
    lines.append(f"device {engine.device}, {threads} torch threads ({share})")
    lines.append(f"stores directory {settings.store_root.resolve()}")
    for domain in manager.known_domains():
        active = manager.state(domain).active
        if active is not None:
            m = active.manifest
            lines.append(
                f"domain {domain}: active version {active.version} "
                f"({m.get('method')}, {m.get('pairs')} pairs)"
            )
        elif domain == GENERAL_DOMAIN:
            lines.append(f"domain {domain}: no store, translated without retrieval")
        else:
            lines.append(f"domain {domain}: no active store (503 until a version is activated)")
    admin = "on" if settings.admin_key is not None else "off (RAGMT_ADMIN_KEY unset)"
    n_keys = len(settings.api_keys) + len(settings.key_entries)
    keys = f"{n_keys} keys required" if settings.keys_required else "off (open)"
    signed = "required" if settings.signing_key else "not required (RAGMT_STORE_SIGNING_KEY unset)"
    lines.append(f"store signatures {signed}")
    lines.append(f"management routes {admin}; client API keys {keys}")
    worker = "in this process" if settings.run_worker else "off (a separate `ragmt worker`)"
    lines.append(f"{state}; store builds {worker}")
    return lines


def create_app(settings: Settings | None = None, backends: Backends | None = None) -> FastAPI:
    """Build the app; models and stores load when the lifespan starts (not here).

    `backends` replaces what the settings would open (tests run two replicas on one set).
    """
    settings = settings if settings is not None else Settings()
    options = DecodeOptions(
        beam_size=settings.beam_size,
        length_penalty=settings.length_penalty,
        split_sentences=settings.split_sentences,
        neighbours_k=settings.neighbours_k,
    )
    limits = Limits(
        max_texts=settings.max_texts,
        max_chars=settings.max_chars,
        max_beam_size=settings.max_beam_size,
        options=options,
    )
    metrics = Metrics()
    engine = TranslationEngine(
        limits,
        device=settings.device,
        cache_ttl_s=settings.cache_ttl_s,
        metrics=metrics,
        quantize=settings.quantize,
    )
    app = FastAPI(
        title="ragmt translation service",
        version="0.2.0",
        lifespan=lifespan,
        openapi_tags=OPENAPI_TAGS,
        docs_url=None,  # /docs and /redoc: service/routes/page.py, with local assets
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.backends = backends
    app.state.service = Service(settings=settings, metrics=metrics, engine=engine)
    routers = (
        health,
        translate,
        libretranslate,
        domains,
        management,
        memory,
        page,
        glossary,
        files,
    )
    for module in routers:
        app.include_router(module.router)
    app.add_middleware(
        RequestBodies,
        max_bytes=settings.max_body_bytes,
        max_upload_bytes=settings.max_upload_bytes,
        uploads={
            UPLOAD_PATH: lambda headers: check_admin(settings, headers),
            files.UPLOAD_PATH: files.check_upload_key(app.state.service.keyring),
        },
        body_timeout_s=settings.body_timeout_s,
        on_client_gone=metrics.rejections.labels("client_gone").inc,
    )
    install_error_handlers(app)
    return app
