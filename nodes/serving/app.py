"""The production entry: one node as an ASGI app that owns its Redis client through the lifespan.

Layer: nodes (serving). ``create_app`` is the factory an ASGI server imports
(``uvicorn --factory nodes.serving.app:create_app``; ``notes-cluster node`` runs exactly that, see
``nodes.serving.http_server``). It reads its settings from the environment:

    NOTES_CLUSTER_CONFIG      path of the TOML configuration (required)
    NOTES_CLUSTER_REDIS       redis:// URL of the store (default redis://127.0.0.1:6379/0)
    NOTES_CLUSTER_NODE_ID     this node's name in logs and statistics (default: host-pid)
    NOTES_CLUSTER_PUBLIC_URL  base of setup links when the config sets no ``public_url``
    NOTES_CLUSTER_LOG_LEVEL   when set, logging at this level (``nodes.logging_setup``)
    NOTES_CLUSTER_LOG_JSON    1: log JSON lines

The app is built when the server starts it (lifespan startup: open Redis, check its eviction
policy, resolve the durability mode, build the node, its legacy adapter and the operator's
middleware: ``/healthz``, ``/readyz``, metrics) and closed after the server stopped serving
(lifespan shutdown: close Redis). Between the two, HTTP requests go to ``nodes.http``'s app.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from nodes.http import ASGIApp, ASGIScope, Receive, Send, StreamableHTTPApp, make_app
from nodes.legacy import LegacyLimits, open_legacy_adapter
from nodes.logging_setup import configure_logging
from nodes.metrics import NodeMetrics, metered
from nodes.protocol import Node
from nodes.serving.durability import resolve_wait_replicas
from nodes.serving.operator import OperatorEndpoints, OperatorOptions, with_operator_endpoints
from nodes.serving.settings import ClusterSettings, load_settings
from store.client_factory import blocking_client, open_note_client
from store.notes import DEFAULT_PREFIX, NoteStore
from store.sessions import SessionStore

log = logging.getLogger("nodes.serving.app")

CONFIG_ENV = "NOTES_CLUSTER_CONFIG"
REDIS_ENV = "NOTES_CLUSTER_REDIS"
NODE_ID_ENV = "NOTES_CLUSTER_NODE_ID"
PUBLIC_URL_ENV = "NOTES_CLUSTER_PUBLIC_URL"
LOG_LEVEL_ENV = "NOTES_CLUSTER_LOG_LEVEL"
LOG_JSON_ENV = "NOTES_CLUSTER_LOG_JSON"
SERVER_TIMES_BODIES_ENV = "NOTES_CLUSTER_SERVER_TIMES_BODIES"
"""Set to 1 by ``notes-cluster node`` when its server bounds body reads itself (unless it fell
back to uvicorn's own protocol: ``nodes.serving.http_server.hooks_missing``)."""
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True)
class NodeOptions:
    """Everything one node process needs besides the cluster's shared settings."""

    redis_url: str
    node_id: str
    embedded: bool = False
    prefix: str = DEFAULT_PREFIX
    public_url: str | None = None
    legacy_limits: LegacyLimits | None = None
    ops: OperatorOptions = field(default_factory=OperatorOptions)
    """Metrics (their own port) of this node."""
    server_times_bodies: bool = False
    """The ASGI server bounds each body's arrival (``nodes.serving.http_server`` does: a cancel
    scope per request in the app costs a fifth more of the node's instructions per flow);
    when False the app does, with a deadline of its own around the read (any other server)."""
    server_routes_metrics_port: bool = False
    """The ASGI server hands every connection on the metrics port to ``NodeApp.serve_metrics``
    (``nodes.serving.http_server``'s ``port_apps``), so the app does not check each request's port;
    when False it does (any other server)."""


class NodeApp:
    """An ASGI app serving one node; opens its store at lifespan startup, closes it at shutdown.
    ``drain`` (called by the server on SIGTERM) ends legacy streams."""

    def __init__(self, settings: ClusterSettings, options: NodeOptions) -> None:
        self.settings = settings
        self.options = options
        self.http: StreamableHTTPApp | None = None
        """The node's HTTP app, once started."""
        self.served: ASGIApp | None = None
        """What requests go to: ``http`` inside the operator's middleware (health, metrics)."""
        self.operator: OperatorEndpoints | None = None
        self.metrics_app: ASGIApp | None = None
        """What ``serve_metrics`` serves, once started with a metrics port."""
        self._stack = AsyncExitStack()
        self.on_build: list[Callable[[StreamableHTTPApp], None]] = []
        """Called with the HTTP app once built (before serving): a place to add routes."""

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        served = self.served
        if served is not None and scope["type"] == "http":
            await served(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif served is not None:
            await served(scope, receive, send)
        else:
            # A server without lifespan support never started the node.
            await _plain_answer(send, 503, b"node not started")

    async def serve_metrics(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        """A request on the metrics port, handed over by the server
        (``NodeOptions.server_routes_metrics_port``): the metrics, at any path."""
        if scope["type"] != "http":
            return
        metrics = self.metrics_app
        if metrics is None:
            await _plain_answer(send, 503, b"metrics not started")
            return
        await metrics(scope, receive, send)

    async def drain(self) -> None:
        """The server has stopped accepting: ``/readyz`` answers 503 from now on, and legacy
        streams end."""
        if self.operator is not None:
            self.operator.readiness.draining = True
        if self.http is not None:
            await self.http.drain()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._start()
                except Exception as exc:
                    log.exception("node failed to start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.served = self.http = self.operator = self.metrics_app = None
                await self._stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        o, s = self.options, self.settings
        stack = self._stack
        # The store's own client (store.resp_client) for the notes and the legacy sessions,
        # whose blocking reads get a connection of their own.
        notes_client = await stack.enter_async_context(
            open_note_client(o.redis_url, embedded=o.embedded, client_name=o.node_id)
        )
        limits = o.legacy_limits or LegacyLimits()
        blocking = blocking_client(notes_client, limits.inbox_block_ms)
        if blocking is not None:
            await stack.enter_async_context(blocking)
        store = NoteStore(
            notes_client,
            prefix=o.prefix,
            replay_grace_ms=s.replay_grace_ms,
            wait_replicas=await resolve_wait_replicas(notes_client, s.wait_replicas),
        )
        metrics = None if o.ops.metrics_port is None else NodeMetrics()
        served = store if metrics is None else metered(store, metrics)
        config = replace(s.node, node_id=o.node_id)
        if config.public_url is None and o.public_url is not None:
            config = replace(config, public_url=o.public_url)
        node = Node(config, served)
        sessions = SessionStore(notes_client, prefix=o.prefix, blocking=blocking)
        legacy = await stack.enter_async_context(
            open_legacy_adapter(node, sessions, o.legacy_limits)
        )
        operator = stack.enter_context(
            with_operator_endpoints(node, store.check_ready, metrics, o.ops, legacy)
        )
        http = make_app(
            node,
            s.tokens,
            allowed_origins=s.allowed_origins,
            legacy=legacy,
            body_timeout_s=None if o.server_times_bodies else s.timeouts.body_s,
        )
        for hook in self.on_build:
            hook(http)
        self.operator = operator
        self.http = http
        self.served = operator.wrap(http, route_metrics_port=not o.server_routes_metrics_port)
        self.metrics_app = operator.metrics_endpoint()
        log.info("node %s serving, store %s", o.node_id, "embedded" if o.embedded else "Redis")


async def _plain_answer(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app() -> NodeApp:
    """The ASGI app factory of the production entry: settings from the environment (above)."""
    level = os.environ.get(LOG_LEVEL_ENV)
    if level:
        configure_logging(level, json_lines=os.environ.get(LOG_JSON_ENV) == "1")
    path = os.environ.get(CONFIG_ENV)
    if not path:
        raise RuntimeError(f"set {CONFIG_ENV} to the node's TOML configuration file")
    options = NodeOptions(
        redis_url=os.environ.get(REDIS_ENV, DEFAULT_REDIS_URL),
        node_id=os.environ.get(NODE_ID_ENV) or f"{socket.gethostname()}-{os.getpid()}",
        public_url=os.environ.get(PUBLIC_URL_ENV) or None,
        server_times_bodies=os.environ.get(SERVER_TIMES_BODIES_ENV) == "1",
    )
    return NodeApp(load_settings(Path(path)), options)
