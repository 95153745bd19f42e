"""The setup page's browser sign-in (cookie, CSRF) and authentication before any body is read.

Sign-in flows run over HTTP against two nodes sharing one store (embedded and real Redis), with
cookies carried by hand, so each test states exactly which cookie goes where. The body tests drive
the ASGI app in memory with a ``receive()`` that counts its calls: a refused request must not have
called it at all.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from functools import partial
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx
import pytest
import trio

from nodes import http
from nodes.auth import TokenTable
from nodes.http import DRAIN_MAX_BYTES
from nodes.protocol import Node
from nodes.serving.demo import BOB_NOTES, DEMO_TOKENS
from nodes.setup_links import SETUP_PATH_PREFIX, open_link
from nodes.setup_signin import cookie_name, seal_signin
from store.notes import NoteStore
from tests.asgi_driver import request
from tests.harness import call_tool, make_nodes, result, until_redis_clock
from tests.test_setup_url import ARGS, KEY, SECRET, URL_CAPS, configured, retry, start

ALICE = "alice-demo-token"
BOB = "bob-demo-token"
TOKENS = TokenTable.from_plain(DEMO_TOKENS)
FORM = {"content-type": "application/x-www-form-urlencoded"}
LINK_TTL_MS = 2_000
"""Long enough to sign in and open the form on a loaded machine, then wait out."""
CSRF_INPUT = re.compile(r"name='csrf' value='([^']+)'")


@dataclass
class Served:
    nodes: list[Node]
    bases: list[str]
    client: httpx.AsyncClient


@pytest.fixture
async def served(store: NoteStore, nursery: trio.Nursery) -> AsyncIterator[Served]:
    nodes = make_nodes(store, 2, state_ttl_ms=60_000)
    urls = [await nursery.start(partial(http.serve_node, node, TOKENS)) for node in nodes]
    # No cookie jar: every test sends exactly the cookie it names.
    no_jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    async with httpx.AsyncClient(timeout=10, follow_redirects=False, cookies=no_jar) as client:
        yield Served(nodes, [u.removesuffix("/mcp") for u in urls], client)


def on(s: Served, node: int, url: str) -> str:
    """The same link, on another node."""
    return s.bases[node] + httpx.URL(url).path


async def sign_in(s: Served, url: str, token: str = ALICE) -> httpx.Response:
    return await s.client.post(url, content=f"token={token}", headers=FORM)


def cookie_of(response: httpx.Response) -> tuple[str, str]:
    """(name, value) of the one cookie a sign-in set."""
    header = response.headers["set-cookie"]
    name, _, rest = header.partition("=")
    return name, rest.partition(";")[0]


async def page(s: Served, url: str, cookie: tuple[str, str]) -> httpx.Response:
    return await s.client.get(url, headers={"cookie": f"{cookie[0]}={cookie[1]}"})


async def submit(
    s: Served, url: str, cookie: tuple[str, str], fields: dict[str, str]
) -> httpx.Response:
    body = "&".join(f"{k}={v}" for k, v in fields.items())
    headers = {**FORM, "cookie": f"{cookie[0]}={cookie[1]}"}
    return await s.client.post(url, content=body, headers=headers)


async def test_sign_in_sets_a_strict_httponly_cookie_any_node_accepts_and_completes(
    served: Served,
) -> None:
    node_a, node_b = served.nodes
    state, url = await start(node_a)
    url = on(served, 0, url)

    anonymous = await served.client.get(url)
    assert anonymous.status_code == 401
    assert "name='token'" in anonymous.text
    signed = await sign_in(served, url)
    assert signed.status_code == 303
    assert signed.headers["location"] == httpx.URL(url).path.rpartition("/")[2]
    attributes = [a.strip() for a in signed.headers["set-cookie"].split(";")]
    assert {"HttpOnly", "SameSite=Strict", f"Path={SETUP_PATH_PREFIX}"} <= set(attributes)
    max_age = int(next(a for a in attributes if a.startswith("Max-Age=")).partition("=")[2])
    assert 0 < max_age <= 600
    assert "Secure" not in attributes, "plain http on loopback"
    cookie = cookie_of(signed)

    form = await page(served, on(served, 1, url), cookie)  # the other node opens it too
    assert form.status_code == 200, form.text
    csrf = CSRF_INPUT.search(form.text)
    assert csrf is not None
    done = await submit(
        served, on(served, 1, url), cookie, {"api_key": SECRET, "csrf": csrf.group(1)}
    )
    assert done.status_code == 200, done.text
    assert configured(await retry(node_b, state)) is True


async def test_a_wrong_or_foreign_token_signs_nobody_in(served: Served) -> None:
    _, url = await start(served.nodes[0])
    url = on(served, 0, url)
    wrong = await sign_in(served, url, "not-a-real-token")
    assert wrong.status_code == 401
    assert "not accepted" in wrong.text
    foreign = await sign_in(served, url, BOB)
    assert foreign.status_code == 403
    for response in (wrong, foreign):
        assert "set-cookie" not in response.headers


async def test_a_cookie_for_another_principal_or_link_is_refused(served: Served) -> None:
    node = served.nodes[0]
    _, alice_url = await start(node)
    bob_round_1 = await call_tool(
        node, "notes_setup", {"workspaceUri": BOB_NOTES}, caps=URL_CAPS, principal="bob"
    )
    bob_url = result(bob_round_1)["inputRequests"][KEY]["params"]["url"]
    alice_url, bob_url = on(served, 0, alice_url), on(served, 0, bob_url)
    bob_cookie = cookie_of(await sign_in(served, bob_url, BOB))
    alice_link = open_link(
        node.config.key_ring,
        node.config.server_name,
        httpx.URL(alice_url).path.removeprefix(SETUP_PATH_PREFIX),
    )
    # Bob's own cookie, sent under the name alice's link reads.
    renamed = (cookie_name(alice_link), bob_cookie[1])
    assert (await page(served, alice_url, renamed)).status_code == 403
    # A cookie sealed with the cluster's ring for alice's link but naming bob.
    now = await node.store.redis_time_ms()
    forged, _ = seal_signin(
        node.config.key_ring, node.config.server_name, replace(alice_link, principal="bob"), now
    )
    forged_cookie = (cookie_name(alice_link), forged)
    assert (await page(served, alice_url, forged_cookie)).status_code == 403
    refused = await submit(served, alice_url, forged_cookie, {"api_key": SECRET, "csrf": "x"})
    assert refused.status_code == 403
    # A cookie that is not sealed at all asks to sign in again.
    garbage = await page(served, alice_url, (cookie_name(alice_link), "ns1.demo.AAAA"))
    assert garbage.status_code == 401


@pytest.mark.parametrize("csrf", [None, "", "wrong-token"])
async def test_a_form_without_the_right_csrf_token_completes_nothing(
    served: Served, csrf: str | None
) -> None:
    state, url = await start(served.nodes[0])
    url = on(served, 0, url)
    cookie = cookie_of(await sign_in(served, url))
    fields = {"api_key": SECRET} if csrf is None else {"api_key": SECRET, "csrf": csrf}
    refused = await submit(served, url, cookie, fields)
    assert refused.status_code == 403
    res = result(await retry(served.nodes[1], state))
    assert res["resultType"] == "input_required", "still not configured"


async def csrf_of(s: Served, url: str, cookie: tuple[str, str]) -> str:
    match = CSRF_INPUT.search((await page(s, url, cookie)).text)
    assert match is not None
    return match.group(1)


async def test_a_used_link_answers_409_and_an_expired_one_410(
    served: Served, store: NoteStore
) -> None:
    _, url = await start(served.nodes[0])
    url = on(served, 0, url)
    cookie = cookie_of(await sign_in(served, url))
    fields = {"api_key": SECRET, "csrf": await csrf_of(served, url, cookie)}
    assert (await submit(served, url, cookie, fields)).status_code == 200
    assert (await submit(served, url, cookie, fields)).status_code == 409
    assert (await page(served, url, cookie)).status_code == 409
    assert (await sign_in(served, url)).status_code == 409

    node = served.nodes[0]
    node.config = replace(node.config, state_ttl_ms=LINK_TTL_MS)
    state, late = await start(node)
    late = on(served, 0, late)
    cookie = cookie_of(await sign_in(served, late))
    fields = {"api_key": SECRET, "csrf": await csrf_of(served, late, cookie)}
    exp_ms = node.config.key_ring.open(state, audience=node.config.server_name).exp_ms
    await until_redis_clock(store, exp_ms)  # the link's expiry, on the Redis clock
    assert (await submit(served, late, cookie, fields)).status_code == 410
    assert (await page(served, late, cookie)).status_code == 410
    assert (await sign_in(served, late)).status_code == 410


# --- no body is read before the caller is known ---------------------------------------------

BIG = 50 * 1024 * 1024
CHUNK = b"x" * 65_536


async def link_path(node: Node) -> str:
    reply = await call_tool(node, "notes_setup", ARGS, caps=URL_CAPS)
    return httpx.URL(result(reply)["inputRequests"][KEY]["params"]["url"]).path


def app_of(node: Node) -> Any:
    return http.make_app(node, TOKENS)


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-token"),
        pytest.param({"authorization": "Bearer wrong-token"}, id="wrong-token"),
    ],
)
async def test_an_unauthenticated_post_to_mcp_is_refused_without_reading_its_body(
    store: NoteStore, headers: dict[str, str]
) -> None:
    (node,) = make_nodes(store, 1)
    big = {"content-type": "application/json", "content-length": str(BIG), **headers}
    answer = await request(app_of(node), "POST", "/mcp", big, [CHUNK] * 4)
    assert answer.status == 401
    assert answer.receive_calls == 0


async def test_setup_posts_are_refused_without_reading_their_body(store: NoteStore) -> None:
    (node,) = make_nodes(store, 1, public_url="http://127.0.0.1:9")
    path = await link_path(node)
    link = open_link(
        node.config.key_ring, node.config.server_name, path.removeprefix(SETUP_PATH_PREFIX)
    )
    forged, _ = seal_signin(
        node.config.key_ring,
        node.config.server_name,
        replace(link, principal="bob"),
        await node.store.redis_time_ms(),
    )
    big = {**FORM, "content-length": str(BIG)}
    cases = [
        ("/setup/not-a-link", big, 404),
        (path, {**big, "authorization": f"Bearer {BOB}"}, 403),
        (path, {**big, "authorization": "Bearer wrong-token"}, 401),
        (path, {**big, "cookie": f"{cookie_name(link)}={forged}"}, 403),
        (path, big, 413),  # no credentials: a sign-in form, refused by its announced size
    ]
    for target, headers, status in cases:
        answer = await request(app_of(node), "POST", target, headers, [CHUNK] * 4)
        assert (answer.status, answer.receive_calls) == (status, 0), (target, headers)


async def test_an_unannounced_sign_in_body_is_cut_off_at_the_form_limit(
    store: NoteStore,
) -> None:
    (node,) = make_nodes(store, 1, public_url="http://127.0.0.1:9")
    path = await link_path(node)
    answer = await request(app_of(node), "POST", path, FORM, [CHUNK] * 100)
    assert answer.status == 413
    # Past the form limit the body is read to its end and dropped (``DRAIN_MAX_BYTES``: the
    # client finds its 413 on an open connection), never held ...
    assert answer.receive_calls == 100
    # ... and a body that grows past the drain bound is cut off at once.
    chunks = DRAIN_MAX_BYTES // len(CHUNK) + 4
    answer = await request(app_of(node), "POST", path, FORM, [CHUNK] * chunks)
    assert answer.status == 413
    assert answer.receive_calls == DRAIN_MAX_BYTES // len(CHUNK) + 1
