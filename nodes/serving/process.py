"""One HTTP node as an OS process (``python -m nodes.serving.process``), started by ``serve
--processes`` and the bench. Serves on uvicorn (``nodes.serving.http_server``); prints its URL on
one line when ready, then serves until SIGTERM, SIGINT or SIGHUP (a graceful drain), or until its
parent is gone (the lifeline pipe's EOF: the same drain).

Layer: nodes (serving).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from nodes.http import ServerTimeouts
from nodes.logging_setup import DEFAULT_LEVEL, LEVELS, configure_logging
from nodes.serving.app import NodeApp, NodeOptions
from nodes.serving.durability import parse_wait_replicas
from nodes.serving.http_server import bind_socket, hooks_missing, run_server, server_config
from nodes.serving.lifeline import terminate_self, watch_lifeline
from nodes.serving.operator import DEFAULT_METRICS_HOST, OperatorOptions, bind_metrics
from nodes.serving.settings import (
    ClusterSettings,
    ConfigError,
    settings_for,
    with_conformance_fixtures,
    with_demo_anonymous,
)
from store.notes import DEFAULT_PREFIX

TIMEOUTS = ("headers", "body", "idle", "drain")


def parser() -> argparse.ArgumentParser:
    """The node process's command line (``cluster.serve.ProcessNode`` writes it)."""
    p = argparse.ArgumentParser(prog="nodes.serving.process")
    p.add_argument("--redis", required=True)
    p.add_argument("--embedded", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--node-id", default="node-0")
    p.add_argument("--prefix", default=DEFAULT_PREFIX)
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--state-ttl", type=float, default=None)
    p.add_argument("--replay-grace", type=float, default=None)
    p.add_argument(
        "--lifeline-fd",
        type=int,
        default=None,
        help="read end of the parent's lifeline pipe: EOF (the parent is gone) drains the node",
    )
    p.add_argument("--wait-replicas", type=parse_wait_replicas, default=None)
    p.add_argument("--metrics-host", default=DEFAULT_METRICS_HOST)
    p.add_argument("--metrics-port", type=int, default=None)
    p.add_argument("--log-level", default=DEFAULT_LEVEL, choices=LEVELS)
    p.add_argument("--log-json", action="store_true")
    p.add_argument("--demo-anonymous", default=None, metavar="PRINCIPAL")
    p.add_argument("--conformance-fixtures", action="store_true")
    p.add_argument("--max-header-bytes", type=int, default=None)
    for name in TIMEOUTS:
        p.add_argument(f"--{name}-timeout", type=float, default=None, help="seconds")
    return p


def _timeouts(a: argparse.Namespace, base: ServerTimeouts) -> ServerTimeouts:
    """``base`` with the timeouts given on the command line."""
    given = {
        f"{name}_s": getattr(a, f"{name}_timeout")
        for name in TIMEOUTS
        if getattr(a, f"{name}_timeout") is not None
    }
    return replace(base, **given)


def settings_from_args(a: argparse.Namespace) -> ClusterSettings:
    """The node's settings from its parsed command line: logging configured, the lifeline
    watched; exits with a message on a configuration error."""
    configure_logging(a.log_level, json_lines=a.log_json)
    if a.lifeline_fd is not None:
        watch_lifeline(a.lifeline_fd, terminate_self)
    settings = settings_for(a.config, a.config is None, a.state_ttl, a.replay_grace)
    if a.wait_replicas is not None:
        settings = replace(settings, wait_replicas=a.wait_replicas)
    settings = replace(settings, timeouts=_timeouts(a, settings.timeouts))
    try:
        settings = with_demo_anonymous(settings, a.demo_anonymous, a.host)
        settings = with_conformance_fixtures(settings, a.conformance_fixtures, a.config is None)
    except ConfigError as exc:
        sys.exit(f"node: {exc}")
    if a.max_header_bytes is not None:
        settings = replace(settings, max_header_bytes=a.max_header_bytes)
    return settings


def main(argv: list[str] | None = None) -> None:
    """Parse the parent's arguments and serve."""
    a = parser().parse_args(argv)
    settings = settings_from_args(a)
    # Bound before the app is built, so a port-0 node knows its URL (setup links name it).
    sock = bind_socket(a.host, a.port)
    base = base_url(sock)
    # The metrics port is served by the same server (nodes.serving.operator.bind_metrics).
    metrics_socket, ops = bind_metrics(
        OperatorOptions(metrics_host=a.metrics_host, metrics_port=a.metrics_port)
    )
    options = NodeOptions(
        redis_url=a.redis,
        node_id=a.node_id,
        embedded=a.embedded,
        prefix=a.prefix,
        public_url=base,
        ops=ops,
        server_times_bodies=not hooks_missing(),  # else on uvicorn's own protocol: the app
        server_routes_metrics_port=True,
    )
    app = NodeApp(settings, options)
    port_apps = {} if ops.metrics_port is None else {ops.metrics_port: app.serve_metrics}
    sockets = [sock] if metrics_socket is None else [sock, metrics_socket]
    serve_sockets(app, settings, sockets, port_apps)


def base_url(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a listening socket (an IPv6 host in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_sockets(
    app: Any, settings: ClusterSettings, sockets: list[socket.socket], port_apps: dict[int, Any]
) -> None:
    """Serve ``app`` on ``sockets`` (the first the MCP port: its URL is printed once ready,
    the parent reads it) as a node process does, ``port_apps`` taking their ports'
    connections; exit 0 once stopped."""
    host, port = sockets[0].getsockname()[:2]
    base = base_url(sockets[0])
    config = server_config(
        app,
        host=host,
        port=port,
        timeouts=settings.timeouts,
        max_header_bytes=settings.max_header_bytes,
        port_apps=port_apps,
    )

    def ready() -> None:
        print(f"{base}/mcp", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        run_server(config, ready, sockets=sockets)
    sys.exit(0)


if __name__ == "__main__":
    main()
