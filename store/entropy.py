"""Where the store's and the nodes' random bytes come from: the OS unless a run says otherwise.

Layer: store (nothing of ours). Every random draw of a node and of the store (state nonces,
AES-GCM nonces, note ids, operation and call ids, key material generated on the fly) goes
through ``token_bytes`` and its two spellings here. In production nothing sets the source, so
every draw is ``os.urandom``'s, as ``secrets`` would give. A caller that must replay a run bit
for bit (a deterministic simulation) runs its whole trio run inside ``entropy_source`` with a
seeded source; trio copies the context into every task it starts, so each node and store call
of that run draws from it, and nothing outside it does.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

EntropySource = Callable[[int], bytes]
"""``n -> n random bytes``."""

_SOURCE: ContextVar[EntropySource] = ContextVar("notes_cluster_entropy", default=os.urandom)


@contextmanager
def entropy_source(source: EntropySource) -> Iterator[None]:
    """Draw every random byte inside this block (and in tasks started inside it) from
    ``source``."""
    token = _SOURCE.set(source)
    try:
        yield
    finally:
        _SOURCE.reset(token)


def token_bytes(n: int) -> bytes:
    """``n`` random bytes (``secrets.token_bytes``)."""
    return _SOURCE.get()(n)


def token_hex(n: int) -> str:
    """``n`` random bytes as hex (``secrets.token_hex``)."""
    return token_bytes(n).hex()


def token_urlsafe(n: int) -> str:
    """``n`` random bytes as unpadded url-safe base64 (``secrets.token_urlsafe``)."""
    return base64.urlsafe_b64encode(token_bytes(n)).rstrip(b"=").decode("ascii")
