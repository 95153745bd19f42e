"""The legacy 2025-11-25 adapter across nodes: sessions in the store, answers delivered anywhere.

Layer: tests. Three HTTP nodes (``cluster.serve.serve_http_node``, which mounts the adapter) over
the store under test (embedded and real Redis). The official SDK client in ``mode="legacy"``
(``Client.__aenter__`` then runs ``initialize`` + ``notifications/initialized``, sends
``Mcp-Session-Id`` and ``MCP-Protocol-Version: 2025-11-25`` on every later request, and POSTs its
answers to server requests back as ``{jsonrpc, id, result}``) goes through a transport that sends
each POST/DELETE to the next node in turn, like a balancer with no affinity. Raw HTTP tests
(``httpx``) pin which node gets what: the stream on one node, the answer on another.
"""

from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
import trio
from mcp.client import Client, ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from cluster.serve import seed_demo_notes, start_http_nodes
from nodes.legacy import LEGACY_VERSION, LegacyLimits, wire
from nodes.protocol import Node, PreparedCall
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_EVIL, ALICE_NOTES, DEMO_TENANT, TEAM
from nodes.serving.settings import demo_settings
from store.notes import NoteStore
from store.sessions import SessionStore
from tests.conftest import raw
from tests.test_sdk_interop import (
    ALICE_TOKEN,
    CREATED_2024,
    DELETE_ARGS,
    OUR_TOOLS,
    Elicitations,
    Hop,
    RoundRobinTransport,
    tps_reports,
)

BOB_TOKEN = "bob-demo-token"
NODES = 3
ALICE_DOCS = "file:///Users/alice/Documents"
STEP_S = 10.0
"""Longest wait for any one step of a raw exchange."""
LIMITS = LegacyLimits(answer_timeout_s=20.0, url_poll_s=0.2)


@dataclass
class Cluster:
    urls: list[str]
    store: NoteStore
    sessions: SessionStore
    http: httpx.AsyncClient


async def start_nodes(
    redis_url: str,
    embedded_url: str,
    prefix: str,
    nursery: trio.Nursery,
    limits: LegacyLimits,
    state_ttl_ms: int | None = None,
) -> list[str]:
    settings = demo_settings()
    if state_ttl_ms is not None:
        settings = replace(settings, node=replace(settings.node, state_ttl_ms=state_ttl_ms))
    embedded = redis_url == embedded_url
    await seed_demo_notes(redis_url, embedded, prefix=prefix)
    return await start_http_nodes(
        nursery,
        settings,
        redis_url,
        count=NODES,
        embedded=embedded,
        prefix=prefix,
        legacy_limits=limits,
    )


@pytest.fixture
async def cluster(
    redis_url: str, embedded_url: str, key_prefix: str, nursery: trio.Nursery, store: NoteStore
) -> AsyncIterator[Cluster]:
    urls = await start_nodes(redis_url, embedded_url, key_prefix, nursery, LIMITS)
    async with httpx.AsyncClient(timeout=STEP_S) as http:
        yield Cluster(urls, store, SessionStore(raw(store), prefix=key_prefix), http)


# --- raw HTTP helpers ------------------------------------------------------------------------


def legacy_headers(session: str | None, token: str = ALICE_TOKEN) -> dict[str, str]:
    out = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {token}",
    }
    if session is not None:
        out["mcp-session-id"] = session
        out["mcp-protocol-version"] = LEGACY_VERSION
    return out


async def post(
    c: Cluster, node: int, message: dict[str, Any], session: str | None, token: str = ALICE_TOKEN
) -> httpx.Response:
    return await c.http.post(c.urls[node], json=message, headers=legacy_headers(session, token))


async def accepted(c: Cluster, node: int, message: dict[str, Any], session: str) -> None:
    """POST a notification or an answer; assert it was taken (202, no body)."""
    response = await post(c, node, message, session)
    assert response.status_code == 202, response.text
    assert response.content == b""


async def initialize(c: Cluster, node: int = 0, capabilities: dict[str, Any] | None = None) -> str:
    params = {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {"elicitation": {}} if capabilities is None else capabilities,
        "clientInfo": {"name": "raw", "version": "0"},
    }
    msg = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    response = await post(c, node, msg, None)
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await post(c, (node + 1) % NODES, done, session)).status_code == 202
    return session


async def test_a_round_slower_than_the_state_lifetime_still_waits_for_the_answer_to_its_state(
    redis_url: str,
    embedded_url: str,
    key_prefix: str,
    nursery: trio.Nursery,
    store: NoteStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no answer timeout of its own, a call waits for the answer to a round's question
    until that round's state expires, however long the round took. The delete's first round
    here outlasts the whole state lifetime on the Redis clock before it mints its state (a
    loaded node): a wait counted from the call's start would be over before the question is
    even sent, and a decline answered in time would get "No answer from the client in time" (the
    checker's ``answers_make_progress``: only ``declined`` is legal while the state lives)."""
    ttl_ms = 3_000
    real_round = Node.run_round
    slowed: list[int] = []

    async def slow_first_round(
        node: Node, call: PreparedCall, responses: Any, state: str | None
    ) -> dict[str, Any]:
        if call.tool == "notes_delete" and responses is None and not slowed:
            start = await store.redis_time_ms()
            slowed.append(start)
            with trio.fail_after(STEP_S):  # poll the Redis clock past a lifetime from here
                while True:
                    if await store.redis_time_ms() > start + ttl_ms:
                        break
                    await trio.sleep(0.05)
        return await real_round(node, call, responses, state)

    monkeypatch.setattr(Node, "run_round", slow_first_round)
    urls = await start_nodes(redis_url, embedded_url, key_prefix, nursery, LegacyLimits(), ttl_ms)
    before = await tps_reports(store)
    async with httpx.AsyncClient(timeout=STEP_S) as http:
        c = Cluster(urls, store, SessionStore(raw(store), prefix=key_prefix), http)
        session = await initialize(c)
        async with open_call(c, 0, session, DELETE_ARGS) as events:
            ask = await events.next()
            exp_ms = ask["params"]["_meta"][wire.CONFIRMATION_META]["expMs"]
            await accepted(c, 2, answer(ask["id"], {"action": "decline"}), session)
            answered_ms = await store.redis_time_ms()
            final = await events.next()
            withdrawn = []
            while "method" in final:  # a timed-out call withdraws its request first
                withdrawn.append(final["method"])
                final = await events.next()
    assert slowed
    assert exp_ms > slowed[0] + ttl_ms  # the state was minted past a lifetime
    # The answer was in the store while its state lived (else an error result is legal too).
    assert answered_ms < exp_ms, (answered_ms, exp_ms)
    assert final["result"].get("isError") is not True, (withdrawn, final)
    assert final["result"]["structuredContent"] == {"deleted": False}
    assert withdrawn == []
    assert await tps_reports(store) == before


def answer(request_id: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def notify(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def pick_2024(event: dict[str, Any]) -> str:
    assert event["method"] == "elicitation/create", event
    options = event["params"]["requestedSchema"]["properties"]["noteId"]["oneOf"]
    return str(next(o["const"] for o in options if CREATED_2024 in o["title"]))


def confirm(note_id: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"noteId": note_id, "confirm": True}}


def roots(*uris: str) -> dict[str, Any]:
    return {"roots": [{"uri": u} for u in uris]}


class Events:
    """The JSON-RPC messages of one SSE response, in order."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.status_code
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["x-accel-buffering"] == "no"
        self._lines = response.aiter_lines()

    async def next(self) -> dict[str, Any]:
        data: list[str] = []
        with trio.fail_after(STEP_S):
            async for line in self._lines:
                if line.startswith("data: "):
                    data.append(line.removeprefix("data: "))
                elif line == "" and data:
                    out: dict[str, Any] = json.loads("".join(data))
                    return out
        raise EOFError

    async def ended(self) -> bool:
        try:
            await self.next()
        except EOFError:
            return True
        return False


@asynccontextmanager
async def open_call(
    c: Cluster, node: int, session: str, arguments: dict[str, Any], name: str = "notes_delete"
) -> AsyncIterator[Events]:
    params = {"name": name, "arguments": arguments}
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    headers = legacy_headers(session)
    async with c.http.stream("POST", c.urls[node], json=msg, headers=headers) as response:
        yield Events(response)


async def deletions(store: NoteStore, note_id: str) -> int:
    """How many times the journal records ``note_id`` deleted."""
    entries = await raw(store).xrange(store.keys(DEMO_TENANT).journal)
    return sum(
        1
        for e in entries
        if e.field_values.get("op") == "delete" and e.field_values.get("note") == note_id
    )


# --- isolation -------------------------------------------------------------------------------


def test_the_modern_core_and_http_shell_never_import_the_legacy_adapter() -> None:
    """Every module of ``nodes`` but the adapter itself and the serving edge (``nodes.serving``,
    the composition root that puts a node and its adapter together, as ``cluster`` did before
    it moved) is held to it."""
    nodes = Path(__file__).resolve().parent.parent / "nodes"
    for path in nodes.rglob("*.py"):
        if {"legacy", "serving"} & set(path.relative_to(nodes).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n.startswith("nodes.legacy") for n in names), path
    probe = (
        "import sys, nodes.protocol, nodes.http, nodes.tools; "
        "sys.exit(any(m.startswith('nodes.legacy') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


@pytest.mark.parametrize(
    ("http_method", "headers", "message", "legacy"),
    [
        ("POST", {}, {"jsonrpc": "2.0", "id": 1, "method": "initialize"}, True),
        ("POST", {"mcp-protocol-version": LEGACY_VERSION}, {"method": "tools/list"}, True),
        ("POST", {"mcp-protocol-version": LEGACY_VERSION}, {"id": "nc-x", "result": {}}, True),
        # The modern _meta wins over any header: the modern core answers (e.g. -32020).
        (
            "POST",
            {"mcp-protocol-version": LEGACY_VERSION},
            {"method": "tools/list", "params": {"_meta": {wire.MODERN_META_VERSION: "x"}}},
            False,
        ),
        ("POST", {}, {"method": "tools/list"}, False),
        ("POST", {"mcp-protocol-version": "2026-07-28"}, {"method": "tools/list"}, False),
        ("POST", {"mcp-protocol-version": LEGACY_VERSION}, ["batch"], False),
        ("DELETE", {"mcp-session-id": "s" * 32}, None, True),
        ("DELETE", {}, None, False),
        ("GET", {"mcp-session-id": "s" * 32}, None, False),
    ],
)
def test_the_adapter_claims_exactly_the_handshake_era_requests(
    http_method: str, headers: dict[str, str], message: object, legacy: bool
) -> None:
    assert wire.claims(http_method, headers, message) is legacy


def test_roots_only_narrow_a_malformed_root_matches_nothing() -> None:
    listed = {"result": roots(ALICE_DOCS, "file:///Users/alice/../bob", "https://x", ALICE_DOCS)}
    assert wire.parse_roots(listed) == (ALICE_DOCS,)
    assert wire.parse_roots({"error": {"code": -32601, "message": "no"}}) is None
    assert wire.parse_roots({"result": {"roots": [{"name": "no uri"}]}}) is None
    assert wire.within_roots((ALICE_NOTES,), (ALICE_DOCS,))
    assert not wire.within_roots((ALICE_NOTES, TEAM), (ALICE_DOCS,))
    assert not wire.within_roots(("file:///Users/alice/Documents-evil",), (ALICE_DOCS,))


def test_legacy_results_lose_the_modern_only_members() -> None:
    modern = {
        "resultType": "complete",
        "content": [],
        "structuredContent": {"deleted": False},
        "isError": False,
        "_meta": {wire.META_SERVER_INFO: {"name": "n"}, "dev.notes-cluster/replay": True},
    }
    assert wire.legacy_result(modern) == {
        "content": [],
        "structuredContent": {"deleted": False},
        "isError": False,
        "_meta": {"dev.notes-cluster/replay": True},
    }


# --- the SDK in legacy mode ------------------------------------------------------------------


class PostRotation(RoundRobinTransport):
    """Each POST or DELETE to the next node; the SDK's GET stream (405 here) does not take a
    turn, so which node gets which message does not depend on when the SDK retries its GET."""

    def __init__(self, urls: Sequence[str]) -> None:
        super().__init__(urls)
        self._turn = 0
        self.session_id: str | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            target = self.urls[0]
            request.url = request.url.copy_with(host=target.host, port=target.port)
            return await self._inner.handle_async_request(request)
        index = self._turn % len(self.urls)
        self._turn += 1
        target = self.urls[index]
        request.url = request.url.copy_with(host=target.host, port=target.port, path=target.path)
        request.headers["host"] = f"{target.host}:{target.port}"
        body = json.loads(request.content) if request.content else {}
        method = str(body.get("method", "answer" if body else request.method))
        self.hops.append(Hop(index, method, body.get("id"), False))
        response = await self._inner.handle_async_request(request)
        self.session_id = response.headers.get("mcp-session-id", self.session_id)
        return response


@asynccontextmanager
async def legacy_sdk_client(
    urls: Sequence[str], **callbacks: Any
) -> AsyncIterator[tuple[Client, PostRotation]]:
    rotation = PostRotation(urls)
    async with httpx2.AsyncClient(
        transport=rotation,
        headers={"Authorization": f"Bearer {ALICE_TOKEN}"},
        timeout=httpx2.Timeout(STEP_S),
    ) as http_client:
        client = Client(
            streamable_http_client(urls[0], http_client=http_client),
            mode="legacy",
            client_info=types.Implementation(name="legacy-test", version="0"),
            **callbacks,
        )
        with trio.fail_after(3 * STEP_S):
            async with client:
                yield client, rotation


async def test_the_sdk_in_legacy_mode_deletes_with_every_request_on_another_node(
    cluster: Cluster,
) -> None:
    before = await tps_reports(cluster.store)
    listed: list[str] = []

    async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
        listed.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri=ALICE_DOCS)])  # type: ignore[arg-type]

    callback = Elicitations("accept")
    async with legacy_sdk_client(
        cluster.urls, elicitation_callback=callback, list_roots_callback=list_roots
    ) as (client, rotation):
        assert client.protocol_version == LEGACY_VERSION
        assert client.session.initialize_result is not None
        result = await client.call_tool("notes_delete", DELETE_ARGS)

    assert result.is_error is False
    picked = next(k for k, v in before.items() if v == 1_719_835_200_000)
    assert result.structured_content == {"deleted": True, "noteId": picked}
    assert set(await tps_reports(cluster.store)) == set(before) - {picked}
    assert await deletions(cluster.store, picked) == 1
    assert listed == ["roots"]
    assert len(callback.shown) == 1
    # initialize, initialized, tools/call, its two answers (roots, form), tools/list, DELETE:
    # each on the next node, so the call's stream and each answer were on different nodes.
    methods = [h.method for h in rotation.hops]
    assert methods[:5] == [
        "initialize",
        "notifications/initialized",
        "tools/call",
        "answer",
        "answer",
    ]
    assert methods[-1] == "DELETE"
    call = rotation.hops[2]
    assert all(h.node != call.node for h in rotation.hops[3:5])
    # The SDK's DELETE on exit ended the session in the store.
    assert rotation.session_id is not None
    assert await cluster.sessions.load(rotation.session_id) is None


async def test_the_sdk_in_legacy_mode_archives_the_picked_note_with_requests_on_other_nodes(
    cluster: Cluster,
) -> None:
    before = await tps_reports(cluster.store)
    callback = Elicitations("accept")
    async with legacy_sdk_client(cluster.urls, elicitation_callback=callback) as (
        client,
        rotation,
    ):
        assert client.protocol_version == LEGACY_VERSION
        result = await client.call_tool("notes_archive", DELETE_ARGS)

    assert result.is_error is False, result
    picked = next(k for k, v in before.items() if v == 1_719_835_200_000)
    assert result.structured_content is not None
    assert result.structured_content["archived"] is True
    assert result.structured_content["noteId"] == picked
    assert len(callback.shown) == 1
    moved = await cluster.store.get(DEMO_TENANT, picked)
    assert moved is not None
    assert moved.workspace == ALICE_ARCHIVE
    assert set(await tps_reports(cluster.store)) == set(before) - {picked}
    assert await deletions(cluster.store, picked) == 0
    call = next(h for h in rotation.hops if h.method == "tools/call")
    answer = next(h for h in rotation.hops if h.method == "answer")
    assert answer.node != call.node


# --- raw HTTP: one stream, answers elsewhere -------------------------------------------------


async def test_an_answer_posted_to_another_node_reaches_the_stream_and_deletes_once(
    cluster: Cluster,
) -> None:
    session = await initialize(cluster, node=0)
    async with open_call(cluster, 1, session, DELETE_ARGS) as events:
        ask = await events.next()
        note = pick_2024(ask)
        accepted = await post(cluster, 2, answer(ask["id"], confirm(note)), session)
        assert accepted.status_code == 202
        final = await events.next()
        assert await events.ended()
    assert final["id"] == 1
    result = final["result"]
    assert "resultType" not in result
    assert "ttlMs" not in result
    assert result["structuredContent"] == {"deleted": True, "noteId": note}
    # A late copy of the same answer, to yet another node: accepted, and nothing happens.
    again = await post(cluster, 0, answer(ask["id"], confirm(note)), session)
    assert again.status_code == 202
    assert await deletions(cluster.store, note) == 1
    assert len(await tps_reports(cluster.store)) == 2


async def test_the_same_answer_posted_to_two_nodes_at_once_deletes_exactly_once(
    cluster: Cluster,
) -> None:
    session = await initialize(cluster, node=2)
    async with open_call(cluster, 0, session, DELETE_ARGS) as events:
        ask = await events.next()
        note = pick_2024(ask)
        statuses: list[int] = []

        async def send_copy(node: int) -> None:
            response = await post(cluster, node, answer(ask["id"], confirm(note)), session)
            statuses.append(response.status_code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_copy, 1)
            nursery.start_soon(send_copy, 2)
        final = await events.next()
    assert statuses == [202, 202]
    assert final["result"]["structuredContent"] == {"deleted": True, "noteId": note}
    # Only the first copy reached the inbox; the second was acknowledged and dropped.
    inbox = await raw(cluster.store).xrange(cluster.sessions.keys(session).inbox)
    assert [e.field_values["rid"] for e in inbox if e.field_values["kind"] == "answer"] == [
        ask["id"]
    ]
    assert await deletions(cluster.store, note) == 1
    assert note not in await tps_reports(cluster.store)


async def test_a_declined_answer_on_another_node_deletes_nothing(cluster: Cluster) -> None:
    before = await tps_reports(cluster.store)
    session = await initialize(cluster)
    async with open_call(cluster, 2, session, DELETE_ARGS) as events:
        ask = await events.next()
        await accepted(cluster, 1, answer(ask["id"], {"action": "decline"}), session)
        final = await events.next()
    assert final["result"]["structuredContent"] == {"deleted": False}
    assert await tps_reports(cluster.store) == before


# --- sessions --------------------------------------------------------------------------------


async def test_an_unknown_session_gets_404_and_so_does_another_principals(
    cluster: Cluster,
) -> None:
    listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    for unknown in ("A" * 32, "not a session id", "{s:x}"):
        response = await post(cluster, 0, listing, unknown)
        assert response.status_code == 404
        assert response.json()["error"]["message"] == "Session not found"
    session = await initialize(cluster, node=1)
    assert (await post(cluster, 2, listing, session, token=BOB_TOKEN)).status_code == 404
    mine = await post(cluster, 2, listing, session)
    assert mine.status_code == 200
    tools = mine.json()["result"]
    assert "ttlMs" not in tools
    assert "cacheScope" not in tools
    assert "notes_delete" in {t["name"] for t in tools["tools"]}
    # No session header at all is a bad request, not an unknown session.
    headers = legacy_headers(None) | {"mcp-protocol-version": LEGACY_VERSION}
    response = await cluster.http.post(cluster.urls[0], json=listing, headers=headers)
    assert response.status_code == 400


async def test_the_session_lives_in_the_store_with_its_principal_and_capabilities(
    cluster: Cluster,
) -> None:
    caps = {"elicitation": {"form": {}}, "roots": {"listChanged": True}}
    session = await initialize(cluster, node=0, capabilities=caps)
    record = await cluster.sessions.load(session)
    assert record is not None
    assert record.principal == "alice"
    assert record.capabilities == caps
    assert record.version == LEGACY_VERSION
    assert record.initialized is True
    ttl = await raw(cluster.store).pttl(cluster.sessions.keys(session).session)
    assert 0 < ttl <= cluster.sessions.idle_ttl_ms


async def test_delete_ends_the_session_and_its_pending_call(cluster: Cluster) -> None:
    before = await tps_reports(cluster.store)
    session = await initialize(cluster)
    async with open_call(cluster, 0, session, DELETE_ARGS) as events:
        ask = await events.next()
        headers = legacy_headers(session)
        ended = await cluster.http.delete(cluster.urls[1], headers=headers)
        assert ended.status_code == 204
        final = await events.next()
        assert final["error"]["message"] == "Session ended"
    late = await post(cluster, 2, answer(ask["id"], confirm(pick_2024(ask))), session)
    assert late.status_code == 404
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert (await post(cluster, 2, ping, session)).status_code == 404
    assert (await cluster.http.delete(cluster.urls[2], headers=headers)).status_code == 404
    assert await cluster.sessions.load(session) is None
    assert await tps_reports(cluster.store) == before


async def test_initialize_counter_offers_our_version_and_a_session_takes_any_handshake_version(
    cluster: Cluster,
) -> None:
    params = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {}}
    msg = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    response = await post(cluster, 0, msg, None)
    result = response.json()["result"]
    assert result["protocolVersion"] == LEGACY_VERSION
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == demo_settings().node.server_name
    session = response.headers["mcp-session-id"]
    # The header SHOULD name the negotiated version; any handshake-era one is taken (as the
    # TypeScript SDK's server does, and the conformance suite sends 2025-03-26 on our session).
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for version in ("2025-06-18", "2025-03-26"):
        headers = legacy_headers(session) | {"mcp-protocol-version": version}
        taken = await cluster.http.post(cluster.urls[1], json=ping, headers=headers)
        assert taken.status_code == 200, taken.text
        assert taken.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    # A version no era knows is not the adapter's: the modern path answers (it has no ping).
    headers = legacy_headers(session) | {"mcp-protocol-version": "2099-01-01"}
    unknown = await cluster.http.post(cluster.urls[1], json=ping, headers=headers)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == -32601, unknown.text
    # A legacy client without the elicitation capability: -32602, not the modern -32021.
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "notes_delete", "arguments": DELETE_ARGS},
    }
    refused = (await post(cluster, 1, call, session)).json()["error"]
    assert refused["code"] == -32602
    assert refused["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}


# --- roots -----------------------------------------------------------------------------------


ROOTS_CAPS = {"elicitation": {}, "roots": {"listChanged": True}}


async def test_a_roots_change_that_moves_a_pending_target_out_of_scope_refuses_the_delete(
    cluster: Cluster,
) -> None:
    before = await tps_reports(cluster.store)
    session = await initialize(cluster, capabilities=ROOTS_CAPS)
    async with open_call(cluster, 1, session, DELETE_ARGS) as events:
        listing = await events.next()
        assert listing["method"] == "roots/list"
        await accepted(cluster, 2, answer(listing["id"], roots(ALICE_DOCS)), session)
        ask = await events.next()
        # The roots change, then the user confirms: both acknowledged before the node reads
        # either, on two other nodes. The change comes first, so the node re-reads the roots.
        changed = await post(cluster, 0, notify("notifications/roots/list_changed"), session)
        assert changed.status_code == 202
        await accepted(cluster, 2, answer(ask["id"], confirm(pick_2024(ask))), session)
        relisting = await events.next()
        assert relisting["method"] == "roots/list"
        await accepted(cluster, 0, answer(relisting["id"], roots(TEAM)), session)
        final = await events.next()
    result = final["result"]
    assert result["isError"] is True
    assert "structuredContent" not in result
    assert result["content"][0]["text"].startswith(
        f"The workspace {ALICE_NOTES} is outside this client's roots: the roots it listed "
        f"({TEAM}) changed and no longer include it; nothing was changed."
    )
    assert await tps_reports(cluster.store) == before
    record = await cluster.sessions.load(session)
    assert record is not None
    assert record.current_roots == (TEAM,)


async def test_a_roots_change_while_the_form_is_open_withdraws_it(cluster: Cluster) -> None:
    session = await initialize(cluster, capabilities=ROOTS_CAPS)
    # Roots already read in an earlier call are reused: this call starts with the form.
    record = await cluster.sessions.load(session)
    assert record is not None
    await cluster.sessions.set_roots(session, (ALICE_DOCS,), record.roots_epoch)
    async with open_call(cluster, 2, session, DELETE_ARGS) as events:
        ask = await events.next()
        assert ask["method"] == "elicitation/create"
        await accepted(cluster, 1, notify("notifications/roots/list_changed"), session)
        relisting = await events.next()
        await accepted(cluster, 0, answer(relisting["id"], roots("file:///Users/bob")), session)
        withdrawn = await events.next()
        final = await events.next()
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == ask["id"]
    assert final["result"]["isError"] is True


async def test_legacy_roots_never_widen_what_the_principal_may_touch(cluster: Cluster) -> None:
    session = await initialize(cluster, capabilities=ROOTS_CAPS)
    evil = {"workspaceUri": ALICE_EVIL, "title": "TPS report"}
    async with open_call(cluster, 0, session, evil) as events:
        listing = await events.next()
        await accepted(cluster, 1, answer(listing["id"], roots("file:///")), session)
        final = await events.next()
    assert final["result"]["isError"] is True
    assert "not authorized" in final["result"]["content"][0]["text"].lower()
    snap = await cluster.store.find(DEMO_TENANT, ALICE_EVIL, "TPS report", 10)
    assert len(snap.notes) == 1
    # After a change the next call reads the roots again; a workspace outside them is refused
    # before any form is shown.
    await accepted(cluster, 2, notify("notifications/roots/list_changed"), session)
    async with open_call(cluster, 1, session, {"workspaceUri": TEAM, "title": "Standup"}) as ev:
        listing = await ev.next()
        await accepted(cluster, 2, answer(listing["id"], roots(ALICE_DOCS)), session)
        final = await ev.next()
    assert final["result"]["isError"] is True
    assert final["result"]["content"][0]["text"].startswith(
        f"The workspace {TEAM} is outside this client's roots: the roots it listed ({ALICE_DOCS}) "
        "do not include it; nothing was changed."
    )
    snap = await cluster.store.find(DEMO_TENANT, TEAM, "Standup", 10)
    assert len(snap.notes) == 1


async def test_a_client_that_lists_no_roots_is_told_so_and_how_to_declare_one(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # The MCP Inspector's default: the roots capability declared, `roots/list` answered with
    # an empty list. Roots only narrow, so nothing is open; the refusal says why and what to do,
    # as plain text (no structuredContent a client would hold to the tool's outputSchema).
    caplog.set_level(logging.INFO, logger="nodes.legacy")
    before = await tps_reports(cluster.store)
    session = await initialize(cluster, capabilities=ROOTS_CAPS)
    async with open_call(cluster, 0, session, DELETE_ARGS) as events:
        listing = await events.next()
        assert listing["method"] == "roots/list"
        await accepted(cluster, 1, answer(listing["id"], {"roots": []}), session)
        final = await events.next()
    result = final["result"]
    assert result["isError"] is True
    assert "structuredContent" not in result
    assert result["content"] == [
        {
            "type": "text",
            "text": f"The workspace {ALICE_NOTES} is outside this client's roots: the client "
            "declared the roots capability but listed no roots, so no workspace is open to it; "
            "nothing was changed. To use it, add it (or a folder above it) to the client's "
            "roots, or connect without the roots capability (the server's grants alone then "
            "decide)",
        }
    ]
    assert await tps_reports(cluster.store) == before
    # The log names the reason, not the client's own text.
    refusals = [r.getMessage() for r in caplog.records if "legacy call refused" in r.getMessage()]
    assert refusals == [
        "legacy call refused: The client listed no roots; nothing was changed (tool=notes_delete)"
    ]


async def test_every_tools_error_result_carries_no_structured_content_on_either_path(
    cluster: Cluster,
) -> None:
    # Clients hold structuredContent to the tool's outputSchema, even on errors (the TypeScript
    # SDK does): an error result has none, its message is its one text block, on both paths.
    caps = {"elicitation": {"form": {}, "url": {}}}
    session = await initialize(cluster, capabilities=caps)
    modern = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    }
    for i, tool in enumerate(sorted(OUR_TOOLS)):
        call = {"name": tool, "arguments": {"workspaceUri": ALICE_NOTES, "bogus": 1}}
        old = {"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": call}
        new = {**old, "params": {**call, "_meta": modern}}
        headers = {
            "authorization": f"Bearer {ALICE_TOKEN}",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": tool,
        }
        replies = [
            (await post(cluster, i % NODES, old, session)).json()["result"],
            (await cluster.http.post(cluster.urls[i % NODES], json=new, headers=headers)).json()[
                "result"
            ],
        ]
        for result in replies:
            assert result["isError"] is True, (tool, result)
            assert "structuredContent" not in result, (tool, result)
            (block,) = result["content"]
            assert block["type"] == "text"
            assert block["text"].startswith("Invalid arguments: "), block
            assert "bogus: Extra inputs are not permitted" in block["text"], block
            assert result["_meta"]["dev.notes-cluster/error"] == {"error": block["text"]}


# --- URL mode, cancellation, timeouts --------------------------------------------------------


class UrlUser:
    """A user at a legacy client: agrees to open the setup URL, then completes the page a
    moment later (so the node must wait rather than ask again)."""

    def __init__(self, nursery: trio.Nursery, delay_s: float) -> None:
        self.nursery = nursery
        self.delay_s = delay_s
        self.shown: list[types.ElicitRequestURLParams] = []
        self.page_status: int | None = None

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams)
        self.shown.append(params)
        self.nursery.start_soon(self.complete, params.url)
        return types.ElicitResult(action="accept")

    async def complete(self, url: str) -> None:
        await trio.sleep(self.delay_s)
        async with httpx.AsyncClient(timeout=STEP_S) as http:
            page = await http.post(
                url,
                data={"api_key": "report-service-key"},
                headers={"authorization": f"Bearer {ALICE_TOKEN}"},
            )
        self.page_status = page.status_code


async def test_url_mode_over_legacy_carries_an_elicitation_id_and_waits_for_the_page(
    cluster: Cluster, nursery: trio.Nursery
) -> None:
    user = UrlUser(nursery, delay_s=0.6)
    seen: list[str] = []

    async def messages(message: object) -> None:
        seen.append(type(message).__name__)

    async with legacy_sdk_client(
        cluster.urls, elicitation_callback=user, message_handler=messages
    ) as (client, rotation):
        result = await client.call_tool("notes_setup", {"workspaceUri": ALICE_NOTES})
    assert result.is_error is False, result
    assert result.structured_content == {"configured": True}
    assert user.page_status == 200
    # Asked once (the node waited for the page instead of asking again), with an id.
    assert len(user.shown) == 1
    assert user.shown[0].elicitation_id
    assert "ElicitCompleteNotification" in seen
    call = next(h for h in rotation.hops if h.method == "tools/call")
    consent = next(h for h in rotation.hops if h.method == "answer")
    assert consent.node != call.node


async def test_a_cancelled_call_ends_its_stream_without_a_response(cluster: Cluster) -> None:
    before = await tps_reports(cluster.store)
    session = await initialize(cluster)
    async with open_call(cluster, 0, session, DELETE_ARGS) as events:
        ask = await events.next()
        cancel = notify("notifications/cancelled", {"requestId": 1, "reason": "user gave up"})
        await accepted(cluster, 2, cancel, session)
        assert await events.ended()
    late = await post(cluster, 1, answer(ask["id"], confirm(pick_2024(ask))), session)
    assert late.status_code == 202  # still an open request id: accepted, then dropped
    unknown = await post(cluster, 1, answer("nc-" + "x" * 22, {"action": "cancel"}), session)
    assert unknown.status_code == 400
    assert await tps_reports(cluster.store) == before


async def test_a_call_nobody_answers_times_out_deleting_nothing(
    redis_url: str, embedded_url: str, key_prefix: str, nursery: trio.Nursery, store: NoteStore
) -> None:
    limits = LegacyLimits(answer_timeout_s=1.0)
    urls = await start_nodes(redis_url, embedded_url, key_prefix, nursery, limits)
    before = await tps_reports(store)
    async with httpx.AsyncClient(timeout=STEP_S) as http:
        c = Cluster(urls, store, SessionStore(raw(store), prefix=key_prefix), http)
        session = await initialize(c)
        async with open_call(c, 1, session, DELETE_ARGS) as events:
            ask = await events.next()
            withdrawn = await events.next()
            final = await events.next()
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == ask["id"]
    assert final["result"]["isError"] is True
    assert "No answer" in final["result"]["content"][0]["text"]
    assert await tps_reports(store) == before


async def test_an_answer_reaching_its_call_past_the_state_expiry_is_an_error_result(
    redis_url: str, embedded_url: str, key_prefix: str, nursery: trio.Nursery, store: NoteStore
) -> None:
    """The state expires on the Redis clock before the client's accept is POSTed (the call
    waits longer than the state lives): the client, which never saw a requestState, is told
    with an ``isError`` result, and nothing is deleted. ``loadgen.check.model`` holds a legacy
    answer to an expired state to exactly this (``World.legacy``)."""
    limits = LegacyLimits(answer_timeout_s=STEP_S * 3)
    urls = await start_nodes(redis_url, embedded_url, key_prefix, nursery, limits, 300)
    before = await tps_reports(store)
    async with httpx.AsyncClient(timeout=STEP_S) as http:
        c = Cluster(urls, store, SessionStore(raw(store), prefix=key_prefix), http)
        session = await initialize(c)
        async with open_call(c, 0, session, DELETE_ARGS) as events:
            ask = await events.next()
            exp_ms = ask["params"]["_meta"][wire.CONFIRMATION_META]["expMs"]
            with trio.fail_after(STEP_S):  # poll the Redis clock past the expiry
                while True:
                    if await store.redis_time_ms() > exp_ms:
                        break
                    await trio.sleep(0.05)
            await accepted(c, 2, answer(ask["id"], confirm(pick_2024(ask))), session)
            final = await events.next()
    assert final["result"]["isError"] is True
    assert "expired" in final["result"]["content"][0]["text"]
    assert await tps_reports(store) == before
