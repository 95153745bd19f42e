"""Liveness and readiness: ``GET /healthz`` and ``GET /readyz``, answered before anything else.

Layer: node, transport shell (ASGI middleware around the HTTP app; it does not import it). Both
endpoints take no credentials and read no body; they say nothing a stranger could use.

- ``/healthz``: the process serves HTTP. It touches neither Redis nor the node: 200 always.
- ``/readyz``: the store answers and holds the node's scripts (``ReadinessProbe``, e.g.
  ``NoteStore.check_ready``): 200, else 503. A hostile poller must not be able to load Redis
  through it, so one probe runs at a time and its answer is reused for ``READY_CACHE_S``; a probe
  that takes longer than ``READY_TIMEOUT_S`` counts as not ready. The reason goes to the log (once
  per probe), never to the client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

log = logging.getLogger("nodes.health")

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
HEALTH_PATHS = frozenset({HEALTH_PATH, READY_PATH})
READY_CACHE_S = 1.0
"""How long one readiness answer is reused: a load balancer polls every few seconds, so a second
is fresh enough, and any number of pollers then cost Redis at most one probe per second."""
READY_TIMEOUT_S = 1.0
"""A probe slower than this is "not ready": a load balancer's own check times out in seconds."""

ReadinessProbe = Callable[[], Awaitable[None]]
"""Raises when the node cannot serve (store unreachable, scripts missing)."""

ASGIScope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[ASGIScope, Receive, Send], Awaitable[None]]


class Readiness:
    """The cached answer of one node's readiness probe."""

    def __init__(
        self,
        probe: ReadinessProbe,
        *,
        cache_s: float = READY_CACHE_S,
        timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self._probe = probe
        self._cache_s = cache_s
        self._timeout_s = timeout_s
        self._lock = anyio.Lock()
        self._checked_at: float | None = None
        self._ready = False
        self.draining = False
        """Set when the node stops taking new work (SIGTERM): it is then never ready."""

    async def ready(self) -> bool:
        """Whether the node is ready, probing at most once per ``cache_s``."""
        if self.draining:
            return False
        async with self._lock:
            now = anyio.current_time()
            if self._checked_at is None or now - self._checked_at >= self._cache_s:
                self._ready = await self._run_probe()
                self._checked_at = anyio.current_time()
            return self._ready

    async def _run_probe(self) -> bool:
        try:
            with anyio.fail_after(self._timeout_s):
                await self._probe()
        except TimeoutError:
            log.warning("not ready: the store did not answer within %.1f s", self._timeout_s)
            return False
        except Exception as exc:
            log.warning("not ready: %s", exc)
            return False
        return True


def _json(status: int, body: dict[str, str]) -> tuple[int, bytes]:
    return status, json.dumps(body).encode("ascii")


_ALIVE = _json(200, {"status": "ok"})
_READY = _json(200, {"status": "ready"})
_NOT_READY = _json(503, {"status": "unavailable"})
_METHOD = _json(405, {"status": "method not allowed"})


async def _send(send: Send, answer: tuple[int, bytes], head: bool) -> None:
    status, body = answer
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"cache-control", b"no-store"),
    ]
    if status == 405:
        headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


def with_health(app: ASGIApp, readiness: Readiness) -> ASGIApp:
    """``app`` with ``/healthz`` and ``/readyz`` answered in front of it.

    Not a coroutine of its own: any other request gets ``app``'s awaitable itself, so the
    middleware adds no frame to the request's await chain (every resumption of the request
    passes through each frame of it)."""

    def health_app(scope: ASGIScope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http" and scope.get("path") in HEALTH_PATHS:
            return _answer(scope, send, readiness)
        return app(scope, receive, send)

    return health_app


async def _answer(scope: ASGIScope, send: Send, readiness: Readiness) -> None:
    path = scope["path"]
    method = scope["method"]
    if method not in ("GET", "HEAD"):
        await _send(send, _METHOD, head=False)
    elif path == HEALTH_PATH:
        await _send(send, _ALIVE, head=method == "HEAD")
    else:
        answer = _READY if await readiness.ready() else _NOT_READY
        await _send(send, answer, head=method == "HEAD")
