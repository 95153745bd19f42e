"""Error replies that mean "the command did not run, try again soon", and how long to.

Layer: store. Pure module apart from reading the running loop's clock. A Redis being
resharded, failed over, started or demoted refuses a command before running any of it:

    TRYAGAIN     a multi-key command (every script of ours) on a slot being migrated, with some
                 of its keys on either side (a create's new keys always are): ``resharding``
    ASK, MOVED   more redirections than ``store.resp_cluster.MAX_REDIRECTS``: ``resharding``
    CLUSTERDOWN  the cluster has a slot no master serves (a failover under way): ``cluster_down``
    READONLY     the server is a replica now (a failover left the node on the old address; a
                 script refused at its first write wrote nothing): ``read_only``
    LOADING      the server is loading its data set after a restart: ``loading``
    MASTERDOWN   a replica lost its master and refuses stale reads: ``master_down``
    BUSY         a script runs past ``busy-reply-threshold``: ``busy``
    NOREPLICAS   ``min-replicas-to-write`` is not met: ``no_replicas``

Each is safe to send again (nothing ran), so the store re-sends it with a growing pause until
the request's deadline (``refusal_deadline``); what still refuses then is a ``StoreRefused``,
which the node answers as a retryable error naming the reason.
"""

from __future__ import annotations

import math

import anyio
import coredis.exceptions

from store.resp import ReplyError

REFUSAL_WAIT_S = 5.0
"""How long a call keeps re-sending a refused command when its request sets no earlier
deadline: a slot's migration (``MIGRATE`` in batches) or a replica's promotion takes about a
second on a quiet cluster; a request waiting longer is better answered "try again"."""

DEADLINE_MARGIN_S = 0.05
"""Kept free before the request's own deadline, to answer it."""

FIRST_PAUSE_S = 0.005
MAX_PAUSE_S = 0.2
"""The pause before the n-th re-send: ``FIRST_PAUSE_S`` doubled each time, at most this."""

_CODES: dict[str, str] = {
    "TRYAGAIN": "resharding",
    "ASK": "resharding",
    "MOVED": "resharding",
    "CLUSTERDOWN": "cluster_down",
    "READONLY": "read_only",
    "LOADING": "loading",
    "MASTERDOWN": "master_down",
    "BUSY": "busy",
    "NOREPLICAS": "no_replicas",
}

_COREDIS: tuple[tuple[type[Exception], str], ...] = (
    (coredis.exceptions.TryAgainError, "resharding"),
    (coredis.exceptions.AskError, "resharding"),  # MovedError too
    (coredis.exceptions.ClusterDownError, "cluster_down"),
    (coredis.exceptions.ReadOnlyError, "read_only"),
)


def refusal_reason(exc: BaseException) -> str | None:
    """The reason ``exc`` is a refusal of a command that did not run (see the table above), or
    None when it is anything else."""
    if isinstance(exc, ReplyError):
        return _CODES.get(exc.code)
    for kind, reason in _COREDIS:
        if isinstance(exc, kind):
            return reason
    if isinstance(exc, coredis.exceptions.ResponseError):
        return _CODES.get(str(exc).split(" ", 1)[0])
    return None


def pause_s(attempt: int) -> float:
    """The pause before re-send number ``attempt`` (0 first)."""
    return float(min(MAX_PAUSE_S, FIRST_PAUSE_S * (2 ** min(attempt, 16))))


def refusal_deadline(wait_s: float) -> float:
    """Until when (``anyio.current_time``) refused commands are re-sent: ``wait_s`` from now,
    or sooner when the request's own deadline (the innermost cancel scope's) comes first."""
    now = anyio.current_time()
    own = anyio.current_effective_deadline()
    end = now + wait_s
    if not math.isinf(own):
        end = min(end, own - DEADLINE_MARGIN_S)
    return end
