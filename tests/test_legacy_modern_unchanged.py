"""The modern HTTP suite again, on nodes that also serve legacy clients: nothing changes.

Layer: tests. Every test of ``tests/test_http_transport.py`` is collected here a second time
(pytest collects the tests and fixtures a module holds, wherever they were defined), against
nodes whose app has the legacy adapter mounted, as ``cluster.serve`` mounts it (the ``served``
fixture is redefined). The adapter claims only ``initialize``, handshake-era requests without
the modern ``_meta``, and DELETE with a session id, so every status, code and body of the modern
suite must come out the same. Routing does not depend on the store: the embedded one suffices.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from functools import partial

import httpx
import pytest
import trio

from nodes import http
from nodes.legacy import open_legacy_adapter
from store.notes import NoteStore
from store.sessions import SessionStore
from tests import test_http_transport as modern
from tests.conftest import raw
from tests.harness import make_nodes

# Its tests and its fixtures (``served`` and ``redis_url`` are redefined below).
globals().update({name: value for name, value in vars(modern).items() if name[0] != "_"})


@pytest.fixture
def redis_url(embedded_url: str) -> str:
    """Only the embedded store (overrides the conftest parameters)."""
    return embedded_url


@pytest.fixture
async def served(store: NoteStore, nursery: trio.Nursery) -> AsyncIterator[modern.Served]:
    """As ``test_http_transport.served``, with the legacy adapter mounted on both nodes."""
    nodes = make_nodes(store, 2)
    urls = []
    async with AsyncExitStack() as stack:
        for node in nodes:
            sessions = SessionStore(raw(store), prefix=store.prefix)
            legacy = await stack.enter_async_context(open_legacy_adapter(node, sessions))
            start = partial(
                http.serve_node,
                node,
                modern.TOKENS,
                allowed_origins=frozenset({modern.GOOD_ORIGIN}),
                max_body_bytes=modern.MAX_BODY,
                legacy=legacy,
            )
            urls.append(await nursery.start(start))
        async with httpx.AsyncClient(timeout=10) as client:
            yield modern.Served(nodes, urls, client, store)


def test_this_module_runs_the_whole_modern_suite() -> None:
    ours = {name for name in globals() if name.startswith("test_")}
    theirs = {name for name in vars(modern) if name.startswith("test_")}
    assert theirs < ours
