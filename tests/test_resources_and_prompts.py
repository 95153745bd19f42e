"""Notes as resources, the workspace summary prompt, ``workspaceUri`` completion, what
``server/discover`` advertises, the header/body version order, and the conformance fixture
mode (off by default, refused outside the demo).

Layer: tests. The core is driven directly (``Node.handle``) on the embedded store; two nodes
share one store and one key ring, as a cluster's nodes do, so a round answered on one node is
retried on the other.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import pytest

from nodes.headers import request_headers
from nodes.protocol import PROTOCOL_VERSION, Node, RequestContext
from nodes.resources import titled_uri
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, BOB_NOTES, DEMO_TENANT, TEAM
from nodes.serving.settings import ConfigError, demo_settings, with_conformance_fixtures
from store.notes import NoteStore
from tests.asgi_client import asgi_client, post_method
from tests.harness import demo_config, error, make_nodes, meta, result, rpc

ROOTS = {"roots": {}}


async def note(store: NoteStore, title: str = "Groceries", body: str = "eggs") -> Any:
    return await store.create(DEMO_TENANT, ALICE_NOTES, title, body, "alice")


async def test_discover_advertises_exactly_the_methods_served(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    caps = result(await rpc(node, "server/discover", caps={}))["capabilities"]
    assert set(caps) == {"tools", "resources", "prompts", "completions"}
    for method in ("resources/list", "resources/templates/list", "prompts/list"):
        assert result(await rpc(node, method))["resultType"] == "complete"
    bare = Node(demo_config(), store, resources=(), prompts=())
    caps = result(await rpc(bare, "server/discover", caps={}))["capabilities"]
    assert set(caps) == {"tools"}
    for method in ("resources/list", "prompts/list", "completion/complete"):
        reply = await rpc(bare, method)
        assert (reply.status, error(reply)["code"]) == (404, -32601)


async def test_notes_are_listed_and_read_as_resources_with_caching_hints(
    store: NoteStore,
) -> None:
    made = await note(store)
    (node,) = make_nodes(store, 1)
    listed = result(await rpc(node, "resources/list"))
    assert (listed["ttlMs"], listed["cacheScope"]) == (0, "private")
    mine = [r for r in listed["resources"] if r["uri"] == made.uri]
    assert mine == [
        {
            "uri": f"{ALICE_NOTES}/{made.note_id}.md",
            "name": "Groceries",
            "title": "Groceries",
            "description": f"Note {made.note_id} in {ALICE_NOTES}",
            "mimeType": "text/markdown",
        }
    ]
    read = result(await rpc(node, "resources/read", {"uri": made.uri}))
    assert read["contents"] == [{"uri": made.uri, "mimeType": "text/markdown", "text": "eggs"}]
    assert (read["ttlMs"], read["cacheScope"]) == (0, "private")
    templates = result(await rpc(node, "resources/templates/list"))
    assert [t["uriTemplate"] for t in templates["resourceTemplates"]] == [
        "{+workspaceUri}/{noteId}.md",
        "notes:titled/{title}",
    ]
    assert templates["cacheScope"] == "public"
    assert templates["ttlMs"] > 0


async def test_bob_cannot_list_or_read_alices_notes_and_cannot_tell_they_exist(
    store: NoteStore,
) -> None:
    made = await note(store)
    (node,) = make_nodes(store, 1)
    listed = result(await rpc(node, "resources/list", principal="bob"))
    assert made.uri not in {r["uri"] for r in listed["resources"]}
    refused = await rpc(node, "resources/read", {"uri": made.uri}, principal="bob")
    missing = f"{ALICE_NOTES}/n-does-not-exist.md"
    absent = await rpc(node, "resources/read", {"uri": missing})
    for reply, uri in ((refused, made.uri), (absent, missing)):
        assert reply.status == 400
        assert error(reply) == {
            "code": -32602,
            "message": "Resource not found",
            "data": {"uri": uri},
        }


async def test_a_note_moved_out_of_the_workspace_its_uri_names_is_not_found(
    store: NoteStore,
) -> None:
    made = await note(store)
    (node,) = make_nodes(store, 1)
    moved_uri = f"{ALICE_ARCHIVE}/{made.note_id}.md"
    reply = await rpc(node, "resources/read", {"uri": moved_uri})
    assert error(reply)["code"] == -32602


async def test_a_read_by_title_asks_for_roots_and_completes_on_the_retry_on_another_node(
    store: NoteStore,
) -> None:
    made = await note(store, "Plans", "go north")
    await store.create(DEMO_TENANT, BOB_NOTES, "Plans", "bob's", "bob")
    node_a, node_b = make_nodes(store, 2)
    uri = titled_uri("Plans")
    asked = result(await rpc(node_a, "resources/read", {"uri": uri}, caps=ROOTS))
    assert asked == {
        "resultType": "input_required",
        "inputRequests": {"roots": {"method": "roots/list"}},
        "_meta": asked["_meta"],
    }
    roots = {"roots": [{"uri": "file:///Users"}, {"uri": BOB_NOTES}]}
    params = {"uri": uri, "inputResponses": {"roots": roots}}
    done = result(await rpc(node_b, "resources/read", params, caps=ROOTS))
    # Only alice's own workspace inside her roots: bob's root grants her nothing.
    assert done["contents"] == [{"uri": made.uri, "mimeType": "text/markdown", "text": "go north"}]
    assert (done["ttlMs"], done["cacheScope"]) == (0, "private"), "a retry's result is not cached"


async def test_a_read_by_title_without_the_roots_capability_is_minus_32021(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1)
    reply = await rpc(node, "resources/read", {"uri": titled_uri("Plans")}, caps={})
    assert reply.status == 400
    assert error(reply)["data"] == {"requiredCapabilities": {"roots": {}}}


async def test_a_read_by_title_whose_roots_cover_no_such_note_is_not_found(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1)
    uri = titled_uri("Nothing like it " + quote("/"))
    params = {"uri": uri, "inputResponses": {"roots": {"roots": [{"uri": ALICE_NOTES}]}}}
    reply = await rpc(node, "resources/read", params, caps=ROOTS)
    assert error(reply) == {"code": -32602, "message": "Resource not found", "data": {"uri": uri}}


async def test_the_summary_prompt_lists_the_workspace_and_refuses_another_principals(
    store: NoteStore,
) -> None:
    made = await note(store, "Budget")
    (node,) = make_nodes(store, 1)
    listed = result(await rpc(node, "prompts/list"))
    assert [p["name"] for p in listed["prompts"]] == ["notes_workspace_summary"]
    args = {"name": "notes_workspace_summary", "arguments": {"workspaceUri": ALICE_NOTES}}
    got = result(await rpc(node, "prompts/get", args))
    text = got["messages"][0]["content"]["text"]
    assert f"- Budget ({made.uri})" in text
    refused = await rpc(node, "prompts/get", args, principal="bob")
    assert error(refused)["code"] == -32602
    assert "not authorized" in error(refused)["message"]


async def test_workspace_uri_completes_from_the_principals_grants_only(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)

    async def complete(ref: dict[str, str], value: str, who: str = "alice") -> list[str]:
        params = {"ref": ref, "argument": {"name": "workspaceUri", "value": value}}
        out: list[str] = result(await rpc(node, "completion/complete", params, principal=who))[
            "completion"
        ]["values"]
        return out

    prompt = {"type": "ref/prompt", "name": "notes_workspace_summary"}
    assert await complete(prompt, "file:///Users/alice") == [ALICE_ARCHIVE, ALICE_NOTES]
    assert await complete(prompt, "") == [TEAM, ALICE_ARCHIVE, ALICE_NOTES]
    assert await complete(prompt, "file:///Users/alice", who="bob") == []
    template = {"type": "ref/resource", "uri": "{+workspaceUri}/{noteId}.md"}
    assert await complete(template, "file:///Shared") == [TEAM]
    unknown = await rpc(
        node,
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "x", "value": ""}},
    )
    assert error(unknown)["code"] == -32602


async def test_a_header_version_disagreeing_with_the_body_is_32020_before_the_version_is_judged(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1)
    params: dict[str, Any] = {"_meta": meta(version="v999.0.0")}
    message = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": params}
    headers = request_headers("server/discover", params, PROTOCOL_VERSION)
    reply = await node.handle(message, RequestContext(principal="alice", headers=headers))
    assert (reply.status, error(reply)["code"]) == (400, -32020)
    # Header and body agreeing on a version we do not support: that is -32022.
    headers = request_headers("server/discover", params, "v999.0.0")
    reply = await node.handle(message, RequestContext(principal="alice", headers=headers))
    assert (reply.status, error(reply)["code"]) == (400, -32022)
    assert error(reply)["data"] == {"supported": [PROTOCOL_VERSION], "requested": "v999.0.0"}


async def test_fixture_mode_is_off_by_default_and_adds_the_suites_fixtures(
    store: NoteStore,
) -> None:
    (plain,) = make_nodes(store, 1)
    names = {t["name"] for t in result(await rpc(plain, "tools/list"))["tools"]}
    assert not any(n.startswith("test_") for n in names)
    fixtures = Node(replace(demo_config(), conformance_fixtures=True), store)
    names = {t["name"] for t in result(await rpc(fixtures, "tools/list"))["tools"]}
    assert {"test_simple_text", "test_input_required_result_multi_round"} <= names
    read = result(await rpc(fixtures, "resources/read", {"uri": "test://static-text"}))
    assert read["contents"][0]["text"]


def test_fixture_mode_is_refused_outside_the_demo() -> None:
    settings = demo_settings()
    assert with_conformance_fixtures(settings, False, False) is settings
    assert with_conformance_fixtures(settings, True, True).node.conformance_fixtures
    with pytest.raises(ConfigError, match="demo only"):
        with_conformance_fixtures(settings, True, False)


async def test_a_fixtures_sealed_state_opens_on_another_node_and_a_tampered_one_is_refused(
    store: NoteStore,
) -> None:
    cfg = replace(demo_config(), conformance_fixtures=True)
    node_a, node_b = (Node(replace(cfg, node_id=f"node-{i}"), store) for i in range(2))
    name = "test_input_required_result_multi_round"

    async def call(node: Node, state: str | None, key: str | None, value: str) -> Any:
        params: dict[str, Any] = {"name": name, "arguments": {}}
        if state is not None:
            params["requestState"] = state
        if key is not None:
            params["inputResponses"] = {key: {"action": "accept", "content": {key: value}}}
        return await rpc(node, "tools/call", params)

    r1 = result(await call(node_a, None, None, ""))
    assert list(r1["inputRequests"]) == ["step1"]
    tampered = r1["requestState"][:-2] + ("AA" if r1["requestState"][-2:] != "AA" else "BB")
    params: dict[str, Any] = {
        "name": name,
        "arguments": {},
        "requestState": tampered,
        "inputResponses": {"step1": {"action": "accept", "content": {"name": "Ann"}}},
    }
    refused = await rpc(node_b, "tools/call", params)
    assert error(refused)["data"] == {"reason": "invalid_request_state"}
    params["requestState"] = r1["requestState"]
    r2 = result(await rpc(node_b, "tools/call", params))
    assert list(r2["inputRequests"]) == ["step2"]
    params = {
        "name": name,
        "arguments": {},
        "requestState": r2["requestState"],
        "inputResponses": {"step2": {"action": "accept", "content": {"color": "blue"}}},
    }
    done = result(await rpc(node_a, "tools/call", params))
    assert done["content"][0]["text"] == "Multi-round complete for Ann who likes blue"


async def test_progress_goes_on_a_response_stream_before_the_result(store: NoteStore) -> None:
    node = Node(replace(demo_config(), conformance_fixtures=True), store)
    params = {"name": "test_tool_with_progress", "arguments": {}}
    async with asgi_client(node) as client:
        _, plain = await post_method(client, "tools/call", params)
        assert plain.headers["content-type"] == "application/json"
        with_token = {**params, "_meta": {**meta(), "progressToken": "p-1"}}
        rid, streamed = await post_method(client, "tools/call", with_token)
    assert streamed.headers["content-type"] == "text/event-stream"
    assert streamed.headers["x-accel-buffering"] == "no"
    events = [
        json.loads(line.removeprefix("data: "))
        for line in streamed.text.splitlines()
        if line.startswith("data: ")
    ]
    progress = [e["params"] for e in events[:-1]]
    assert progress == [
        {"progressToken": "p-1", "progress": done, "total": 100} for done in (0, 50, 100)
    ]
    assert all(e["method"] == "notifications/progress" for e in events[:-1])
    assert events[-1]["id"] == rid
    assert events[-1]["result"]["content"] == [{"type": "text", "text": "Progress test completed"}]


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("eu-west", True),
        ("=?base64?ZXUtd2VzdA==?=", True),
        ("=?base64?ZXUtd2VzdA?=", False),  # bad padding
        ("eu-east", False),
        (None, False),
    ],
)
async def test_an_x_mcp_header_argument_must_match_its_mcp_param_header(
    store: NoteStore, header: str | None, ok: bool
) -> None:
    node = Node(replace(demo_config(), conformance_fixtures=True), store)
    params: dict[str, Any] = {
        "name": "test_custom_header",
        "arguments": {"region": "eu-west"},
        "_meta": meta(),
    }
    headers = request_headers("tools/call", params, PROTOCOL_VERSION)
    if header is not None:
        headers["mcp-param-region"] = header
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    reply = await node.handle(message, RequestContext(principal="alice", headers=headers))
    if ok:
        assert result(reply)["content"] == [{"type": "text", "text": "region: eu-west"}]
    else:
        assert (reply.status, error(reply)["code"]) == (400, -32020)
