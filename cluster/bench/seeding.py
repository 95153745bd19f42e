"""The benchmark's store side: fast seeding, the raw-script ceiling, and ``redis-benchmark``.

Layer: cluster (the bench). Writes notes straight into the store's key layout (the same hash
fields and index sets ``create.lua`` writes, minus the journal entry) in batches of one Lua call,
because seeding tens of thousands of notes through the tools would take longer than the
measurements. The ceiling loop runs the store's own ``read_notes`` and ``confirm`` scripts through
``NoteStore`` with no MCP layer at all.
"""

from __future__ import annotations

import csv
import hashlib
import io
import secrets
import shutil
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import coredis
import trio

from cluster.bench.flows import SeededNote
from loadgen.tenants import LOAD_TENANTS, tenant
from nodes.sealing import new_nonce
from store.api import Confirmation
from store.keys import TenantKeys
from store.notes import NoteStore

SEED_BATCH = 500
"""Notes per seeding call: large enough to amortise the round trip, small enough not to stall
Redis for the nodes of a running point."""

FILLER_BATCH = 20_000
"""Filler notes one server-side call creates (a few tens of milliseconds of Redis time)."""

CEILING_STATE_TTL_MS = 300_000

_SEED_LUA = """
-- ARGV: created ms, then per note: note key, workspace set, title index, id, title, workspace
for i = 2, #ARGV, 6 do
  redis.call('HSET', ARGV[i], 'id', ARGV[i + 3], 'title', ARGV[i + 4], 'body', 'bench',
    'workspace', ARGV[i + 5], 'version', 1, 'created_ms', ARGV[1], 'updated_ms', ARGV[1])
  redis.call('SADD', ARGV[i + 1], ARGV[i + 3])
  redis.call('SADD', ARGV[i + 2], ARGV[i + 3])
end
return (#ARGV - 1) / 6
"""

_FILLER_LUA = """
-- ARGV: tenant base, workspace set, workspace, first index, count
local base, first, count = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5])
for i = first, first + count - 1 do
  local id = 'f' .. i
  redis.call('HSET', base .. ':note:' .. id, 'id', id, 'title', 'filler ' .. i,
    'body', 'filler note', 'workspace', ARGV[3], 'version', 1, 'created_ms', 0, 'updated_ms', 0)
  redis.call('SADD', ARGV[2], id)
  redis.call('SADD', base .. ':title:fill' .. i, id)
end
return count
"""


def inbox(tenant_index: int) -> str:
    """The inbox workspace of load tenant ``i`` (see ``loadgen.workload``)."""
    return f"file:///load/t{tenant_index}/inbox"


async def seed_targets(
    client: coredis.Redis[str], prefix: str, count: int, tag: str
) -> list[SeededNote]:
    """Create ``count`` notes with unique titles, spread over the load tenants."""
    script = client.register_script(_SEED_LUA)
    tenants = [TenantKeys(prefix, tenant(t)) for t in range(LOAD_TENANTS)]
    ws_keys = [k.workspace(inbox(t)) for t, k in enumerate(tenants)]
    targets: list[SeededNote] = []
    args: list[str | int] = []

    async def flush() -> None:
        if args:
            await script(keys=[], args=[0, *args])
            args.clear()

    for i in range(count):
        t = i % LOAD_TENANTS
        ws, title, note_id = inbox(t), f"bench {tag} {i}", "n" + secrets.token_hex(8)
        k = tenants[t]
        args += [k.note(note_id), ws_keys[t], k.title(ws, title), note_id, title, ws]
        targets.append(SeededNote(f"u{t}a", f"load{t}", ws, title, note_id))
        if len(args) >= SEED_BATCH * 6:
            await flush()
    await flush()
    return targets


def memory_targets(count: int, tag: str) -> list[SeededNote]:
    """``count`` targets named as ``seed_targets`` names them, for a server that keeps its
    notes in memory (the SDK peer's in-memory variant loads them from a file)."""
    out = []
    for i in range(count):
        t = i % LOAD_TENANTS
        note_id = "n" + secrets.token_hex(8)
        out.append(SeededNote(f"u{t}a", tenant(t), inbox(t), f"bench {tag} {i}", note_id))
    return out


async def seed_filler(client: coredis.Redis[str], prefix: str, count: int) -> None:
    """Create ``count`` other notes (unique titles) in the load tenants' inboxes, server-side."""
    script = client.register_script(_FILLER_LUA)
    per_tenant = -(-count // LOAD_TENANTS)
    made = 0
    for t in range(LOAD_TENANTS):
        k = TenantKeys(prefix, tenant(t))
        first = 0
        while first < per_tenant and made < count:
            n = min(FILLER_BATCH, per_tenant - first, count - made)
            await script(keys=[], args=[k.base, k.workspace(inbox(t)), inbox(t), first, n])
            first += n
            made += n


async def dbsize(client: coredis.Redis[str]) -> int:
    """Keys in the database."""
    return int(await client.dbsize())


async def raw_flow(store: NoteStore, target: SeededNote) -> str | None:
    """The store work of one delete flow, no MCP: read by title, then confirm and delete."""
    snap = await store.find(target.tenant, target.workspace, target.title, 51)
    if len(snap.notes) != 1:
        return f"read_notes found {len(snap.notes)} notes"
    note = snap.notes[0]
    answer = {"action": "accept", "content": {"noteId": note.note_id, "confirm": True}}
    out = await store.confirm(
        Confirmation(
            tenant=target.tenant,
            nonce=new_nonce(),
            action="accept",
            answer_digest=hashlib.sha256(repr(answer).encode()).hexdigest(),
            exp_ms=snap.redis_now_ms + CEILING_STATE_TTL_MS,
            note_id=note.note_id,
            expected_version=note.version,
            title=target.title,
            workspace=target.workspace,
            principal=target.principal,
            tool="notes_delete",
        )
    )
    return None if out.status == "executed" else f"confirm: {out.status}"


def redis_address(url: str) -> tuple[str, int, int]:
    """Host, port and database number of a ``redis://`` URL."""
    parts = urlsplit(url)
    db = parts.path.strip("/") or "0"
    return parts.hostname or "127.0.0.1", parts.port or 6379, int(db)


async def redis_benchmark_evalsha(
    client: coredis.Redis[str], url: str, target: SeededNote, prefix: str, concurrency: int, n: int
) -> dict[str, Any] | None:
    """``redis-benchmark`` EVALSHA of ``read_notes`` on one seeded title (read-only, so it can
    repeat); None when the tool is not installed."""
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return None
    source = resources.files("store").joinpath("scripts", "read_notes.lua").read_text("utf-8")
    sha = await client.script_load(source)
    keys = TenantKeys(prefix, target.tenant)
    host, port, db = redis_address(url)
    cmd = [
        exe,
        "-h",
        host,
        "-p",
        str(port),
        "--dbnum",
        str(db),
        "-c",
        str(concurrency),
        "-n",
        str(n),
        "--csv",
        "EVALSHA",
        sha,
        "1",
        keys.title(target.workspace, target.title),
        f"{keys.base}:note:",
        "51",
    ]
    done = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
    if done.returncode != 0:
        return None
    rows = list(csv.DictReader(io.StringIO(done.stdout.decode())))
    if not rows:
        return None
    row = rows[-1]
    return {
        "script": "read_notes",
        "concurrency": concurrency,
        "requests": n,
        "rps": float(row["rps"]),
        "p50_ms": float(row["p50_latency_ms"]),
        "p99_ms": float(row["p99_latency_ms"]),
    }
