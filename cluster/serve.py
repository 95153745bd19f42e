"""HTTP clusters: N nodes on N loopback ports, as trio tasks or as separate OS processes.

Layer: cluster. Starts nodes (``nodes.http.serve_node``) over a store; imports nothing of the load
generator (the demo settings include the load fixture, ``cluster.load_fixture``, which does not
either), so a node process started here loads none of it (tests/test_import_direction.py). In
process mode every child gets the same key ring through its environment (base64 in
``NOTES_CLUSTER_STATE_KEY``), so any node opens any other node's states.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import trio

from cluster.config import ClusterSettings, demo_settings, load_settings
from cluster.durability import resolve_wait_replicas
from cluster.load_fixture import load_archives, load_tokens, with_load_scope
from cluster.operations import OpsOptions, operate_node
from cluster.stores import seed_demo, store_url
from nodes.http import serve_node
from nodes.legacy import LegacyLimits, open_legacy_adapter
from nodes.metrics import NodeMetrics, metered
from nodes.protocol import Node
from nodes.sealing import KeyRing
from store.client import open_redis
from store.notes import DEFAULT_PREFIX, NoteStore
from store.sessions import SessionStore

STATE_KEY_ENV = "NOTES_CLUSTER_STATE_KEY"
"""Environment variable through which a parent hands a demo key ring to its node processes."""


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
    ops: OpsOptions | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """One HTTP node with its own Redis pool; reports its URL; runs until cancelled. It also
    serves 2025-11-25 clients (``nodes.legacy``), with their sessions in the same store, and
    ``/healthz``, ``/readyz`` and (when ``ops`` names a port) metrics (``cluster.operations``)."""
    from dataclasses import replace

    ops = ops or OpsOptions()
    async with open_redis(redis_url, embedded=embedded) as client:
        store = NoteStore(
            client,
            prefix=prefix,
            replay_grace_ms=settings.replay_grace_ms,
            wait_replicas=await resolve_wait_replicas(client, settings.wait_replicas),
        )
        metrics = None if ops.metrics_port is None else NodeMetrics()
        served = store if metrics is None else metered(store, metrics)
        node = Node(replace(settings.node, node_id=node_id), served)
        sessions = SessionStore(client, prefix=prefix)
        async with open_legacy_adapter(node, sessions, legacy_limits) as legacy:
            with operate_node(node, store.check_ready, metrics, ops, legacy) as operations:
                await serve_node(
                    node,
                    settings.tokens,
                    host=host,
                    port=port,
                    allowed_origins=settings.allowed_origins,
                    legacy=legacy,
                    task_status=task_status,
                    wrap=operations.wrap,
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
    ops: OpsOptions | None = None,
) -> list[str]:
    """Start ``count`` HTTP nodes in ``nursery`` (node i on ``base_port + i``, or on free ports
    when ``base_port`` is 0), each ready before the next starts; return their endpoint URLs."""
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
            ops=(ops or OpsOptions()).for_node(i),
        )
        urls.append(await nursery.start(start))
    return urls


async def seed_demo_notes(redis_url: str, embedded: bool, prefix: str = DEFAULT_PREFIX) -> None:
    """Seed the demo notes once for the whole cluster."""
    async with open_redis(redis_url, embedded=embedded) as client:
        await seed_demo(NoteStore(client, prefix=prefix))


def _child_command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "cluster.node_process", *args]


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
    ops: OpsOptions | None = None,
    log_args: Sequence[str] = (),
) -> None:
    """Serve ``nodes`` HTTP nodes on ``base_port + i`` until cancelled (with ``processes``, each
    child gets ``log_args``: the parent's ``--log-level`` / ``--log-json``)."""
    ops = ops or OpsOptions()
    with store_url(redis_url) as (url, embedded):
        if demo:
            await seed_demo_notes(url, embedded)
        async with trio.open_nursery() as nursery:
            if processes:
                urls: list[str] = []
                for i in range(nodes):
                    port = base_port + i if base_port else 0
                    child = [*log_args, *_ops_args(ops.for_node(i))]
                    urls.append(
                        await nursery.start(
                            _run_process, settings, url, embedded, host, port, i, config_path, child
                        )
                    )
            else:
                urls = await start_http_nodes(
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


async def _run_process(
    settings: ClusterSettings,
    url: str,
    embedded: bool,
    host: str,
    port: int,
    index: int,
    config_path: Path | None,
    extra_args: Sequence[str],
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one node as a child process; report its URL from the line it prints when ready."""
    args = [
        "--redis",
        url,
        "--host",
        host,
        "--port",
        str(port),
        "--node-id",
        f"node-{index}",
        "--state-ttl",
        str(settings.node.state_ttl_ms / 1000),
        "--wait-replicas",
        str(settings.wait_replicas),
        *extra_args,
    ]
    env = dict(os.environ)
    if embedded:
        args.append("--embedded")
    if config_path is not None:
        args += ["--config", str(config_path)]
    else:
        ring = settings.node.key_ring
        env[STATE_KEY_ENV] = base64.b64encode(ring.keys[ring.active]).decode("ascii")
    proc = await trio.lowlevel.open_process(_child_command(args), stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(1)
            if not chunk:
                raise RuntimeError(f"node process {index} exited before it was ready")
            line += chunk
        task_status.started(line.decode().strip())
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


def _ops_args(ops: OpsOptions) -> list[str]:
    if ops.metrics_port is None:
        return []
    return ["--metrics-host", ops.metrics_host, "--metrics-port", str(ops.metrics_port)]


def settings_for(config: Path | None, demo: bool, state_ttl: float | None) -> ClusterSettings:
    """Settings from a config file, or the demo fixture (a key ring from the environment when a
    parent process handed one down)."""
    if config is not None:
        return load_settings(config).with_state_ttl(state_ttl)
    ring = None
    key = os.environ.get(STATE_KEY_ENV)
    if key:
        ring = KeyRing.from_sources({"demo": f"base64:{key}"}, "demo")
    base = demo_settings(ring)
    scope = with_load_scope(base.node.scope)
    return demo_settings(ring, load_tokens(), scope, load_archives()).with_state_ttl(state_ttl)
