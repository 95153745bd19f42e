"""One HTTP node as an OS process (``python -m cluster.node_process``), started by ``serve
--processes`` and the bench. Serves on uvicorn (``cluster.node_server``); prints its URL on one
line when ready, then serves until SIGTERM (a graceful drain) or SIGINT.

Layer: cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import replace
from pathlib import Path

from cluster.asgi import NodeApp, NodeOptions
from cluster.config import ConfigError
from cluster.durability import parse_wait_replicas
from cluster.node_server import bind_socket, run_server, server_config
from cluster.operations import DEFAULT_METRICS_HOST, OpsOptions
from cluster.serve import settings_for, with_demo_anonymous
from nodes.http import ServerTimeouts
from nodes.logging_setup import DEFAULT_LEVEL, LEVELS, configure_logging
from store.notes import DEFAULT_PREFIX

TIMEOUTS = ("headers", "body", "idle", "drain")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cluster.node_process")
    p.add_argument("--redis", required=True)
    p.add_argument("--embedded", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--node-id", default="node-0")
    p.add_argument("--prefix", default=DEFAULT_PREFIX)
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--state-ttl", type=float, default=None)
    p.add_argument("--wait-replicas", type=parse_wait_replicas, default=None)
    p.add_argument("--metrics-host", default=DEFAULT_METRICS_HOST)
    p.add_argument("--metrics-port", type=int, default=None)
    p.add_argument("--log-level", default=DEFAULT_LEVEL, choices=LEVELS)
    p.add_argument("--log-json", action="store_true")
    p.add_argument("--demo-anonymous", default=None, metavar="PRINCIPAL")
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


def main(argv: list[str] | None = None) -> None:
    """Parse the parent's arguments and serve."""
    a = _parser().parse_args(argv)
    configure_logging(a.log_level, json_lines=a.log_json)
    settings = settings_for(a.config, a.config is None, a.state_ttl)
    if a.wait_replicas is not None:
        settings = replace(settings, wait_replicas=a.wait_replicas)
    settings = replace(settings, timeouts=_timeouts(a, settings.timeouts))
    try:
        settings = with_demo_anonymous(settings, a.demo_anonymous, a.host)
    except ConfigError as exc:
        sys.exit(f"node: {exc}")
    # Bound before the app is built, so a port-0 node knows its URL (setup links name it).
    sock = bind_socket(a.host, a.port)
    host, port = sock.getsockname()[:2]
    base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    options = NodeOptions(
        redis_url=a.redis,
        node_id=a.node_id,
        embedded=a.embedded,
        prefix=a.prefix,
        public_url=base,
        ops=OpsOptions(metrics_host=a.metrics_host, metrics_port=a.metrics_port),
        server_times_bodies=True,
    )
    app = NodeApp(settings, options)
    config = server_config(app, host=a.host, port=port, timeouts=settings.timeouts)

    def ready() -> None:
        print(f"{base}/mcp", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        run_server(config, ready, sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()
