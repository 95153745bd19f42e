"""Safe durability by default: where the store's masters have replicas, writes wait for one.

Layer: nodes (serving). Decides, when a node starts, how many replicas every write waits for
(``WAIT``, see ``NoteStore(wait_replicas=...)``) and logs the mode it chose.

- ``"auto"`` (the default): ``INFO replication`` on the master (on a Redis Cluster, on every
  master). When every master has at least one connected replica, a write waits for one; else it
  does not wait (a master with no replica would answer every write "outcome unknown"). The
  embedded store has no replicas and no ``INFO``: no wait.
- An explicit number (``--wait-replicas N``, ``wait_replicas = N`` in the config; ``0`` turns
  waiting off) is used as given.

The choice is made once, at start: a replica added later is used after a restart; a replica that
goes away later makes writes answer "outcome unknown" (-32603) until it is back, never success.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import coredis
import coredis.exceptions

from store.client_factory import NoteClient
from store.resp import ReplyError
from store.resp_client import RespRedis
from store.resp_cluster import RespCluster

log = logging.getLogger("nodes.serving.durability")

AUTO: Literal["auto"] = "auto"
WaitReplicas = int | Literal["auto"]
"""How many replicas a write waits for: a number, or ``"auto"`` (see the module docstring)."""


def parse_wait_replicas(text: str) -> WaitReplicas:
    """``"auto"`` or a number from 0 to 16 (for the command line); ValueError otherwise."""
    if text.strip().lower() == AUTO:
        return AUTO
    value = int(text)
    if not 0 <= value <= 16:
        raise ValueError("wait_replicas must be 'auto' or a number from 0 to 16")
    return value


async def _replicas(node: coredis.Redis[str] | RespRedis) -> int | None:
    """Connected replicas of ``node`` if it is a master; None if it is a replica."""
    info: dict[str, Any] = dict(await node.info("replication"))
    if str(info.get("role", "master")) != "master":
        return None
    return int(info.get("connected_slaves", 0))


async def fewest_replicas(client: NoteClient) -> int:
    """The fewest connected replicas any master of the store has (0 for the embedded store,
    which refuses ``INFO``)."""
    try:
        if isinstance(client, RespCluster):
            found = [await _replicas(master) for master in client.masters()]
            return min((n for n in found if n is not None), default=0)
        if isinstance(client, coredis.RedisCluster):
            counts: list[int] = []
            for node in client.all_nodes:
                async with node:
                    replicas = await _replicas(node)
                if replicas is not None:
                    counts.append(replicas)
            return min(counts, default=0)
        return await _replicas(client) or 0
    except (coredis.exceptions.ResponseError, ReplyError):
        return 0


async def resolve_wait_replicas(client: NoteClient, setting: WaitReplicas) -> int:
    """The number of replicas every write of a node on ``client`` waits for; logs the mode."""
    if setting != AUTO:
        if setting == 0:
            log.info("durability: writes do not wait for replicas (configured: wait_replicas 0)")
        else:
            log.info("durability: writes wait for %d replica(s) (configured)", setting)
        return int(setting)
    replicas = await fewest_replicas(client)
    if replicas > 0:
        log.info(
            "durability: writes wait for 1 replica (auto: every master has %d or more); "
            "set wait_replicas = 0 to turn this off",
            replicas,
        )
        return 1
    log.info(
        "durability: writes do not wait for replicas (auto: a master has none); a failover "
        "to an asynchronous replica may forget acknowledged confirmations"
    )
    return 0
