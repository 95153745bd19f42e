"""Acceptance tests of the node's protocol core: envelope, versions, capabilities, discovery,
the tool list, headers and notifications. The core is driven directly (``Node.handle``), as the
HTTP app and the in-process transport drive it."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from nodes.config import SERVER_VERSION
from nodes.headers import request_headers
from nodes.protocol import PROTOCOL_VERSION, Reply, RequestContext
from nodes.serving.demo import ALICE_NOTES, DEMO_SERVER_NAME, DEMO_TENANT
from store.notes import NoteStore
from tests.conftest import raw
from tests.harness import accept, call_tool, error, make_nodes, meta, result, rpc

SERVER_INFO = "io.modelcontextprotocol/serverInfo"
DELETE_ARGS: dict[str, Any] = {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
FORM_REQUIRED = {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def one_note(store: NoteStore) -> str:
    note = await store.create(DEMO_TENANT, ALICE_NOTES, "TPS report", "2025 edition", "alice")
    return note.note_id


async def journal_length(store: NoteStore) -> int:
    return len(await raw(store).xrange(store.keys(DEMO_TENANT).journal))


def assert_error(reply: Reply, code: int, status: int) -> dict[str, Any]:
    assert reply.status == status, reply
    err = error(reply)
    assert err["code"] == code, err
    assert isinstance(err["message"], str)
    assert err["message"]
    return err


# --- discovery -------------------------------------------------------------------------------


async def test_discovery_answers_a_client_without_roots_or_any_capability(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1)
    reply = await rpc(node, "server/discover", caps={})

    assert reply.status == 200
    res = result(reply)
    assert res["resultType"] == "complete"
    assert res["supportedVersions"] == [PROTOCOL_VERSION]
    assert "tools" in res["capabilities"]
    assert "roots" not in res["capabilities"]
    assert isinstance(res["ttlMs"], int)
    assert res["ttlMs"] >= 0
    assert res["cacheScope"] in ("public", "private")
    assert res["_meta"][SERVER_INFO] == {"name": DEMO_SERVER_NAME, "version": SERVER_VERSION}
    assert "serverInfo" not in res
    assert "protocolVersion" not in res
    assert "inputRequests" not in res
    assert "requestState" not in res


async def test_discovery_is_the_same_on_every_node(store: NoteStore) -> None:
    node_a, node_b = make_nodes(store, 2)
    first = result(await rpc(node_a, "server/discover"))
    assert result(await rpc(node_b, "server/discover", caps={})) == first


# --- the tool list ---------------------------------------------------------------------------


async def test_the_tool_list_is_identical_on_two_nodes_sorted_and_carries_cache_hints(
    store: NoteStore,
) -> None:
    node_a, node_b = make_nodes(store, 2)
    listed_a = result(await rpc(node_a, "tools/list"))
    listed_b = result(await rpc(node_b, "tools/list", caps={}, principal="bob"))

    assert listed_a == listed_b
    assert listed_a == result(await rpc(node_a, "tools/list"))
    assert listed_a["resultType"] == "complete"
    assert isinstance(listed_a["ttlMs"], int)
    assert listed_a["ttlMs"] >= 0
    assert listed_a["cacheScope"] in ("public", "private")
    assert "nextCursor" not in listed_a
    names = [t["name"] for t in listed_a["tools"]]
    assert names == sorted(names)
    assert {"notes_create", "notes_delete", "notes_list", "notes_move", "notes_update"} <= set(
        names
    )


async def test_every_tool_takes_a_closed_object_with_an_explicit_workspace(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1)
    for tool in result(await rpc(node, "tools/list"))["tools"]:
        schema = tool["inputSchema"]
        assert schema["type"] == "object", tool["name"]
        assert schema["additionalProperties"] is False, tool["name"]
        assert "workspaceUri" in schema["properties"], tool["name"]
        if tool["name"] == "notes_search":
            # The one deprecated roots adapter: workspaceUri may be omitted (then roots narrow
            # the caller's authorized workspaces); every other tool requires it.
            assert schema["required"] == ["title"]
            assert "Deprecated" in tool["description"]
            continue
        assert "workspaceUri" in schema["required"], tool["name"]


async def test_notes_delete_is_annotated_as_destructive_and_the_others_are_not(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1)
    tools = {t["name"]: t for t in result(await rpc(node, "tools/list"))["tools"]}
    delete = tools["notes_delete"]
    assert delete["annotations"]["destructiveHint"] is True
    assert delete["annotations"]["readOnlyHint"] is False
    assert set(delete["inputSchema"]["properties"]) == {"workspaceUri", "title"}
    assert tools["notes_list"]["annotations"]["readOnlyHint"] is True
    for name in ("notes_create", "notes_list", "notes_update"):
        assert tools[name]["annotations"]["destructiveHint"] is False, name


async def test_changing_a_reply_changes_nothing_the_node_sends_later(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    listed = result(await rpc(node, "tools/list"))
    pristine = copy.deepcopy(listed)
    listed["tools"][0]["inputSchema"]["properties"].clear()
    listed["tools"][0]["annotations"]["destructiveHint"] = "mangled"
    assert result(await rpc(node, "tools/list")) == pristine

    refused = error(await call_tool(node, "notes_delete", DELETE_ARGS, caps={}))
    refused["data"]["requiredCapabilities"]["elicitation"]["url"] = {}
    again = error(await call_tool(node, "notes_delete", DELETE_ARGS, caps={}))
    assert again["data"] == FORM_REQUIRED


async def test_a_cursor_on_the_single_page_tool_list_is_invalid_params(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    assert_error(await rpc(node, "tools/list", {"cursor": "page-2"}), -32602, 400)


async def test_an_unknown_tool_is_invalid_params(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    assert_error(await call_tool(node, "notes_shred", DELETE_ARGS), -32602, 400)


# --- client capabilities ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "caps",
    [
        pytest.param({"elicitation": {}}, id="bare-elicitation"),
        pytest.param({"elicitation": {"form": {}}}, id="form"),
        pytest.param({"elicitation": {"form": {}, "url": {}}}, id="form-and-url"),
    ],
)
async def test_form_elicitation_declared_either_way_is_enough_to_ask(
    store: NoteStore, caps: dict[str, Any]
) -> None:
    note_id = await one_note(store)
    (node,) = make_nodes(store, 1)
    res = result(await call_tool(node, "notes_delete", DELETE_ARGS, caps=caps))
    assert res["resultType"] == "input_required"
    assert res["inputRequests"]["confirm_delete"]["params"]["mode"] == "form"
    assert await store.get(DEMO_TENANT, note_id) is not None


@pytest.mark.parametrize(
    "caps",
    [
        pytest.param({"elicitation": {"url": {}}}, id="url-only"),
        pytest.param({}, id="none"),
        pytest.param({"roots": {}}, id="roots-only"),
        pytest.param({"elicitation": {"form": True}}, id="form-not-an-object"),
        pytest.param({"elicitation": True}, id="elicitation-not-an-object"),
    ],
)
async def test_a_client_without_form_elicitation_gets_minus_32021_naming_form_mode(
    store: NoteStore, caps: dict[str, Any]
) -> None:
    note_id = await one_note(store)
    (node,) = make_nodes(store, 1)
    err = assert_error(await call_tool(node, "notes_delete", DELETE_ARGS, caps=caps), -32021, 400)
    assert err["data"] == FORM_REQUIRED
    assert node.statistics().rounds == 0
    assert await store.get(DEMO_TENANT, note_id) is not None


async def test_a_confirmation_retried_without_form_elicitation_deletes_nothing(
    store: NoteStore,
) -> None:
    note_id = await one_note(store)
    node_a, node_b = make_nodes(store, 2)
    state = result(await call_tool(node_a, "notes_delete", DELETE_ARGS))["requestState"]
    reply = await call_tool(
        node_b,
        "notes_delete",
        DELETE_ARGS,
        caps={"elicitation": {"url": {}}},
        state=state,
        responses=accept(note_id),
    )
    assert assert_error(reply, -32021, 400)["data"] == FORM_REQUIRED
    assert await store.get(DEMO_TENANT, note_id) is not None


# --- versions and the required _meta ---------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({}, id="no-meta"),
        pytest.param({"_meta": None}, id="null-meta"),
        pytest.param(
            {"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}, id="no-version"
        ),
        pytest.param(
            {
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": 20260728,
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
            },
            id="version-not-a-string",
        ),
        pytest.param(
            {"_meta": {"io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION}},
            id="no-capabilities",
        ),
    ],
)
@pytest.mark.parametrize("method", ["server/discover", "tools/list", "tools/call"])
async def test_a_request_missing_required_meta_is_invalid_params(
    store: NoteStore, method: str, params: dict[str, Any]
) -> None:
    (node,) = make_nodes(store, 1)
    message = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    reply = await node.handle(message, RequestContext(principal="alice"))
    assert_error(reply, -32602, 400)
    assert reply.body is not None
    assert reply.body["id"] == 7


@pytest.mark.parametrize("version", ["X", "2025-11-25", "2026-07-29", ""])
@pytest.mark.parametrize("method", ["server/discover", "tools/list", "tools/call"])
async def test_an_unsupported_version_is_refused_with_the_supported_list(
    store: NoteStore, method: str, version: str
) -> None:
    (node,) = make_nodes(store, 1)
    params = {"name": "notes_list", "arguments": {"workspaceUri": ALICE_NOTES}}
    params["_meta"] = meta(version=version)
    err = assert_error(await rpc(node, method, params), -32022, 400)
    assert err["data"] == {"supported": ["2026-07-28"], "requested": version}


@pytest.mark.parametrize(
    "method", ["initialize", "ping", "logging/setLevel", "resources/subscribe", "no/such", ""]
)
async def test_an_unknown_method_is_method_not_found_with_http_404(
    store: NoteStore, method: str
) -> None:
    (node,) = make_nodes(store, 1)
    assert_error(await rpc(node, method), -32601, 404)


# --- the envelope ----------------------------------------------------------------------------

VALID = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}}


@pytest.mark.parametrize(
    "message",
    [
        pytest.param([VALID], id="batch"),
        pytest.param("server/discover", id="string"),
        pytest.param(42, id="number"),
        pytest.param(None, id="null"),
        pytest.param({**VALID, "jsonrpc": "1.0"}, id="jsonrpc-1.0"),
        pytest.param({**VALID, "jsonrpc": 2.0}, id="jsonrpc-number"),
        pytest.param({k: v for k, v in VALID.items() if k != "jsonrpc"}, id="jsonrpc-missing"),
        pytest.param({**VALID, "id": None}, id="id-null"),
        pytest.param({**VALID, "id": True}, id="id-bool"),
        pytest.param({**VALID, "id": 1.5}, id="id-float"),
        pytest.param({**VALID, "id": [1]}, id="id-list"),
        pytest.param({**VALID, "id": {"n": 1}}, id="id-object"),
        pytest.param({**VALID, "method": 5}, id="method-not-a-string"),
        pytest.param({k: v for k, v in VALID.items() if k != "method"}, id="method-missing"),
    ],
)
async def test_a_malformed_envelope_is_an_invalid_request(
    store: NoteStore, message: object
) -> None:
    (node,) = make_nodes(store, 1)
    reply = await node.handle(message, RequestContext(principal="alice"))
    assert_error(reply, -32600, 400)
    assert reply.body is not None
    assert reply.body["jsonrpc"] == "2.0"


@pytest.mark.parametrize("request_id", [0, -3, "abc", ""])
async def test_the_reply_echoes_the_request_id(store: NoteStore, request_id: object) -> None:
    (node,) = make_nodes(store, 1)
    reply = await node.handle({**VALID, "id": request_id}, RequestContext(principal="alice"))
    assert reply.status == 200
    assert reply.body is not None
    assert reply.body["id"] == request_id


async def test_params_that_are_not_an_object_are_invalid_params(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [meta()]}
    assert_error(await node.handle(message, RequestContext(principal="alice")), -32602, 400)


# --- notifications ---------------------------------------------------------------------------


async def test_a_notification_carrying_an_accepted_confirmation_deletes_nothing(
    store: NoteStore,
) -> None:
    note_id = await one_note(store)
    node_a, node_b = make_nodes(store, 2)
    state = result(await call_tool(node_a, "notes_delete", DELETE_ARGS))["requestState"]
    before = await journal_length(store)
    params = {
        "name": "notes_delete",
        "arguments": DELETE_ARGS,
        "requestState": state,
        "inputResponses": accept(note_id),
    }

    reply = await rpc(node_b, "tools/call", params, notification=True)

    assert reply.status == 202
    assert reply.body is None
    assert await store.get(DEMO_TENANT, note_id) is not None
    assert await journal_length(store) == before
    stats = node_b.statistics()
    assert (stats.notifications, stats.requests, stats.executions) == (1, 0, 0)
    # Nothing was recorded either: the same confirmation as a request still executes.
    res = result(
        await call_tool(node_b, "notes_delete", DELETE_ARGS, state=state, responses=accept(note_id))
    )
    assert res["structuredContent"] == {"deleted": True, "noteId": note_id}
    assert await store.get(DEMO_TENANT, note_id) is None


async def test_a_notification_without_a_method_is_an_invalid_request(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    message = {"jsonrpc": "2.0", "params": {"_meta": meta()}}
    assert_error(await node.handle(message, RequestContext(principal="alice")), -32600, 400)


# --- transport headers -----------------------------------------------------------------------


def tools_call(state: str | None = None, note_id: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "notes_delete", "arguments": DELETE_ARGS, "_meta": meta()}
    if state is not None and note_id is not None:
        params["requestState"] = state
        params["inputResponses"] = accept(note_id)
    return params


async def test_headers_that_agree_with_the_body_are_accepted(store: NoteStore) -> None:
    note_id = await one_note(store)
    (node,) = make_nodes(store, 1)
    params = tools_call()
    headers = request_headers("tools/call", params, PROTOCOL_VERSION)
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    reply = await node.handle(message, RequestContext(principal="alice", headers=headers))
    assert result(reply)["resultType"] == "input_required"

    encoded = {
        **headers,
        "mcp-name": "=?base64?" + base64.b64encode(b"notes_delete").decode() + "?=",
    }
    reply = await node.handle(message, RequestContext(principal="alice", headers=encoded))
    assert result(reply)["resultType"] == "input_required"
    assert await store.get(DEMO_TENANT, note_id) is not None


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"mcp-method": "tools/list"}, id="method-mismatch"),
        pytest.param({"mcp-method": "Tools/Call"}, id="method-case"),
        pytest.param({"mcp-name": "notes_list"}, id="name-mismatch"),
        pytest.param({"mcp-name": "notes_delete "}, id="name-trailing-space"),
        pytest.param({"mcp-name": "=?base64?bm90ZXNfbGlzdA==?="}, id="name-base64-mismatch"),
        pytest.param({"mcp-name": "=?base64?!!!?="}, id="name-bad-base64"),
        pytest.param({"mcp-name": None}, id="name-missing"),
        pytest.param({"mcp-method": None}, id="method-missing"),
        pytest.param({"mcp-protocol-version": "2025-11-25"}, id="version-mismatch"),
        pytest.param({"mcp-protocol-version": None}, id="version-missing"),
    ],
)
async def test_headers_that_disagree_with_the_body_are_refused_with_minus_32020(
    store: NoteStore, change: dict[str, str | None]
) -> None:
    note_id = await one_note(store)
    node_a, node_b = make_nodes(store, 2)
    state = result(await call_tool(node_a, "notes_delete", DELETE_ARGS))["requestState"]
    params = tools_call(state, note_id)
    headers: dict[str, str] = dict(request_headers("tools/call", params, PROTOCOL_VERSION))
    for name, value in change.items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}

    reply = await node_b.handle(message, RequestContext(principal="alice", headers=headers))

    assert_error(reply, -32020, 400)
    assert await store.get(DEMO_TENANT, note_id) is not None
    assert node_b.statistics().executions == 0


async def test_a_discover_request_whose_method_header_disagrees_is_refused(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1)
    message = {**VALID}
    headers = {"mcp-protocol-version": PROTOCOL_VERSION, "mcp-method": "tools/list"}
    reply = await node.handle(message, RequestContext(principal="alice", headers=headers))
    assert_error(reply, -32020, 400)
