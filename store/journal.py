"""Reading the mutation journal, the surviving notes and the replay store, for the checker.

Layer: store. Synchronous redis-py, run once after a load run; knows the key layout and the journal
fields the Lua scripts write, nothing of MCP, nodes, the cluster or the load generator. Works on one
Redis and on a Redis Cluster (``store.client_factory.sync_client`` picks the client): SCAN runs per
node, so on a cluster it targets the master owning a tenant's slot, or every master.

Journal stream fields (``<prefix>:{t:<tenant>}:journal``), all optional but ``op`` and ``at``:
``op`` (create|update|move|delete|decline|setup), ``note``, ``ws``, ``to``, ``title``, ``version``,
``principal``, ``at`` (ms, Redis clock); confirm.lua's entries (its executions and its declines)
also carry ``nonce``, ``exp`` (ms, Redis clock) and ``tool``; the create, update and move
scripts' entries carry ``opid``, the operation id recorded with the write (an idempotency key's
``k...``, or a random ``r...``): one operation id journals at most one write. A setup link's
completion (``setup.lua``) journals ``op`` setup with ``principal``, ``nonce`` (the link's),
``exp`` and ``tool`` notes_setup.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import redis
import redis.cluster

from store.client_factory import SyncClient
from store.keys import TenantKeys

XRANGE_CHUNK = 1000
"""Entries per XRANGE call: big enough to be quick, small enough not to block Redis."""

SCAN_COUNT = 1000
"""SCAN hint: keys examined per call."""


@dataclass(frozen=True)
class JournalEntry:
    """One journal stream entry. Absent text fields are ``""``; ``exp_ms`` is None when absent."""

    tenant: str
    id: str
    op: str
    note: str
    ws: str
    to: str
    title: str
    version: int
    principal: str
    nonce: str
    exp_ms: int | None
    at_ms: int
    tool: str
    op_id: str = ""
    """The operation id of a create, update or move ("" for other entries)."""

    @property
    def sort_key(self) -> tuple[int, int, int, str]:
        """Order by Redis-clock time, then stream id (ms, seq), then tenant."""
        ms, _, seq = self.id.partition("-")
        return (self.at_ms, int(ms), int(seq or 0), self.tenant)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return "" if value is None else str(value)


def _entry(tenant: str, entry_id: object, raw: Mapping[Any, Any] | None) -> JournalEntry:
    f = {_text(k): _text(v) for k, v in (raw or {}).items()}
    exp = f.get("exp", "")
    return JournalEntry(
        tenant=tenant,
        id=_text(entry_id),
        op=f.get("op", ""),
        note=f.get("note", ""),
        ws=f.get("ws", ""),
        to=f.get("to", ""),
        title=f.get("title", ""),
        version=int(f.get("version") or 0),
        principal=f.get("principal", ""),
        nonce=f.get("nonce", ""),
        exp_ms=int(exp) if exp else None,
        at_ms=int(f.get("at") or 0),
        tool=f.get("tool", ""),
        op_id=f.get("opid", ""),
    )


def _after(entry_id: str) -> str:
    """The smallest stream id greater than ``entry_id`` (works on Redis before 6.2 too)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _stream(
    client: SyncClient, key: str, start: str = "-"
) -> Iterator[tuple[Any, Mapping[Any, Any] | None]]:
    while True:
        chunk = client.xrange(key, min=start, max="+", count=XRANGE_CHUNK) or []
        yield from chunk
        if len(chunk) < XRANGE_CHUNK:
            return
        start = _after(_text(chunk[-1][0]))


def read_journal(
    client: SyncClient, prefix: str, tenants: Iterable[str], since_ms: int = 0
) -> list[JournalEntry]:
    """Every journal entry of ``tenants`` (from ``since_ms`` on, by the Redis clock that names
    stream entries: a load against a long-lived store reads only its own run's), ordered by
    (at_ms, stream id)."""
    start = f"{since_ms}-0" if since_ms > 0 else "-"
    entries = [
        _entry(tenant, entry_id, fields)
        for tenant in tenants
        for entry_id, fields in _stream(client, TenantKeys(prefix, tenant).journal, start)
    ]
    return sorted(entries, key=lambda e: e.sort_key)


def scan_keys(client: SyncClient, match: str, slot_key: str | None = None) -> Iterator[str]:
    """Every key matching the glob ``match``. On a cluster SCAN runs on each master, or only on
    the master owning ``slot_key``'s slot when every match shares that key's hash tag."""
    if not isinstance(client, redis.cluster.RedisCluster):
        for key in client.scan_iter(match=match, count=SCAN_COUNT):
            yield _text(key)
        return
    for node in _masters(client, slot_key):
        for key in client.scan_iter(match=match, count=SCAN_COUNT, target_nodes=node):
            yield _text(key)


def keys_per_master(client: SyncClient, prefix: str) -> dict[str, int]:
    """``"host:port" -> n``: how many keys under ``prefix`` each master holds (one entry for a
    single Redis). Shows how tenants spread over a cluster's slots."""
    if not isinstance(client, redis.cluster.RedisCluster):
        kw = client.connection_pool.connection_kwargs
        where = f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"
        return {where: sum(1 for _ in scan_keys(client, f"{prefix}:*"))}
    out: dict[str, int] = {}
    for node in sorted(_masters(client), key=lambda n: (n.host, n.port)):
        keys = client.scan_iter(match=f"{prefix}:*", count=SCAN_COUNT, target_nodes=node)
        out[f"{node.host}:{node.port}"] = sum(1 for _ in keys)
    return out


def _masters(
    client: redis.cluster.RedisCluster, slot_key: str | None = None
) -> list[redis.cluster.ClusterNode]:
    """A cluster's masters, or only the one owning ``slot_key``'s slot (redis-py leaves these
    two methods untyped)."""
    if slot_key is not None:
        return [client.get_node_from_key(slot_key)]  # type: ignore[no-untyped-call]
    return list(client.get_primaries())  # type: ignore[no-untyped-call]


def _scan_ids(client: SyncClient, base: str) -> list[tuple[str, str]]:
    """(key, id) of every key starting with ``base`` (a glob-safe literal plus ``*``)."""
    return [(k, k[len(base) :]) for k in scan_keys(client, f"{base}*", slot_key=base)]


def read_final_notes(
    client: SyncClient, prefix: str, tenants: Iterable[str]
) -> dict[tuple[str, str], str]:
    """(tenant, noteId) -> workspace of every note that still exists."""
    out: dict[tuple[str, str], str] = {}
    for tenant in tenants:
        found = _scan_ids(client, TenantKeys(prefix, tenant).note(""))
        pipe = client.pipeline(transaction=False)
        for key, _ in found:
            pipe.hget(key, "workspace")
        for (_, note_id), ws in zip(found, pipe.execute(), strict=True):
            if ws is not None:  # deleted between SCAN and HGET
                out[(tenant, note_id)] = _text(ws)
    return out


def list_replay_entries(
    client: SyncClient, prefix: str, tenants: Iterable[str]
) -> dict[tuple[str, str], int]:
    """(tenant, nonce) -> remaining PTTL in ms of every replay entry still present (-1: no TTL)."""
    out: dict[tuple[str, str], int] = {}
    for tenant in tenants:
        found = _scan_ids(client, TenantKeys(prefix, tenant).replay(""))
        pipe = client.pipeline(transaction=False)
        for key, _ in found:
            pipe.pttl(key)
        for (_, nonce), ttl in zip(found, pipe.execute(), strict=True):
            if int(ttl) != -2:  # expired between SCAN and PTTL
                out[(tenant, nonce)] = int(ttl)
    return out


def redis_time_ms(client: SyncClient) -> int:
    """The Redis server clock (TIME) in ms: the clock ``at``, ``exp`` and TTLs are measured on."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def read_store_records(client: SyncClient, prefix: str, tenant: str) -> dict[str, Any]:
    """One tenant's operation records and usage counters, and what its notes say the counters
    should hold: ``ops`` {op id: PTTL ms (-1: no TTL)}; ``usage`` {counter: value} as stored
    (``n:<principal>`` notes and ``b:<principal>`` bytes of the tenant's usage hash,
    ``w:<workspace usage key>:<principal>`` notes per workspace); ``recount`` the same counters
    counted from the surviving notes (owner, workspace, title and body bytes)."""
    keys = TenantKeys(prefix, tenant)
    ops: dict[str, int] = {}
    found = _scan_ids(client, keys.op(""))
    pipe = client.pipeline(transaction=False)
    for key, _ in found:
        pipe.pttl(key)
    for (_, op_id), ttl in zip(found, pipe.execute(), strict=True):
        if int(ttl) != -2:
            ops[op_id] = int(ttl)
    usage: dict[str, int] = {}
    for name, value in (client.hgetall(keys.usage) or {}).items():
        usage[_text(name)] = int(value)
    ws_base = keys.workspace_usage("")
    ws_base = ws_base[: ws_base.rindex(":") + 1]
    for key, digest in _scan_ids(client, ws_base):
        for owner, value in (client.hgetall(key) or {}).items():
            usage[f"w:{digest}:{_text(owner)}"] = int(value)
    recount: dict[str, int] = {}
    notes = _scan_ids(client, keys.note(""))
    pipe = client.pipeline(transaction=False)
    for key, _ in notes:
        pipe.hmget(key, "owner", "workspace", "title", "body")
    for owner, ws, title, body in pipe.execute():
        if owner is None or ws is None:
            continue
        who = _text(owner)
        size = len(_text(title).encode("utf-8")) + len(_text(body).encode("utf-8"))
        digest = keys.workspace_usage(_text(ws))[len(ws_base) :]
        for name, n in ((f"n:{who}", 1), (f"b:{who}", size), (f"w:{digest}:{who}", 1)):
            recount[name] = recount.get(name, 0) + n
    return {"ops": ops, "usage": usage, "recount": recount}
