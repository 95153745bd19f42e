"""One timeout bounds a whole call of the store's own Redis client, the connect included.

The cause of "no unknown outcome under a paused Redis" on this client: a call that found no
usable connection waited for the lock of another call's connect (itself up to one timeout: the
handshake goes unanswered while Redis is paused), and then opened a connection of its own with
a fresh timeout. Calls queued so waited out a one-second ``CLIENT PAUSE`` and succeeded, where
coredis gave up after its timeout: the node never had to answer "outcome unknown", and the fault
run saw none. Now the wait for a connection counts against the call's own deadline, and a call
that has no connection by then is ``NotSent``.

Time here is virtual (trio's MockClock; an asyncio loop whose clock the test moves), so the
deadlines are exact and nothing depends on the machine's speed. The server is a loopback
listener that reads and never answers, as a paused Redis does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
import trio.testing

from store.redis_errors import NotSent, RedisClientError, ReplyTimeout
from store.resp_client import RespRedis

TIMEOUT_S = 10.0
"""The client's timeout (virtual seconds: nothing here waits for it in real time)."""


class _FrozenTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock moves only when told (``advance``)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class SilentServer:
    """Accepts connections and reads what they send; never answers (a paused Redis)."""

    connections: int = 0
    received: anyio.Event = field(default_factory=anyio.Event)
    port: int = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610
        task_status.started()
        await listener.serve(self._read)

    async def _read(self, stream: anyio.abc.SocketStream) -> None:
        self.connections += 1
        async with stream:
            try:
                async for _ in stream:
                    self.received.set()
            except (anyio.BrokenResourceError, OSError):
                pass


SETTLE_STEPS = 20
"""Loop iterations to let pass after the clock moved: asyncio runs a due timer only on the
loop's next iteration, and a cancelled task's clean-up takes a few more."""


async def settle() -> None:
    """Let every task run that the clock's move woke, until all are blocked again."""
    for _ in range(SETTLE_STEPS):
        await anyio.lowlevel.checkpoint()
    await anyio.wait_all_tasks_blocked()


def run_on(backend: str, main: Callable[[Callable[[float], None]], Any]) -> None:
    """Run ``main(advance)`` on ``backend`` with a clock that only ``advance`` moves."""
    if backend == "trio":
        clock = trio.testing.MockClock()
        anyio.run(main, clock.jump, backend="trio", backend_options={"clock": clock})
        return
    loops: list[_FrozenTimeLoop] = []

    def factory() -> _FrozenTimeLoop:
        loops.append(_FrozenTimeLoop())
        return loops[-1]

    def advance(seconds: float) -> None:
        loops[-1].advance(seconds)

    anyio.run(main, advance, backend="asyncio", backend_options={"loop_factory": factory})


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_call_queued_behind_another_calls_connect_fails_by_its_own_deadline(
    backend: str,
) -> None:
    """Two calls start together on a client with no connection; the first connects and sends
    its handshake, which the server never answers; the second waits for that connect. At their
    common deadline both are over, NotSent, and the second never opened a connection of its
    own (before the fix it then connected afresh and waited one more timeout)."""
    outcomes: dict[str, BaseException | str] = {}
    at_deadline: dict[str, object] = {}

    async def main(advance: Callable[[float], None]) -> None:
        server = SilentServer()
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            url = f"redis://127.0.0.1:{server.port}/0"
            client = RespRedis.from_url(
                url, client_name="nc-deadline", timeout_s=TIMEOUT_S, max_connections=1
            )
            async with client:

                async def call(name: str) -> None:
                    try:
                        outcomes[name] = await client.ping()
                    except RedisClientError as exc:
                        outcomes[name] = exc

                tg.start_soon(call, "first")
                await server.received.wait()  # the first call's handshake reached the server
                tg.start_soon(call, "second")
                assert client._connecting is not None
                await settle()
                # the second call waits for the first one's connect
                assert client._connecting.statistics().tasks_waiting == 1
                assert outcomes == {}
                advance(TIMEOUT_S + 0.5)
                await settle()
                at_deadline.update(outcomes, connections=server.connections)
                advance(2 * TIMEOUT_S)  # whatever still waits ends now, so the test ends
                await settle()
            tg.cancel_scope.cancel()

    run_on(backend, main)
    assert set(at_deadline) == {"first", "second", "connections"}, "a call outlived its timeout"
    assert at_deadline["connections"] == 1, "the second call connected after its deadline"
    assert isinstance(outcomes["first"], NotSent), outcomes  # the handshake went unanswered
    assert isinstance(outcomes["second"], NotSent), outcomes


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_call_on_an_open_connection_times_out_at_its_deadline(backend: str) -> None:
    """The control: a call written on an open connection and never answered is ReplyTimeout
    (an unknown outcome) at its deadline, not before."""
    outcomes: dict[str, BaseException | str] = {}

    async def main(advance: Callable[[float], None]) -> None:
        server = SilentServer()
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            url = f"redis://127.0.0.1:{server.port}/0"
            async with RespRedis.from_url(url, timeout_s=TIMEOUT_S, max_connections=1) as client:

                async def call() -> None:
                    try:
                        outcomes["call"] = await client.ping()
                    except RedisClientError as exc:
                        outcomes["call"] = exc

                tg.start_soon(call)
                await server.received.wait()  # no handshake: this is the PING itself
                advance(TIMEOUT_S - 0.5)
                await settle()
                assert outcomes == {}, "gave up before its timeout"
                advance(1.0)
                await settle()
                assert set(outcomes) == {"call"}
            tg.cancel_scope.cancel()

    run_on(backend, main)
    assert isinstance(outcomes["call"], ReplyTimeout), outcomes


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_call_behind_a_cancelled_one_times_out_at_its_own_deadline_not_the_first_ones(
    backend: str,
) -> None:
    """Two unanswered calls on one connection, the second written later; the first caller
    gives up (cancelled). The connection is not closed at the first call's deadline, and the
    second call is ReplyTimeout at its own (on asyncio one timer watches every call's deadline
    and waits again for the next one)."""
    outcomes: dict[str, BaseException | str] = {}

    async def main(advance: Callable[[float], None]) -> None:
        server = SilentServer()
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            url = f"redis://127.0.0.1:{server.port}/0"
            async with RespRedis.from_url(url, timeout_s=TIMEOUT_S, max_connections=1) as client:

                async def call(name: str, scope: anyio.CancelScope) -> None:
                    with scope:
                        try:
                            outcomes[name] = await client.ping()
                        except RedisClientError as exc:
                            outcomes[name] = exc
                    if scope.cancelled_caught:
                        outcomes[name] = "cancelled"

                first = anyio.CancelScope()
                tg.start_soon(call, "first", first)
                await server.received.wait()
                advance(TIMEOUT_S / 2)
                await settle()
                first.cancel()
                tg.start_soon(call, "second", anyio.CancelScope())
                await settle()
                assert outcomes == {"first": "cancelled"}
                advance(TIMEOUT_S / 2 + 0.5)  # past the first call's deadline
                await settle()
                assert outcomes == {"first": "cancelled"}, "closed at a cancelled call's deadline"
                assert client.statistics()["connections"] == 1
                advance(TIMEOUT_S / 2)  # past the second call's
                await settle()
                assert set(outcomes) == {"first", "second"}
            tg.cancel_scope.cancel()

    run_on(backend, main)
    assert isinstance(outcomes["second"], ReplyTimeout), outcomes
