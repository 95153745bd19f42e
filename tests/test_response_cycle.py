"""The node server's own request cycle (``nodes.serving.response_cycle``) against uvicorn's.

Every scenario runs the same app and the same request bytes through uvicorn's stock httptools
protocol (its ``RequestResponseCycle``) and through the node's protocol (``ResponseCycle``), on
fake transports: the bytes written, whether the connection was closed and what the app received
must be the same. Only how the bytes were split into writes may differ (the node's cycle holds
a response's head for its body), and that is checked on its own in
``tests/test_node_server_internals.py``. Then what uvicorn leaves to its cycle and the node's
cycle does its own way: the body signal's waiters, a body in pieces.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from nodes.http import ServerTimeouts
from nodes.serving.http_server import _TimedHttpToolsProtocol, server_config
from nodes.serving.response_cycle import BodySignal, ResponseCycle
from tests.test_node_server_internals import FakeTransport, run, settle

App = Callable[[Any, Any, Any], Awaitable[None]]
JSON = b'{"ok":true}'
POST = (
    b"POST /p?q=1 HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b"content-length: 2\r\n\r\n{}"
)
GET = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"


def _http(app: App) -> App:
    async def only_http(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await app(scope, receive, send)

    return only_http


async def _exchange(
    protocol_class: type[HttpToolsProtocol],
    config: uvicorn.Config,
    pieces: list[bytes],
    seen: list[Any],
) -> tuple[bytes, bool, list[Any]]:
    protocol = protocol_class(config, ServerState(), {}, _loop=asyncio.get_running_loop())
    transport = FakeTransport()
    protocol.connection_made(transport)
    for piece in pieces:
        if transport.closed:
            break
        protocol.data_received(piece)
        await settle()
    await settle()
    received = list(seen)
    seen.clear()
    return b"".join(transport.writes), transport.closed, received


def both(app: App, pieces: list[bytes]) -> None:
    """The same exchange on uvicorn's cycle and on the node's: the same bytes and state."""
    seen: list[Any] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        async def watched_receive() -> Any:
            message = await receive()
            seen.append(message)
            return message

        await app(scope, watched_receive, send)

    stock = uvicorn.Config(
        _http(recording),
        http="httptools",
        lifespan="off",
        proxy_headers=False,
        server_header=False,
        date_header=False,
        access_log=False,
        log_config=None,  # the test process's logging stays as it is
    )
    ours = server_config(_http(recording), host="127.0.0.1", port=0, timeouts=ServerTimeouts())

    async def scenario() -> None:
        expected = await _exchange(HttpToolsProtocol, stock, pieces, seen)
        got = await _exchange(_TimedHttpToolsProtocol, ours, pieces, seen)
        assert got == expected

    run(scenario)


async def json_answer(scope: Any, receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(JSON))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": JSON})


def sending(*messages: dict[str, Any], read: bool = True) -> App:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if read:
            await receive()
        for message in messages:
            await send(message)

    return app


def start(status: int = 200, *headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": list(headers)}


def body(data: bytes = b"", more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


LENGTH_5 = (b"content-length", b"5")

SCENARIOS: dict[str, tuple[App, list[bytes]]] = {
    "a JSON answer, kept alive": (json_answer, [POST, POST]),
    "a HEAD": (
        sending(start(200, LENGTH_5), body(b"hello")),
        [b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\n"],
    ),
    "no length: chunked": (sending(start(200), body(b"ab", True), body(b"c")), [GET]),
    "chunked, an empty last chunk": (sending(start(200), body(b"ab", True), body()), [GET]),
    "204 without a body": (sending(start(204), body()), [GET]),
    "304 without a body": (sending(start(304), body()), [GET]),
    "a declared length in two pieces": (
        sending(start(200, LENGTH_5), body(b"he", True), body(b"llo")),
        [GET],
    ),
    "the app asks to close": (
        sending(start(200, LENGTH_5, (b"Connection", b"keep-alive, Close")), body(b"hello")),
        [GET, GET],
    ),
    "the client asks to close": (
        json_answer,
        [b"POST / HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"],
    ),
    "HTTP/1.0": (json_answer, [b"POST / HTTP/1.0\r\ncontent-length: 2\r\n\r\n{}"]),
    "a body in pieces": (
        json_answer,
        [POST[:-2] + b"{", b"}", POST],
    ),
    "a chunked request body": (
        json_answer,
        [
            b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n",
            b"0\r\n\r\n",
        ],
    ),
    "100 Continue": (
        json_answer,
        [b"POST / HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n", b"{}"],
    ),
    "a body longer than declared": (
        sending(start(200, (b"content-length", b"1")), body(b"ab")),
        [GET],
    ),
    "a body shorter than declared": (sending(start(200, LENGTH_5), body(b"ab")), [GET]),
    "a CR LF in a header value": (
        sending(start(200, LENGTH_5, (b"x-a", b"1\r\nset-cookie: x")), body(b"hello")),
        [GET],
    ),
    "a space in a header name": (sending(start(200, (b"x a", b"1")), body()), [GET]),
    "a body before the start": (sending(body(b"x")), [GET]),
    "a start twice": (sending(start(200), start(200)), [GET]),
    "a message after the end": (sending(start(200, LENGTH_5), body(b"hello"), body()), [GET, GET]),
    "no response at all": (sending(), [GET]),
    "a started response left unfinished": (sending(start(200)), [GET]),
    "a length left unfinished": (sending(start(200, LENGTH_5), body(b"he", True)), [GET]),
    "pipelined requests": (json_answer, [POST + POST + POST]),
    "a body read after the answer": (
        sending(start(200, (b"content-length", b"0")), body(), read=False),
        [POST],
    ),
}


FIXED_IN_UVICORN_0_53 = {"the app asks to close", "HTTP/1.0", "a space in a header name"}
"""Where uvicorn's own cycle answered otherwise before 0.53 (no ``connection: close`` on an
HTTP/1.0 answer or after the app's own ``Connection: close``; a header-name check that let a
space through), and the node's cycle answers as 0.53 and later do."""


def _uvicorn_version() -> tuple[int, ...]:
    return tuple(int(part) for part in uvicorn.__version__.split(".")[:2])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_node_cycle_answers_as_uvicorns(name: str) -> None:
    if name in FIXED_IN_UVICORN_0_53 and _uvicorn_version() < (0, 53):
        pytest.skip(f"uvicorn {uvicorn.__version__} answered this before its fix (0.53)")
    app, pieces = SCENARIOS[name]
    both(app, pieces)


def test_an_app_that_fails_before_answering_gets_500_as_on_uvicorn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR):
        both(failing, [GET])
    assert "Exception in ASGI application" in caplog.text


def test_an_app_that_fails_mid_answer_closes_the_connection_as_on_uvicorn() -> None:
    async def failing(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send(start(200, LENGTH_5))
        raise ValueError("boom")

    both(failing, [GET])


def test_a_client_gone_while_the_app_waits_for_the_body() -> None:
    """The app waits for a body that never comes; the connection drops: it is told so."""
    got: list[Any] = []

    async def waiting(scope: Any, receive: Any, send: Any) -> None:
        while True:
            got.append(await receive())
            if got[-1]["type"] != "http.request":
                return

    async def scenario() -> None:
        config = server_config(_http(waiting), host="127.0.0.1", port=0, timeouts=ServerTimeouts())
        protocol = _TimedHttpToolsProtocol(
            config, ServerState(), {}, _loop=asyncio.get_running_loop()
        )
        transport = FakeTransport()
        protocol.connection_made(transport)
        protocol.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 9\r\n\r\n{")
        await settle()
        assert got == [{"type": "http.request", "body": b"{", "more_body": True}]
        got.clear()
        cycle = protocol.cycle
        protocol.connection_lost(None)
        await settle()
        assert cycle.disconnected
        assert got == [{"type": "http.disconnect"}]
        assert transport.writes == [], "nobody is left to answer"
        assert not protocol.tasks

    run(scenario)


def test_a_body_that_came_in_one_piece_is_handed_over_as_it_came() -> None:
    cycle = ResponseCycle(
        {},
        FakeTransport(),
        FlowControl(FakeTransport()),
        logging.getLogger("t"),
        logging.getLogger("t"),
        False,
        [],
        False,
        True,
        lambda: None,
    )
    piece = b'{"a":1}'
    assert cycle.add_body(piece) == len(piece)
    assert cycle.body is piece
    assert cycle.add_body(b"xy") == len(piece) + 2
    assert bytes(cycle.body) == piece + b"xy"
    assert piece == b'{"a":1}', "the first piece is not grown in place"


def test_the_body_signal_wakes_every_waiter_and_a_cancelled_one_alone() -> None:
    async def scenario() -> None:
        signal = BodySignal()
        woken: list[int] = []

        async def waiter(n: int) -> None:
            await signal.wait()
            woken.append(n)

        tasks = [asyncio.ensure_future(waiter(n)) for n in range(3)]
        await settle()
        tasks[1].cancel()
        await settle()
        assert woken == []
        signal.set()
        await settle()
        assert sorted(woken) == [0, 2]
        assert tasks[1].cancelled()
        assert signal.is_set()
        await signal.wait()  # set: no wait
        signal.clear()
        assert not signal.is_set()
        late = asyncio.ensure_future(waiter(9))
        await settle()
        assert not late.done()
        signal.set()
        await settle()
        assert woken[-1] == 9

    run(scenario)


def test_the_servers_default_header_lines_are_made_once_per_list() -> None:
    """The default headers' lines are made once per list (uvicorn makes a new list each second,
    with the new date): the same list gives the same bytes object, a new list new lines; a
    header the head's loop acts on, or an invalid one, sends every default through the loop."""
    from nodes.serving import response_cycle

    dated = [(b"Date", b"Wed, 02 Dec 2026 19:00:00 GMT"), (b"server", b"x")]
    block = response_cycle._default_lines(dated)
    assert block == b"date: Wed, 02 Dec 2026 19:00:00 GMT\r\nserver: x\r\n"
    assert response_cycle._default_lines(dated) is block
    later = [(b"date", b"Wed, 02 Dec 2026 19:00:01 GMT")]
    assert response_cycle._default_lines(later) == b"date: Wed, 02 Dec 2026 19:00:01 GMT\r\n"
    assert response_cycle._default_lines([]) == b""
    for odd in (
        [(b"connection", b"close")],
        [(b"Content-Length", b"3")],
        [(b"transfer-encoding", b"chunked")],
        [(b"x-bad", b"a\r\nb")],
        [(b"bad name", b"v")],
    ):
        assert response_cycle._default_lines([*later, *odd]) is None
