"""``notes-cluster conformance-table``: the pack against our cluster and both SDK references,
check by check, as docs/explanation/sdk-references.md publishes it.

Layer: cluster (the lab). Starts each target in turn on the given Redis (keys under a
prefix of the run's own, deleted afterwards): three of our HTTP nodes (the demo fixture), the
Python SDK reference (two instances) as its docs show and with a used-state store, and the
TypeScript SDK reference (two instances, when Node 22 and its packages are there) as its docs
show and with what its author must add; runs ``notes-cluster conformance``'s pack against each
with the same short state lifetime; writes one folder of ``checks.json``/``checks.md`` per
target and ``table.md``, the checks side by side.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from cluster.lab.sdk_references.references import ADDITIONS, Sdk, node_missing, open_reference
from cluster.mrtr_conformance import demo_contract, run_conformance
from cluster.serve import start_http_nodes
from loadgen.mrtr_pack.checks import comparison
from nodes.serving.settings import demo_settings
from store.client_factory import sync_client
from store.journal import scan_keys

STATE_TTL_S = 8.0
"""Long enough that every round of a slow target lands well inside it; the same for all."""
EXPIRY_MARGIN_S = 2.0
"""How far before and after the expiry the expiry checks answer: room for a loaded machine."""


@dataclass(frozen=True)
class Column:
    """One target of the table: its label, folder name and how to start it."""

    label: str
    folder: str
    start: Callable[[str, str], AbstractAsyncContextManager[list[str]]]


@asynccontextmanager
async def _ours(redis_url: str, prefix: str) -> AsyncIterator[list[str]]:
    settings = demo_settings().with_state_ttl(STATE_TTL_S)
    async with trio.open_nursery() as nursery:
        yield await start_http_nodes(
            nursery, settings, redis_url, count=3, embedded=False, prefix=prefix
        )
        nursery.cancel_scope.cancel()


def _reference(sdk: Sdk, with_additions: bool) -> Callable[[str, str], Any]:
    def start(redis_url: str, prefix: str) -> AbstractAsyncContextManager[list[str]]:
        additions = ADDITIONS[sdk] if with_additions else ()
        return open_reference(
            sdk, redis_url, prefix=prefix, state_ttl_s=STATE_TTL_S, additions=additions
        )

    return start


def columns() -> list[Column]:
    """The targets, in the table's order (the TypeScript ones only when Node 22 is there)."""
    out = [
        Column("notes-cluster (3 nodes)", "ours", _ours),
        Column("Python SDK reference", "python", _reference("python", False)),
        Column("Python SDK + used-state store", "python-store", _reference("python", True)),
    ]
    if node_missing() is None:
        out += [
            Column("TypeScript SDK reference", "typescript", _reference("typescript", False)),
            Column(
                "TypeScript SDK + bind-call + used-state store",
                "typescript-store",
                _reference("typescript", True),
            ),
        ]
    return out


def _drop_keys(redis_url: str, prefix: str) -> None:
    sync = sync_client(redis_url)
    keys = list(scan_keys(sync, f"{prefix}:*"))
    if keys:
        sync.delete(*keys)
    sync.close()


def left_out() -> str | None:
    """The sentence saying which columns the table leaves out and why, or None."""
    why = node_missing()
    if why is None:
        return None
    return f"The TypeScript SDK columns are left out: {why}."


async def conformance_table(redis_url: str, out_dir: Path) -> str:
    """Run the pack against every target; write the folders and ``table.md``; return it."""
    results: list[tuple[str, list[dict[str, Any]]]] = []
    for col in columns():
        prefix = "ncpack" + secrets.token_hex(4)
        try:
            async with col.start(redis_url, prefix) as urls:
                checks = await run_conformance(
                    urls,
                    demo_contract(STATE_TTL_S, expiry_margin_s=EXPIRY_MARGIN_S),
                    out_dir / col.folder,
                )
        finally:
            await trio.to_thread.run_sync(_drop_keys, redis_url, prefix)
        results.append((col.label, [c.to_json() for c in checks]))
    table = comparison(results)
    note = left_out()
    if note is not None:
        table = f"{table.rstrip()}\n\n{note}\n"
    (out_dir / "table.md").write_text(table, encoding="utf-8")
    (out_dir / "table.json").write_text(
        json.dumps(dict(results), indent=2) + "\n", encoding="utf-8"
    )
    return table
