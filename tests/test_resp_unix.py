"""The store's own Redis client over a Unix domain socket (``unix:///PATH``), on trio and on
asyncio (uvloop), against a real redis-server listening on a socket of its own.

What only a socket has; the rules both share (replies in order, NOSCRIPT sent once in full,
the handshake on every connection, AUTH in each URL form) run over TCP and over a socket in
``tests/test_resp_client.py``. Here: unix URLs, a socket nobody listens on is ``NotSent``, a
server killed under a call is ``ConnectionLost`` and the call is never sent again, and
``open_note_client`` runs a ``unix://`` store URL on this client, not coredis.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import anyio
import coredis
import pytest
import redis

from store.client_factory import (
    CLIENT_ENV,
    check_redis_url,
    is_cluster,
    open_note_client,
    open_redis,
    sync_client,
)
from store.notes import NoteStore
from store.redis_errors import ConnectionLost, NotSent
from store.resp import ReplyError
from store.resp_client import RespRedis, endpoint_from_url
from store.resp_cluster import RespCluster
from tests.own_redis import OwnRedis, own_redis, short_folder
from tests.test_resp_client import BACKENDS, run
from tests.test_store_smoke import delete_once


@pytest.fixture(scope="module")
def server() -> Iterator[OwnRedis]:
    with own_redis(None, unix_socket=True) as r:
        yield r


def runs(port: int, key: str) -> int:
    """How often a count script ran on ``key`` (read over TCP, beside the client under test)."""
    value = redis.Redis(port=port).get(key)
    return 0 if value is None else int(value)


# -- URLs ---------------------------------------------------------------------------------------


def test_unix_urls_give_the_socket_database_and_credentials_in_either_form() -> None:
    e = endpoint_from_url("unix:///run/redis/r%20x.sock?db=4&password=p%3As")
    assert (e.unix_path, e.db, e.username, e.password) == ("/run/redis/r x.sock", 4, None, "p:s")
    assert e.ssl_context is None
    assert e.where == "unix:/run/redis/r x.sock"
    at = endpoint_from_url("unix://u%40x:pw@/run/redis/r.sock?db=2")
    assert (at.unix_path, at.db, at.username, at.password) == ("/run/redis/r.sock", 2, "u@x", "pw")
    query = endpoint_from_url("unix:///run/redis/r.sock?username=bob&password=pw")
    assert (query.username, query.password, query.db) == ("bob", "pw", 0)
    # As coredis and redis-py read them: the userinfo's credentials win over the query's.
    both = endpoint_from_url("unix://:mine@/run/redis/r.sock?password=theirs")
    assert both.password == "mine"
    # The same query forms on redis://, and the query's database before the path's.
    tcp = endpoint_from_url("redis://127.0.0.1:6380/1?db=5&password=pw")
    assert (tcp.unix_path, tcp.port, tcp.db, tcp.password) == (None, 6380, 5, "pw")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("unix:///run/redis/r.sock?ssl_cert_reqs=none", "no TLS"),
        ("unix://run/redis/r.sock", "unix:///PATH"),
        ("unix://", "unix:///PATH"),
        ("unix:///run/redis/r.sock?db=two", "must be a number"),
        ("redis://127.0.0.1:6379/0?db=x", "must be a number"),
    ],
)
def test_a_unix_url_the_client_cannot_honour_is_refused_before_connecting(
    url: str, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        endpoint_from_url(url)


def test_a_unix_url_is_never_a_redis_cluster() -> None:
    with pytest.raises(ValueError, match="over TCP"):
        RespCluster.from_url("unix:///run/redis/r.sock")
    assert anyio.run(is_cluster, "unix:///nowhere/r.sock") is False  # not even asked
    with pytest.raises(ValueError, match="unix:///PATH"):
        check_redis_url("unix://localhost/run/redis/r.sock")


# -- against a real Redis on its socket ---------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_or_refusing_socket_is_not_sent_within_the_timeout(backend: str) -> None:
    timeout_s = 60.0  # far past a refused connect's time, however busy the machine
    with short_folder() as folder:
        # A socket file nobody listens on: bound, never listening, so a connect is refused.
        refusing = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        refusing.bind(str(folder / "refusing.sock"))

        async def main() -> None:
            for path in (folder / "missing.sock", folder / "refusing.sock"):
                async with RespRedis.from_url(f"unix://{path}", timeout_s=timeout_s) as client:
                    started = time.monotonic()
                    with pytest.raises(NotSent, match=f"unix:{path}"):
                        await client.ping()
                    assert time.monotonic() - started < timeout_s

        try:
            run(backend, main)
        finally:
            refusing.close()


SPIN_SCRIPT = """
redis.call('INCR', KEYS[1])
if ARGV[1] == 'spin' then
  local stop = tonumber(redis.call('TIME')[1]) + 3
  while tonumber(redis.call('TIME')[1]) < stop do end
end
return {ARGV[1], redis.call('GET', KEYS[1])}
"""
"""The count script, made to run for up to 3 s when asked (``spin``): time to kill its server."""

DURABLE = ("--appendonly", "yes", "--appendfsync", "always", "--busy-reply-threshold", "50")
"""Every write on disk before its reply (a restart keeps it); a script running past 50 ms makes
the server answer others ``BUSY``, which tells the test the call is under way."""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_server_killed_under_a_call_is_connection_lost_and_the_call_never_sent_again(
    backend: str, tmp_path: Path
) -> None:
    """Killed while the script runs: the caller learns ``ConnectionLost`` at once (not a
    timeout), a connect while the server is down is refused (``NotSent``), and once the server
    is back on its data the next call opens a fresh connection and sends only itself: the
    count is the warm call's and the next one's, so the lost call ran at most once (a script
    killed before its end writes nothing) and was never replayed."""
    key = "resp-unix-kill:" + secrets.token_hex(6)
    with short_folder() as folder, ExitStack() as stack:
        path = folder / "redis.sock"
        first = stack.enter_context(own_redis(tmp_path, *DURABLE, unix_socket=path))
        restarted: list[OwnRedis] = []

        async def main() -> None:
            async with (
                RespRedis.from_url(f"unix://{path}", timeout_s=30.0, max_connections=1) as client,
                RespRedis.from_url(first.url, timeout_s=5.0) as probe,
            ):
                script = client.register_script(SPIN_SCRIPT)
                assert await script(keys=[key], args=["warm"]) == ["warm", "1"]
                outcome: list[BaseException] = []

                async def doomed() -> None:
                    try:
                        await script(keys=[key], args=["spin"])
                    except ConnectionLost as exc:
                        outcome.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(doomed)
                    busy = ""
                    while not busy:  # until the script runs (the server answers others BUSY)
                        try:
                            await probe.ping()
                        except ReplyError as exc:
                            busy = exc.code
                        await anyio.sleep(0.01)
                    assert busy == "BUSY"
                    killed_at = time.monotonic()
                    os.kill(first.proc.pid, signal.SIGKILL)
                assert len(outcome) == 1, outcome
                # Told when the connection drops, not at the reply timeout (30 s).
                assert time.monotonic() - killed_at < 15.0
                assert first.proc.wait(timeout=10) == -signal.SIGKILL
                assert path.exists()  # a killed server leaves its socket file: refused
                with pytest.raises(NotSent):
                    await client.ping()
                restarted.append(
                    stack.enter_context(
                        own_redis(tmp_path, *DURABLE, unix_socket=path, port=first.port)
                    )
                )
                assert await script(keys=[key], args=["next"]) == ["next", "2"]

        run(backend, main)
        assert runs(restarted[0].port, key) == 2


# -- the note store on a unix:// URL ------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["resp", "coredis"])
def test_a_delete_flow_on_a_unix_store_url_runs_on_the_stores_own_client(
    backend: str, kind: str, server: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default (``resp``) a ``unix://`` URL gets ``RespRedis``; coredis only when chosen
    (and coredis' paths, its cluster probe included, take the URL too)."""
    if kind == "resp":
        monkeypatch.delenv(CLIENT_ENV, raising=False)
    else:
        monkeypatch.setenv(CLIENT_ENV, kind)
    prefix = "ncu" + secrets.token_hex(4)
    url = server.unix_url + "?db=2"

    async def main() -> None:
        async with open_note_client(url, client_name="unix-store") as client:
            if kind == "resp":
                assert type(client) is RespRedis
                assert client.endpoint.unix_path == str(server.unix_path)
            else:
                assert isinstance(client, coredis.Redis)
            store = NoteStore(client, prefix=prefix)
            await store.check_ready()
            note_id = await delete_once(store, nonce="u" * 22)
            assert await store.get("acme", note_id) is None

    run(backend, main)
    r = redis.Redis(port=server.port, db=2)
    deletes = [e for _, e in r.xrange(f"{prefix}:{{t:acme}}:journal") if e[b"op"] == b"delete"]
    assert len(deletes) == 1
    for k in r.scan_iter(match=f"{prefix}:*"):
        r.delete(k)


def test_the_start_up_and_tooling_paths_take_a_unix_url(server: OwnRedis) -> None:
    """coredis' ``open_redis`` (the legacy sessions, the start-up checks) and the sync tooling
    on a ``unix://`` URL: they once stripped its path with the database and reached nothing."""
    url = server.unix_url + "?db=2"

    async def main() -> None:
        async with open_redis(url) as client:
            assert await client.ping() == "PONG"
            info = await client.client_info()
            assert str(info["db"]) == "2"

    run("uvloop", main)
    tooling = sync_client(url)
    try:
        assert tooling.ping()
        assert tooling.connection_pool.connection_kwargs["db"] == 2
    finally:
        tooling.close()
