"""In-process clusters: N nodes as trio tasks over one store, and a transport that needs no sockets.

Layer: cluster. Starts nodes over a store; the transport implements the load generator's wire
contract (``loadgen.transport``), as its HTTP twin does. Each node owns its own Redis connection
pool, so stopping a node (cancelling its scope) is as abrupt as a crash: the node's in-flight
requests are cancelled and nothing it held survives, except what is in the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any
from urllib.parse import urlencode

import orjson
import trio

from cluster.store_faults import StoreFaults
from cluster.stores import seed_demo, store_url
from loadgen.transport import NodeDown, Reply, request_headers
from nodes.auth import TokenTable
from nodes.config import NodeConfig
from nodes.protocol import Node, RequestContext
from nodes.serving.durability import AUTO, WaitReplicas, resolve_wait_replicas
from nodes.setup_page import SetupPages
from store.api import NoteStoreAPI
from store.client_factory import STREAM_TIMEOUT_S, open_note_client
from store.notes import DEFAULT_PREFIX, REPLAY_GRACE_MS, WAIT_TIMEOUT_MS, NoteStore


@dataclass(frozen=True)
class StoreOptions:
    """How each node opens its store (defaults: as in production)."""

    wait_replicas: WaitReplicas = AUTO
    """Replicas every write must reach before the node answers (see ``NoteStore`` and
    ``nodes.serving.durability``: "auto" waits for one where every master has a replica)."""
    wait_timeout_ms: int = WAIT_TIMEOUT_MS
    stream_timeout_s: float = STREAM_TIMEOUT_S
    """A Redis reply slower than this is an unknown outcome (fault runs shorten it)."""
    client_name: str | None = None
    """Prefix of the nodes' Redis connection names (``<name>-<node index>``), so a fault
    injector can find exactly these connections in ``CLIENT LIST``; None: unnamed."""
    connect_url: str | None = None
    """Where the nodes reach Redis instead of the store's URL (a reply-dropping proxy in front
    of it, ``cluster.reply_dropping_proxy``); None: the store's URL."""
    store_faults: StoreFaults | None = None
    """The store seam's nemeses (``cluster.store_faults``): every node's scripts go through
    it. Set by ``simulate --faults lost-reply,stall`` on the embedded store."""
    on_lost_reply: Callable[[str, str, float], None] | None = None
    """Told of every store reply a node lost (its node id, what it sent, the seconds it waited;
    ``NoteStore.lost_reply_observer``): a simulation records them as observed faults."""
    wrap: Callable[[NoteStoreAPI], NoteStoreAPI] | None = None
    """Test-only: what each node talks to instead of its store (a test plants a misbehaving
    store this way, to see the checker catch it). Never set by the CLI or a config file."""


async def serve_inprocess_node(
    config: NodeConfig,
    redis_url: str,
    *,
    embedded: bool,
    prefix: str = DEFAULT_PREFIX,
    replay_grace_ms: int = REPLAY_GRACE_MS,
    options: StoreOptions | None = None,
    task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one in-process node until cancelled; report the Node once its store is open."""
    options = options or StoreOptions()
    name = None if options.client_name is None else f"{options.client_name}-{config.node_id}"
    async with open_note_client(
        options.connect_url or redis_url,
        embedded=embedded,
        client_name=name,
        stream_timeout_s=options.stream_timeout_s,
    ) as client:
        if options.store_faults is not None:
            options.store_faults.attach(client)
        store = NoteStore(
            client,
            prefix=prefix,
            replay_grace_ms=replay_grace_ms,
            wait_replicas=await resolve_wait_replicas(client, options.wait_replicas),
            wait_timeout_ms=options.wait_timeout_ms,
        )
        if options.on_lost_reply is not None:
            store.lost_reply_observer = partial(options.on_lost_reply, config.node_id)
        node = Node(config, store if options.wrap is None else options.wrap(store))
        task_status.started(node)
        await trio.sleep_forever()


@dataclass
class LocalCluster:
    """A running in-process cluster. ``nodes[i]`` is None while node i is stopped."""

    config: NodeConfig
    redis_url: str
    embedded: bool
    prefix: str
    nursery: trio.Nursery
    replay_grace_ms: int = REPLAY_GRACE_MS
    store_options: StoreOptions = field(default_factory=StoreOptions)
    nodes: list[Node | None] = field(default_factory=list)
    _scopes: list[trio.CancelScope | None] = field(default_factory=list)
    _requests: dict[int, set[trio.CancelScope]] = field(default_factory=dict)
    restarts: int = 0

    async def start_node(self, index: int) -> Node:
        """Start (or restart) node ``index`` and wait until it serves."""
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await serve_inprocess_node(
                    replace(self.config, node_id=f"node-{index}"),
                    self.redis_url,
                    embedded=self.embedded,
                    prefix=self.prefix,
                    replay_grace_ms=self.replay_grace_ms,
                    options=self.store_options,
                    task_status=task_status,
                )

        node: Node = await self.nursery.start(run)
        while len(self.nodes) <= index:
            self.nodes.append(None)
            self._scopes.append(None)
        self.nodes[index], self._scopes[index] = node, scope
        return node

    def stop_node(self, index: int) -> None:
        """Stop node ``index`` abruptly: its in-flight requests are cancelled."""
        scope = self._scopes[index]
        self.nodes[index] = None
        # Requests run in their callers' tasks, not the node's: cancel them as a crash would.
        for request in self._requests.pop(index, set()):
            request.cancel()
        if scope is not None:
            scope.cancel()

    def request_scope(self, index: int) -> trio.CancelScope:
        """A cancel scope for one request to node ``index``, cancelled if the node stops before
        the request ends; hand it back with ``request_done``."""
        scope = trio.CancelScope()
        self._requests.setdefault(index, set()).add(scope)
        return scope

    def request_done(self, index: int, scope: trio.CancelScope) -> None:
        """Forget a request scope from ``request_scope``."""
        self._requests.get(index, set()).discard(scope)

    async def restart_node(self, index: int) -> Node:
        """Stop then start node ``index`` (a crash and a fresh node in its place)."""
        self.stop_node(index)
        self.restarts += 1
        return await self.start_node(index)


@asynccontextmanager
async def open_local_cluster(
    config: NodeConfig,
    n_nodes: int = 3,
    *,
    redis_url: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    seed: bool = True,
    replay_grace_ms: int = REPLAY_GRACE_MS,
    store_options: StoreOptions | None = None,
) -> AsyncIterator[LocalCluster]:
    """Run ``n_nodes`` in-process nodes over one store (embedded unless ``redis_url`` is given)."""
    with store_url(redis_url) as (url, embedded):
        async with trio.open_nursery() as nursery:
            cluster = LocalCluster(
                config,
                url,
                embedded,
                prefix,
                nursery,
                replay_grace_ms,
                store_options or StoreOptions(),
            )
            for i in range(n_nodes):
                await cluster.start_node(i)
            if seed:
                first = cluster.nodes[0]
                assert first is not None
                assert isinstance(first.store, NoteStore)
                await seed_demo(first.store)
            try:
                yield cluster
            finally:
                nursery.cancel_scope.cancel()


def over_the_wire(value: Any) -> Any:
    """``value`` as the other side of a JSON wire reads it (a copy through its JSON text):
    orjson's round trip, C speed; ``json``'s for what orjson refuses (integers past 64 bits)."""
    try:
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError):
        return json.loads(json.dumps(value))


class InProcessTransport:
    """Send JSON-RPC messages to the nodes of a LocalCluster, with the headers and JSON encoding
    an HTTP client would use but without sockets (implements ``loadgen.transport.Transport``)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    @property
    def node_count(self) -> int:
        """How many node slots the cluster has (some may be stopped)."""
        return len(self.cluster.nodes)

    async def send(self, node_index: int, principal: str, message: dict[str, Any]) -> Reply:
        """Deliver a message to node ``node_index`` as ``principal``; NodeDown if it is stopped."""
        node = self.cluster.nodes[node_index]
        if node is None:
            raise NodeDown(f"node-{node_index} is down")
        wire = over_the_wire(message)
        ctx = RequestContext(principal=principal, headers=request_headers(wire))
        scope = self.cluster.request_scope(node_index)
        try:
            with scope:
                reply = await node.handle(wire, ctx)
        except Exception as exc:
            # The node stopped and its pool closed before the cancellation reached the request.
            if scope.cancel_called:
                raise NodeDown(f"node-{node_index} stopped mid-request") from exc
            raise
        finally:
            self.cluster.request_done(node_index, scope)
        if scope.cancelled_caught:
            raise NodeDown(f"node-{node_index} stopped mid-request")
        body = None if reply.body is None else over_the_wire(reply.body)
        return Reply(reply.status, body)

    async def open_page(
        self, node_index: int, principal: str, path: str, form: Mapping[str, str]
    ) -> int:
        """POST ``form`` to setup page ``path`` of node ``node_index`` as ``principal`` (a
        non-browser client sending its bearer token; the harness is trusted with the principal
        as ``send`` is) and return the page's HTTP status; NodeDown if the node is stopped.
        Implements ``loadgen.transport.PageTransport``."""
        node = self.cluster.nodes[node_index]
        if node is None:
            raise NodeDown(f"node-{node_index} is down")
        bearer = f"{principal}-setup-page"
        tokens = TokenTable({hashlib.sha256(bearer.encode()).hexdigest(): principal})
        body = urlencode(dict(form)).encode()
        headers = {
            "authorization": f"Bearer {bearer}",
            "content-type": "application/x-www-form-urlencoded",
        }

        async def read_body(limit: int) -> bytes:
            return body  # a few bytes, far under any limit

        scope = self.cluster.request_scope(node_index)
        try:
            with scope:
                page = await SetupPages(node.config, node.store, tokens).answer(
                    "POST", path, headers, read_body
                )
        finally:
            self.cluster.request_done(node_index, scope)
        if scope.cancelled_caught:
            raise NodeDown(f"node-{node_index} stopped mid-request")
        return page.status


def node_urls(host: str, base_port: int, n: int) -> Sequence[str]:
    """The endpoint URLs of ``n`` HTTP nodes on consecutive ports."""
    return [f"http://{host}:{base_port + i}/mcp" for i in range(n)]
