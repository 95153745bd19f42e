"""Flows that take the small-quota tenants' principals to each quota's exact boundary: the last
create a quota allows succeeds, the next is refused.

Layer: loadgen. Built of ``loadgen.flow_steps`` and the writes of ``loadgen.surface_flows``;
listed by ``loadgen.workload``. The flow's own note and its accept are in its load tenant as
every flow's; the quota work runs in the small-quota tenants (``loadgen.tenants.SMALL_QUOTAS``)
as one of their principals, one ``quota_boundary`` flow at a time per load process (a lock), so
each starts from what the last one cleaned up. The checker does not rely on that: it holds
every success and refusal to the configured bound and the usage the journal shows
(``loadgen.check.quotas``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import trio

from loadgen import tenants as names
from loadgen.clients import Outcome
from loadgen.flow_steps import Asked, FlowEnv, cleanup, confirm
from loadgen.surface_flows import write

NOTES_TENANT = "loadq"
"""The small-quota tenant whose notes and bytes quotas the flow reaches."""
WRITES_TENANT = "loadw"
"""The small-quota tenant whose writes quota the flow reaches."""

_LOCKS: dict[int, trio.Lock] = {}
"""One lock per trio run (by the id of its token): quota flows of one process, one at a time."""


def _lock() -> trio.Lock:
    token = id(trio.lowlevel.current_trio_token())
    if token not in _LOCKS:
        _LOCKS.clear()  # a lock of an earlier run is never waited for again
        _LOCKS[token] = trio.Lock()
    return _LOCKS[token]


def quota_env(env: FlowEnv, name: str) -> FlowEnv:
    """``env`` in small-quota tenant ``name``, as one of its principals (the flow's side)."""
    side = env.principal[-1]
    other = "b" if side == "a" else "a"
    root = names.quota_root(name)
    return replace(
        env,
        principal=names.quota_principal(name, side),
        foreigner=names.quota_principal(name, other),
        tenant=name,
        inbox=f"{root}/inbox",
        archive=f"{root}/archive",
        root=root,
        steps=[],
        leftovers={},
        done=False,
    )


def _refused(out: Outcome) -> bool:
    return out.type == "ok" and bool(out.value.get("isError"))


async def _create(env: FlowEnv, body: str) -> Outcome:
    env.leave(env.inbox)
    args: dict[str, Any] = {"workspaceUri": env.inbox, "title": env.title, "body": body}
    return await write(env, "notes_create", args)


async def _notes_and_bytes(env: FlowEnv) -> None:
    notes, most_bytes, _ = names.SMALL_QUOTAS[NOTES_TENANT]
    # Notes: one more create than the quota allows (the last is refused).
    for _ in range(notes + 1):
        if _refused(await _create(env, "q")):
            break
    await cleanup(env)
    env.leftovers.clear()
    # Bytes: one note exactly at the bound (allowed), then one byte more (refused).
    fill = most_bytes - len(env.title.encode("utf-8"))
    await _create(env, "b" * fill)
    await _create(env, "b")
    await cleanup(env)


async def _writes(env: FlowEnv) -> None:
    # Writes are counted for a whole window: once one flow used them up, every later create of
    # that principal is refused at once.
    _, _, writes = names.SMALL_QUOTAS[WRITES_TENANT]
    for _ in range(writes + 1):
        if _refused(await _create(env, "w")):
            break
    await cleanup(env)


STOP_CLEANUP_S = 10.0
"""How long a quota flow cut short may spend deleting what it made in a small-quota tenant (as
``loadgen.workload.STOP_CLEANUP_S`` gives a flow for its own notes)."""


async def _in_tenant(env: FlowEnv, name: str, work: Any) -> None:
    """``work`` as a principal of small-quota tenant ``name``; cut short, it deletes what it
    made there first (when the run cleans up after flows cut short)."""
    q = quota_env(env, name)
    try:
        await work(q)
    except BaseException:
        if env.clean_up_cut_short:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + STOP_CLEANUP_S):
                await cleanup(q)
        raise


async def flow_quota_boundary(env: FlowEnv, asked: Asked, note: str) -> None:
    # The flow's own accept, then each small quota to its boundary.
    await confirm(env, asked, note)
    async with _lock():
        await _in_tenant(env, NOTES_TENANT, _notes_and_bytes)
        await _in_tenant(env, WRITES_TENANT, _writes)
