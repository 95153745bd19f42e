"""Drive an ASGI app in memory: one HTTP request in, the response out, and how often the app
called ``receive()`` (so a test can prove a body was never read)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

App = Callable[
    [Mapping[str, Any], Callable[[], Awaitable[Mapping[str, Any]]], Any], Awaitable[None]
]


@dataclass
class Exchange:
    """What the app answered, and how much of the body it asked for."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    receive_calls: int = 0


async def request(
    app: App,
    method: str,
    path: str,
    headers: Mapping[str, str] | None = None,
    chunks: Sequence[bytes] = (),
) -> Exchange:
    """Send one request; ``chunks`` are handed out one per ``receive()`` call."""
    out = Exchange()
    pending = list(chunks) or [b""]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in (headers or {}).items()],
    }

    async def receive() -> Mapping[str, Any]:
        out.receive_calls += 1
        if not pending:
            return {"type": "http.disconnect"}
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out.status = message["status"]
            for k, v in message.get("headers", []):
                out.headers[k.decode("latin-1").lower()] = v.decode("latin-1")
        elif message["type"] == "http.response.body":
            out.body += message.get("body", b"")

    await app(scope, receive, send)
    return out
