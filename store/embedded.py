"""The embedded store: a fakeredis server (with Lua) on a free loopback port, in-process.

Layer: store. The default when no Redis URL is given, so ``notes-cluster simulate`` needs no
server. It speaks real RESP over TCP, so the nodes use the same Redis client and the same Lua
scripts as against a real Redis. It never evicts keys, so the replay store is sound on it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from fakeredis import TcpFakeServer

EMBEDDED_HOST = "127.0.0.1"


@contextmanager
def serve_embedded_redis() -> Iterator[str]:
    """Run an embedded Redis on 127.0.0.1 and a free port; yield its ``redis://`` URL.

    The server runs in a daemon thread and is shut down on exit. Its data lives only as long as
    the context.
    """
    server = TcpFakeServer((EMBEDDED_HOST, 0), server_type="redis")
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True)
    thread.start()
    try:
        port = int(server.server_address[1])
        yield f"redis://{EMBEDDED_HOST}:{port}/0"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
