"""Where the benchmarks keep their data: a Redis of their own, or a user's database they own alone.

Layer: cluster (the bench). By default ``bench`` and the lab's ``bench-servers`` and ``bench-
parts`` start a ``redis-server`` of their own (``cluster.redis_server``) and may empty it at will.
Given ``--redis URL``, that database is a user's: the bench refuses it when it holds any key the
bench did not write (every key the bench writes starts with ``BENCH_PREFIX``), and between and
after points deletes only keys under ``BENCH_PREFIX``, never FLUSHDB.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import coredis
import redis
from coredis.tokens import PureToken

from cluster.redis_server import local_redis_server
from store.journal import SCAN_COUNT

BENCH_PREFIX = "ncbench"
"""The key prefix of every store the benchmarks run (nodes, the SDK peer in Redis, the steady
state's simulation: ``ncbench...``): the keys they may delete on a user's Redis."""

EXAMPLES_NAMED = 3
"""How many foreign keys the refusal names."""

DELETE_BATCH = 1_000


class ForeignKeys(Exception):
    """The database given to a benchmark holds keys it did not write."""


@dataclass(frozen=True)
class BenchRedis:
    """The Redis a benchmark runs on: its URL, and whether the benchmark started it (then it may
    flush it; otherwise it deletes only its own keys)."""

    url: str
    own: bool


def foreign_keys(url: str) -> tuple[int, list[str]]:
    """How many keys of the database at ``url`` do not start with ``BENCH_PREFIX``, and a few of
    them by name."""
    count = 0
    named: list[str] = []
    with redis.Redis.from_url(url, socket_timeout=10, decode_responses=True) as client:
        for key in client.scan_iter(count=SCAN_COUNT):
            if not key.startswith(BENCH_PREFIX):
                count += 1
                if len(named) < EXAMPLES_NAMED:
                    named.append(key)
    return count, named


def refuse_foreign(url: str) -> None:
    """Raise ``ForeignKeys`` (one line: what, and what to do) when the database at ``url`` holds
    keys the benchmark did not write."""
    count, named = foreign_keys(url)
    if count:
        shown = ", ".join(repr(k) for k in named) + (", ..." if count > len(named) else "")
        raise ForeignKeys(
            f"--redis {url}: the database holds {count} key(s) the bench did not write "
            f"({shown}); give it an empty database, or leave out --redis and the bench starts "
            "a Redis of its own"
        )


@contextlib.contextmanager
def bench_redis(url: str | None) -> Iterator[BenchRedis]:
    """The benchmark's Redis: a ``redis-server`` of its own when ``url`` is None, else ``url``
    once it is known to hold no foreign keys."""
    if url is None:
        with local_redis_server() as server:
            yield BenchRedis(server.url, own=True)
        return
    refuse_foreign(url)
    yield BenchRedis(url, own=False)


async def clear(client: coredis.Redis[str], where: BenchRedis) -> None:
    """Remove what the benchmark stored: FLUSHDB ASYNC on its own server (a million notes vanish
    at once, freed in the background); on a user's database, UNLINK the keys under
    ``BENCH_PREFIX`` and nothing else."""
    if where.own:
        await client.flushdb(PureToken.ASYNC)
        return
    keys = client.scan_iter(match=f"{BENCH_PREFIX}*", count=SCAN_COUNT)
    batch: list[str] = []
    async for key in keys:
        batch.append(key)
        if len(batch) >= DELETE_BATCH:
            await client.unlink(batch)
            batch = []
    if batch:
        await client.unlink(batch)


SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
"""The commands that run a script: a store's round trips are mostly these. Commands a script
calls inside Redis count in ``INFO commandstats`` too, so the bench counts scripts, not all
commands."""


async def scripts_run(client: coredis.Redis[str]) -> int:
    """Scripts this Redis server has run since it started (every client, every database)."""
    stats = await client.info("commandstats")
    total = 0
    for name in SCRIPT_COMMANDS:
        row = stats.get(f"cmdstat_{name}")
        if isinstance(row, dict):
            total += int(row.get("calls", 0))
    return total
