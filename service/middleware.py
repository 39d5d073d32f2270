"""How a request's body reaches the routes: bounded in size and in time, and abandoned with
its client.

- Size: bodies over the limit are refused with 413, by Content-Length before anything is
  read, else by the bytes received. Uploads (corpora, files to translate: the paths of
  `uploads`) get `max_upload_bytes`, the rest `max_body_bytes`.
- Time: a client that sends nothing for `body_timeout_s` gets 408 and its connection closed,
  so stalled bodies do not hold connections and memory forever.
- Uploads: the key its path needs is checked from the headers before a byte is read (a client
  without it costs nothing), and the body streams through to the route, which spools it;
  other bodies (small by their limit) are read whole here and replayed to the app.
- A client that goes away before its answer cancels its request: its texts leave the
  decoding queue instead of being decoded for nobody.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BadRequest, PayloadTooLarge, RequestTimeout, ServiceError, error_response

# Called with the request's headers before an upload's body is read; raises to refuse it.
CheckHeaders = Callable[[Headers], None]


class RequestBodies:
    """The ASGI middleware of the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        max_upload_bytes: int,
        uploads: Mapping[str, CheckHeaders],
        body_timeout_s: float,
        on_client_gone: Callable[[], None] = lambda: None,
    ) -> None:
        self.app = app
        # upload path pattern -> the check of its request's headers
        self.uploads = [(re.compile(path), check) for path, check in uploads.items()]
        self.limits = {"max_body_bytes": max_bytes, "max_upload_bytes": max_upload_bytes}
        self.body_timeout_s = body_timeout_s
        self.on_client_gone = on_client_gone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        check = next((c for p, c in self.uploads if p.fullmatch(scope["path"])), None)
        upload = check is not None
        name = "max_upload_bytes" if upload else "max_body_bytes"
        max_bytes = self.limits[name]
        too_large = PayloadTooLarge(
            f"request body exceeds {name}={max_bytes} bytes", limit=name, max=max_bytes
        )
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        try:
            if declared is not None:
                if not declared.isdigit():
                    raise BadRequest("invalid Content-Length")
                if int(declared) > max_bytes:
                    raise too_large
            if check is not None:
                check(headers)
        except ServiceError as e:
            return await error_response(e)(scope, receive, send)
        if upload:
            return await self._stream(scope, receive, send, max_bytes, too_large)
        chunks, size, more = [], 0, True
        while more:
            try:
                message = await self._next(receive)
            except RequestTimeout as e:
                return await error_response(e, {"Connection": "close"})(scope, receive, send)
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > max_bytes:
                return await error_response(too_large)(scope, receive, send)
            more = message.get("more_body", False)
        await self._answer(scope, b"".join(chunks), receive, send)

    async def _next(self, receive: Receive) -> Message:
        """The next body message, or RequestTimeout after `body_timeout_s` of silence."""
        try:
            return await asyncio.wait_for(receive(), self.body_timeout_s)
        except TimeoutError:
            raise RequestTimeout(
                f"no request body received for {self.body_timeout_s:g} s"
            ) from None

    async def _stream(
        self, scope: Scope, receive: Receive, send: Send, max_bytes: int, too_large: ServiceError
    ) -> None:
        """Pass the body through as it arrives, counting bytes and silence. Over the limit or
        silent too long, the client is answered here (413, 408) and the app is told the
        client left, so it stops reading; whatever it then sends is dropped."""
        size, started, answered = 0, False, False

        async def counted() -> Message:
            nonlocal size, answered
            try:
                message = await self._next(receive)
                if message["type"] == "http.request":
                    size += len(message.get("body", b""))
                    if size > max_bytes:
                        raise too_large
                return message
            except ServiceError as e:
                if not started and not answered:
                    answered = True
                    await error_response(e, {"Connection": "close"})(scope, receive, send)
                return {"type": "http.disconnect"}

        async def sending(message: Message) -> None:
            nonlocal started
            if not answered:
                started = True
                await send(message)

        await self.app(scope, counted, sending)

    async def _answer(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """Run the app on the read body while listening for the client's disconnect; it
        cancels the app unless the answer has started."""
        gone = asyncio.Event()
        started = False
        replay: list[Message] = [{"type": "http.request", "body": body}]

        async def replayed() -> Message:
            if replay:
                return replay.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        app = asyncio.ensure_future(self.app(scope, replayed, sending))

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            if not started and not app.done():
                self.on_client_gone()
                app.cancel()

        listener = asyncio.ensure_future(listen())
        try:
            await app
        except asyncio.CancelledError:
            if not gone.is_set():
                raise  # cancelled from outside (shutdown), not by the client leaving
        finally:
            listener.cancel()
