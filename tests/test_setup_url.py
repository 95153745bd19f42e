"""notes_setup: URL-mode elicitation whose out-of-band step is a page the cluster serves itself.

Every test runs on the embedded store and on a real Redis (the ``store`` fixture). In-process
nodes get a ``public_url`` from their config; served nodes take it from the address they bind,
and the page is opened with ``httpx`` between the rounds, as a person's browser would.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from nodes import http
from nodes.auth import TokenTable
from nodes.protocol import Node, Reply
from nodes.results import META_ERROR
from nodes.serving.demo import ALICE_NOTES, BOB_NOTES, DEMO_TENANT, DEMO_TOKENS, TEAM
from nodes.setup_links import SETUP_PATH_PREFIX
from nodes.setup_page import SetupPages
from store.notes import NoteStore
from tests.conftest import raw
from tests.harness import call_tool, error, make_nodes, meta, result, until_redis_clock
from tests.test_delete_flow import assert_invalid_state

SETUP = "notes_setup"
KEY = "report_service"
ARGS: dict[str, Any] = {"workspaceUri": ALICE_NOTES}
URL_CAPS: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
PUBLIC = "http://127.0.0.1:9"
ALICE = "alice-demo-token"
BOB = "bob-demo-token"
SECRET = "rs-live-0123456789-SECRET"
"""The report service's credential: it goes to the page only."""
TOKENS = TokenTable.from_plain(DEMO_TOKENS)
FORM = {"content-type": "application/x-www-form-urlencoded"}


TTL_TRIES = 5
"""Tries of a setup link that must be completed before it expires, the TTL growing each time."""


def nodes_with_links(store: NoteStore, n: int = 2, **overrides: Any) -> list[Node]:
    return make_nodes(store, n, public_url=PUBLIC, **overrides)


async def start(node: Node, principal: str = "alice") -> tuple[str, str]:
    """Round 1: the requestState and the setup URL."""
    reply = await call_tool(node, SETUP, ARGS, caps=URL_CAPS, principal=principal)
    res = result(reply)
    assert res["resultType"] == "input_required", res
    request = res["inputRequests"][KEY]
    assert request["method"] == "elicitation/create"
    params = request["params"]
    assert set(params) == {"mode", "message", "url"}, "no elicitationId at 2026-07-28"
    assert params["mode"] == "url"
    return res["requestState"], params["url"]


async def retry(
    node: Node, state: str, action: str | None = "accept", principal: str = "alice"
) -> Reply:
    responses = None if action is None else {KEY: {"action": action}}
    return await call_tool(
        node, SETUP, ARGS, caps=URL_CAPS, state=state, responses=responses, principal=principal
    )


def configured(reply: Reply) -> bool:
    assert reply.status == 200, reply
    res = result(reply)
    assert res["resultType"] == "complete", res
    assert res["isError"] is False, res
    value: bool = res["structuredContent"]["configured"]
    assert set(res["structuredContent"]) == {"configured"}
    return value


def page_path(url: str) -> str:
    path = httpx.URL(url).path
    assert path.startswith(SETUP_PATH_PREFIX)
    return path


async def open_page(
    node: Node, url: str, method: str = "GET", token: str | None = ALICE, body: bytes = b""
) -> int:
    """The page's status, answered by the pages of ``node`` (no sockets)."""
    headers = dict(FORM)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"

    async def read_body(limit: int) -> bytes:
        assert len(body) <= limit
        return body

    page = await SetupPages(node.config, node.store, TOKENS).answer(
        method, page_path(url), headers, read_body
    )
    return page.status


async def keys_of(store: NoteStore) -> set[str]:
    return {str(k) async for k in raw(store).scan_iter(match=f"{store.prefix}:*")}


# --- the capability ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "caps",
    [
        pytest.param({}, id="none"),
        pytest.param({"elicitation": {}}, id="bare-elicitation-is-form-only"),
        pytest.param({"elicitation": {"form": {}}}, id="form-only"),
        pytest.param({"roots": {}}, id="roots-only"),
    ],
)
async def test_url_mode_is_refused_without_the_url_capability_with_the_exact_data(
    store: NoteStore, caps: dict[str, Any]
) -> None:
    (node,) = nodes_with_links(store, 1)
    reply = await call_tool(node, SETUP, ARGS, caps=caps)
    assert reply.status == 400
    assert error(reply) == {
        "code": -32021,
        "message": "Missing required client capability: elicitation.url",
        "data": {"requiredCapabilities": {"elicitation": {"url": {}}}},
    }
    assert node.statistics().rounds == 0


# --- round 1 ----------------------------------------------------------------------------------


async def test_round_one_is_a_url_elicitation_to_a_cluster_page_that_writes_nothing(
    store: NoteStore,
) -> None:
    (node,) = nodes_with_links(store, 1)
    before = await keys_of(store)
    state, url = await start(node)
    assert url.startswith(f"{PUBLIC}{SETUP_PATH_PREFIX}")
    # The link is opaque: it names neither the user nor the workspace, and is not the state.
    assert "alice" not in url
    assert "Users" not in url
    assert state not in url
    assert await keys_of(store) == before


async def test_a_node_with_no_public_url_cannot_offer_a_link(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1)
    res = result(await call_tool(node, SETUP, ARGS, caps=URL_CAPS))
    assert res["isError"] is True
    assert "structuredContent" not in res
    assert res["content"] == [
        {"type": "text", "text": "This node serves no setup page (no public URL)"}
    ]
    assert res["_meta"][META_ERROR]["configured"] is False


async def test_setup_of_a_workspace_outside_the_grants_is_a_tool_error(store: NoteStore) -> None:
    (node,) = nodes_with_links(store, 1)
    res = result(await call_tool(node, SETUP, {"workspaceUri": BOB_NOTES}, caps=URL_CAPS))
    assert res["isError"] is True
    assert node.statistics().rounds == 0


# --- the retry --------------------------------------------------------------------------------


async def test_accept_without_completion_asks_again_with_the_same_link(store: NoteStore) -> None:
    node_a, node_b = nodes_with_links(store)
    state, url = await start(node_a)

    res = result(await retry(node_b, state))
    assert res["resultType"] == "input_required"
    assert res["requestState"] == state
    again = res["inputRequests"][KEY]["params"]
    assert again["mode"] == "url"
    assert "not been completed" in again["message"]
    # Another seal of the same link: the page sees the same nonce, and either opens.
    assert await open_page(node_a, again["url"]) == 200
    assert await open_page(node_a, url) == 200


async def test_silence_offers_the_link_again(store: NoteStore) -> None:
    node_a, node_b = nodes_with_links(store)
    state, _ = await start(node_a)
    res = result(await retry(node_b, state, action=None))
    assert res["resultType"] == "input_required"
    assert res["inputRequests"][KEY]["params"]["mode"] == "url"


async def test_the_page_completes_the_setup_for_any_node_and_the_link_is_one_time(
    store: NoteStore,
) -> None:
    node_a, node_b = nodes_with_links(store)
    state, url = await start(node_a)
    assert await open_page(node_b, url, "POST", body=f"api_key={SECRET}".encode()) == 200
    assert await open_page(node_a, url, "POST", body=b"api_key=another") == 409
    assert await open_page(node_a, url) == 409

    assert configured(await retry(node_b, state)) is True
    assert configured(await retry(node_a, state)) is True, "the check may be repeated"


async def test_completion_by_a_different_principal_does_not_count(store: NoteStore) -> None:
    node_a, node_b = nodes_with_links(store)
    state, url = await start(node_a)
    before = await keys_of(store)

    assert await open_page(node_b, url, token=BOB) == 403
    assert await open_page(node_b, url, "POST", token=BOB, body=b"api_key=bobs") == 403
    assert await open_page(node_b, url, "POST", token=None, body=b"api_key=anon") == 401
    assert await open_page(node_b, url, "POST", token="not-a-token", body=b"api_key=x") == 401
    assert await keys_of(store) == before, "nothing recorded"

    res = result(await retry(node_a, state))
    assert res["resultType"] == "input_required", "alice is asked again"
    # Bob cannot use alice's state either.
    assert_invalid_state(await retry(node_b, state, principal="bob"))


async def test_a_completion_recorded_for_another_principal_does_not_configure(
    store: NoteStore,
) -> None:
    (node,) = nodes_with_links(store, 1)
    state, _ = await start(node)
    nonce = node.config.key_ring.open(state, audience=node.config.server_name).nonce
    await store.complete_setup(DEMO_TENANT, nonce, "bob", await store.redis_time_ms() + 60_000)
    res = result(await retry(node, state))
    assert res["resultType"] == "input_required"


def exp_of(node: Node, state: str) -> int:
    """The expiry (Redis clock, ms) sealed in ``state``."""
    return node.config.key_ring.open(state, audience=node.config.server_name).exp_ms


async def test_an_expired_link_is_refused_and_its_state_too(store: NoteStore) -> None:
    node_a, node_b = nodes_with_links(store, state_ttl_ms=300)
    state, url = await start(node_a)
    await until_redis_clock(store, exp_of(node_a, state))

    assert await open_page(node_b, url) == 410
    assert await open_page(node_b, url, "POST", body=b"api_key=late") == 410
    assert_invalid_state(await retry(node_b, state))


async def test_a_link_completed_before_its_expiry_still_configures_a_late_retry(
    store: NoteStore,
) -> None:
    # The POST must land before the link expires: on a loaded machine it may not, and then it
    # must be refused (410) as the Redis clock requires; each such try quadruples the TTL.
    ttl_ms = 400
    for _ in range(TTL_TRIES):
        node_a, node_b = nodes_with_links(store, state_ttl_ms=ttl_ms)
        state, url = await start(node_a)
        status = await open_page(node_b, url, "POST", body=b"api_key=intime")
        if status == 200:
            break
        assert status == 410
        assert await store.redis_time_ms() >= exp_of(node_a, state)  # it had expired: legal
        ttl_ms *= 4
    else:
        pytest.fail(f"no POST landed before its link's expiry in {TTL_TRIES} tries")
    await until_redis_clock(store, exp_of(node_a, state))
    assert configured(await retry(node_b, state)) is True


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_and_cancel_answer_not_configured_and_write_nothing(
    store: NoteStore, action: str
) -> None:
    node_a, node_b = nodes_with_links(store)
    state, _ = await start(node_a)
    before = await keys_of(store)
    assert configured(await retry(node_b, state, action=action)) is False
    assert await keys_of(store) == before


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"action": "accept", "content": {"api_key": SECRET}}, id="content"),
        pytest.param({"action": "ok"}, id="bad-action"),
        pytest.param("accept", id="not-an-object"),
    ],
)
async def test_a_malformed_url_answer_is_invalid_params(store: NoteStore, answer: object) -> None:
    (node,) = nodes_with_links(store, 1)
    state, _ = await start(node)
    reply = await call_tool(node, SETUP, ARGS, caps=URL_CAPS, state=state, responses={KEY: answer})
    assert reply.status == 400
    assert error(reply)["code"] == -32602


async def test_a_link_is_not_a_request_state_and_a_request_state_is_not_a_link(
    store: NoteStore,
) -> None:
    (node,) = nodes_with_links(store, 1)
    state, url = await start(node)
    link_token = page_path(url).removeprefix(SETUP_PATH_PREFIX)
    assert_invalid_state(await retry(node, link_token))
    assert await open_page(node, f"{PUBLIC}{SETUP_PATH_PREFIX}{state}") == 404
    assert await open_page(node, f"{PUBLIC}{SETUP_PATH_PREFIX}garbage") == 404


async def test_a_state_for_one_workspace_does_not_configure_another(store: NoteStore) -> None:
    (node,) = nodes_with_links(store, 1)
    state, _ = await start(node)
    reply = await call_tool(
        node, SETUP, {"workspaceUri": TEAM}, caps=URL_CAPS, state=state, responses={}
    )
    assert_invalid_state(reply)


# --- over HTTP, with the page opened by an HTTP client between the rounds ---------------------


@dataclass
class Served:
    nodes: list[Node]
    urls: list[str]
    client: httpx.AsyncClient


@pytest.fixture
async def served(store: NoteStore, nursery: trio.Nursery) -> AsyncIterator[Served]:
    nodes = make_nodes(store, 2)
    urls = [await nursery.start(partial(http.serve_node, node, TOKENS)) for node in nodes]
    async with httpx.AsyncClient(timeout=10) as client:
        yield Served(nodes, urls, client)


async def mcp(s: Served, node: int, params: dict[str, Any], request_id: int) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    params.setdefault("_meta", meta(URL_CAPS))
    headers = {
        "authorization": f"Bearer {ALICE}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": SETUP,
    }
    response = await s.client.post(s.urls[node], json=body, headers=headers)
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()["result"]
    return out


async def test_the_page_opened_over_http_between_the_rounds_completes_the_setup(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    first = await mcp(served, 0, {"name": SETUP, "arguments": ARGS}, 1)
    url = first["inputRequests"][KEY]["params"]["url"]
    node_base = served.urls[0].removesuffix("/mcp")
    assert url.startswith(f"{node_base}{SETUP_PATH_PREFIX}"), "links name the bound address"
    state = first["requestState"]

    # The page, as the user opens it: sign-in required, then the form.
    anonymous = await served.client.get(url)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    page = await served.client.get(url, headers={"authorization": f"Bearer {ALICE}"})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "api_key" in page.text
    foreign = await served.client.get(url, headers={"authorization": f"Bearer {BOB}"})
    assert foreign.status_code == 403

    # Not yet completed: the retry (on the other node) asks again.
    pending = await mcp(
        served,
        1,
        {
            "name": SETUP,
            "arguments": ARGS,
            "requestState": state,
            "inputResponses": {KEY: {"action": "accept"}},
        },
        2,
    )
    assert pending["resultType"] == "input_required"

    done = await served.client.post(
        url, data={"api_key": SECRET}, headers={"authorization": f"Bearer {ALICE}"}
    )
    assert done.status_code == 200, done.text
    assert SECRET not in done.text
    again = await served.client.post(
        url, data={"api_key": SECRET}, headers={"authorization": f"Bearer {ALICE}"}
    )
    assert again.status_code == 409

    final = await mcp(
        served,
        1,
        {
            "name": SETUP,
            "arguments": ARGS,
            "requestState": state,
            "inputResponses": {KEY: {"action": "accept"}},
        },
        3,
    )
    assert final["resultType"] == "complete"
    assert final["structuredContent"] == {"configured": True}

    # No credential anywhere: not the service's, not a bearer token, not the link.
    link_token = page_path(url).removeprefix(SETUP_PATH_PREFIX)
    results = json.dumps([first, pending, final])
    # The product's own logs (the test's HTTP client logs the URLs it fetches, by design).
    ours = [r for r in caplog.records if r.name.split(".")[0] in ("nodes", "store", "cluster")]
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in ours)
    for secret in (SECRET, ALICE, BOB, link_token):
        assert secret not in logged
        assert secret not in json.dumps(final)
    for secret in (SECRET, ALICE, BOB):
        assert secret not in results
    assert any(r.name == "nodes.setup_page" for r in ours), "the page does log"


async def test_the_mcp_endpoint_is_unchanged_next_to_the_setup_pages(served: Served) -> None:
    response = await served.client.get(served.urls[0], headers={"authorization": f"Bearer {ALICE}"})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    other = await served.client.put(
        served.urls[0].removesuffix("/mcp") + SETUP_PATH_PREFIX + "x",
        headers={"authorization": f"Bearer {ALICE}"},
    )
    assert other.status_code == 405
    assert other.headers["allow"] == "GET, POST"


async def test_a_configured_public_url_is_kept_when_the_node_serves(
    store: NoteStore, nursery: trio.Nursery
) -> None:
    (node,) = make_nodes(store, 1, public_url="https://notes.example")
    await nursery.start(partial(http.serve_node, node, TOKENS))
    assert node.config.public_url == "https://notes.example"
    _, url = await start(node)
    assert url.startswith(f"https://notes.example{SETUP_PATH_PREFIX}")
