"""One ASGI app on one of several HTTP servers, as an OS process: the servers the bench compares.

Layer: cluster (the lab). ``python -m cluster.lab.server_variants SERVER APP``
serves APP (``fixed``: the fixed-replies app, ``cluster.lab.fixed_replies``; ``node``:
one node over ``--redis``, as ``nodes.serving.process`` builds it) on SERVER, one worker, on a
free loopback port, and prints its URL once the port accepts connections. Servers:

- ``uvicorn``: uvicorn with httptools and uvloop, the node processes' settings
  (``nodes.serving.http_server``: what ``serve --processes`` and ``notes-cluster node`` run);
- ``granian``: granian's ASGI worker on a uvloop loop, HTTP/1 only, in this process (granian's
  embedded server: one process to measure and to stop, no supervisor);
- ``uvicorn-h11``: uvicorn with h11 on the asyncio loop (uvicorn without its speedups);
- ``hypercorn-trio``: hypercorn's trio worker (how nodes inside a trio process are served).
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time
from functools import partial
from typing import Any, TextIO

ServerName = str
SERVERS: tuple[ServerName, ...] = ("uvicorn", "granian", "uvicorn-h11", "hypercorn-trio")
APPS = ("fixed", "node")
READY_TIMEOUT_S = 60.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the server binds it a moment later; loopback, so a
    collision is unlikely and shows as a start failure, not a wrong measurement)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _announce_when_ready(out: TextIO, host: str, port: int) -> None:
    """Write the URL to ``out`` once ``host:port`` accepts a connection (from a thread: every
    server below runs its own loop in the main thread)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
        except OSError:
            time.sleep(0.05)
            continue
        print(f"http://{host}:{port}/mcp", file=out, flush=True)
        return


def node_app(redis_url: str, prefix: str, public_url: str, server_times_bodies: bool) -> Any:
    """One node over ``redis_url`` with the bench's settings (the demo and load fixtures), as
    ``nodes.serving.process`` builds it."""
    from nodes.serving.app import NodeApp, NodeOptions
    from nodes.serving.settings import settings_for

    options = NodeOptions(
        redis_url=redis_url,
        node_id="node-0",
        prefix=prefix,
        public_url=public_url,
        server_times_bodies=server_times_bodies,
    )
    return NodeApp(settings_for(None, True, None), options)


def _serve_uvicorn(app: Any, host: str, port: int) -> None:
    from nodes.http import ServerTimeouts
    from nodes.serving.http_server import run_server, server_config

    run_server(server_config(app, host=host, port=port, timeouts=ServerTimeouts()))


def _serve_uvicorn_h11(app: Any, host: str, port: int) -> None:
    import uvicorn

    from nodes.http import DEFAULT_MAX_HEADER_BYTES

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http="h11",
        loop="asyncio",
        lifespan="on",
        access_log=False,
        log_config=None,
        server_header=False,
        h11_max_incomplete_event_size=DEFAULT_MAX_HEADER_BYTES,
    )
    uvicorn.Server(config).run()


def _serve_granian(app: Any, host: str, port: int) -> None:
    import uvloop
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server.embed import Server

    from nodes.http import DEFAULT_HEADERS_TIMEOUT_S, DEFAULT_MAX_HEADER_BYTES

    server = Server(
        app,
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        http=HTTPModes.http1,
        websockets=False,
        # The node's header bounds: its size (hyper answers 431 past its read buffer, which it
        # keeps at 8 KiB at least) and its timeout (milliseconds).
        http1_settings=HTTP1Settings(
            header_read_timeout=int(DEFAULT_HEADERS_TIMEOUT_S * 1000),
            max_buffer_size=max(DEFAULT_MAX_HEADER_BYTES, 8192),
        ),
        log_access=False,
        log_level=LogLevels.warning,
    )
    uvloop.run(server.serve())


def _serve_hypercorn_trio(app: Any, host: str, port: int) -> None:
    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from nodes.http import DEFAULT_MAX_HEADER_BYTES

    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.include_server_header = False
    config.loglevel = "WARNING"
    config.h11_max_incomplete_size = DEFAULT_MAX_HEADER_BYTES
    config.h2_max_header_list_size = DEFAULT_MAX_HEADER_BYTES
    trio.run(partial(serve, app, config, mode="asgi"))


_RUNNERS = {
    "uvicorn": _serve_uvicorn,
    "granian": _serve_granian,
    "uvicorn-h11": _serve_uvicorn_h11,
    "hypercorn-trio": _serve_hypercorn_trio,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cluster.lab.server_variants")
    p.add_argument("server", choices=SERVERS)
    p.add_argument("app", choices=APPS)
    p.add_argument("--redis", default=None, help="the node's store (app node)")
    p.add_argument("--prefix", default=None)
    return p


def main(argv: list[str] | None = None) -> None:
    """Serve the app on the server until killed."""
    a = _parser().parse_args(argv)
    host, port = "127.0.0.1", free_port()
    if a.app == "fixed":
        from cluster.lab.fixed_replies import app as fixed

        app: Any = fixed
    else:
        if a.redis is None:
            raise SystemExit("the node app needs --redis URL")
        from store.notes import DEFAULT_PREFIX

        # Only uvicorn's protocol in nodes.serving.http_server bounds body arrival; elsewhere the
        # app.
        app = node_app(
            a.redis, a.prefix or DEFAULT_PREFIX, f"http://{host}:{port}", a.server == "uvicorn"
        )
    # Standard output carries the URL line only: servers that log to it (granian) log to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    threading.Thread(target=_announce_when_ready, args=(out, host, port), daemon=True).start()
    _RUNNERS[a.server](app, host, port)


if __name__ == "__main__":
    main()
