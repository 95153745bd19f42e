"""One HTTP node as an OS process (``python -m cluster.node_process``), started by ``serve
--processes``. Prints its URL on one line when ready, then serves until killed.

Layer: cluster.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import trio

from cluster.durability import parse_wait_replicas
from cluster.operations import DEFAULT_METRICS_HOST, OpsOptions
from cluster.serve import serve_http_node, settings_for
from nodes.logging_setup import DEFAULT_LEVEL, LEVELS, configure_logging


def main(argv: list[str] | None = None) -> None:
    """Parse the parent's arguments and serve."""
    p = argparse.ArgumentParser(prog="cluster.node_process")
    p.add_argument("--redis", required=True)
    p.add_argument("--embedded", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--node-id", default="node-0")
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--state-ttl", type=float, default=None)
    p.add_argument("--wait-replicas", type=parse_wait_replicas, default=None)
    p.add_argument("--metrics-host", default=DEFAULT_METRICS_HOST)
    p.add_argument("--metrics-port", type=int, default=None)
    p.add_argument("--log-level", default=DEFAULT_LEVEL, choices=LEVELS)
    p.add_argument("--log-json", action="store_true")
    a = p.parse_args(argv)
    configure_logging(a.log_level, json_lines=a.log_json)
    settings = settings_for(a.config, a.config is None, a.state_ttl)
    if a.wait_replicas is not None:
        settings = replace(settings, wait_replicas=a.wait_replicas)
    ops = OpsOptions(metrics_host=a.metrics_host, metrics_port=a.metrics_port)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve_http_node(
                    settings,
                    a.redis,
                    embedded=a.embedded,
                    host=a.host,
                    port=a.port,
                    node_id=a.node_id,
                    ops=ops,
                    task_status=task_status,
                )
            )
            print(url, flush=True)

    try:
        trio.run(run)
    except* KeyboardInterrupt:  # trio wraps it in a group when it lands inside a nursery
        pass


if __name__ == "__main__":
    main()
