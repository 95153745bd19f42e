"""A hostile (or broken) Redis cannot pin or balloon a node: the store's own client against a
fake RESP server that answers what the test tells it to.

- A complete reply followed by stray bytes in the same read: the call gets its reply (it
  arrived whole), then the connection closes; nothing waits past its deadline.
- A reply larger than ``store.resp.MAX_REPLY_BYTES``: the connection closes when the bytes
  held for it pass the bound (checked on the reader's own count, never on process memory).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import anyio.abc
import pytest

from store.redis_conn import READ_SIZE
from store.redis_errors import ConnectionLost
from store.resp import MAX_REPLY_BYTES, ProtocolError, RespCore, pack
from store.resp_client import RespRedis

BACKENDS = ["trio", "uvloop"]
CALL_TIMEOUT_S = 30.0
"""The client's timeout: generous, since the calls here must end long before it (on the bytes
they get, not on a timer); a hang would show as the outer fail_after."""


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` on trio, or on asyncio with uvloop (the production loop)."""
    if backend == "trio":
        anyio.run(fn, backend="trio")
    else:
        anyio.run(fn, backend="asyncio", backend_options={"use_uvloop": True})


# -- the protocol core, sans-IO ------------------------------------------------------------------


def test_a_whole_reply_before_garbage_rides_on_the_protocol_error() -> None:
    core: RespCore[str] = RespCore()
    core.request("a", (pack("PING"),))
    core.request("b", (pack("PING"),))
    with pytest.raises(ProtocolError) as caught:
        core.receive(b"+PONG\r\n?stray bytes\r\n")
    assert caught.value.completed == [("a", ["PONG"])]
    assert core.abandon() == ["b"]


def test_a_whole_reply_before_an_unasked_one_rides_on_the_protocol_error() -> None:
    core: RespCore[str] = RespCore()
    core.request("a", (pack("PING"),))
    with pytest.raises(ProtocolError, match="no request was waiting") as caught:
        core.receive(b"+PONG\r\n+EXTRA\r\n")
    assert caught.value.completed == [("a", ["PONG"])]


@pytest.mark.parametrize(
    ("head", "unit"),
    [(b"$999999999\r\n", b"x" * 4096), (b"*99999999\r\n", b"$1\r\nx\r\n" * 512)],
    ids=["one bulk string", "an array of many small ones"],
)
def test_a_reply_past_the_bound_is_refused_with_what_is_held_within_it(
    head: bytes, unit: bytes
) -> None:
    bound = 1 << 20
    core: RespCore[str] = RespCore(max_reply_bytes=bound)
    core.request("a", (pack("GET", "k"),))
    core.receive(head)
    fed = len(head)
    refused: ProtocolError | None = None
    while refused is None:
        try:
            core.receive(unit)
        except ProtocolError as exc:
            refused = exc
        fed += len(unit)
        # Held for the reply in progress never passes the bound by more than one read.
        assert core._reader.len() <= bound + len(unit)
        assert fed <= bound + 2 * len(unit)
    assert "MAX_REPLY_BYTES" in str(refused)
    assert fed > bound - len(unit)


def test_replies_under_the_bound_pass_however_many_come_in_one_read() -> None:
    core: RespCore[int] = RespCore(max_reply_bytes=1000)
    reply = b"$900\r\n" + b"y" * 900 + b"\r\n"
    for i in range(20):
        core.request(i, (pack("GET", "k"),))
    done = core.receive(reply * 20)
    assert [w for w, _ in done] == list(range(20))


# -- against a fake server ------------------------------------------------------------------------


@dataclass
class FakeRedis:
    """Answers each command it reads with ``answer`` (bytes, or a callable that sends)."""

    answer: bytes = b"+PONG\r\n"
    huge: int = 0
    """When set: answer with one bulk string of this many bytes, sent in 1 MiB writes until
    the client closes."""
    port: int = 0
    sent: int = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610
        task_status.started()
        await listener.serve(self._answer)

    async def _answer(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                async for _ in stream:
                    if self.huge:
                        await stream.send(f"${self.huge}\r\n".encode())
                        chunk = b"z" * (1 << 20)
                        while self.sent < self.huge:
                            await stream.send(chunk)
                            self.sent += len(chunk)
                    else:
                        await stream.send(self.answer)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_stray_bytes_after_a_whole_reply_do_not_keep_the_call_waiting(backend: str) -> None:
    async def main() -> None:
        fake = FakeRedis(answer=b"+PONG\r\n?stray\r\n")
        async with anyio.create_task_group() as tg:
            await tg.start(fake.serve)
            url = f"redis://127.0.0.1:{fake.port}/0"
            async with RespRedis.from_url(url, timeout_s=CALL_TIMEOUT_S) as client:
                with anyio.fail_after(CALL_TIMEOUT_S / 2):
                    assert await client.ping() == "PONG"
                    # The connection went with the stray bytes; the next call opens another.
                    assert await client.ping() == "PONG"
            tg.cancel_scope.cancel()

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_200_mb_reply_closes_the_connection_at_the_bound(backend: str) -> None:
    async def main() -> None:
        fake = FakeRedis(huge=200 * 1000 * 1000)
        async with anyio.create_task_group() as tg:
            await tg.start(fake.serve)
            url = f"redis://127.0.0.1:{fake.port}/0"
            async with RespRedis.from_url(url, timeout_s=CALL_TIMEOUT_S) as client:
                with anyio.fail_after(CALL_TIMEOUT_S / 2), pytest.raises(ConnectionLost) as lost:
                    await client.get("k")
                assert "MAX_REPLY_BYTES" in str(lost.value)
            tg.cancel_scope.cancel()
        # The server got to send little more than the bound before the client closed (what
        # sits in the socket buffers on the way aside); never the whole reply.
        assert fake.sent < 200 * 1000 * 1000
        assert fake.sent >= MAX_REPLY_BYTES - READ_SIZE

    run(backend, main)
