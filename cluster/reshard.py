"""Moving one slot of a Redis Cluster between masters, as ``redis-cli --cluster reshard`` does:
``CLUSTER SETSLOT ... IMPORTING`` / ``MIGRATING``, ``MIGRATE`` of its keys in batches, then
``CLUSTER SETSLOT ... NODE`` on every master.

Layer: cluster. Synchronous (redis-py); run it in a thread. Used by the ``reshard`` nemesis
(``cluster.faults``) and by tests. While a slot is migrating, a script whose keys are split
between the two masters, or not all present yet (every create of ours), is refused with
``TRYAGAIN``: it did not run, and the store re-sends it (``store.refusals``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis
import trio
from redis.crc import key_slot

CONTROL_TIMEOUT_S = 5.0
MIGRATE_BATCH = 100
"""Keys one ``MIGRATE`` moves."""

MIGRATE_TIMEOUT_MS = 5_000


Address = tuple[str, int]


@dataclass(frozen=True)
class Master:
    """One master of the cluster: its address and its node id."""

    address: Address
    node_id: str


def tenant_slot(tenant: str) -> int:
    """The slot of every key of ``tenant`` (its hash tag, ``store.keys``)."""
    return int(key_slot(f"{{t:{tenant}}}".encode()))


def _client(address: Address) -> redis.Redis:
    return redis.Redis(
        host=address[0],
        port=address[1],
        socket_timeout=CONTROL_TIMEOUT_S,
        socket_connect_timeout=CONTROL_TIMEOUT_S,
        decode_responses=True,
    )


def masters(address: Address) -> list[Master]:
    """The cluster's masters (not failed), seen from the server at ``address``."""
    with _client(address) as c:
        nodes = str(c.execute_command("CLUSTER", "NODES"))
    found = []
    for line in nodes.splitlines():
        fields = line.split()
        flags = fields[2].split(",") if len(fields) > 2 else []
        if "master" in flags and "fail" not in flags:
            where = fields[1].split("@", 1)[0]
            host, _, port = where.rpartition(":")
            found.append(Master((host or address[0], int(port)), fields[0]))
    return sorted(found, key=lambda m: m.address)


def owner(slot: int, among: Sequence[Master]) -> Master:
    """The master serving ``slot``."""
    with _client(among[0].address) as c:
        for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                port = int(master[1])
                return next(m for m in among if m.address[1] == port)
    raise LookupError(f"slot {slot} is not served by any master")


def begin_move(slot: int, source: Master, target: Master) -> None:
    """Mark ``slot`` importing on ``target`` and migrating on ``source``: from now on a
    script of the slot's tenant that creates a key is refused with TRYAGAIN until the move
    ends (``finish_move``)."""
    with _client(target.address) as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
    with _client(source.address) as src:
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)


def finish_move(slot: int, source: Master, target: Master, every_master: Sequence[Master]) -> int:
    """``MIGRATE`` the slot's keys in batches and give the slot to ``target`` on every master
    (the target first, then the source, then the rest: what redis-cli does); the keys moved."""
    moved = 0
    with _client(source.address) as src:
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, MIGRATE_BATCH)
            if not keys:
                break
            host, port = target.address
            src.execute_command(
                "MIGRATE", host, port, "", 0, MIGRATE_TIMEOUT_MS, "REPLACE", "KEYS", *keys
            )
            moved += len(keys)
    order = [
        target,
        source,
        *(m for m in every_master if m.node_id not in (source.node_id, target.node_id)),
    ]
    for master in order:
        with _client(master.address) as c:
            c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
    return moved


def move_slot(
    slot: int,
    source: Master,
    target: Master,
    every_master: Sequence[Master],
    *,
    hold_s: float = 0.0,
) -> int:
    """Move ``slot`` from ``source`` to ``target``; the keys moved. ``hold_s``: how long the
    slot stays migrating before its first key moves (the window in which a busy tenant's
    writes are refused with TRYAGAIN)."""
    begin_move(slot, source, target)
    if hold_s > 0:
        time.sleep(hold_s)
    return finish_move(slot, source, target, every_master)


async def reshard_tenant(
    url: str,
    tenant: str,
    *,
    away_s: float,
    hold_s: float,
    hold_until: Callable[[], Awaitable[None]] | None = None,
    done: Callable[[str], None] = lambda _: None,
) -> str:
    """The ``reshard`` nemesis' one fault: move ``tenant``'s slot from its master to another,
    holding it migrating ``hold_s`` first (its writes meet TRYAGAIN meanwhile), leave it there
    ``away_s``, move it back the same way; a detail line for the run's fault record.
    ``hold_until``: after ``hold_s``, each way, the slot stays migrating until it returns (a
    test's hook, which orders the migration window after the writes it needs to see refused
    instead of hoping a timed window meets them). A move once begun is finished even when the
    run ends meanwhile (its hold is cut short, the rest shielded), and the slot always goes
    back home: a run never leaves a slot migrating or away. ``done`` is handed the detail line
    once the slot is home, also when the run's end cut the stay away short (the detail is then
    not returned: the cancellation goes on)."""
    parts = urlsplit(url)
    address = (parts.hostname or "127.0.0.1", parts.port or 6379)
    slot = tenant_slot(tenant)
    with trio.CancelScope(shield=True):
        every = await trio.to_thread.run_sync(masters, address)
        home = await trio.to_thread.run_sync(owner, slot, every)
    away = next(m for m in every if m.node_id != home.node_id)
    where = f"{home.address[0]}:{home.address[1]} -> {away.address[0]}:{away.address[1]}"
    moved = 0
    held: list[float] = []
    begun: list[Master] = []

    async def move(source: Master, target: Master) -> None:
        nonlocal moved
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(begin_move, slot, source, target)
        begun.append(target)
        began = trio.current_time()
        try:
            await trio.sleep(hold_s)
            if hold_until is not None:
                await hold_until()
        finally:
            held.append(trio.current_time() - began)
            with trio.CancelScope(shield=True):
                moved += await trio.to_thread.run_sync(finish_move, slot, source, target, every)

    def detail() -> str:
        holds = " and ".join(f"{s * 1000:.0f} ms" for s in held)
        return (
            f"slot {slot} (tenant {tenant}) moved {where} and back, held migrating "
            f"{holds}: {moved} keys moved"
        )

    try:
        await move(home, away)
        await trio.sleep(away_s)
    finally:
        if begun:  # the slot left home (or is leaving): it goes back
            try:
                await move(away, home)
            finally:
                done(detail())
    return detail()
