"""A store error on the setup page is its own 503 page and one log line, never a traceback.

Layer: tests. Store errors on ``/setup/*`` are answered, not crashed on: the page
calls the store (the Redis clock, the link's completion record, the completion script). A full
Redis (a ``redis-server`` of this module's own, ``maxmemory 2mb``, ``noeviction``) and an
unreachable one (a loopback port with nothing listening) both answer the page's "try again" 503
with one WARNING line that names neither the link nor a token, and no traceback; once Redis has
room again the same link completes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import httpx
import pytest

from nodes import http
from nodes.auth import TokenTable
from nodes.protocol import Node
from nodes.serving.demo import DEMO_TOKENS
from store.client_factory import redis_client
from store.notes import NoteStore
from tests.asgi_driver import Exchange, request
from tests.harness import demo_config
from tests.own_redis import free_port
from tests.test_setup_url import ALICE, FORM, PUBLIC, SECRET, configured, retry, start
from tests.test_store_errors import empty, filled, small_redis

TOKENS = TokenTable.from_plain(DEMO_TOKENS)
BEARER = {"authorization": f"Bearer {ALICE}"}
LOG_LINE = "setup page answered 503, store error"


async def post(app: http.ASGIApp, path: str, body: str, headers: Mapping[str, str]) -> Exchange:
    length = {"content-length": str(len(body))}
    return await request(app, "POST", path, {**FORM, **length, **headers}, [body.encode()])


def assert_try_again(answer: Exchange) -> None:
    assert answer.status == 503, (answer.status, answer.body[:300])
    assert answer.headers["content-type"].startswith("text/html")
    assert b"try again" in answer.body


def one_warning_each(caplog: pytest.LogCaptureFixture, count: int, path: str) -> None:
    """``count`` store-error lines at WARNING, no traceback, and no link or token logged."""
    lines = [r for r in caplog.records if LOG_LINE in r.getMessage()]
    assert len(lines) == count, [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.WARNING for r in lines)
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert "Traceback" not in caplog.text
    token = path.rpartition("/")[2]
    for secret in (token, ALICE, SECRET):
        assert secret not in caplog.text


async def test_a_full_redis_answers_the_setup_page_503_and_the_link_completes_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    with small_redis() as url:
        async with redis_client(url) as client:
            node = Node(demo_config(public_url=PUBLIC), NoteStore(client, prefix="setupfull"))
            app = http.make_app(node, TOKENS)
            state, link = await start(node)  # round 1 reads only: it works on a full Redis
            path = httpx.URL(link).path
            with filled(url):
                caplog.clear()
                # Showing the form reads; completing it writes, which a full Redis refuses.
                shown = await request(app, "GET", path, BEARER)
                assert shown.status == 200, shown.body[:300]
                assert_try_again(await post(app, path, f"api_key={SECRET}", BEARER))
                one_warning_each(caplog, 1, path)
                assert "out of memory" in caplog.text
            empty(url)
            done = await post(app, path, f"api_key={SECRET}", BEARER)
            assert done.status == 200, done.body[:300]
            assert configured(await retry(node, state)) is True


async def test_an_unreachable_redis_answers_every_setup_request_503(
    embedded_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = demo_config(public_url=PUBLIC)
    async with (
        redis_client(embedded_url) as good,
        redis_client(f"redis://127.0.0.1:{free_port()}/0") as gone,
    ):
        prefix = "setupgone" + str(time.monotonic_ns())
        _, link = await start(Node(config, NoteStore(good, prefix=prefix)))
        path = httpx.URL(link).path
        app = http.make_app(Node(config, NoteStore(gone, prefix=prefix)), TOKENS)
        caplog.clear()
        answers = [
            await request(app, "GET", path, BEARER),  # the form: is the link still open?
            await post(app, path, f"api_key={SECRET}", BEARER),  # the completion
            await post(app, path, f"token={ALICE}", {}),  # a browser's sign-in
        ]
    for answer in answers:
        assert_try_again(answer)
    one_warning_each(caplog, len(answers), path)
