"""Which store a cluster runs on: a given Redis, or an embedded one; and its demo notes.

Layer: cluster. Shared by the in-process clusters (``cluster.local``) and the HTTP ones
(``cluster.serve``); imports no load generator, so ``serve`` does not either.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from nodes.serving.demo import DEMO_NOTES, DEMO_TENANT
from store.notes import NoteStore


@contextmanager
def store_url(redis_url: str | None) -> Iterator[tuple[str, bool]]:
    """Yield ``(url, embedded)``: the given Redis, or an embedded one started for the context."""
    if redis_url is not None:
        yield redis_url, False
        return
    # Imported here: the embedded store (fakeredis) is an extra that a node's install may lack.
    from store.embedded import serve_embedded_redis

    with serve_embedded_redis() as url:
        yield url, True


async def seed_demo(store: NoteStore, *, only_missing: bool = False) -> int:
    """Create the demo notes (see ``nodes.serving.demo``); return how many were created.

    ``only_missing`` (a store that outlives the command, ``serve --demo --redis URL``): create
    only the demo notes the store does not hold, a demo note being there when a note of its
    workspace and title exists with its creation date (any date, for the notes dated at
    seeding). Starting twice then leaves one fixture, and a demo note a walkthrough deleted comes
    back. A fresh store (embedded, a simulation's own prefix) skips the reads."""
    created = 0
    for n in DEMO_NOTES:
        if only_missing:
            there = (await store.find(DEMO_TENANT, n.workspace, n.title)).notes
            if any(n.created_ms in (0, head.created_ms) for head in there):
                continue
        await store.create(DEMO_TENANT, n.workspace, n.title, n.body, n.owner, n.created_ms)
        created += 1
    return created


def demo_removal_hint(redis_url: str, prefix: str) -> str:
    """The line ``serve --demo --redis`` prints: where the demo fixture lives and how to remove
    it (the demo tenant's keys only; never a FLUSHDB)."""
    pattern = f"{prefix}:{{t:{DEMO_TENANT}}}:*"
    if urlsplit(redis_url).password is not None:
        redis_url = "'<your Redis URL>'"  # never print a password
    return (
        f"demo fixture in {redis_url} (tenant {DEMO_TENANT!r}, keys {pattern}); to remove it: "
        f"redis-cli -u {redis_url} --scan --pattern '{pattern}' "
        f"| xargs -r redis-cli -u {redis_url} unlink"
    )


def needs_real_redis(
    *, wait_replicas: int = 0, workers: int = 1, faults: Collection[str] = ()
) -> str | None:
    """Why a run asked for cannot run on the embedded store (None: it can). The one place the
    rule is kept: the CLI refuses with it (exit 2), a target refuses to open with it."""
    if wait_replicas:
        return "--wait-replicas needs a real Redis (--redis): no WAIT embedded"
    if workers > 1:
        return "--workers needs a real Redis (--redis): the embedded store lives in one process"
    if "reshard" in faults:
        return (
            "--faults reshard needs a Redis Cluster (--redis redis://HOST:PORT of one of its "
            "nodes): it moves the busy tenants' slots between masters"
        )
    if "redis" in faults:
        return (
            "--faults redis needs a real Redis (--redis redis://HOST:PORT): the embedded store "
            "accepts CLIENT KILL and CLIENT PAUSE but ignores them"
        )
    return None
