"""Shared fixtures: every store-touching test runs on the embedded store and on a real Redis.

Which real Redis, and what the suite may do to it:

- ``NOTES_CLUSTER_TEST_REDIS`` unset (the default): the suite starts a ``redis-server`` of its own
  on a free loopback port for the session (``suite_redis_url``) and stops it at the end. Tests
  that must flush, fill, kill or pause a server start one more of their own
  (``tests/own_redis.py``). The Redis at ``127.0.0.1:6379`` is never contacted.
- ``NOTES_CLUSTER_TEST_REDIS=redis://host:port/db``: that server is a user's Redis that holds data
  ("prefix mode"). The store tests run there, every key under a prefix that starts with this
  session's own root (``SESSION_ROOT``), and delete only their own keys. Nothing the suite runs
  sends FLUSHDB or FLUSHALL to it: ``.ci/run`` checks that with ``INFO commandstats``.

At the end of the session any key of the suite's own making that is still there without a TTL
(on its own server: any key; on the user's: any key under ``SESSION_ROOT``) fails the run by name;
on the user's Redis such leftovers are then deleted. Under CI (any non-empty ``CI``) a missing real
Redis or ``redis-server`` fails the run; elsewhere those parameters are skipped.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
from collections.abc import AsyncIterator, Iterator

import coredis
import pytest
import redis

from store.client_factory import redis_client, sync_client
from store.embedded import serve_embedded_redis
from store.journal import scan_keys
from store.notes import NoteStore
from store.resp_client import RespRedis
from tests.ci import fail_in_ci_else_skip
from tests.own_redis import OwnRedis, own_redis

TEST_REDIS_ENV = "NOTES_CLUSTER_TEST_REDIS"
"""The user's Redis the store tests may use in prefix mode; unset: a server of the suite's own."""

USER_REDIS_URL: str | None = os.environ.get(TEST_REDIS_ENV) or None

SESSION_ROOT = "nct" + secrets.token_hex(4)
"""The start of every key prefix this session hands out: two runs of the suite on one Redis
(two checkouts, CI beside a developer) never touch each other's keys."""

_prefix_numbers = itertools.count()
_session_servers = contextlib.ExitStack()
_suite_server: list[OwnRedis] = []

LEFTOVERS_LISTED = 20
"""How many leftover keys the end-of-session check names."""


def new_prefix() -> str:
    """A key prefix no other test of any run uses (it starts with ``SESSION_ROOT``)."""
    return f"{SESSION_ROOT}x{next(_prefix_numbers)}"


def real_redis_answers(url: str) -> bool:
    """True when a real Redis answers PING at ``url``."""
    try:
        with redis.Redis.from_url(url, socket_timeout=1) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def suite_redis_url() -> str:
    """The ``redis-server`` of the suite's own for this session (started on first use, stopped at
    the session's end). Shared by the tests that ask for it, so never flushed: tests keep to
    their prefixes here too. Skipped (failed under CI) when ``redis-server`` is not installed."""
    if not _suite_server:
        _suite_server.append(_session_servers.enter_context(own_redis(None)))
    return _suite_server[0].url


def require_real_redis() -> str:
    """The real Redis of the store tests: the user's (``NOTES_CLUSTER_TEST_REDIS``, prefix mode)
    when given, else the suite's own server. Fails under CI, skips elsewhere, when the user's
    Redis does not answer."""
    if USER_REDIS_URL is None:
        return suite_redis_url()
    if not real_redis_answers(USER_REDIS_URL):
        fail_in_ci_else_skip(f"a real Redis at {USER_REDIS_URL} ({TEST_REDIS_ENV}); none answers")
    return USER_REDIS_URL


def delete_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` (and only those) at ``url``."""
    sync = sync_client(url)  # a cluster client on a cluster: SCAN every master
    try:
        keys = list(scan_keys(sync, f"{prefix}:*"))
        if keys:
            sync.delete(*keys)
    finally:
        sync.close()


def keys_without_ttl(url: str, match: str) -> list[str]:
    """Keys matching the glob ``match`` at ``url`` that would live for ever."""
    with redis.Redis.from_url(url, socket_timeout=5, decode_responses=True) as client:
        return [k for k in client.scan_iter(match=match, count=1000) if client.ttl(k) == -1]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run on keys the suite left without a TTL, then stop the suite's own server."""
    leftovers: list[str] = []
    try:
        if _suite_server:
            leftovers += keys_without_ttl(_suite_server[0].url, "*")
        if USER_REDIS_URL is not None and real_redis_answers(USER_REDIS_URL):
            mine = keys_without_ttl(USER_REDIS_URL, f"{SESSION_ROOT}*")
            leftovers += mine
            with redis.Redis.from_url(USER_REDIS_URL, socket_timeout=5) as client:
                for key in mine:
                    client.delete(key)
    finally:
        _session_servers.close()
    if leftovers:
        shown = ", ".join(sorted(leftovers)[:LEFTOVERS_LISTED])
        print(f"\nthe suite left {len(leftovers)} key(s) without a TTL: {shown}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def embedded_url() -> Iterator[str]:
    """One embedded Redis for the whole session (tests separate themselves by key prefix)."""
    with serve_embedded_redis() as url:
        yield url


@pytest.fixture(params=["embedded", "redis"])
def redis_url(request: pytest.FixtureRequest, embedded_url: str) -> str:
    """The URL of the store under test: the embedded one, then the real one."""
    if request.param == "embedded":
        return embedded_url
    return require_real_redis()


@pytest.fixture
def key_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    prefix = new_prefix()
    yield prefix
    delete_prefix(redis_url, prefix)


RawClient = coredis.Redis[str] | coredis.RedisCluster[str]

_RAW: dict[int, RawClient] = {}


def raw(store: NoteStore) -> RawClient:
    """A coredis client on the server of ``store`` (a ``store`` fixture's): for the raw reads
    a test makes beside the store (HGETALL, XRANGE, SCAN), and for the legacy sessions, which
    stay on coredis whatever client the note store uses. A store a test made itself on
    coredis: its own client."""
    found = _RAW.get(id(store))
    if found is not None:
        return found
    if isinstance(store.client, coredis.Redis | coredis.RedisCluster):
        return store.client
    raise LookupError("raw(): not a store fixture's store, nor a store on coredis")


@contextlib.contextmanager
def beside(store: NoteStore, client: RawClient) -> Iterator[NoteStore]:
    """``store``, with ``client`` as its ``raw(store)`` while the block runs."""
    _RAW[id(store)] = client
    try:
        yield store
    finally:
        del _RAW[id(store)]


@pytest.fixture(params=["resp", "coredis"])
def note_client_kind(request: pytest.FixtureRequest) -> str:
    """The Redis client under test: the store's own (the default), then coredis."""
    return str(request.param)


@pytest.fixture
async def store(redis_url: str, key_prefix: str, note_client_kind: str) -> AsyncIterator[NoteStore]:
    """A NoteStore on the store under test, with a short replay grace for expiry tests, on
    each Redis client (``note_client_kind``); ``raw(store)`` is a coredis client beside it."""
    async with redis_client(redis_url) as coredis_client:
        if note_client_kind == "resp":
            async with RespRedis.from_url(redis_url) as own:
                with beside(
                    NoteStore(own, prefix=key_prefix, replay_grace_ms=1_000), coredis_client
                ) as s:
                    yield s
            return
        notes = NoteStore(coredis_client, prefix=key_prefix, replay_grace_ms=1_000)
        with beside(notes, coredis_client) as s:
            yield s
