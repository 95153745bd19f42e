"""What the store's own Redis client raises, drawn once.

Layer: store. Pure module. The one rule: **the client never sends a command twice**. A command
that was written and not definitively answered is an unknown outcome; the caller decides.

    RedisClientError
     ├── NotSent             nothing was written (connect refused or timed out, client closed):
     │                       the command did not run
     └── UnknownOutcome      written, no definitive answer: it may or may not have run
          ├── ConnectionLost     the connection dropped (or spoke garbage) before the reply
          ├── ReplyTimeout       no reply within the timeout; the connection is closed, so a
          │                      late reply can never be taken for another command's
          └── ReplicationError   ``WAIT`` saw fewer replicas than asked: the write ran on the
                                 master and may be lost in a failover

A server's error reply (``-ERR``, ``-NOSCRIPT``, ``-OOM``) is ``store.resp.ReplyError``: a
definite answer, raised as it is.
"""

from __future__ import annotations


class RedisClientError(Exception):
    """Base of the client's own failures (not the server's error replies)."""


class NotSent(RedisClientError):
    """The command was never written: it did not run."""


class UnknownOutcome(RedisClientError):
    """The command was written and no definitive reply came back: it may have run."""


class ConnectionLost(UnknownOutcome):
    """The connection dropped, or its bytes stopped being RESP, before the reply."""


class ReplyTimeout(UnknownOutcome):
    """No reply within the client's timeout; the connection was closed."""


class ReplicationError(UnknownOutcome):
    """``WAIT`` acknowledged fewer replicas than asked (or was refused): the write ran on the
    master only, as far as anyone knows."""

    def __init__(self, wanted: int, acknowledged: int | str) -> None:
        super().__init__(f"WAIT: {acknowledged} replica(s) acknowledged, {wanted} wanted")
        self.wanted = wanted
        self.acknowledged = acknowledged
