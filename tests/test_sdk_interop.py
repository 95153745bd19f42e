"""Interop: the official MCP Python SDK (``mcp`` 2.3.0), unmodified, drives our HTTP nodes.

Layer: tests. The SDK is the client no one here wrote. Three HTTP nodes serve one store (embedded
and real Redis, via the ``redis_url`` fixture), each with its own ``NoteStore`` under the test's
key prefix and all with one key ring (one ``demo_settings()``); the nodes run as trio tasks of
the test process, then (on the real Redis) as node processes on uvicorn, the production serving
path. The SDK's ``Client`` speaks 2026-07-28 (``mode="auto"``: it probes ``server/discover``
and adopts the result) through an ``httpx2.AsyncClient`` whose transport sends each HTTP
request to the next node in turn, so round 1 and round 2 of ``notes_delete`` land on different
nodes.

What the SDK does with MRTR at 2026-07-28 (read from ``mcp/client/client.py`` and
``mcp/client/_input_required.py``): ``Client.call_tool`` sends ``tools/call``; on an
``input_required`` result it runs every embedded input request through the same callback table as
legacy server-to-client requests (``elicitation_callback`` for ``elicitation/create``), then
re-sends the original call with a new JSON-RPC id, ``inputResponses`` under the server's keys and
``requestState`` echoed byte for byte, up to ``input_required_max_rounds`` (10) rounds. A client
declares ``elicitation: {form: {}, url: {}}`` in every request's ``_meta`` exactly when it was
given an ``elicitation_callback``. A JSON-RPC error in a 4xx body is surfaced as ``MCPError`` with
the server's code and data.

Note: the SDK's HTTP stack is ``httpx2`` (a fork shipped as its dependency), not ``httpx``; its
``streamable_http_client`` only accepts an ``httpx2.AsyncClient``, so the rotating transport here
is an ``httpx2.AsyncBaseTransport``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

import httpx2
import mcp_types as types
import pytest
import trio
from mcp.client import Client, ClientRequestContext
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from cluster.serve import seed_demo_notes, start_http_nodes, start_process_nodes
from nodes.protocol import PROTOCOL_VERSION
from nodes.serving.demo import ALICE_NOTES, DEMO_TENANT, DEMO_TOKENS
from nodes.serving.settings import demo_settings
from nodes.tools import DEFAULT_TOOLS
from store.notes import NoteStore

ALICE_TOKEN = next(token for token, principal in DEMO_TOKENS.items() if principal == "alice")
NODES = 3
TPS = "TPS report"
CREATED_2024 = "2024-07-01"
"""How the form's option titles tell the 2024 TPS report apart (see ``nodes.serving.demo``)."""
OUR_TOOLS = {t.name for t in DEFAULT_TOOLS}


@dataclass(frozen=True)
class Hop:
    """One HTTP request as the rotating transport sent it: to which node, for which method."""

    node: int
    method: str
    request_id: object
    retry: bool
    """A ``tools/call`` that carries ``requestState`` (an MRTR retry)."""


class RoundRobinTransport(httpx2.AsyncBaseTransport):
    """Send each request to the next node URL in turn and record where it went.

    The SDK believes it talks to one endpoint; this transport rewrites every request's address
    (and Host) to node ``i mod n`` for the ``i``-th request, like a load balancer with no
    affinity.
    """

    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = [httpx2.URL(u) for u in urls]
        self.hops: list[Hop] = []
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        index = len(self.hops) % len(self.urls)
        target = self.urls[index]
        request.url = request.url.copy_with(host=target.host, port=target.port, path=target.path)
        request.headers["host"] = f"{target.host}:{target.port}"
        self.hops.append(_hop(index, request))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def calls(self, method: str) -> list[Hop]:
        """The hops of ``method``, in order."""
        return [h for h in self.hops if h.method == method]


def _hop(index: int, request: httpx2.Request) -> Hop:
    body = json.loads(request.content) if request.content else {}
    params = body.get("params") or {}
    return Hop(index, str(body.get("method")), body.get("id"), "requestState" in params)


@asynccontextmanager
async def open_sdk_client(
    urls: Sequence[str],
    *,
    elicitation_callback: ElicitationFnT | None = None,
) -> AsyncIterator[tuple[Client, RoundRobinTransport]]:
    """An SDK ``Client`` (unmodified, ``mode="auto"``) over the rotating transport as alice."""
    rotation = RoundRobinTransport(urls)
    async with httpx2.AsyncClient(
        transport=rotation,
        headers={"Authorization": f"Bearer {ALICE_TOKEN}"},
        timeout=httpx2.Timeout(10.0),
    ) as http_client:
        transport = streamable_http_client(urls[0], http_client=http_client)
        client = Client(
            transport,
            elicitation_callback=elicitation_callback,
            client_info=types.Implementation(name="sdk-interop-test", version="0"),
        )
        async with client:
            yield client, rotation


@pytest.fixture(params=["in-process", "processes"])
async def node_urls(
    request: pytest.FixtureRequest,
    redis_url: str,
    embedded_url: str,
    key_prefix: str,
    nursery: trio.Nursery,
) -> list[str]:
    """Three HTTP nodes over the store under test, seeded with the demo notes: trio tasks of
    this process (hypercorn's trio worker), then node processes (uvicorn, the production path)."""
    settings = demo_settings()
    embedded = redis_url == embedded_url
    if embedded and request.param == "processes":
        pytest.skip("node processes run on the real Redis (in-process covers the embedded store)")
    await seed_demo_notes(redis_url, embedded, prefix=key_prefix)
    start = start_process_nodes if request.param == "processes" else start_http_nodes
    return await start(
        nursery, settings, redis_url, count=NODES, embedded=embedded, prefix=key_prefix
    )


async def tps_reports(store: NoteStore) -> dict[str, int]:
    """Alice's TPS reports in her notes workspace: note id -> creation time (ms)."""
    snap = await store.find(DEMO_TENANT, ALICE_NOTES, TPS, 100)
    return {n.note_id: n.created_ms for n in snap.notes}


class Elicitations:
    """An elicitation callback, as a user at the SDK's prompt: it records the forms it was shown
    and answers ``action``; on accept it picks the 2024 TPS report and confirms."""

    def __init__(self, action: Literal["accept", "decline", "cancel"]) -> None:
        self.action = action
        self.shown: list[types.ElicitRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        self.shown.append(params)
        if self.action != "accept":
            return types.ElicitResult(action=self.action)
        assert isinstance(params, types.ElicitRequestFormParams)
        options = params.requested_schema["properties"]["noteId"]["oneOf"]
        pick = next(o["const"] for o in options if CREATED_2024 in o["title"])
        return types.ElicitResult(action="accept", content={"noteId": pick, "confirm": True})


DELETE_ARGS = {"workspaceUri": ALICE_NOTES, "title": TPS}


async def test_the_sdk_discovers_the_cluster_at_2026_07_28_and_lists_our_eight_tools(
    node_urls: list[str],
) -> None:
    async with open_sdk_client(node_urls) as (client, rotation):
        assert client.protocol_version == PROTOCOL_VERSION
        discovered = client.session.discover_result
        assert discovered is not None
        assert discovered.supported_versions == [PROTOCOL_VERSION]
        assert client.server_capabilities.tools is not None
        assert client.server_info is not None
        assert client.server_info.name == demo_settings().node.server_name
        assert client.session.initialize_result is None

        listed = await client.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert set(tools) == OUR_TOOLS
        assert len(tools) == 8
        delete = tools["notes_delete"]
        assert delete.annotations is not None
        assert delete.annotations.destructive_hint is True
        assert delete.output_schema is not None
    assert [h.method for h in rotation.hops] == ["server/discover", "tools/list"]
    assert [h.node for h in rotation.hops] == [0, 1]


async def test_the_sdk_deletes_the_picked_note_with_round_one_and_round_two_on_different_nodes(
    node_urls: list[str], store: NoteStore
) -> None:
    before = await tps_reports(store)
    assert len(before) == 3
    callback = Elicitations("accept")
    async with open_sdk_client(node_urls, elicitation_callback=callback) as (client, rotation):
        await client.list_tools()
        result = await client.call_tool("notes_delete", DELETE_ARGS)

    # The form reached the SDK's callback as we sent it: three candidates, each with uri and date.
    assert len(callback.shown) == 1
    form = callback.shown[0]
    assert isinstance(form, types.ElicitRequestFormParams)
    schema = form.requested_schema
    assert schema["required"] == ["noteId", "confirm"]
    assert schema["properties"]["confirm"]["type"] == "boolean"
    options = schema["properties"]["noteId"]["oneOf"]
    assert {o["const"] for o in options} == set(before)
    for option in options:
        assert f"{ALICE_NOTES}/{option['const']}.md" in option["title"]
    days = ("2023-07-01", "2024-07-01", "2025-07-01")
    assert sorted(d for o in options for d in days if d in o["title"]) == list(days)

    # The SDK retried on its own and got the final result.
    picked = next(o["const"] for o in options if CREATED_2024 in o["title"])
    assert before[picked] == 1_719_835_200_000  # the 2024 edition, by the store's own record
    assert result.is_error is False
    assert result.structured_content == {"deleted": True, "noteId": picked}
    after = await tps_reports(store)
    assert picked not in after
    assert after == {k: v for k, v in before.items() if k != picked}

    # Round 1 and round 2 were served by different nodes.
    rounds = rotation.calls("tools/call")
    assert [h.retry for h in rounds] == [False, True]
    assert rounds[0].node != rounds[1].node
    assert rounds[0].request_id != rounds[1].request_id


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_or_cancelled_form_through_the_sdk_deletes_nothing(
    node_urls: list[str], store: NoteStore, action: Literal["decline", "cancel"]
) -> None:
    before = await tps_reports(store)
    callback = Elicitations(action)
    async with open_sdk_client(node_urls, elicitation_callback=callback) as (client, rotation):
        result = await client.call_tool("notes_delete", DELETE_ARGS)
    assert len(callback.shown) == 1
    assert result.is_error is False
    assert result.structured_content == {"deleted": False}
    assert await tps_reports(store) == before
    rounds = rotation.calls("tools/call")
    assert [h.retry for h in rounds] == [False, True]
    assert rounds[0].node != rounds[1].node


async def test_an_sdk_client_without_elicitation_gets_missing_capability_32021(
    node_urls: list[str], store: NoteStore
) -> None:
    before = await tps_reports(store)
    async with open_sdk_client(node_urls) as (client, rotation):
        with pytest.raises(MCPError) as caught:
            await client.call_tool("notes_delete", DELETE_ARGS)
    assert caught.value.code == -32021
    assert caught.value.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert await tps_reports(store) == before
    assert len(rotation.calls("tools/call")) == 1
