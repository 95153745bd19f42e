"""Drive one node's ASGI app in-process (no sockets): real HTTP statuses and bodies."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from nodes.auth import TokenTable
from nodes.headers import request_headers
from nodes.http import make_app
from nodes.protocol import PROTOCOL_VERSION, Node
from nodes.serving.demo import DEMO_TOKENS
from tests.harness import meta

TOKENS = {"alice": "alice-demo-token", "bob": "bob-demo-token"}
_ids = itertools.count(1000)


@asynccontextmanager
async def asgi_client(node: Node) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on ``node``'s ASGI app (demo tokens)."""
    app = make_app(node, TokenTable.from_plain(DEMO_TOKENS))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        yield client


async def post_call(
    client: httpx.AsyncClient,
    name: str,
    arguments: dict[str, Any],
    *,
    principal: str = "alice",
    state: str | None = None,
    responses: dict[str, Any] | None = None,
    request_id: int | str | None = None,
) -> tuple[int | str, httpx.Response]:
    """POST one ``tools/call`` with conforming headers; returns the id sent and the response."""
    params: dict[str, Any] = {"name": name, "arguments": arguments, "_meta": meta()}
    if state is not None:
        params["requestState"] = state
    if responses is not None:
        params["inputResponses"] = responses
    return await post_method(
        client, "tools/call", params, principal=principal, request_id=request_id
    )


async def post_method(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    *,
    principal: str = "alice",
    request_id: int | str | None = None,
) -> tuple[int | str, httpx.Response]:
    """POST one request of any method (``_meta`` added unless present)."""
    rid = next(_ids) if request_id is None else request_id
    params = {"_meta": meta(), **params}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {TOKENS[principal]}",
        **request_headers(method, params, PROTOCOL_VERSION),
    }
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    return rid, await client.post("/mcp", json=body, headers=headers)


def tool_result(response: httpx.Response) -> dict[str, Any]:
    """The result of a 200 answer (asserts it is one)."""
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()["result"]
    return out
