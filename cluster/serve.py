"""HTTP clusters: N nodes on N loopback ports, as trio tasks or as separate OS processes.

Layer: cluster. Starts nodes (``nodes.http.serve_node``) over a store; imports nothing of the load
generator (the demo settings include the load fixture, ``nodes.serving.load_fixture``, which does
not either), so a node process started here loads none of it (tests/test_import_direction.py). In
process mode every child gets the same key ring through its environment (base64 in
``NOTES_CLUSTER_STATE_KEY``), so any node opens any other node's states.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import trio

from cluster.child_processes import open_with_lifeline, read_url_line
from cluster.stores import demo_removal_hint, seed_demo, store_url
from nodes.http import ASGIApp, make_app, serve_app
from nodes.legacy import LegacyLimits, open_legacy_adapter
from nodes.metrics import NodeMetrics, metered
from nodes.protocol import Node
from nodes.serving.durability import resolve_wait_replicas
from nodes.serving.operator import (
    OperatorEndpoints,
    OperatorOptions,
    bind_metrics,
    with_operator_endpoints,
)
from nodes.serving.settings import STATE_KEY_ENV, ClusterSettings
from store.client_factory import blocking_client, open_note_client
from store.notes import DEFAULT_PREFIX, NoteStore
from store.sessions import SessionStore

STOP_GRACE_S = 2.0
"""Beyond a node's drain timeout, how long its parent waits after SIGTERM before SIGKILL."""
NODE_PROCESS_MODULE = "nodes.serving.process"
"""The module a node process runs."""


async def serve_http_node(
    settings: ClusterSettings,
    redis_url: str,
    *,
    embedded: bool,
    host: str,
    port: int,
    node_id: str,
    prefix: str = DEFAULT_PREFIX,
    legacy_limits: LegacyLimits | None = None,
    ops: OperatorOptions | None = None,
    session_wrap: Callable[[SessionStore], SessionStore] | None = None,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """One HTTP node with its own Redis pool; reports its URL; runs until cancelled. It also
    serves 2025-11-25 clients (``nodes.legacy``), with their sessions in the same store, and
    ``/healthz``, ``/readyz`` and (when ``ops`` names a port) metrics (``nodes.serving.operator``),
    which the same server serves on that port."""
    metrics_socket, ops = bind_metrics(ops or OperatorOptions())
    try:
        await _serve_http_node(
            settings, redis_url, embedded, host, port, node_id, prefix, legacy_limits, ops,
            [] if metrics_socket is None else [metrics_socket], task_status, session_wrap,
        )  # fmt: skip
    finally:
        if metrics_socket is not None and metrics_socket.fileno() != -1:
            metrics_socket.close()  # not handed over: the node failed before serving


@dataclass(frozen=True)
class NodeSeams:
    """Test-only: what a node talks to instead of its stores (a planted defect,
    ``store.simulation.plants``); never set by ``serve`` or a config file."""

    store: Callable[[Any], Any] | None = None
    """Wraps the node's note store."""
    sessions: Callable[[SessionStore], SessionStore] | None = None
    """Wraps the legacy session store."""


@contextlib.asynccontextmanager
async def open_node_app(
    settings: ClusterSettings,
    redis_url: str,
    *,
    embedded: bool,
    node_id: str,
    prefix: str = DEFAULT_PREFIX,
    legacy_limits: LegacyLimits | None = None,
    ops: OperatorOptions | None = None,
    seams: NodeSeams | None = None,
) -> AsyncIterator[tuple[Node, ASGIApp, OperatorEndpoints]]:
    """One node's store clients, legacy adapter and operator endpoints, open for the block:
    the node, its ASGI app (``nodes.http.make_app`` with the legacy adapter, inside the
    operator's middleware) and its operator endpoints. ``serve_http_node`` serves the app on a
    port; a deterministic simulation (``cluster.deterministic.legacy``) serves the same app
    with no socket."""
    ops = ops or OperatorOptions()
    seams = seams or NodeSeams()
    async with (
        open_note_client(redis_url, embedded=embedded) as notes_client,
        contextlib.AsyncExitStack() as stack,
    ):
        # The legacy sessions on the same client; their blocking reads on a connection of
        # their own.
        block_ms = (legacy_limits or LegacyLimits()).inbox_block_ms
        blocking = blocking_client(notes_client, block_ms)
        if blocking is not None:
            await stack.enter_async_context(blocking)
        store = NoteStore(
            notes_client,
            prefix=prefix,
            replay_grace_ms=settings.replay_grace_ms,
            wait_replicas=await resolve_wait_replicas(notes_client, settings.wait_replicas),
        )
        metrics = None if ops.metrics_port is None else NodeMetrics()
        served: Any = store if metrics is None else metered(store, metrics)
        if seams.store is not None:
            served = seams.store(served)
        node = Node(replace(settings.node, node_id=node_id), served)
        sessions = SessionStore(notes_client, prefix=prefix, blocking=blocking)
        if seams.sessions is not None:
            sessions = seams.sessions(sessions)
        async with open_legacy_adapter(node, sessions, legacy_limits) as legacy:
            with with_operator_endpoints(node, store.check_ready, metrics, ops, legacy) as operator:
                app = make_app(
                    node,
                    settings.tokens,
                    allowed_origins=settings.allowed_origins,
                    legacy=legacy,
                    body_timeout_s=settings.timeouts.body_s,
                )
                yield node, operator.wrap(app), operator


async def _serve_http_node(
    settings: ClusterSettings,
    redis_url: str,
    embedded: bool,
    host: str,
    port: int,
    node_id: str,
    prefix: str,
    legacy_limits: LegacyLimits | None,
    ops: OperatorOptions,
    sockets: list[socket.socket],
    task_status: anyio.abc.TaskStatus[str],
    session_wrap: Callable[[SessionStore], SessionStore] | None = None,
) -> None:
    async with open_node_app(
        settings,
        redis_url,
        embedded=embedded,
        node_id=node_id,
        prefix=prefix,
        legacy_limits=legacy_limits,
        ops=ops,
        seams=NodeSeams(sessions=session_wrap),
    ) as (node, app, _):
        await serve_app(
            node,
            app,
            host=host,
            port=port,
            idle_timeout_s=settings.timeouts.idle_s,
            max_header_bytes=settings.max_header_bytes,
            sockets=sockets,
            task_status=task_status,
        )


async def start_http_nodes(
    nursery: trio.Nursery,
    settings: ClusterSettings,
    redis_url: str,
    *,
    count: int,
    embedded: bool,
    host: str = "127.0.0.1",
    base_port: int = 0,
    prefix: str = DEFAULT_PREFIX,
    name: str = "node",
    legacy_limits: LegacyLimits | None = None,
    ops: OperatorOptions | None = None,
    session_wrap: Callable[[SessionStore], SessionStore] | None = None,
) -> list[str]:
    """Start ``count`` HTTP nodes in ``nursery`` (node i on ``base_port + i``, or on free ports
    when ``base_port`` is 0), each ready before the next starts; return their endpoint URLs.
    ``session_wrap``: a simulation's planted defect in each node's session store."""
    urls: list[str] = []
    for i in range(count):
        start = partial(
            serve_http_node,
            settings,
            redis_url,
            embedded=embedded,
            host=host,
            port=base_port + i if base_port else 0,
            node_id=f"{name}-{i}",
            prefix=prefix,
            legacy_limits=legacy_limits,
            ops=(ops or OperatorOptions()).for_node(i),
            session_wrap=session_wrap,
        )
        urls.append(await nursery.start(start))
    return urls


async def seed_demo_notes(redis_url: str, embedded: bool, prefix: str = DEFAULT_PREFIX) -> int:
    """Seed the demo notes once for the whole cluster; on a Redis that outlives the command,
    only those it does not hold yet (``seed_demo``). Returns how many were created."""
    async with open_note_client(redis_url, embedded=embedded) as client:
        return await seed_demo(NoteStore(client, prefix=prefix), only_missing=not embedded)


async def serve_cluster(
    settings: ClusterSettings,
    *,
    nodes: int,
    host: str,
    base_port: int,
    redis_url: str | None,
    demo: bool,
    processes: bool = False,
    config_path: Path | None = None,
    on_ready: Callable[[list[str]], None] | None = None,
    ops: OperatorOptions | None = None,
    log_args: Sequence[str] = (),
) -> None:
    """Serve ``nodes`` HTTP nodes on ``base_port + i`` until cancelled (with ``processes``, each
    child gets ``log_args``: the parent's ``--log-level`` / ``--log-json``)."""
    ops = ops or OperatorOptions()
    with store_url(redis_url) as (url, embedded):
        if demo:
            created = await seed_demo_notes(url, embedded)
            if not embedded:
                # stderr: stdout carries only the node URLs, which scripts read.
                print(
                    f"{created} demo note(s) seeded; {demo_removal_hint(url, DEFAULT_PREFIX)}",
                    file=sys.stderr,
                    flush=True,
                )
        async with trio.open_nursery() as nursery:
            start = (
                partial(start_process_nodes, config_path=config_path, log_args=log_args)
                if processes
                else start_http_nodes
            )
            urls = await start(
                nursery,
                settings,
                url,
                count=nodes,
                embedded=embedded,
                host=host,
                base_port=base_port,
                ops=ops,
            )
            if on_ready is not None:
                on_ready(urls)


@dataclass(frozen=True)
class ProcessNode:
    """How to start one node process (``nodes.serving.process``)."""

    settings: ClusterSettings
    redis_url: str
    embedded: bool
    host: str
    port: int
    node_id: str
    prefix: str
    config_path: Path | None
    extra_args: Sequence[str] = ()
    """Passed on as they are: the parent's logging and this node's metrics options."""
    module: str = NODE_PROCESS_MODULE
    """What the child runs: ``nodes.serving.process``, or a module that takes its command line
    and serves the node another way (the bench's metrics switch)."""

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The child's command line and environment."""
        args = ["--redis", self.redis_url, "--host", self.host, "--port", str(self.port)]
        args += ["--node-id", self.node_id, "--prefix", self.prefix]
        args += ["--state-ttl", str(self.settings.node.state_ttl_ms / 1000)]
        args += ["--replay-grace", str(self.settings.replay_grace_ms / 1000)]
        args += ["--wait-replicas", str(self.settings.wait_replicas)]
        t = self.settings.timeouts
        args += ["--headers-timeout", str(t.headers_s), "--body-timeout", str(t.body_s)]
        args += ["--idle-timeout", str(t.idle_s), "--drain-timeout", str(t.drain_s)]
        if self.settings.tokens.anonymous is not None:
            args += ["--demo-anonymous", self.settings.tokens.anonymous]
        if self.settings.node.conformance_fixtures:
            args.append("--conformance-fixtures")
        args += ["--max-header-bytes", str(self.settings.max_header_bytes)]
        args += self.extra_args
        env = dict(os.environ)
        if self.embedded:
            args.append("--embedded")
        if self.config_path is not None:
            args += ["--config", str(self.config_path)]
        else:
            ring = self.settings.node.key_ring
            env[STATE_KEY_ENV] = base64.b64encode(ring.keys[ring.active]).decode("ascii")
        return [sys.executable, "-m", self.module, *args], env


@dataclass(frozen=True)
class StartedNode:
    """One node process once ready: the URL it answers at and its pid."""

    url: str
    pid: int


async def start_process_nodes(
    nursery: trio.Nursery, settings: ClusterSettings, redis_url: str, **options: Any
) -> list[str]:
    """The URLs of ``start_node_processes`` (same arguments): a drop-in for
    ``start_http_nodes``, which callers choose between."""
    started = await start_node_processes(nursery, settings, redis_url, **options)
    return [n.url for n in started]


async def start_node_processes(
    nursery: trio.Nursery,
    settings: ClusterSettings,
    redis_url: str,
    *,
    count: int,
    embedded: bool,
    host: str = "127.0.0.1",
    base_port: int = 0,
    prefix: str = DEFAULT_PREFIX,
    name: str = "node",
    config_path: Path | None = None,
    ops: OperatorOptions | None = None,
    log_args: Sequence[str] = (),
    module: str = NODE_PROCESS_MODULE,
    module_args: Sequence[str] = (),
) -> list[StartedNode]:
    """Start ``count`` node processes in ``nursery``, all at once (node i on ``base_port + i``,
    or on free ports when ``base_port`` is 0); return their URLs and pids once all are ready
    (the pids of these children only: a caller measuring them counts no other node).
    Cancelling the nursery stops each with SIGTERM (a drain), then SIGKILL past its bound.
    Each child gets ``log_args`` and its own metrics options from ``ops``, and runs
    ``module`` (``ProcessNode.module``) with ``module_args`` after the node's own."""
    ops = ops or OperatorOptions()
    started: list[StartedNode | None] = [None] * count

    async def start(i: int) -> None:
        port = base_port + i if base_port else 0
        extra = [*log_args, *_ops_args(ops.for_node(i)), *module_args]
        node = ProcessNode(
            settings, redis_url, embedded, host, port, f"{name}-{i}", prefix, config_path, extra,
            module,
        )  # fmt: skip
        started[i] = await nursery.start(_run_process, node, i)

    async with trio.open_nursery() as starting:
        for i in range(count):
            starting.start_soon(start, i)
    return [n for n in started if n is not None]


async def _run_process(
    node: ProcessNode,
    index: int,
    task_status: trio.TaskStatus[StartedNode] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one node as a child process; report its URL (from the line it prints when ready)
    and its pid.
    The child watches a lifeline pipe whose only write end this process holds: should this
    process end without stopping it (SIGKILL), the child sees EOF and drains by itself."""
    command, env = node.command()
    async with open_with_lifeline(lambda fd: [*command, "--lifeline-fd", str(fd)], env) as proc:
        try:
            assert proc.stdout is not None
            url = await read_url_line(proc.stdout, f"node process {index}")
            task_status.started(StartedNode(url, proc.pid))
            await proc.wait()
        finally:
            await _stop_process(proc, node.settings.timeouts.drain_s + STOP_GRACE_S)


async def _stop_process(proc: trio.Process, drain_s: float) -> None:
    """SIGTERM (the node drains), then SIGKILL if it is still running after ``drain_s``."""
    if proc.returncode is not None:
        return
    proc.terminate()
    with trio.CancelScope(shield=True):
        with trio.move_on_after(drain_s):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def _ops_args(ops: OperatorOptions) -> list[str]:
    if ops.metrics_port is None:
        return []
    return ["--metrics-host", ops.metrics_host, "--metrics-port", str(ops.metrics_port)]
