"""Helpers for driving nodes in tests: demo config, node construction, JSON-RPC calls."""

from __future__ import annotations

import itertools
import os
import secrets
from dataclasses import replace
from typing import Any

import trio

from nodes.config import NodeConfig
from nodes.protocol import PROTOCOL_VERSION, Node, Reply, RequestContext
from nodes.scope import Scope
from nodes.sealing import KeyRing
from nodes.serving.demo import DEMO_ARCHIVES, DEMO_GRANTS, DEMO_SERVER_NAME, DEMO_WORKSPACES
from store.api import NoteStoreAPI

FORM_CAPS: dict[str, Any] = {"elicitation": {}}
_ids = itertools.count(1)


def demo_config(ring: KeyRing | None = None, **overrides: Any) -> NodeConfig:
    """A NodeConfig on the demo scope (fresh key ring unless one is given)."""
    cfg = NodeConfig(
        server_name=DEMO_SERVER_NAME,
        scope=Scope.build(DEMO_WORKSPACES, DEMO_GRANTS),
        key_ring=ring or KeyRing.generate(),
        archives=DEMO_ARCHIVES,
    )
    return replace(cfg, **overrides)


def make_nodes(store: NoteStoreAPI, n: int = 2, **overrides: Any) -> list[Node]:
    """``n`` nodes sharing one store, one key ring and one audience."""
    cfg = demo_config(**overrides)
    return [Node(replace(cfg, node_id=f"node-{i}"), store) for i in range(n)]


def meta(caps: dict[str, Any] | None = None, version: str = PROTOCOL_VERSION) -> dict[str, Any]:
    """The required request ``_meta``."""
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": FORM_CAPS if caps is None else caps,
    }


async def rpc(
    node: Node,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    principal: str = "alice",
    caps: dict[str, Any] | None = None,
    notification: bool = False,
) -> Reply:
    """Send one request (``_meta`` added unless params already has one)."""
    p = dict(params or {})
    p.setdefault("_meta", meta(caps))
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": p}
    if not notification:
        msg["id"] = next(_ids)
    return await node.handle(msg, RequestContext(principal=principal))


async def call_tool(
    node: Node,
    name: str,
    arguments: dict[str, Any],
    *,
    principal: str = "alice",
    caps: dict[str, Any] | None = None,
    state: str | None = None,
    responses: dict[str, Any] | None = None,
) -> Reply:
    """``tools/call`` with optional MRTR retry fields."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if state is not None:
        params["requestState"] = state
    if responses is not None:
        params["inputResponses"] = responses
    return await rpc(node, "tools/call", params, principal=principal, caps=caps)


def result(reply: Reply) -> dict[str, Any]:
    """The result of a successful reply (asserts it is one)."""
    assert reply.body is not None, reply
    assert "result" in reply.body, reply.body
    out: dict[str, Any] = reply.body["result"]
    return out


def error(reply: Reply) -> dict[str, Any]:
    """The error of a failed reply (asserts it is one)."""
    assert reply.body is not None, reply
    assert "error" in reply.body, reply.body
    out: dict[str, Any] = reply.body["error"]
    return out


def accept(note_id: str, confirm: bool = True) -> dict[str, Any]:
    """An accepted answer to the delete form."""
    return {
        "confirm_delete": {"action": "accept", "content": {"noteId": note_id, "confirm": confirm}}
    }


async def until_redis_clock(store: NoteStoreAPI, redis_ms: int) -> int:
    """Wait until the Redis server clock (``TIME``, not this process's clock) reads at least
    ``redis_ms``; return its reading. Sleeps on trio's clock for the distance left, then reads
    the Redis clock again, so a loaded machine only makes it wait longer."""
    while True:
        now = await store.redis_time_ms()
        if now >= redis_ms:
            return now
        await trio.sleep((redis_ms - now) / 1000)


SEED_ENV = "NOTES_CLUSTER_TEST_SEED"
"""The seed every randomized test uses when set; else each draws a fresh one and prints it."""


def random_seed() -> int:
    """The seed of a randomized test: ``NOTES_CLUSTER_TEST_SEED`` when set, else a fresh one.
    Printed with the command that repeats the test with it (pytest shows it on failure)."""
    given = os.environ.get(SEED_ENV, "").strip()
    seed = int(given) if given else secrets.randbelow(2**32)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    print(f"seed {seed}; repeat with: {SEED_ENV}={seed} pytest '{test}'")
    return seed
