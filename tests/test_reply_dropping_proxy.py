"""The reply-dropping proxy pairs replies with commands and loses exactly the ones picked.

Layer: tests. ``cluster.reply_dropping_proxy``: RESP framing (RESP2 and RESP3, split anywhere),
the pick rules, and both ways of losing a reply (``close``: the client's connection drops;
``stall``: that connection goes silent, the client times out), against the embedded store, so
these run without a server. Its use against a real Redis is ``tests/test_lost_replies.py``.
"""

from __future__ import annotations

import coredis
import coredis.exceptions
import pytest
import trio

from cluster.reply_dropping_proxy import (
    RespError,
    command_at,
    frame_end,
    open_reply_dropping_proxy,
)
from tests.test_resp_client import STALL_TIMEOUT_S

FRAMES: list[bytes] = [
    b"+OK\r\n",
    b"-ERR no\r\n",
    b":42\r\n",
    b"$5\r\nhello\r\n",
    b"$-1\r\n",
    b"$0\r\n\r\n",
    b"*2\r\n$1\r\na\r\n:1\r\n",
    b"*-1\r\n",
    b"*0\r\n",
    b"%1\r\n+k\r\n*1\r\n:2\r\n",
    b"~2\r\n+a\r\n+b\r\n",
    b"_\r\n",
    b",1.5\r\n",
    b"#t\r\n",
    b"(12345678901234567890\r\n",
    b"!3\r\nbad\r\n",
    b"=8\r\ntxt:abcd\r\n",
    b"|1\r\n+ttl\r\n:3\r\n+value\r\n",
    b">2\r\n+invalidate\r\n*0\r\n",
    b"$6\r\na\r\nb\r\n\r\n",
]


@pytest.mark.parametrize("frame", FRAMES)
def test_every_resp_frame_ends_where_it_ends_and_no_prefix_of_it_is_complete(frame: bytes) -> None:
    after = b"+NEXT\r\n"
    assert frame_end(frame + after, 0) == len(frame)
    for cut in range(len(frame)):
        assert frame_end(frame[:cut], 0) is None, cut


def test_a_command_is_read_with_its_arguments_and_only_once_complete() -> None:
    cmd = b"*3\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n0\r\n"
    assert command_at(cmd, 0) == (len(cmd), [b"EVALSHA", b"abc", b"0"])
    assert all(command_at(cmd[:cut], 0) is None for cut in range(len(cmd)))
    assert command_at(b"PING\r\n", 0) == (6, [b"PING"])
    with pytest.raises(RespError):
        frame_end(b"?what\r\n", 0)


async def test_the_picked_reply_is_lost_and_every_other_reply_reaches_its_command(
    embedded_url: str,
) -> None:
    port = int(embedded_url.rsplit(":", 1)[1].split("/")[0])
    async with open_reply_dropping_proxy("127.0.0.1", port) as proxy:
        client: coredis.Redis[str] = coredis.Redis.from_url(
            proxy.url(0),
            decode_responses=True,
            retry_policy=coredis.retry.NoRetryPolicy(),
            stream_timeout=STALL_TIMEOUT_S,
        )
        async with client:
            key = "proxy-test-" + str(proxy.port)
            proxy.drop_next(1, ("INCR",), matching=lambda args: args[1] == key.encode())
            assert await client.set("other", "x")
            with pytest.raises(coredis.exceptions.ConnectionError):
                await client.incr(key)
            assert proxy.statistics().dropped == 1
            # Redis ran it: the lost reply's effect is there, and later replies pass again.
            assert await client.get(key) == "1"
            assert await client.incr(key) == 2
            proxy.drop_next(1, ("GET",), mode="stall")
            with pytest.raises(TimeoutError):
                await client.get(key)
            await proxy.wait_dropped(2)
            # The silent connection is cut by the next command, which never reaches Redis.
            with pytest.raises(coredis.exceptions.ConnectionError):
                await client.set(key, "never")
            assert await client.get(key) == "2"  # on a fresh connection
            await client.delete([key, "other"])
        stats = proxy.statistics()
        assert stats.dropped == 2
        assert stats.connections >= 2


async def test_drop_rules_count_down_and_stop_dropping_forgets_them(embedded_url: str) -> None:
    port = int(embedded_url.rsplit(":", 1)[1].split("/")[0])
    async with open_reply_dropping_proxy("127.0.0.1", port) as proxy:
        client: coredis.Redis[str] = coredis.Redis.from_url(
            proxy.url(0), decode_responses=True, retry_policy=coredis.retry.NoRetryPolicy()
        )
        async with client:
            proxy.drop_next(2, ("ECHO",))
            for _ in range(2):
                with pytest.raises(coredis.exceptions.ConnectionError):
                    await client.echo("x")
            assert await client.echo("y") == "y"
            proxy.drop_next(5, ("ECHO",))
            proxy.stop_dropping()
            with trio.fail_after(10):
                assert await client.echo("z") == "z"
        assert proxy.statistics().dropped == 2
