"""The serving commands: ``node`` (one node in production), ``serve`` (N nodes on loopback) and
``redis-cluster`` (a local Redis Cluster). Their normal end is a stop signal (exit 0).

Layer: cluster. The work is ``nodes.serving`` and ``cluster.serve``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cluster.commands.base import (
    REDIS_URL,
    print_ready,
    require_extra,
    require_store,
    run_until_stopped,
    serving,
)
from cluster.commands.options import (
    log_options,
    ops_options,
    with_options,
)
from cluster.exit_codes import (
    NotCarriedOut,
)
from nodes.loopback import is_loopback_host

if TYPE_CHECKING:
    from nodes.serving.durability import WaitReplicas

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@click.command(
    "node",
    help="Serve one node from a configuration file, in production: uvicorn (httptools, uvloop) "
    "with WORKERS processes on one port, each its own node over the same Redis. SIGTERM "
    "(SIGHUP, Ctrl-C) drains "
    "(stop accepting, finish in-flight requests within [timeouts] drain, end legacy streams, "
    "close Redis). The same app for any ASGI server: nodes.serving.app:create_app (a factory).",
)
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TOML configuration (principals, token hashes, workspaces, state keys, [timeouts]).",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8700, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes on the one port, each a node of its own; a worker whose "
    "supervisor is gone drains and exits by itself.",
)
@click.option(
    "--redis",
    "redis_url",
    default="redis://127.0.0.1:6379/0",
    show_default=True,
    type=REDIS_URL,
    help="redis:// URL of the store (a Redis Cluster node is detected).",
)
@with_options(*log_options())
def node(
    config_path: Path,
    host: str,
    port: int,
    workers: int,
    redis_url: str,
    log_level: str,
    log_json: bool,
) -> None:
    """``notes-cluster node``."""
    import os

    from nodes.logging_setup import configure_logging
    from nodes.serving import app as node_app
    from nodes.serving.http_server import hooks_missing, run_server, server_config
    from nodes.serving.settings import ConfigError, load_settings

    configure_logging(log_level.upper(), json_lines=log_json)

    try:
        settings = load_settings(config_path)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    require_store(redis_url)
    serving()
    # The factory runs in each worker and reads these (a worker is a fresh interpreter).
    os.environ[node_app.CONFIG_ENV] = str(config_path.resolve())
    os.environ[node_app.REDIS_ENV] = redis_url
    os.environ.setdefault(node_app.PUBLIC_URL_ENV, f"http://{host}:{port}")
    os.environ[node_app.SERVER_TIMES_BODIES_ENV] = "0" if hooks_missing() else "1"
    os.environ[node_app.LOG_LEVEL_ENV] = log_level.upper()
    os.environ[node_app.LOG_JSON_ENV] = "1" if log_json else "0"
    config = server_config(
        "nodes.serving.app:create_app",
        host=host,
        port=port,
        timeouts=settings.timeouts,
        workers=workers,
        factory=True,
        max_header_bytes=settings.max_header_bytes,
    )
    run_server(config)


SERVE_EXAMPLES = """
\b
Examples:
  notes-cluster serve --demo --nodes 3 --port 8700
  notes-cluster serve --demo --redis redis://127.0.0.1:6379/0 --processes
\b
SIGTERM, SIGHUP or Ctrl-C stops every node (node processes drain first) and exits 0
(130 for Ctrl-C); a node process whose parent is gone drains and exits by itself.
"""


@click.command(
    "serve",
    help="Serve N nodes over Streamable HTTP on consecutive loopback ports.\n" + SERVE_EXAMPLES,
)
@click.option(
    "--nodes",
    default=3,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Nodes to serve, on PORT, PORT+1, ...",
)
@click.option(
    "--port",
    "base_port",
    default=8700,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of node 0; node i listens on PORT+i.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--redis",
    "redis_url",
    default=None,
    type=REDIS_URL,
    help="redis:// URL (default: embedded store).",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TOML configuration (principals, token hashes, workspaces, state keys).",
)
@click.option("--demo", is_flag=True, help="Use the demo fixture and seed its notes.")
@click.option(
    "--state-ttl",
    default=None,
    type=click.FloatRange(0.5, 86_400),
    help="Seconds a sealed confirmation stays valid (default 300, or the config's).",
)
@click.option(
    "--replay-grace",
    default=None,
    type=click.FloatRange(0.1, 3600),
    help="Seconds a replay entry outlives its state (default 60, or the config's). A load "
    "against these nodes waits it out before checking: give loadgen the same value.",
)
@click.option("--processes", is_flag=True, help="Run each node as its own OS process.")
@click.option(
    "--wait-replicas",
    default=None,
    metavar="auto|N",
    help="Writes wait for this many replicas (WAIT) before a node answers; fewer in time is "
    "'outcome unknown' (-32603). Default (and config wait_replicas): auto, 1 where every "
    "master has a replica, else 0. 0 turns waiting off.",
)
@click.option(
    "--demo-anonymous",
    default=None,
    metavar="PRINCIPAL",
    help="With --demo, on loopback only: an MCP request without an Authorization header acts "
    "as PRINCIPAL (e.g. alice), for tools that send no token, such as the MCP conformance "
    "suite. A wrong token is still refused.",
)
@click.option(
    "--conformance-fixtures",
    is_flag=True,
    help="With --demo: also serve the official MCP conformance suite's fixture tools, "
    "resources and prompts (test_*, test://...), for `npx @modelcontextprotocol/conformance "
    "server --requirements 2026-07-28`. Never in production: refused with --config.",
)
@ops_options
def serve(
    nodes: int,
    base_port: int,
    host: str,
    redis_url: str | None,
    config_path: Path | None,
    demo: bool,
    state_ttl: float | None,
    replay_grace: float | None,
    processes: bool,
    wait_replicas: str | None,
    demo_anonymous: str | None,
    conformance_fixtures: bool,
    log_level: str,
    log_json: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """``notes-cluster serve``."""
    from dataclasses import replace

    from cluster.serve import serve_cluster
    from nodes.logging_setup import configure_logging
    from nodes.serving.operator import OperatorOptions
    from nodes.serving.settings import (
        ConfigError,
        settings_for,
        with_conformance_fixtures,
        with_demo_anonymous,
    )

    if not is_loopback_host(host):
        raise click.UsageError("--host must be a loopback address (127.0.0.0/8 or ::1)")
    if config_path is None and not demo:
        raise click.UsageError("give --config FILE, or --demo for the demo fixture")
    if demo_anonymous is not None and not demo:
        raise click.UsageError("--demo-anonymous needs --demo")
    waits = _wait_replicas(wait_replicas, redis_url)
    if redis_url is None:
        require_extra("sim", only=("fakeredis", "lupa"))  # the embedded store
    try:
        settings = settings_for(config_path, demo, state_ttl, replay_grace)
        settings = with_demo_anonymous(settings, demo_anonymous, host)
        settings = with_conformance_fixtures(settings, conformance_fixtures, config_path is None)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if waits is not None:
        settings = replace(settings, wait_replicas=waits)
    if redis_url is not None:
        require_store(redis_url)
    serving()
    configure_logging(log_level, json_lines=log_json)
    ops = OperatorOptions(metrics_host=metrics_host, metrics_port=metrics_port)
    log_args = ["--log-level", log_level, *(["--log-json"] if log_json else [])]
    run_until_stopped(
        lambda: serve_cluster(
            settings,
            nodes=nodes,
            host=host,
            base_port=base_port,
            redis_url=redis_url,
            demo=demo,
            processes=processes,
            config_path=config_path,
            on_ready=print_ready,
            ops=ops,
            log_args=log_args,
        )
    )


@click.command(
    "redis-cluster",
    help="Run a local Redis Cluster (redis-server on free loopback ports) until Ctrl-C; print "
    "its URL, which simulate, serve and loadgen take as --redis (a cluster is detected).",
)
@click.option("--masters", default=3, show_default=True, type=click.IntRange(3, 16))
@click.option("--replicas", default=0, show_default=True, type=click.IntRange(0, 2))
def redis_cluster(masters: int, replicas: int) -> None:
    """``notes-cluster redis-cluster``."""
    from cluster.redis_cluster import RedisClusterError
    from cluster.redis_cluster import main as run_redis_cluster

    serving()
    click.echo("starting; Ctrl-C, SIGTERM or SIGHUP stops it", err=True)
    try:
        run_redis_cluster(masters, replicas, click.echo)
    except RedisClusterError as exc:
        raise NotCarriedOut(str(exc)) from None


def _wait_replicas(text: str | None, redis_url: str | None) -> WaitReplicas | None:
    """``--wait-replicas`` parsed (None: not given, the config decides)."""
    from nodes.serving.durability import parse_wait_replicas

    try:
        waits = None if text is None else parse_wait_replicas(text)
    except ValueError:
        raise click.UsageError("--wait-replicas: 'auto' or a number from 0 to 16") from None
    from cluster.stores import needs_real_redis

    why = needs_real_redis(wait_replicas=0 if waits in (None, "auto") else int(waits))
    if why and redis_url is None:
        raise click.UsageError(why)
    return waits
