"""The lean store's blocking ``XREAD`` (``store.simulation.lean_server``) on a virtual clock.

Layer: tests. A blocked read is woken by an ``XADD`` to one of its keys, from another
connection or from a script, and answers then; with none it answers nil exactly at its timeout;
while it waits it runs no command (no busy loop: the store's command counter proves it); a
connection closed under it ends it. Time is trio's ``MockClock`` (autojump), as in a
deterministic run.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from cluster.deterministic.world import EPOCH_S
from store.redis_errors import ConnectionLost, UnknownOutcome
from store.resp import pack
from store.simulation.lean_server import LeanConnection, LeanServer

READ = pack("XREAD", "COUNT", 10, "BLOCK", 5000, "STREAMS", "inbox", "wake", "0-0", "0-0")


def _server() -> LeanServer:
    server = LeanServer()
    server.redis._clock = lambda: EPOCH_S + trio.current_time()
    return server


async def test_a_blocked_read_is_woken_by_an_append_from_another_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = _server()
    reader, writer = server.connect(), server.connect()
    got: list[object] = []
    async with trio.open_nursery() as nursery:

        async def read() -> None:
            got.extend(await reader.request((READ,)))
            got.append(trio.current_time())

        nursery.start_soon(read)
        await trio.sleep(1.5)
        before = server.redis.calls
        await writer.request((pack("XADD", "wake", "*", "kind", "wake"),))
    (reply, at) = got
    assert reply == [["wake", [[f"{int((EPOCH_S + 1.5) * 1000)}-0", ["kind", "wake"]]]]]
    assert at == 1.5
    assert server.redis.calls == before + 2  # the XADD and the one read it woke: no polling


async def test_an_append_inside_a_script_wakes_it_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = _server()
    reader, writer = server.connect(), server.connect()
    script = "redis.call('XADD', KEYS[1], '*', 'kind', 'answer') return 1"
    async with trio.open_nursery() as nursery:
        replies: list[object] = []

        async def read() -> None:
            replies.extend(await reader.request((READ,)))

        nursery.start_soon(read)
        await trio.sleep(0.25)
        await writer.request((pack("EVAL", script, 1, "inbox"),))
    assert replies[0][0][0] == "inbox"  # type: ignore[index]


async def test_with_no_append_it_answers_nil_at_its_timeout_having_run_nothing_meanwhile(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = _server()
    reader = server.connect()
    server.recording = []
    read = pack("XREAD", "COUNT", 10, "BLOCK", 300, "STREAMS", "inbox", "0-0")
    assert await reader.request((read,)) == [None]
    assert trio.current_time() == pytest.approx(0.3)
    assert server.redis.calls == 2  # the read, and the read again at its timeout
    # Recorded as what a replay sends then: the read without BLOCK, at its answer's time.
    ((_conn, clock, commands, replies),) = server.recording
    assert commands == [[b"XREAD", b"COUNT", b"10", b"STREAMS", b"inbox", b"0-0"]]
    assert clock == pytest.approx(EPOCH_S + 0.3)
    assert replies == [b"*-1\r\n"]


async def test_entries_already_there_answer_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = _server()
    conn = server.connect()
    await conn.request((pack("XADD", "inbox", "*", "kind", "answer"),))
    (reply,) = await conn.request((READ,))
    assert reply[0][0] == "inbox"
    assert trio.current_time() == 0


async def test_a_connection_closed_under_a_blocked_read_ends_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = _server()
    reader: LeanConnection = server.connect()
    failures: list[BaseException] = []
    async with trio.open_nursery() as nursery:

        async def read() -> None:
            try:
                await reader.request((READ,))
            except ConnectionLost as exc:
                failures.append(exc)

        nursery.start_soon(read)
        await trio.sleep(1)
        reader.close(UnknownOutcome("test closes it"))
    assert len(failures) == 1
    assert trio.current_time() == 1
    assert not server.waiting  # nothing left registered
