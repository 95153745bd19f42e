"""The HTTP server alone: an ASGI app answering two fixed MCP replies, on the nodes' server.

Layer: cluster (the lab). ``python -m cluster.lab.fixed_replies`` serves it with
the node processes' uvicorn settings (``nodes.serving.http_server``) on a free loopback port and
prints its URL. Round 1 (no ``requestState``) gets an ``input_required`` reply offering note
``FIXED_NOTE``; round 2 gets ``deleted: true``. The lab drives it with the bench's wrk script
(``fixed_targets``), as it drives the nodes, so its CPU per flow is what the server itself costs
a node per flow: ``bench-parts`` (``parts``) and ``bench-servers`` (``server_variants``, which
serves the same app on other servers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nodes.http import Receive, Send, ServerTimeouts
from nodes.serving.http_server import bind_socket, run_server, server_config

if TYPE_CHECKING:
    from cluster.bench.flows import SeededNote

FIXED_NOTE = "n0000000000000000"
_STATE = "v1.demo." + "A" * 300
"""About the size of our sealed states."""
_ROUND_1 = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "resultType": "input_required",
            "inputRequests": {
                "confirm_delete": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Which note should be deleted?",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {
                                "noteId": {"type": "string", "oneOf": [{"const": FIXED_NOTE}]},
                                "confirm": {"type": "boolean", "default": False},
                            },
                        },
                    },
                }
            },
            "requestState": _STATE,
        },
    },
    separators=(",", ":"),
).encode()
_ROUND_2 = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {
            "content": [{"type": "text", "text": "deleted"}],
            "structuredContent": {"deleted": True, "noteId": FIXED_NOTE},
        },
    },
    separators=(",", ":"),
).encode()


def fixed_targets(count: int) -> list[SeededNote]:
    """Notes for the fixed-replies app (every flow names its fixed note), ten times ``count``:
    the HTTP server alone runs far faster than any node."""
    from cluster.bench.flows import SeededNote  # the bench's loop: not loaded by the server

    return [SeededNote("u0a", "load0", "file:///load/t0/inbox", "fixed", FIXED_NOTE)] * (10 * count)


def _start(body: bytes) -> dict[str, Any]:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    return {"type": "http.response.start", "status": 200, "headers": headers}


async def app(scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
    """Read the body, answer round 1 or round 2."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    reply = _ROUND_2 if b'"requestState"' in body else _ROUND_1
    await send(_start(reply))
    await send({"type": "http.response.body", "body": reply})


def main() -> None:
    """Serve on a free loopback port; print the URL when ready."""
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = server_config(app, host="127.0.0.1", port=port, timeouts=ServerTimeouts())
    run_server(config, lambda: print(f"http://127.0.0.1:{port}/mcp", flush=True), [sock])


if __name__ == "__main__":
    main()
