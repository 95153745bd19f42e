"""Which store a cluster runs on: a given Redis, or an embedded one; and its demo notes.

Layer: cluster. Shared by the in-process clusters (``cluster.local``) and the HTTP ones
(``cluster.serve``); imports no load generator, so ``serve`` does not either.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from cluster.demo import DEMO_NOTES, DEMO_TENANT
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
    """Create the demo notes (see ``cluster.demo``)."""
    for n in DEMO_NOTES:
        await store.create(DEMO_TENANT, n.workspace, n.title, n.body, n.owner, n.created_ms)
