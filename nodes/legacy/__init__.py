"""The legacy 2025-11-25 adapter: ``initialize``, sessions in the store, streamed server requests.

Layer: node, legacy adapter. Imported by nothing modern: the HTTP app takes it as an injected
``nodes.http.LegacyHandler`` (``cluster.serve`` builds one per node), and the protocol core,
tools and HTTP shell run unchanged without it. Modules:

    wire      pure: routing rule, legacy shapes, roots parsing, what of a client is stored
    stream    one POST's response: JSON, or SSE once the call asks the client something
    inbox     the node's one reader of the inboxes its waiting calls listen to
    bridge    one tools/call: plays MRTR's client part over the stream and the session inbox
    adapter   the handler: sessions, handshake, notifications, answers, dispatch, caps

Backend-neutral (anyio): it runs on trio (tests, simulations) and on asyncio alike.
"""

from __future__ import annotations

from nodes.legacy.adapter import LegacyAdapter, LegacyStatistics, open_legacy_adapter
from nodes.legacy.bridge import LegacyLimits
from nodes.legacy.wire import LEGACY_VERSION

__all__ = [
    "LEGACY_VERSION",
    "LegacyAdapter",
    "LegacyLimits",
    "LegacyStatistics",
    "open_legacy_adapter",
]
