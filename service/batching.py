"""Micro-batching: concurrent requests share decoding batches, behind a bounded queue.

Requests wait at most `wait_s` for company, then the sentences of every waiting request with
the same model and options (up to `max_batch` sentences) decode as one batch in a worker
thread. The queue is bounded in texts, the unit that admission and `max_texts` count (a text
may hold many sentences): a request that does not fit is refused at once (`Overloaded`, 503
with Retry-After) instead of waiting without limit, and a request within the limits always
fits an empty queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from service.errors import NotReady, Overloaded
from service.metrics import Metrics

# decode(key, texts, neighbours or None, sources or None) -> one result per text, in order;
# blocking. sources: each text's encoding made by retrieval (None where there is none).
DecodeFn = Callable[
    [Any, list[str], list[list[tuple[str, str]]] | None, list[Any] | None], list[Any]
]


@dataclass(eq=False)
class _Item:
    key: Hashable
    texts: list[str]  # the sentences to decode
    neighbours: list[list[tuple[str, str]]] | None
    sources: list[Any] | None
    future: asyncio.Future[list[Any]]
    weight: int  # the request's texts, what the queue's bound counts


class DecodeBatcher:
    """One consumer task (`run`) draining a bounded queue into shared decoding batches."""

    def __init__(
        self,
        decode: DecodeFn,
        metrics: Metrics,
        max_queued: int,
        max_batch: int,
        wait_s: float,
    ) -> None:
        self._decode = decode
        self._metrics = metrics
        self.max_queued, self.max_batch, self.wait_s = max_queued, max_batch, wait_s
        self._pending: deque[_Item] = deque()
        self._queued = 0  # texts waiting (not yet in a running batch)
        self._wake = asyncio.Event()
        self._closed = False

    @property
    def queued(self) -> int:
        return self._queued

    async def submit(
        self,
        key: Hashable,
        texts: Sequence[str],
        neighbours: list[list[tuple[str, str]]] | None,
        sources: list[Any] | None = None,
        weight: int | None = None,
    ) -> list[Any]:
        """Queue sentences (`texts`) for decoding and wait for their results (input order);
        `sources`: their encodings, when retrieval made them (the decoder then does not encode
        again); `weight`: how many of the request's texts they are (default: one each)."""
        weight = len(texts) if weight is None else weight
        self.check_room(weight)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Item(key, list(texts), neighbours, sources, future, weight))
        self._set_queued(self._queued + weight)
        self._wake.set()
        return await future

    def check_room(self, n: int) -> None:
        """Refuse at once (Overloaded) when `n` more texts would overflow the queue."""
        if self._closed:
            raise NotReady("shutting down: not admitting requests")
        if self._queued + n > self.max_queued:
            self._metrics.rejections.labels("queue_full").inc()
            raise Overloaded(
                f"decoding queue is full ({self._queued} of queue_size={self.max_queued} texts "
                "waiting); retry shortly",
                limit="queue_size",
                max=self.max_queued,
            )

    def _set_queued(self, n: int) -> None:
        self._queued = n
        self._metrics.queue_depth.set(n)

    def _take(self, key: Hashable) -> list[_Item]:
        """The oldest waiting items with `key`, up to `max_batch` sentences (the first
        always)."""
        batch: list[_Item] = []
        size = 0
        for item in list(self._pending):
            if item.future.done():  # the client went away while waiting
                self._pending.remove(item)
                self._set_queued(self._queued - item.weight)
                continue
            if item.key != key or (batch and size + len(item.texts) > self.max_batch):
                continue
            batch.append(item)
            size += len(item.texts)
            self._pending.remove(item)
            self._set_queued(self._queued - item.weight)
        return batch

    async def run(self) -> None:
        """Consume forever (the app runs this as a task and cancels it on shutdown)."""
        try:
            while True:
                if not self._pending:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                key = self._pending[0].key
                waiting = sum(len(i.texts) for i in self._pending if i.key == key)
                if self.wait_s > 0 and waiting < self.max_batch:
                    await asyncio.sleep(self.wait_s)  # let concurrent requests join
                batch = self._take(key)
                if batch:
                    await self._run_batch(key, batch)
        finally:
            self._closed = True
            for item in self._pending:
                if not item.future.done():
                    item.future.set_exception(NotReady("shutting down"))
            self._pending.clear()
            self._set_queued(0)

    async def _run_batch(self, key: Hashable, batch: list[_Item]) -> None:
        texts = [t for item in batch for t in item.texts]
        neighbours = None
        if any(item.neighbours is not None for item in batch):
            neighbours = [
                n for item in batch for n in (item.neighbours or [[] for _ in item.texts])
            ]
        sources = None
        if any(item.sources is not None for item in batch):
            sources = [x for item in batch for x in (item.sources or [None] * len(item.texts))]
        self._metrics.batch_texts.observe(len(texts))
        try:
            out = await anyio.to_thread.run_sync(self._decode, key, texts, neighbours, sources)
        except Exception as e:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(e)
            return
        start = 0
        for item in batch:
            part = out[start : start + len(item.texts)]
            start += len(item.texts)
            if not item.future.done():
                item.future.set_result(part)
