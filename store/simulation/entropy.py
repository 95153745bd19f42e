"""The entropy seam's simulation side: a seeded source for every random byte of a run.

Layer: store (nothing of ours). Every random draw of a node and of the store goes through
``store.randomness`` -- the AES-GCM nonces and the key material generated on the fly in
``nodes.sealing``, the state nonces, note ids, operation and call ids. A caller that must replay
a run bit for bit (a deterministic simulation) runs its whole trio run inside ``entropy_source``
with a seeded source; trio copies the context into every task it starts, so each node and store
call of that run draws from it, and nothing outside it does. A node in production never imports
this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from store.randomness import SOURCE, EntropySource


@contextmanager
def entropy_source(source: EntropySource) -> Iterator[None]:
    """Draw every random byte inside this block (and in tasks started inside it) from
    ``source``."""
    token = SOURCE.set(source)
    try:
        yield
    finally:
        SOURCE.reset(token)
