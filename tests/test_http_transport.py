"""The Streamable HTTP shell over real sockets: every status and code it can answer.

Nodes run under hypercorn in the test's nursery (embedded and real Redis, via the ``store``
fixture) and are driven with ``httpx.AsyncClient``. The bearer-token table is tested as a unit.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from nodes import http
from nodes.auth import MAX_TOKEN_LENGTH, TokenTable, bearer_token, hash_token
from nodes.headers import request_headers
from nodes.protocol import PROTOCOL_VERSION, Node
from nodes.serving.demo import ALICE_NOTES, DEMO_TENANT, DEMO_TOKENS
from store.notes import NoteStore
from tests.harness import accept, make_nodes, meta

ALICE = "alice-demo-token"
BOB = "bob-demo-token"
GOOD_ORIGIN = "https://notes.example"
MAX_BODY = 8_192
"""Small, so an oversized body still fits the socket buffers while the server refuses it."""
TOKENS = TokenTable.from_plain(DEMO_TOKENS)


@dataclass
class Served:
    """Two nodes over HTTP on two ports, sharing one store."""

    nodes: list[Node]
    urls: list[str]
    client: httpx.AsyncClient
    store: NoteStore


@pytest.fixture
async def served(store: NoteStore, nursery: trio.Nursery) -> AsyncIterator[Served]:
    nodes = make_nodes(store, 2)
    urls = []
    for node in nodes:
        start = partial(
            http.serve_node,
            node,
            TOKENS,
            allowed_origins=frozenset({GOOD_ORIGIN}),
            max_body_bytes=MAX_BODY,
        )
        urls.append(await nursery.start(start))
    async with httpx.AsyncClient(timeout=10) as client:
        yield Served(nodes, urls, client, store)


def message(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    caps: dict[str, Any] | None = None,
    version: str = PROTOCOL_VERSION,
    request_id: int | None = 1,
) -> dict[str, Any]:
    """A JSON-RPC request (or notification, without id) with the required ``_meta``."""
    p = dict(params or {})
    p.setdefault("_meta", meta(caps, version))
    out: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": p}
    if request_id is not None:
        out["id"] = request_id
    return out


def good_headers(msg: dict[str, Any], token: str | None = ALICE) -> dict[str, str]:
    """The headers a conforming client sends with ``msg``."""
    params = msg.get("params", {})
    version = params.get("_meta", {}).get("io.modelcontextprotocol/protocolVersion", "")
    out = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        **request_headers(msg["method"], params, version),
    }
    if token is not None:
        out["authorization"] = f"Bearer {token}"
    return out


async def post(
    s: Served,
    msg: dict[str, Any],
    *,
    node: int = 0,
    token: str | None = ALICE,
    headers: dict[str, str | None] | None = None,
) -> httpx.Response:
    """POST ``msg`` with good headers, then apply ``headers`` (None removes one, even a header
    httpx adds by default)."""
    request = s.client.build_request(
        "POST", s.urls[node], json=msg, headers=good_headers(msg, token)
    )
    for name, value in (headers or {}).items():
        if value is None:
            request.headers.pop(name, None)
        else:
            request.headers[name] = value
    return await s.client.send(request)


def rpc_error(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    """Assert a JSON-RPC error answer with this HTTP status and code; return the error."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code, body
    out: dict[str, Any] = body["error"]
    return out


def result_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()["result"]
    return out


async def seed(store: NoteStore, title: str = "TPS report") -> str:
    note = await store.create(DEMO_TENANT, ALICE_NOTES, title, "body", "alice")
    return note.note_id


async def titles(store: NoteStore, title: str = "TPS report") -> list[str]:
    snap = await store.find(DEMO_TENANT, ALICE_NOTES, title, 100)
    return [n.note_id for n in snap.notes]


def delete_call(*, request_id: int | None = 1, **params: Any) -> dict[str, Any]:
    """A ``notes_delete`` call for alice's "TPS report" (``params``: MRTR retry fields)."""
    arguments = {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
    return message(
        "tools/call",
        {"name": "notes_delete", "arguments": arguments, **params},
        request_id=request_id,
    )


# --- 200 and 202 -----------------------------------------------------------------------------


async def test_discover_answers_200_json_and_mints_no_session(served: Served) -> None:
    response = await post(served, message("server/discover"), headers={"mcp-session-id": "abc"})
    result = result_of(response)
    assert result["supportedVersions"] == [PROTOCOL_VERSION]
    assert response.headers["content-type"] == "application/json"
    assert "mcp-session-id" not in response.headers
    assert int(response.headers["content-length"]) == len(response.content)


async def test_a_notification_gets_202_with_an_empty_body_and_deletes_nothing(
    served: Served,
) -> None:
    note_id = await seed(served.store)
    response = await post(served, delete_call(request_id=None))
    assert response.status_code == 202
    assert response.content == b""
    assert await titles(served.store) == [note_id]
    assert served.nodes[0].statistics().notifications == 1


async def test_wildcard_accept_and_charset_content_type_are_accepted(served: Served) -> None:
    response = await post(
        served,
        message("tools/list"),
        headers={"accept": "*/*", "content-type": "application/json; charset=utf-8"},
    )
    assert result_of(response)["tools"]


async def test_an_allowed_origin_is_served(served: Served) -> None:
    response = await post(served, message("server/discover"), headers={"origin": GOOD_ORIGIN})
    assert result_of(response)["resultType"] == "complete"


# --- 401 / 403 / 404 / 405 / 406 / 415 / 413 ---------------------------------------------------


async def test_a_missing_token_gets_401_with_a_bearer_challenge_and_reaches_no_node(
    served: Served,
) -> None:
    response = await post(served, message("server/discover"), token=None)
    error = rpc_error(response, 401, -32600)
    assert "bearer token" in error["message"]
    assert response.headers["www-authenticate"] == 'Bearer realm="notes-cluster"'
    assert served.nodes[0].statistics().requests == 0


@pytest.mark.parametrize(
    "authorization", ["Bearer not-a-token", "Basic YWxpY2U6eA==", "Bearer", "Bearer a b"]
)
async def test_an_unknown_or_malformed_token_gets_401_invalid_token(
    served: Served, authorization: str
) -> None:
    note_id = await seed(served.store)
    response = await post(served, delete_call(), headers={"authorization": authorization})
    rpc_error(response, 401, -32600)
    assert response.headers["www-authenticate"] == (
        'Bearer realm="notes-cluster", error="invalid_token"'
    )
    assert served.nodes[0].statistics().requests == 0
    assert await titles(served.store) == [note_id]


async def test_bobs_token_cannot_touch_alices_workspace(served: Served) -> None:
    note_id = await seed(served.store)
    result = result_of(await post(served, delete_call(), token=BOB))
    assert result["isError"] is True
    assert result["resultType"] == "complete"
    assert await titles(served.store) == [note_id]
    assert served.nodes[0].statistics().rounds == 0


async def test_a_foreign_origin_gets_403_before_authentication(served: Served) -> None:
    response = await post(served, message("server/discover"), headers={"origin": "https://evil"})
    rpc_error(response, 403, -32600)
    response = await post(
        served, message("server/discover"), token=None, headers={"origin": "null"}
    )
    rpc_error(response, 403, -32600)
    assert served.nodes[0].statistics().requests == 0


@pytest.mark.parametrize("path", ["/", "/other", "/mcp/", "/mcpx", "/MCP"])
async def test_other_paths_get_404(served: Served, path: str) -> None:
    url = httpx.URL(served.urls[0]).copy_with(path=path)
    msg = message("server/discover")
    response = await served.client.post(url, json=msg, headers=good_headers(msg))
    rpc_error(response, 404, -32600)


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "HEAD", "OPTIONS"])
async def test_anything_but_post_gets_405_allow_post(served: Served, method: str) -> None:
    response = await served.client.request(
        method, served.urls[0], headers={"authorization": f"Bearer {ALICE}"}
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert "mcp-session-id" not in response.headers


@pytest.mark.parametrize(
    "accept",
    [
        None,
        "application/json",
        "text/event-stream",
        "text/html, application/xml",
        "application/json, text/event-stream;q=0",
    ],
)
async def test_an_accept_without_json_and_sse_gets_406(served: Served, accept: str | None) -> None:
    response = await post(served, message("server/discover"), headers={"accept": accept})
    rpc_error(response, 406, -32600)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/jsonx", "multipart/x"])
async def test_a_non_json_content_type_gets_415(served: Served, content_type: str | None) -> None:
    response = await post(
        served, message("server/discover"), headers={"content-type": content_type}
    )
    rpc_error(response, 415, -32600)


async def test_a_body_over_the_limit_gets_413_by_its_content_length(served: Served) -> None:
    msg = message("server/discover")
    msg["params"]["padding"] = "x" * MAX_BODY
    response = await post(served, msg)
    rpc_error(response, 413, -32600)
    assert served.nodes[0].statistics().requests == 0


async def test_a_chunked_body_over_the_limit_gets_413_while_reading(served: Served) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"x":"'
        for _ in range(4):
            yield b"x" * (MAX_BODY // 2)
        yield b'"}}'

    msg = message("server/discover")
    response = await served.client.post(served.urls[0], content=chunks(), headers=good_headers(msg))
    assert "content-length" not in response.request.headers
    rpc_error(response, 413, -32600)


# --- 400 -32700 / -32600 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"", b'{"a":NaN}', b"\xff\xfe{}", b'{"jsonrpc":"2.0"', b"1" * 5000],
)
async def test_bad_json_gets_400_parse_error(served: Served, body: bytes) -> None:
    msg = message("server/discover")
    response = await served.client.post(served.urls[0], content=body, headers=good_headers(msg))
    error = rpc_error(response, 400, -32700)
    assert response.json()["id"] is None
    assert "Traceback" not in error["message"]


async def test_a_batch_array_gets_400_invalid_request(served: Served) -> None:
    msg = message("server/discover")
    response = await served.client.post(served.urls[0], json=[msg], headers=good_headers(msg))
    rpc_error(response, 400, -32600)
    assert served.nodes[0].statistics().requests == 0


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [http.DEFAULT_MAX_JSON_DEPTH, 4_000])
async def test_json_nested_too_deep_gets_400_invalid_request(served: Served, depth: int) -> None:
    msg = message("server/discover")
    if depth < 1000:
        # params is at depth 2, so a value nested `depth` deep inside it exceeds the limit.
        msg["params"]["x"] = nested(depth)
        body = httpx.Request("POST", "/", json=msg).content
    else:
        # Deeper than the interpreter's recursion limit: the parser itself gives up.
        body = b"[" * depth + b"]" * depth
    response = await served.client.post(served.urls[0], content=body, headers=good_headers(msg))
    assert "too deeply" in rpc_error(response, 400, -32600)["message"]
    assert served.nodes[0].statistics().requests == 0


async def test_json_nested_just_within_the_limit_is_served(served: Served) -> None:
    msg = message("server/discover")
    msg["params"]["x"] = nested(http.DEFAULT_MAX_JSON_DEPTH - 2)
    assert result_of(await post(served, msg))["resultType"] == "complete"


# --- 400 -32020 / -32022 / -32021 and 404 -32601 from the core ---------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"mcp-method": None},
        {"mcp-method": "tools/list"},
        {"mcp-protocol-version": None},
        {"mcp-protocol-version": "2025-11-25"},
        {"mcp-name": None},
        {"mcp-name": "notes_list"},
        {"mcp-name": "=?base64?bm90ZXNfbGlzdA==?="},  # decodes to notes_list, not notes_delete
        {"mcp-name": "=?base64?not base64?="},
    ],
)
async def test_missing_or_mismatched_routing_headers_get_400_header_mismatch(
    served: Served, headers: dict[str, str | None]
) -> None:
    note_id = await seed(served.store)
    rpc_error(await post(served, delete_call(), headers=headers), 400, -32020)
    assert await titles(served.store) == [note_id]


async def test_a_repeated_mcp_method_header_gets_400_header_mismatch(served: Served) -> None:
    msg = message("server/discover")
    headers = [*good_headers(msg).items(), ("mcp-method", "server/discover")]
    response = await served.client.post(served.urls[0], json=msg, headers=headers)
    rpc_error(response, 400, -32020)


async def test_a_base64_sentinel_mcp_name_is_decoded_before_comparing(served: Served) -> None:
    await seed(served.store)
    sentinel = "=?base64?" + base64.b64encode(b"notes_delete").decode() + "?="
    response = await post(served, delete_call(), headers={"mcp-name": sentinel})
    assert result_of(response)["resultType"] == "input_required"


async def test_an_unsupported_version_gets_400_with_the_supported_list(served: Served) -> None:
    msg = message("server/discover", version="2099-01-01")
    error = rpc_error(await post(served, msg), 400, -32022)
    assert error["data"] == {"supported": [PROTOCOL_VERSION], "requested": "2099-01-01"}


async def test_delete_without_form_elicitation_gets_400_missing_capability(
    served: Served,
) -> None:
    note_id = await seed(served.store)
    msg = message(
        "tools/call",
        {"name": "notes_delete", "arguments": {"workspaceUri": ALICE_NOTES, "title": "TPS report"}},
        caps={},
    )
    error = rpc_error(await post(served, msg), 400, -32021)
    assert error["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert await titles(served.store) == [note_id]


async def test_an_unknown_method_gets_404_method_not_found(served: Served) -> None:
    rpc_error(await post(served, message("resources/subscribe")), 404, -32601)


# --- 500 -32603 --------------------------------------------------------------------------------


async def test_an_unexpected_exception_gets_500_without_a_traceback_and_is_logged(
    served: Served, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom(message: object, ctx: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(served.nodes[0], "handle", boom)
    with caplog.at_level(logging.ERROR, logger="nodes.http"):
        response = await post(served, message("server/discover"))
    error = rpc_error(response, 500, -32603)
    assert "secret" not in response.text
    assert error["message"] == "Internal error"
    assert any(r.exc_info and "secret internals" in str(r.exc_info[1]) for r in caplog.records)


# --- the whole flow across two nodes ------------------------------------------------------------


async def test_a_two_round_delete_runs_round_one_on_node_a_and_round_two_on_node_b(
    served: Served,
) -> None:
    note_id = await seed(served.store)
    other_id = await seed(served.store)
    assert served.urls[0] != served.urls[1]

    first = result_of(await post(served, delete_call(), node=0))
    assert first["resultType"] == "input_required"
    form = first["inputRequests"]["confirm_delete"]
    options = form["params"]["requestedSchema"]["properties"]["noteId"]["oneOf"]
    assert {o["const"] for o in options} == {note_id, other_id}

    retry = delete_call(requestState=first["requestState"], inputResponses=accept(note_id))
    retry["id"] = 2
    second = result_of(await post(served, retry, node=1))
    assert second["resultType"] == "complete"
    assert second["structuredContent"] == {"deleted": True, "noteId": note_id}
    assert await titles(served.store) == [other_id]
    assert served.nodes[0].statistics().rounds == 1
    assert served.nodes[1].statistics().executions == 1

    # The same answer again, now on node A: the recorded outcome, and nothing more deleted.
    retry["id"] = 3
    replay = result_of(await post(served, retry, node=0))
    assert replay["structuredContent"] == {"deleted": True, "noteId": note_id}
    assert await titles(served.store) == [other_id]
    assert served.nodes[0].statistics().replays == 1


# --- TokenTable (unit) --------------------------------------------------------------------------


def test_a_token_table_stores_only_hashes_and_maps_tokens_to_principals() -> None:
    table = TokenTable({hashlib.sha256(b"alice-demo-token").hexdigest(): "alice"})
    assert table.authenticate("Bearer alice-demo-token") == "alice"
    assert table.authenticate("bearer alice-demo-token") == "alice"
    assert table.authenticate("BEARER alice-demo-token") == "alice"
    assert table.authenticate("Bearer bob-demo-token") is None
    plain = TokenTable.from_plain(DEMO_TOKENS)
    assert len(plain) == 2
    assert plain.authenticate(f"Bearer {BOB}") == "bob"
    assert "demo-token" not in repr(plain)
    assert all("demo-token" not in repr(v) for v in vars(plain).values())
    assert hash_token("x") == hashlib.sha256(b"x").hexdigest()
    upper = TokenTable({hash_token("t").upper(): "carol"})
    assert upper.authenticate("Bearer t") == "carol"


@pytest.mark.parametrize("bad", ["", "abc", "g" * 64, hash_token("t") + "00"])
def test_a_token_table_refuses_anything_but_sha256_hex(bad: str) -> None:
    with pytest.raises(ValueError, match="64 hex"):
        TokenTable({bad: "alice"})
    with pytest.raises(ValueError, match="principal"):
        TokenTable({hash_token("t"): ""})


@pytest.fixture
def compare_calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every stored hash ``hmac.compare_digest`` is asked to compare, in order."""
    calls: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(a)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    return calls


@pytest.mark.parametrize("token", ["t0", "t5", "t9", "nobody"])
def test_authentication_looks_the_digest_up_and_compares_only_the_entry_found(
    compare_calls: list[bytes], token: str
) -> None:
    table = TokenTable.from_plain({f"t{i}": f"p{i}" for i in range(10)})
    expected = None if token == "nobody" else f"p{token[1]}"
    assert table.authenticate(f"Bearer {token}") == expected
    if expected is None:
        assert compare_calls == []
    else:
        assert compare_calls == [hashlib.sha256(token.encode()).digest()]


def test_a_table_of_thousands_of_tokens_authenticates_each_and_no_other() -> None:
    plain = {f"tenant-{i:05d}-side-{i % 2}": f"p{i}" for i in range(5000)}
    table = TokenTable.from_plain(plain)
    assert len(table) == 5000
    for token, principal in plain.items():
        assert table.authenticate(f"Bearer {token}") == principal
    assert table.authenticate("Bearer tenant-05000-side-0") is None
    assert table.authenticate("Bearer tenant-00001-side-0") is None
    assert table.authenticate("Bearer tenant-00001-side-1 ") is None
    assert table.authenticate("Basic tenant-00001-side-1") is None


def test_a_hash_listed_twice_in_other_cases_names_the_last_principal() -> None:
    digest = hash_token("t")
    table = TokenTable({digest: "first", digest.upper(): "last"})
    assert table.authenticate("Bearer t") == "last"
    assert len(table) == 2


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Bearer  alice-demo-token",
        "Bearer alice-demo-token ",
        "Bearer alice-demo-token extra",
        "Bearer\talice-demo-token",
        "Basic alice-demo-token",
        "Token alice-demo-token",
        "alice-demo-token",
        "Bearer alice-demo-token\x00",
        "Bearer alicé",
        "Bearer " + "a" * (MAX_TOKEN_LENGTH + 1),
    ],
)
def test_malformed_authorization_headers_name_no_principal(
    compare_calls: list[bytes], header: str | None
) -> None:
    assert TOKENS.authenticate(header) is None
    assert bearer_token(header) is None
    assert compare_calls == []


def test_the_longest_allowed_token_and_b64token_characters_are_accepted() -> None:
    longest = "a" * MAX_TOKEN_LENGTH
    odd = "Ab0-._~+/=="
    table = TokenTable.from_plain({longest: "long", odd: "odd"})
    assert table.authenticate(f"Bearer {longest}") == "long"
    assert table.authenticate(f"Bearer {odd}") == "odd"


# --- small pure helpers of the shell ------------------------------------------------------------
def _reference_header_dict(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The header dict as the shell has always built it, without its known-names table."""
    out: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        prior = out.get(key)
        out[key] = text if prior is None else f"{prior}, {text}"
    return out


def test_the_header_dict_is_the_plain_decode_lowercase_and_join_for_every_name() -> None:
    for name, key in http._KNOWN_HEADER_NAMES.items():
        assert key == name.decode("latin-1").lower()
    raw = [
        (b"accept", b"application/json"),
        (b"Accept", b"text/event-stream"),
        (b"MCP-Method", b"tools/call"),
        (b"mcp-method", b"x"),
        (b"x-\xc0\xe9", b"caf\xe9"),
        (b"X-\xc0\xc9", b"2"),
        (b"content-type", b"application/json"),
        (b"authorization", b""),
        (b"authorization", b"Bearer t"),
    ]
    expected = _reference_header_dict(raw)
    assert http._header_dict(raw) == expected
    assert list(http._header_dict(raw)) == list(expected)
    assert expected["accept"] == "application/json, text/event-stream"
    assert expected["x-\xe0\xe9"] == "caf\xe9, 2"
    assert expected["authorization"] == ", Bearer t"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            http._Answer(200, b"{}"),
            [(b"content-length", b"2"), (b"content-type", b"application/json")],
        ),
        (http._Answer(202, b""), [(b"content-length", b"0")]),
        (
            http._Answer(405, b"{}", ((b"allow", b"POST"),)),
            [
                (b"content-length", b"2"),
                (b"allow", b"POST"),
                (b"content-type", b"application/json"),
            ],
        ),
        (
            http._Answer(200, b"<p>", ((b"content-type", b"text/html"),)),
            [(b"content-length", b"3"), (b"content-type", b"text/html")],
        ),
        (
            http._Answer(204, b"", ((b"connection", b"close"),)),
            [(b"content-length", b"0"), (b"connection", b"close")],
        ),
    ],
)
async def test_an_answer_is_sent_with_its_length_its_headers_and_json_by_default(
    answer: Any, expected: list[tuple[bytes, bytes]]
) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await http._send(send, answer)
    assert sent == [
        {"type": "http.response.start", "status": answer.status, "headers": expected},
        {"type": "http.response.body", "body": answer.body},
    ]


@pytest.mark.parametrize(
    ("accept", "ok"),
    [
        ("application/json, text/event-stream", True),
        ("text/event-stream;q=0.5, application/json;q=1", True),
        ("application/*, text/*", True),
        ("*/*", True),
        ("APPLICATION/JSON, TEXT/EVENT-STREAM", True),
        ("application/json", False),
        ("application/json;q=0, text/event-stream", False),
        ("", False),
    ],
)
def test_the_accept_rule(accept: str, ok: bool) -> None:
    assert http.accepts_json_and_sse(accept) is ok


def test_the_depth_walk_is_iterative() -> None:
    deep = nested(100_000)
    assert http.deeper_than(deep, 64)
    assert not http.deeper_than(nested(63), 64)
    assert http.deeper_than([[[]]], 2)
