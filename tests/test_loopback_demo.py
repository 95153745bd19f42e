"""A loopback node's own origins, and the loopback-only demo principal (``--demo-anonymous``).

Layer: tests. The app is driven in memory (httpx's ASGI transport): the address a request reached
is the ASGI scope's ``server``, which the transport takes from the request URL, so a test can
send the same request to a loopback and to a non-loopback address of the node.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from cluster.cli import main
from cluster.serve import ProcessNode
from nodes.auth import TokenTable
from nodes.headers import request_headers
from nodes.http import make_app
from nodes.loopback import is_own_loopback_origin
from nodes.protocol import PROTOCOL_VERSION
from nodes.serving.demo import ALICE_NOTES, BOB_NOTES, DEMO_TENANT
from nodes.serving.settings import ConfigError, demo_settings, with_demo_anonymous
from store.notes import NoteStore
from tests.harness import make_nodes, meta

PORT = 8700
LOOPBACK = f"http://127.0.0.1:{PORT}"
REMOTE = f"http://10.1.2.3:{PORT}"
ANY = "0.0.0.0"  # noqa: S104 - the address refused, never bound


@asynccontextmanager
async def app_client(
    store: NoteStore,
    base_url: str,
    tokens: TokenTable | None = None,
    allowed_origins: frozenset[str] = frozenset(),
) -> AsyncIterator[httpx.AsyncClient]:
    (node,) = make_nodes(store, 1)
    table = tokens if tokens is not None else demo_settings().tokens
    app = make_app(node, table, allowed_origins=allowed_origins)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
        yield client


async def post(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    extra: dict[str, str] | None = None,
) -> httpx.Response:
    """One modern request with conforming headers and no credentials unless ``extra`` has some."""
    params = {"_meta": meta(), **params}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        **request_headers(method, params, PROTOCOL_VERSION),
        **(extra or {}),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return await client.post("/mcp", json=body, headers=headers)


ALICE = {"authorization": "Bearer alice-demo-token"}


@pytest.mark.parametrize(
    "origin",
    [f"http://localhost:{PORT}", f"http://127.0.0.1:{PORT}", f"http://[::1]:{PORT}"],
)
async def test_a_loopback_node_accepts_its_own_loopback_origins(
    store: NoteStore, origin: str
) -> None:
    async with app_client(store, LOOPBACK) as client:
        reply = await post(client, "tools/list", {}, {**ALICE, "origin": origin})
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["result"]["tools"]) == 8


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",  # a DNS-rebound page names its own host
        f"http://evil.example:{PORT}",
        f"http://localhost:{PORT + 1}",  # another local service's page
        f"https://localhost:{PORT}",
        f"http://user@localhost:{PORT}",
        f"http://localhost:{PORT}/mcp",
        "null",
    ],
)
async def test_other_origins_stay_refused_on_loopback(store: NoteStore, origin: str) -> None:
    async with app_client(store, LOOPBACK) as client:
        reply = await post(client, "tools/list", {}, {**ALICE, "origin": origin})
    assert reply.status_code == 403
    assert reply.json()["error"]["message"] == "Forbidden: Origin not allowed"


async def test_loopback_origins_are_not_accepted_off_loopback_unless_configured(
    store: NoteStore,
) -> None:
    origin = {"origin": f"http://localhost:{PORT}"}
    async with app_client(store, REMOTE) as client:
        refused = await post(client, "tools/list", {}, {**ALICE, **origin})
    assert refused.status_code == 403
    allowed = frozenset({f"http://localhost:{PORT}"})
    async with app_client(store, REMOTE, allowed_origins=allowed) as client:
        configured = await post(client, "tools/list", {}, {**ALICE, **origin})
    assert configured.status_code == 200, configured.text


def test_own_loopback_origin_rule() -> None:
    server = ("127.0.0.1", 80)
    assert is_own_loopback_origin("http://localhost", server)
    assert is_own_loopback_origin("http://localhost:80", server)
    assert not is_own_loopback_origin("http://localhost:81", server)
    assert is_own_loopback_origin("http://[::1]:9000", ("::1", 9000))
    assert not is_own_loopback_origin("http://localhost:9000", (ANY, 9000))
    assert not is_own_loopback_origin("http://localhost:9000", None)
    assert not is_own_loopback_origin("http://localhost:99999", ("127.0.0.1", 9000))
    assert not is_own_loopback_origin("http://localhost:9000", ("/run/node.sock", None))


# --- the demo principal -------------------------------------------------------------------------


def anonymous_alice() -> TokenTable:
    return with_demo_anonymous(demo_settings(), "alice", "127.0.0.1").tokens


async def test_without_the_option_a_request_without_a_token_is_401(store: NoteStore) -> None:
    async with app_client(store, LOOPBACK) as client:
        reply = await post(client, "tools/list", {})
    assert reply.status_code == 401


async def test_the_demo_principal_acts_for_requests_without_a_token_on_loopback(
    store: NoteStore,
) -> None:
    async with app_client(store, LOOPBACK, anonymous_alice()) as client:
        args = {"workspaceUri": ALICE_NOTES, "title": "Anonymous"}
        created = await post(client, "tools/call", {"name": "notes_create", "arguments": args})
        assert created.status_code == 200, created.text
        note_id = created.json()["result"]["structuredContent"]["noteId"]
        # It is alice, no one else: bob's workspace stays closed to it.
        bobs = {"name": "notes_list", "arguments": {"workspaceUri": BOB_NOTES}}
        refused = await post(client, "tools/call", bobs)
        # Any token still counts as itself; a wrong or malformed one is still refused.
        as_bob = await post(client, "tools/call", bobs, {"authorization": "Bearer bob-demo-token"})
        wrong = await post(client, "tools/list", {}, {"authorization": "Bearer nope"})
        malformed = await post(client, "tools/list", {}, {"authorization": "Basic eA=="})
    note = await store.get(DEMO_TENANT, note_id)
    assert note is not None
    assert note.workspace == ALICE_NOTES
    assert refused.json()["result"]["isError"] is True
    assert as_bob.json()["result"]["isError"] is False
    assert (wrong.status_code, malformed.status_code) == (401, 401)


async def test_the_demo_principal_is_never_granted_off_loopback(store: NoteStore) -> None:
    async with app_client(store, REMOTE, anonymous_alice()) as client:
        reply = await post(client, "tools/list", {})
    assert reply.status_code == 401


def test_the_demo_principal_is_refused_on_a_non_loopback_bind_or_for_a_stranger() -> None:
    with pytest.raises(ConfigError, match=r"loopback addresses only, not 0\.0\.0\.0"):
        with_demo_anonymous(demo_settings(), "alice", ANY)
    with pytest.raises(ConfigError, match="mallory: not a principal of the demo"):
        with_demo_anonymous(demo_settings(), "mallory", "127.0.0.1")
    settings = demo_settings()
    assert with_demo_anonymous(settings, None, ANY) is settings


def test_node_processes_inherit_the_demo_principal() -> None:
    settings = with_demo_anonymous(demo_settings(), "alice", "127.0.0.1")
    node = ProcessNode(settings, "redis://x", True, "127.0.0.1", 0, "n0", "p", None)
    args, _ = node.command()
    assert args[args.index("--demo-anonymous") + 1] == "alice"
    plain = ProcessNode(demo_settings(), "redis://x", True, "127.0.0.1", 0, "n0", "p", None)
    assert "--demo-anonymous" not in plain.command()[0]


def test_serve_refuses_the_option_without_demo() -> None:
    out = CliRunner().invoke(main, ["serve", "--config", __file__, "--demo-anonymous", "alice"])
    assert out.exit_code == 2, out.output
    assert "--demo-anonymous needs --demo" in out.output
