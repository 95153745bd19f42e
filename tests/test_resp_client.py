"""The store's own Redis client (store.resp, store.redis_conn, store.resp_client): replies in
order, and never a second send, on asyncio (uvloop) and on trio, against a real redis-server.

The nemeses are a TCP proxy between the client and Redis: it loses a reply after Redis ran the
command (the connection drops), or holds it until the client gave up. Either way the script ran
exactly once and the client says "outcome unknown"; a late reply is never taken for another call.
"""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from store.api import Confirmation, StoreUnavailable
from store.notes import NoteStore
from store.redis_conn import Endpoint
from store.redis_errors import (
    ConnectionLost,
    NotSent,
    ReplicationError,
    ReplyTimeout,
    UnknownOutcome,
)
from store.resp import ProtocolError, ReplyError, RespCore, pack
from store.resp_client import RespRedis, endpoint_from_url
from tests.own_redis import OwnRedis, free_port, own_redis

BACKENDS = ["trio", "uvloop"]
COUNT_SCRIPT = "redis.call('INCR', KEYS[1]) return {ARGV[1], redis.call('GET', KEYS[1])}"
STALL_TIMEOUT_S = 5.0
"""The reply timeout of a client one of whose replies is held until it times out: every other
reply of that client must come within it, on a busy machine too (the held one times out
whatever its length)."""
"""Counts its runs in KEYS[1] and echoes ARGV[1]: how often it ran, and whose reply this is."""


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` on trio, or on asyncio with uvloop (the production loop)."""
    if backend == "trio":
        anyio.run(fn, backend="trio")
    else:
        anyio.run(fn, backend="asyncio", backend_options={"use_uvloop": True})


@pytest.fixture(scope="module")
def server() -> Iterator[OwnRedis]:
    with own_redis(None, unix_socket=True) as r:
        yield r


@pytest.fixture(params=["tcp", "unix"])
def over(request: pytest.FixtureRequest, server: OwnRedis) -> str:
    """The server's URL over TCP or over its Unix domain socket: a test that takes it runs on
    both (``tests/test_resp_unix.py`` holds what only a socket has)."""
    return server.url if request.param == "tcp" else server.unix_url


def with_db(url: str, db: int) -> str:
    """``url`` naming database ``db`` (a path over TCP, ``?db=`` on a socket)."""
    if url.startswith("unix://"):
        return f"{url}?db={db}"
    return f"{url.rsplit('/', 1)[0]}/{db}"


def with_credentials(url: str, userinfo: str) -> str:
    """``url`` with ``userinfo@`` after its scheme."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{userinfo}@{rest}"


@pytest.fixture
def key(server: OwnRedis) -> Iterator[str]:
    name = "resp-test:" + secrets.token_hex(6)
    yield name
    redis.Redis(port=server.port).delete(name)


def runs(server: OwnRedis, key: str) -> int:
    """How often the count script ran on ``key`` (read beside the client under test)."""
    value = redis.Redis(port=server.port).get(key)
    return 0 if value is None else int(value)


@dataclass
class Proxy:
    """A TCP proxy to Redis that can lose or hold the replies of the connections it carries.
    ``mode``: "pass", "drop" (read Redis' reply, then cut the client off without it) or
    "hold" (keep the reply until ``release`` is set)."""

    upstream: int
    mode: str = "pass"
    port: int = 0
    release: anyio.Event = field(default_factory=anyio.Event)
    replies_lost: int = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610
        task_status.started()
        await listener.serve(self._carry)

    async def _carry(self, client: anyio.abc.SocketStream) -> None:
        async with (
            client,
            await anyio.connect_tcp("127.0.0.1", self.upstream) as up,
            anyio.create_task_group() as tg,
        ):

            async def up_to_client() -> None:
                async for data in up:
                    if self.mode == "drop":
                        self.replies_lost += 1
                        break
                    if self.mode == "hold":
                        self.replies_lost += 1
                        await self.release.wait()
                        break
                    await client.send(data)
                tg.cancel_scope.cancel()

            async def client_to_up() -> None:
                try:
                    async for data in client:
                        await up.send(data)
                except (anyio.BrokenResourceError, OSError):
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(up_to_client)
            tg.start_soon(client_to_up)


# -- the sans-IO core ---------------------------------------------------------------------------


def test_replies_go_to_their_requests_in_order_whatever_the_chunking() -> None:
    wire = b"*1\r\n$1\r\na\r\n:7\r\n-NOSCRIPT No matching script\r\n:2\r\n+OK\r\n"
    for size in (1, 2, 3, 5, len(wire)):
        core: RespCore[str] = RespCore()
        core.request("first", (pack("EVALSHA", "x", 0), pack("WAIT", 1, 10)))
        core.request("second", (pack("EVALSHA", "y", 0), pack("WAIT", 1, 10)))
        core.request("third", (pack("PING"),))
        done: list[tuple[str, list[Any]]] = []
        for i in range(0, len(wire), size):
            done += core.receive(wire[i : i + size])
        assert [w for w, _ in done] == ["first", "second", "third"]
        assert done[0][1] == [["a"], 7]
        assert isinstance(done[1][1][0], ReplyError)
        assert done[1][1][0].code == "NOSCRIPT"
        assert done[1][1][1] == 2
        assert done[2][1] == ["OK"]
        assert core.pending == 0


def test_a_reply_nobody_asked_for_is_a_protocol_error() -> None:
    core: RespCore[str] = RespCore()
    with pytest.raises(ProtocolError):
        core.receive(b"+OK\r\n")


def test_garbage_is_a_protocol_error_and_abandon_returns_every_waiter() -> None:
    core: RespCore[str] = RespCore()
    core.request("a", (pack("PING"),))
    core.request("b", (pack("PING"),))
    with pytest.raises(ProtocolError):
        core.receive(b"?what\r\n")
    assert core.abandon() == ["a", "b"]
    assert core.pending == 0


def test_urls_give_address_database_credentials_and_tls() -> None:
    e = endpoint_from_url("rediss://u%40x:p%3Ass@h.example:6380/4?ssl_cert_reqs=none")
    assert (e.host, e.port, e.db, e.username, e.password) == ("h.example", 6380, 4, "u@x", "p:ss")
    assert e.ssl_context is not None
    assert not e.ssl_context.check_hostname
    plain = endpoint_from_url("redis://127.0.0.1/0")
    assert (plain.port, plain.db, plain.ssl_context, plain.password) == (6379, 0, None, None)
    with pytest.raises(ValueError, match="redis://, rediss:// and unix://"):
        endpoint_from_url("http://127.0.0.1:6379")


# -- against a real Redis -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_concurrent_calls_each_get_their_own_reply(
    backend: str, server: OwnRedis, over: str, key: str
) -> None:
    async def main() -> None:
        async with RespRedis.from_url(over) as client:
            script = client.register_script(COUNT_SCRIPT)
            got: dict[str, Any] = {}

            async def one(i: int) -> None:
                got[str(i)] = await script(keys=[key], args=[str(i)])

            async with anyio.create_task_group() as tg:
                for i in range(300):
                    tg.start_soon(one, i)
            assert {k: v[0] for k, v in got.items()} == {str(i): str(i) for i in range(300)}
            assert sorted(int(v[1]) for v in got.values()) == list(range(1, 301))
            assert client.statistics()["connections"] <= client.max_connections

    run(backend, main)
    assert runs(server, key) == 300


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reply_lost_after_the_script_ran_is_an_unknown_outcome_and_never_resent(
    backend: str, server: OwnRedis, key: str
) -> None:
    async def main() -> None:
        proxy = Proxy(server.port)
        async with anyio.create_task_group() as tg:
            await tg.start(proxy.serve)
            url = f"redis://127.0.0.1:{proxy.port}/0"
            async with RespRedis.from_url(url, max_connections=1) as client:
                script = client.register_script(COUNT_SCRIPT)
                assert await script(keys=[key], args=["warm"]) == ["warm", "1"]
                proxy.mode = "drop"
                with pytest.raises(ConnectionLost):
                    await script(keys=[key], args=["lost"])
                assert proxy.replies_lost == 1
                assert runs(server, key) == 2  # it ran; the client did not send it again
                proxy.mode = "pass"
                assert await script(keys=[key], args=["next"]) == ["next", "3"]
            tg.cancel_scope.cancel()

    run(backend, main)
    assert runs(server, key) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stalled_reply_times_out_and_is_never_taken_for_another_call(
    backend: str, server: OwnRedis, key: str
) -> None:
    async def main() -> None:
        proxy = Proxy(server.port)
        async with anyio.create_task_group() as tg:
            await tg.start(proxy.serve)
            url = f"redis://127.0.0.1:{proxy.port}/0"
            stalled = RespRedis.from_url(url, timeout_s=STALL_TIMEOUT_S, max_connections=1)
            async with stalled as client:
                script = client.register_script(COUNT_SCRIPT)
                await client.script_load(COUNT_SCRIPT)
                proxy.mode = "hold"
                with pytest.raises(ReplyTimeout):
                    await script(keys=[key], args=["stalled"])
                proxy.mode = "pass"
                proxy.release.set()  # the late reply now goes to a closed connection
                assert await script(keys=[key], args=["mine"]) == ["mine", "2"]
            tg.cancel_scope.cancel()

    run(backend, main)
    assert runs(server, key) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_noscript_sends_the_script_once_in_full_and_it_runs_once(
    backend: str, server: OwnRedis, over: str, key: str
) -> None:
    async def main() -> None:
        async with RespRedis.from_url(over) as client:
            script = client.register_script(COUNT_SCRIPT)
            await client.execute("SCRIPT", "FLUSH")
            assert await client.script_exists([script.sha]) == (False,)
            assert await script(keys=[key], args=["a"]) == ["a", "1"]
            assert await client.script_exists([script.sha]) == (True,)
            assert await script(keys=[key], args=["b"]) == ["b", "2"]

    run(backend, main)
    assert runs(server, key) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_error_reply_is_raised_as_it_is_and_the_connection_stays_usable(
    backend: str, server: OwnRedis
) -> None:
    async def main() -> None:
        async with RespRedis.from_url(server.url, max_connections=1) as client:
            script = client.register_script("return redis.error_reply('ERR planted')")
            with pytest.raises(ReplyError, match="planted"):
                await script()
            assert await client.ping() == "PONG"
            assert client.statistics()["connections"] == 1

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelled_callers_leave_the_others_their_own_replies(
    backend: str, server: OwnRedis, key: str
) -> None:
    async def main() -> None:
        async with RespRedis.from_url(server.url, max_connections=1) as client:
            script = client.register_script(COUNT_SCRIPT)
            got: dict[int, Any] = {}

            async def one(i: int) -> None:
                got[i] = await script(keys=[key], args=[str(i)])

            async with anyio.create_task_group() as outer:
                with anyio.CancelScope() as doomed:
                    async with anyio.create_task_group() as tg:
                        for i in range(0, 40, 2):
                            tg.start_soon(one, i)
                        for i in range(1, 40, 2):
                            outer.start_soon(one, i)
                        await anyio.lowlevel.checkpoint()
                        doomed.cancel()
            assert all(got[i][0] == str(i) for i in range(1, 40, 2))
            assert await script(keys=[key], args=["last"]) == ["last", str(runs(server, key))]

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_connections_are_named_and_select_the_database(
    backend: str, server: OwnRedis, over: str
) -> None:
    name = "nc-resp-" + secrets.token_hex(4)

    async def main() -> None:
        async with RespRedis.from_url(with_db(over, 3), client_name=name) as client:
            await client.ping()
            entries = redis.Redis(port=server.port).client_list()
            mine = [e for e in entries if e.get("name") == name]
            assert len(mine) == 1
            assert str(mine[0]["db"]) == "3"
            # Redis' flag for a client on a Unix domain socket.
            assert ("U" in mine[0]["flags"]) == over.startswith("unix://")

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_auth_is_sent_in_each_form_and_a_wrong_password_is_refused(
    backend: str, transport: str
) -> None:
    with own_redis(None, unix_socket=True) as server:
        redis.Redis(port=server.port).config_set("requirepass", "demo-password")
        base = server.url if transport == "tcp" else server.unix_url
        query = "&" if "?" in base else "?"

        async def main() -> None:
            for good in (
                with_credentials(base, ":demo-password"),
                with_credentials(base, "default:demo-password"),
                f"{base}{query}password=demo-password",
                f"{base}{query}username=default&password=demo-password&db=1",
            ):
                async with RespRedis.from_url(good) as client:
                    assert await client.ping() == "PONG", good
            for bad in (with_credentials(base, ":wrong"), base):
                async with RespRedis.from_url(bad) as client:
                    with pytest.raises(ReplyError, match=r"WRONGPASS|NOAUTH|invalid"):
                        await client.ping()

        run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nothing_listening_is_not_sent(backend: str) -> None:
    async def main() -> None:
        url = f"redis://127.0.0.1:{free_port()}/0"
        async with RespRedis.from_url(url, timeout_s=1.0) as client:
            with pytest.raises(NotSent):
                await client.ping()

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_waiting_to_connect_when_the_client_closes_is_not_sent(
    backend: str, server: OwnRedis
) -> None:
    """A call queued behind another call's connect while the client closes (a run stopped by
    SIGTERM closes its store under flows still calling) is told ``NotSent``; it used to go on
    and find the task group gone (an ``AssertionError`` on trio, seen in a failover run)."""

    async def main() -> None:
        client = RespRedis.from_url(server.url, timeout_s=5.0)
        outcome: list[object] = []

        async def call() -> None:
            try:
                await client.ping()
                outcome.append("answered")
            except NotSent as exc:
                outcome.append(str(exc))

        async with anyio.create_task_group() as tg:
            # The readers' group is the test's own (on trio), so closing nests as in a node.
            client.start(tg if backend == "trio" else None)
            lock = client._connecting
            assert lock is not None
            await lock.acquire()  # another call's connect is under way
            tg.start_soon(call)
            await anyio.wait_all_tasks_blocked()
            await client.aclose()
            lock.release()
        assert outcome == ["the client is closed"]

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wait_goes_on_the_scripts_connection_and_too_few_replicas_is_unknown(
    backend: str, server: OwnRedis, key: str
) -> None:
    async def main() -> None:
        async with RespRedis.from_url(server.url) as client:
            script = client.register_script(COUNT_SCRIPT)
            with client.ensure_replication(1, 20), pytest.raises(ReplicationError) as caught:
                await script(keys=[key], args=["w"])
            assert isinstance(caught.value, UnknownOutcome)
            assert caught.value.acknowledged == 0

    run(backend, main)
    assert runs(server, key) == 1  # it ran on the master, once


def test_wait_passes_with_a_replica(server: OwnRedis, key: str) -> None:
    with own_redis(None, "--replicaof", "127.0.0.1", str(server.port)) as replica:
        # The replica's link to its master is up (polled with a deadline, no sleep as sync).
        probe = redis.Redis(port=replica.port)
        with _deadline(30) as expired:
            while probe.info("replication").get("master_link_status") != "up":
                expired()
                time.sleep(0.05)

        async def main() -> None:
            async with RespRedis.from_url(server.url) as client:
                script = client.register_script(COUNT_SCRIPT)
                with client.ensure_replication(1, 5_000):
                    assert (await script(keys=[key], args=["r"]))[0] == "r"

        run("trio", main)
        run("uvloop", main)
        assert int(probe.get(key) or 0) == 2


class _deadline:
    """``with _deadline(s) as expired: ... expired()`` raises once ``s`` seconds have passed."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds
        self._now = time.monotonic

    def __enter__(self) -> Callable[[], None]:
        def expired() -> None:
            if self._now() > self._end:
                raise TimeoutError("deadline passed")

        return expired

    def __exit__(self, *exc: object) -> None:
        return None


# -- the note store on this client --------------------------------------------------------------

WS = "file:///Users/alice/Documents/Notes"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_note_store_confirms_once_on_this_client_and_a_lost_reply_is_store_unavailable(
    backend: str, server: OwnRedis
) -> None:
    prefix = "ncr" + secrets.token_hex(4)

    async def main() -> None:
        proxy = Proxy(server.port)
        async with anyio.create_task_group() as tg:
            await tg.start(proxy.serve)
            url = f"redis://127.0.0.1:{proxy.port}/0"
            async with RespRedis.from_url(url, max_connections=1) as client:
                store = NoteStore(client, prefix=prefix)
                await store.check_ready()  # scripts cached: the lost reply is the script's own
                note = await store.create("acme", WS, "TPS report", "body", "alice")
                snap = await store.find("acme", WS, "TPS report")
                c = Confirmation(
                    tenant="acme",
                    nonce="n" * 22,
                    action="accept",
                    answer_digest="d1",
                    exp_ms=snap.redis_now_ms + 10_000,
                    note_id=note.note_id,
                    expected_version=1,
                    title="TPS report",
                    workspace=WS,
                    principal="alice",
                    tool="notes_delete",
                )
                proxy.mode = "drop"
                with pytest.raises(StoreUnavailable):
                    await store.confirm(c)
                proxy.mode = "pass"
                again = await store.confirm(c)  # the client's retry learns the outcome
                assert again.status == "replay"
                assert (again.op, again.note_id) == ("delete", note.note_id)
                assert store.statistics().unavailable == 1
            tg.cancel_scope.cancel()

    run(backend, main)
    r = redis.Redis(port=server.port)
    deletes = [e for _, e in r.xrange(f"{prefix}:{{t:acme}}:journal") if e[b"op"] == b"delete"]
    assert len(deletes) == 1
    for k in r.scan_iter(match=f"{prefix}:*"):
        r.delete(k)


def test_an_endpoint_without_credentials_sends_no_handshake() -> None:
    assert Endpoint("h", 1).handshake() == ()
    assert len(Endpoint("h", 1, db=2, password="p", client_name="n").handshake()) == 3


# -- TLS (rediss://) ----------------------------------------------------------------------------


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and its key (a test fixture, not a secret)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def tls_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A redis-server speaking TLS only, on a free port; stopped by pid."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = _self_signed(directory)
    port = free_port()
    with own_redis(
        directory,
        "--tls-port", str(port),
        "--tls-cert-file", str(cert),
        "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(cert),
        "--tls-auth-clients", "no",
    ):  # fmt: skip
        yield port


@pytest.mark.parametrize("backend", BACKENDS)
def test_rediss_speaks_tls_and_verification_refuses_an_unknown_certificate(
    backend: str, tls_port: int
) -> None:
    async def main() -> None:
        url = f"rediss://127.0.0.1:{tls_port}/0"
        async with RespRedis.from_url(url + "?ssl_cert_reqs=none") as client:
            assert await client.ping() == "PONG"
            assert await client.execute("SET", "resp-tls", "x") == "OK"
            assert await client.get("resp-tls") == "x"
            await client.execute("DEL", "resp-tls")
        async with RespRedis.from_url(url, timeout_s=2.0) as strict:
            with pytest.raises(NotSent):
                await strict.ping()

    run(backend, main)
