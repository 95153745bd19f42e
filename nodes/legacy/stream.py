"""The response to one legacy POST: one JSON body, or an SSE stream once anything must stream.

Layer: node, legacy adapter, transport. Writes ASGI messages; knows nothing of sessions or tools.
A call that completes at once answers ``application/json``; the first server-to-client message
turns the response into ``text/event-stream`` (200, ``X-Accel-Buffering: no``), which then ends
with the call's JSON-RPC response. Writes are serialized, so keep-alive comments never split an
event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from nodes.legacy.wire import SSE_KEEPALIVE, encode, sse_event

Send = Callable[[dict[str, Any]], Awaitable[None]]

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


class StreamClosed(Exception):
    """A write failed: the client went away (or the server closed the connection)."""


class EventStream:
    """One response, written through ASGI ``send``."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = anyio.Lock()
        self.streaming = False
        self.closed = False

    async def event(self, message: Mapping[str, Any]) -> None:
        """Send one JSON-RPC message as an SSE event (opening the stream first if needed)."""
        async with self._lock:
            await self._open()
            await self._body(sse_event(message), more=True)

    async def keepalive(self) -> None:
        """An SSE comment, if the stream is open: proxies see traffic, and a client that went
        away is noticed when the write fails."""
        async with self._lock:
            if self.streaming and not self.closed:
                await self._body(SSE_KEEPALIVE, more=True)

    async def finish(self, message: Mapping[str, Any] | None, status: int = 200) -> None:
        """End the response with ``message``: the last event of a stream, or a JSON body.
        None ends a stream without a response (the client cancelled its request)."""
        async with self._lock:
            if self.closed:
                return
            if self.streaming:
                await self._body(b"" if message is None else sse_event(message), more=False)
            else:
                body = b"" if message is None else encode(message)
                headers = [(b"content-length", str(len(body)).encode("ascii"))]
                if body:
                    headers.append((b"content-type", b"application/json"))
                await self._write(
                    {"type": "http.response.start", "status": status, "headers": headers}
                )
                await self._body(body, more=False)
            self.closed = True

    async def _open(self) -> None:
        if self.streaming:
            return
        self.streaming = True
        await self._write({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})

    async def _body(self, data: bytes, *, more: bool) -> None:
        await self._write({"type": "http.response.body", "body": data, "more_body": more})

    async def _write(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise StreamClosed
        try:
            await self._send(message)
        except Exception as exc:
            # Whatever the server raises for a vanished peer (a BrokenResourceError, OSError, ...).
            self.closed = True
            raise StreamClosed from exc
