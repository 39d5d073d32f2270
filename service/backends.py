"""Open the shared-state backends the settings ask for: Redis when configured, else in-process."""

from __future__ import annotations

import logging

from service.settings import Settings
from service.shared import Backends, memory_backends

log = logging.getLogger("ragmt.service")


async def open_backends(settings: Settings) -> Backends:
    """`redis_backends(redis_url, redis_prefix)` with a Redis URL, else `memory_backends()`.

    The Redis module is imported only when used, so a single replica needs no Redis at all.
    """
    if not settings.redis_url:
        return memory_backends()
    from service.redis_backend import redis_backends

    backends = await redis_backends(settings.redis_url, settings.redis_prefix)
    log.info("shared state in Redis (prefix %s)", settings.redis_prefix)
    return backends
