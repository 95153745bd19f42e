"""Where the store's and the nodes' random bytes come from: the OS unless a simulation says
otherwise.

Layer: store (nothing of ours). Every random draw of a node and of the store goes through
``token_bytes`` and its two spellings here: the AES-GCM nonces and the key material generated on
the fly in ``nodes.sealing``, the state nonces, note ids, operation and call ids. In production
nothing sets the source, so every draw is ``os.urandom``'s, as ``secrets`` would give. A
deterministic simulation replaces the source for its whole trio run
(``store.simulation.entropy.entropy_source``); this module is the production side of that
seam and imports nothing of the simulation.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from contextvars import ContextVar

EntropySource = Callable[[int], bytes]
"""``n -> n random bytes``."""

SOURCE: ContextVar[EntropySource] = ContextVar("notes_cluster_entropy", default=os.urandom)
"""The source of this context's draws (``os.urandom`` unless a simulation set one)."""


def token_bytes(n: int) -> bytes:
    """``n`` random bytes (``secrets.token_bytes``)."""
    return SOURCE.get()(n)


def token_hex(n: int) -> str:
    """``n`` random bytes as hex (``secrets.token_hex``)."""
    return token_bytes(n).hex()


def token_urlsafe(n: int) -> str:
    """``n`` random bytes as unpadded url-safe base64 (``secrets.token_urlsafe``)."""
    return base64.urlsafe_b64encode(token_bytes(n)).rstrip(b"=").decode("ascii")
