"""Strict JSON at the HTTP edge, driven through the ASGI app.

Findings reproduced: ``"protocolVersion": 1e400`` gave HTTP 500 and a traceback (the decoder
turned it into ``inf``, which the legacy ``initialize`` echoed into an error's ``data`` and the
strict encoder could not write), and duplicate keys were accepted with the last one winning.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nodes import json_strict
from nodes.auth import TokenTable
from nodes.headers import request_headers
from nodes.http import make_app
from nodes.legacy import LegacyAdapter
from nodes.protocol import PROTOCOL_VERSION, Node
from nodes.serving.demo import ALICE_NOTES, DEMO_TENANT, DEMO_TOKENS
from store.notes import NoteStore
from store.sessions import SessionStore
from tests.conftest import raw
from tests.harness import demo_config, meta

ALICE = "alice-demo-token"
BOB_NOTES = "file:///Users/bob/Documents/Notes"


@pytest.fixture
async def client(store: NoteStore) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the ASGI app of one node (with the legacy adapter, as served)."""
    node = Node(demo_config(), store)
    legacy = LegacyAdapter(node, SessionStore(raw(store), prefix=store.prefix))
    app = make_app(node, TokenTable.from_plain(DEMO_TOKENS), legacy=legacy)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as http:
        yield http


def headers(method: str, params: dict[str, Any], *, modern: bool = True) -> dict[str, str]:
    out = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {ALICE}",
    }
    if modern:
        out.update(request_headers(method, params, PROTOCOL_VERSION))
    return out


def list_params(workspace: str = ALICE_NOTES) -> dict[str, Any]:
    return {"name": "notes_list", "arguments": {"workspaceUri": workspace}, "_meta": meta()}


async def post_raw(http: httpx.AsyncClient, body: str, hdrs: dict[str, str]) -> httpx.Response:
    return await http.post("/mcp", content=body.encode("utf-8"), headers=hdrs)


def parse_error(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32700, error
    message: str = error["message"]
    return message


async def test_protocol_version_1e400_in_initialize_is_a_parse_error_not_a_500(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1e400,'
        '"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}'
    )
    response = await post_raw(client, body, headers("initialize", {}, modern=False))
    assert "out of range" in parse_error(response)
    assert "Traceback" not in caplog.text
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize(
    "literal", ["1e400", "-1e400", "123456789012345678901234567890", "NaN", "-Infinity"]
)
async def test_numbers_out_of_range_anywhere_are_a_parse_error(
    client: httpx.AsyncClient, literal: str
) -> None:
    params = list_params()
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_list",'
        f'"arguments":{{"workspaceUri":"{ALICE_NOTES}"}},"_meta":{{'
        f'"io.modelcontextprotocol/protocolVersion":{literal},'
        '"io.modelcontextprotocol/clientCapabilities":{}}}}'
    )
    response = await post_raw(client, body, headers("tools/call", params))
    message = parse_error(response)
    assert "range" in message or "not JSON" in message


async def test_duplicate_workspace_keys_are_refused_not_served_for_the_last_one(
    client: httpx.AsyncClient, store: NoteStore
) -> None:
    await store.create(DEMO_TENANT, ALICE_NOTES, "mine", "", "alice")
    params = list_params()
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_list",'
        f'"arguments":{{"workspaceUri":"{BOB_NOTES}","workspaceUri":"{ALICE_NOTES}"}},'
        '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        '"io.modelcontextprotocol/clientCapabilities":{}}}}'
    )
    response = await post_raw(client, body, headers("tools/call", params))
    assert parse_error(response) == "Parse error: duplicate key 'workspaceUri'"


async def test_duplicate_keys_at_the_top_level_are_refused(client: httpx.AsyncClient) -> None:
    body = '{"jsonrpc":"2.0","id":1,"id":2,"method":"server/discover","params":{}}'
    response = await post_raw(client, body, headers("server/discover", {}))
    assert parse_error(response) == "Parse error: duplicate key 'id'"


async def test_a_lone_surrogate_is_a_parse_error_and_a_pair_is_a_character(
    client: httpx.AsyncClient, store: NoteStore
) -> None:
    def create(title_json: str) -> str:
        return (
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_create",'
            f'"arguments":{{"workspaceUri":"{ALICE_NOTES}","title":"{title_json}"}},'
            '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            '"io.modelcontextprotocol/clientCapabilities":{}}}}'
        )

    params = {"name": "notes_create", "arguments": {}, "_meta": meta()}
    lone = await post_raw(client, create("a\\ud800b"), headers("tools/call", params))
    assert "surrogate" in parse_error(lone)
    pair = await post_raw(client, create("smile \\ud83d\\ude00"), headers("tools/call", params))
    assert pair.status_code == 200, pair.text
    assert pair.json()["result"]["structuredContent"]["title"] == "smile \U0001f600"


async def test_bad_syntax_says_only_parse_error(client: httpx.AsyncClient) -> None:
    response = await post_raw(client, '{"jsonrpc": "2.0", "id": 1,', headers("x", {}))
    assert parse_error(response) == "Parse error"


def test_the_strict_decoder_accepts_ordinary_json_unchanged() -> None:
    text = b'{"a": [1, -2, 3.5, 1e300, 9223372036854775807, "\\u00e9\\\\ud800", null, true]}'
    assert json_strict.decode(text) == {
        "a": [1, -2, 3.5, 1e300, 2**63 - 1, "\u00e9\\ud800", None, True]
    }


def test_the_strict_decoder_refuses_what_plain_json_accepts() -> None:
    for text in (
        b'{"k": 1, "k": 1}',
        b'{"o": {"k": 1, "k": 2}}',
        b"[1e999]",
        b"-9223372036854775808",
    ):
        with pytest.raises(json_strict.JsonRefused):
            json_strict.decode(text)


FAST_PATH_CORPUS = (
    # Compact, as orjson writes them: these reach the fast path's round trip.
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}',
    b'{"a":[1,-2,3.5,1e300,9223372036854775807,-9223372036854775807,null,true,false]}',
    b'{"t":"smile \xf0\x9f\x98\x80","u":"\\u00e9","c":"a:b","s":"\\\\ud800"}',
    b'{"e":{},"l":[],"n":[[[{"k":[]}]]]}',
    b'{"s":"12345678901234567890123","n":9007199254740991,"m":-9007199254740991}',
    b'{"n":9007199254740992}',
    b'{"n":9007199254740993}',
    b"[-9007199254740993,1]",
    b'{"id":9223372036854775807}',
    # What the strict decoder refuses, compact, so orjson accepts or refuses each first.
    b'{"k":1,"k":1}',
    b'{"o":{"k":1,"k":2}}',
    b'[{"a":1},{"b":2,"b":2}]',
    b'{"id":1,"id":2,"method":"server/discover","params":{}}',
    b"[1e999]",
    b"[-1e400]",
    b"-9223372036854775808",
    b"9223372036854775808",
    b"18446744073709551615",
    b"18446744073709551616",
    b"123456789012345678901234567890",
    b"[NaN]",
    b"[-Infinity]",
    b'"a\\ud800b"',
    b'"\\udc00"',
    b'"\x01"',
    b"\xef\xbb\xbf{}",
    b'{"a":"\xff"}',
    b"[1,]",
    b"",
    # Not as orjson writes them: straight to the strict decoder.
    b'{"a": 1, "a": 2}',
    b'{"k":1e5,"s":"\\/"}',
    b'{"a":"\\ud83d\\ude00"}',
)


def _outcome(decode: Any, body: bytes) -> object:
    try:
        return ("value", decode(body))
    except ValueError as exc:
        return (type(exc).__name__, json_strict.parse_error_message(exc))


@pytest.mark.parametrize("body", FAST_PATH_CORPUS)
def test_the_fast_path_answers_as_the_strict_decoder(body: bytes) -> None:
    assert _outcome(json_strict.decode, body) == _outcome(json_strict.decode_strictly, body)


@pytest.fixture
def strict_calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bodies that reach the strict decoder, in order, from here on."""
    calls: list[bytes] = []
    real = json_strict.decode_strictly

    def counted(body: bytes) -> object:
        calls.append(body)
        return real(body)

    monkeypatch.setattr(json_strict, "decode_strictly", counted)
    return calls


def test_a_compact_body_skips_the_strict_decoder_and_a_duplicate_does_not(
    strict_calls: list[bytes],
) -> None:
    assert json_strict.decode(FAST_PATH_CORPUS[0])["id"] == 1  # type: ignore[index]
    assert strict_calls == []
    for body in (b'{"k":1,"k":1}', b"9223372036854775808", b'{"a": 1}'):
        _outcome(json_strict.decode, body)
        assert strict_calls[-1] == body
    with pytest.raises(json_strict.JsonRefused, match="duplicate key 'k'"):
        json_strict.decode(b'{"o":{"k":1,"k":2}}')


def test_long_digit_runs_in_strings_stay_on_the_fast_path_and_large_integers_leave_it(
    strict_calls: list[bytes],
) -> None:
    """Integers past 53 bits take the strict decoder (which keeps them up to ``INT_LIMIT``
    and refuses them beyond); digits in a string are no reason to leave the fast path."""
    digits = b'{"note":"12345678901234567890123456789","n":-9007199254740991}'
    assert json_strict.decode(digits) == {"note": "12345678901234567890123456789", "n": 1 - 2**53}
    assert strict_calls == []
    assert json_strict.decode(b'{"n":9007199254740992}') == {"n": 2**53}
    assert strict_calls == [b'{"n":9007199254740992}']
    assert json_strict.decode(b"[-9223372036854775807]") == [-json_strict.INT_LIMIT]
    with pytest.raises(json_strict.JsonRefused):
        json_strict.decode(b"[9223372036854775808]")
    assert len(strict_calls) == 3
