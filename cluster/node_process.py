"""One HTTP node as an OS process (``python -m cluster.node_process``), started by ``serve
--processes``. Prints its URL on one line when ready, then serves until killed.

Layer: cluster.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import trio

from cluster.serve import serve_http_node, settings_for


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
    p.add_argument("--wait-replicas", type=int, default=0)
    a = p.parse_args(argv)
    settings = settings_for(a.config, a.config is None, a.state_ttl)
    if a.wait_replicas:
        settings = replace(settings, wait_replicas=a.wait_replicas)

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
