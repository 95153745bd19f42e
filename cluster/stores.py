"""Which store a cluster runs on: a given Redis, or an embedded one; and its demo notes.

Layer: cluster. Shared by the in-process clusters (``cluster.local``) and the HTTP ones
(``cluster.serve``); imports no load generator, so ``serve`` does not either.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager

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


async def seed_demo(store: NoteStore) -> None:
    """Create the demo notes (see ``nodes.serving.demo``)."""
    for n in DEMO_NOTES:
        await store.create(DEMO_TENANT, n.workspace, n.title, n.body, n.owner, n.created_ms)


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
