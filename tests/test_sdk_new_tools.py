"""Interop: the official MCP Python SDK (``mcp`` 2.3.0), unmodified, completes notes_archive,
notes_setup (URL mode, the page opened between the rounds) and notes_search (roots) against our
HTTP nodes, with successive requests on different nodes (see ``tests.test_sdk_interop``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext
from mcp.client.session import ElicitationFnT, ListRootsFnT
from mcp.client.streamable_http import streamable_http_client

from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_TENANT
from store.notes import NoteStore
from tests.test_sdk_interop import (  # noqa: F401 - node_urls is a fixture
    ALICE_TOKEN,
    CREATED_2024,
    RoundRobinTransport,
    node_urls,
)


@asynccontextmanager
async def sdk_client(
    urls: list[str],
    *,
    elicitation_callback: ElicitationFnT | None = None,
    list_roots_callback: ListRootsFnT | None = None,
) -> AsyncIterator[tuple[Client, RoundRobinTransport]]:
    rotation = RoundRobinTransport(urls)
    async with httpx2.AsyncClient(
        transport=rotation,
        headers={"Authorization": f"Bearer {ALICE_TOKEN}"},
        timeout=httpx2.Timeout(10.0),
    ) as http_client:
        client = Client(
            streamable_http_client(urls[0], http_client=http_client),
            elicitation_callback=elicitation_callback,
            list_roots_callback=list_roots_callback,
            client_info=types.Implementation(name="sdk-new-tools-test", version="0"),
        )
        async with client:
            yield client, rotation


async def test_the_sdk_archives_the_picked_note_across_nodes(
    node_urls: list[str],  # noqa: F811
    store: NoteStore,
) -> None:
    async def pick_2024(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        options = params.requested_schema["properties"]["noteId"]["oneOf"]
        note = next(o["const"] for o in options if CREATED_2024 in o["title"])
        return types.ElicitResult(action="accept", content={"noteId": note, "confirm": True})

    async with sdk_client(node_urls, elicitation_callback=pick_2024) as (client, rotation):
        result = await client.call_tool(
            "notes_archive", {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
        )
    assert result.is_error is False
    content = result.structured_content
    assert content is not None
    assert content["archived"] is True
    note = await store.get(DEMO_TENANT, content["noteId"])
    assert note is not None
    assert note.workspace == ALICE_ARCHIVE
    assert content["uri"] == f"{ALICE_ARCHIVE}/{note.note_id}.md"
    rounds = rotation.calls("tools/call")
    assert [h.retry for h in rounds] == [False, True]
    assert rounds[0].node != rounds[1].node


@pytest.mark.parametrize("complete_first", [True, False])
async def test_the_sdk_completes_setup_through_the_page_it_was_sent_to(
    node_urls: list[str],  # noqa: F811
    complete_first: bool,
) -> None:
    shown: list[str] = []

    async def open_the_page(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams)
        assert params.elicitation_id is None
        shown.append(params.url)
        if complete_first or len(shown) > 1:
            async with httpx.AsyncClient(timeout=10) as browser:
                auth = {"authorization": f"Bearer {ALICE_TOKEN}"}
                page = await browser.get(params.url, headers=auth)
                if page.status_code == 200:
                    done = await browser.post(params.url, data={"api_key": "k-1"}, headers=auth)
                    assert done.status_code == 200
        return types.ElicitResult(action="accept")

    async with sdk_client(node_urls, elicitation_callback=open_the_page) as (client, _):
        result = await client.call_tool("notes_setup", {"workspaceUri": ALICE_NOTES})
    assert result.is_error is False
    assert result.structured_content == {"configured": True}
    assert len(shown) == (1 if complete_first else 2), "accept before completion asks again"


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_setup_through_the_sdk_is_not_configured(
    node_urls: list[str],  # noqa: F811
    action: Literal["decline", "cancel"],
) -> None:
    async def refuse(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action=action)

    async with sdk_client(node_urls, elicitation_callback=refuse) as (client, _):
        result = await client.call_tool("notes_setup", {"workspaceUri": ALICE_NOTES})
    assert result.structured_content == {"configured": False}


async def test_the_sdk_answers_roots_and_the_search_stays_inside_the_grants(
    node_urls: list[str],  # noqa: F811
    store: NoteStore,
) -> None:
    async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(
            roots=[
                types.Root(uri="file:///Users/alice/Documents/Notes", name="notes"),
                types.Root(uri="file:///Users/bob/Notes", name="not hers"),
            ]
        )

    async with sdk_client(node_urls, list_roots_callback=list_roots) as (client, rotation):
        result = await client.call_tool("notes_search", {"title": "TPS report"})
    assert result.is_error is False
    content = result.structured_content
    assert content is not None
    expected = await store.find(DEMO_TENANT, ALICE_NOTES, "TPS report", 100)
    assert {n["noteId"] for n in content["notes"]} == {n.note_id for n in expected.notes}
    assert {n["workspaceUri"] for n in content["notes"]} == {ALICE_NOTES}
    rounds = rotation.calls("tools/call")
    assert len(rounds) == 2
    assert rounds[0].node != rounds[1].node
