"""HTTP with no socket: an httpx transport that runs ASGI apps in-process and streams their
responses.

Layer: cluster. httpx's own ``ASGITransport`` runs the app to its end and only then hands the
buffered response over, so a response that streams while the request waits (a legacy
2025-11-25 ``tools/call``, whose SSE stream carries an ``elicitation/create`` the client must
answer on another request before the call ends) never reaches the client in time. Here the app
runs as a task of the transport's nursery and each ``http.response.body`` chunk goes to the
client through a memory channel as it is sent. The one library transport that streams
(fastmcp's ``StreamingASGITransport``) is built on ``httpx2``'s types and would make fastmcp a
dependency of the cluster, so this one is written for ``httpx`` here.

What a real server would do, the transport does: the request body arrives whole (one
``http.request``); closing the response (or a cancelled request) reaches the app as
``http.disconnect`` on its next ``receive()``, and what it sends after that is dropped; an app
that fails before starting its response is answered 500, as uvicorn and hypercorn answer. The
app is chosen by the URL's host (``memory_urls``). Everything runs on the caller's trio
scheduler: no thread, no socket, so a deterministic run (``cluster.deterministic``) orders it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping, MutableMapping
from typing import Any

import httpx
import trio

from nodes.http import ASGIApp

log = logging.getLogger("cluster.memory_http")

Message = MutableMapping[str, Any]


def memory_urls(hosts: list[str], endpoint: str = "/mcp") -> list[str]:
    """The URLs of apps served under ``hosts``."""
    return [f"http://{host}{endpoint}" for host in hosts]


class _Body(httpx.AsyncByteStream):
    """A response body as the app sends it; closing it disconnects the client."""

    def __init__(self, chunks: trio.MemoryReceiveChannel[bytes], exchange: _Exchange) -> None:
        self._chunks = chunks
        self._exchange = exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        self._exchange.disconnect()
        await self._chunks.aclose()


class _Exchange:
    """One request's side of the app: its ``receive`` and ``send``."""

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body
        self._gone = trio.Event()
        self.started = trio.Event()
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.ended = False
        self.chunks_in, self.chunks_out = trio.open_memory_channel[bytes](math.inf)

    def disconnect(self) -> None:
        self._gone.set()

    async def receive(self) -> Message:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if self._gone.is_set() or self.ended:
            return  # the client went away (or the response ended): dropped, as a server does
        if kind == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", ())]
            self.started.set()
        elif kind == "http.response.body" and self.started.is_set():
            chunk = bytes(message.get("body", b""))
            if chunk:
                self.chunks_in.send_nowait(chunk)
            if not message.get("more_body", False):
                self.end()

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.chunks_in.close()


class MemoryASGITransport(httpx.AsyncBaseTransport):
    """Requests to ``http://<host>/...`` run ``apps[host]`` as a task of ``nursery``."""

    def __init__(self, apps: Mapping[str, ASGIApp], nursery: trio.Nursery) -> None:
        self.apps = dict(apps)
        self.nursery = nursery

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        app = self.apps.get(host)
        if app is None:
            raise httpx.ConnectError(f"no in-process app at {host}", request=request)
        exchange = _Exchange(await request.aread())
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?", 1)[0],
            "query_string": request.url.query,
            "root_path": "",
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "client": ("127.0.0.1", 0),
            "server": (host, request.url.port or 80),
            "state": {},
        }
        self.nursery.start_soon(self._run, app, scope, exchange)
        try:
            await exchange.started.wait()
        except BaseException:
            exchange.disconnect()  # the caller gave up (a timeout, a cancelled flow)
            raise
        if exchange.status == 0:
            exchange.disconnect()
            return httpx.Response(500, headers=[(b"content-length", b"0")], request=request)
        return httpx.Response(
            exchange.status,
            headers=exchange.headers,
            stream=_Body(exchange.chunks_out, exchange),
            request=request,
        )

    async def _run(self, app: ASGIApp, scope: dict[str, Any], exchange: _Exchange) -> None:
        try:
            await app(scope, exchange.receive, exchange.send)
        except Exception:
            # A server logs it and answers 500 (or cuts a started response short).
            log.exception("in-process app failed")
        finally:
            exchange.end()
            exchange.started.set()
