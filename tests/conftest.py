"""Shared fixtures: every store-touching test runs on the embedded store and on a real Redis.

The real Redis is ``NOTES_CLUSTER_TEST_REDIS`` (default ``redis://127.0.0.1:6379/9``); each test
uses a key prefix of its own and deletes its keys afterwards. Under CI (``CI=true``) a missing
real Redis fails the run; elsewhere those parameters are skipped.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from store.client import redis_client, sync_client
from store.embedded import serve_embedded_redis
from store.journal import scan_keys
from store.notes import NoteStore

REAL_REDIS_URL = os.environ.get("NOTES_CLUSTER_TEST_REDIS", "redis://127.0.0.1:6379/9")


def real_redis_answers(url: str = REAL_REDIS_URL) -> bool:
    """True when a real Redis answers PING at ``url``."""
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def require_real_redis(url: str = REAL_REDIS_URL) -> str:
    """Return ``url`` if a real Redis answers there; fail under CI, skip elsewhere."""
    if real_redis_answers(url):
        return url
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a real Redis at {url}, and none answers")
    pytest.skip(f"no real Redis at {url}")


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
    prefix = "nct" + secrets.token_hex(5)
    yield prefix
    sync = sync_client(redis_url)  # a cluster client on a cluster: SCAN every master
    keys = list(scan_keys(sync, f"{prefix}:*"))
    if keys:
        sync.delete(*keys)
    sync.close()


@pytest.fixture
async def store(redis_url: str, key_prefix: str) -> AsyncIterator[NoteStore]:
    """A NoteStore on the store under test, with a short replay grace for expiry tests."""
    client = redis_client(redis_url)
    async with client:
        yield NoteStore(client, prefix=key_prefix, replay_grace_ms=1_000)
