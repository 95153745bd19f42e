"""The race workload: each flow is a real two-round ``notes_delete`` with one race forced into it
(the ``archive`` flow: a two-round ``notes_archive``, its confirmation sent to several nodes).
Beside the confirmations, flows drive the rest of the tool surface (``TOOLS_DRIVEN``): every
write (create, update, move, archive), the reads (``notes_list`` page by page, ``notes_search``
with and without roots, the roots including a workspace the principal is not granted, a pick
drawn among the workspaces offered), ``notes_setup`` up to its URL-mode elicitation, and their
misuses (a state or a cursor used by another principal, for another workspace or title, for
another tool).

Layer: loadgen. Drives nodes through ``loadgen.clients``; learns each state's nonce and expiry
for the history through a ``loadgen.states.StateReader`` (our nodes: the key ring opens it, a
trusted harness like a Jepsen client with access to the database's own ids; a foreign server:
the token's digest and the client's clock). It never reads the store while running.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from loadgen.edge_flows import (
    flow_concurrent_updates,
    flow_full_pick,
    flow_replay_after_expiry,
    flow_shared_key,
)
from loadgen.flow_steps import TWINS, Asked, FlowEnv, cleanup, start_flow
from loadgen.quota_flows import flow_quota_boundary
from loadgen.race_flows import (
    flow_answer_changed,
    flow_archive,
    flow_before_expiry,
    flow_cancel_then_accept,
    flow_changed_args,
    flow_decline,
    flow_duplicate,
    flow_edit_between,
    flow_expired,
    flow_foreign,
    flow_lost_response,
    flow_plain,
    flow_race_delete,
    flow_race_move,
    flow_silence,
    flow_tampered,
    flow_timeout_retry,
)
from loadgen.surface_flows import (
    flow_list_pages,
    flow_roots_ungranted,
    flow_search,
    flow_setup,
    flow_write_retry,
    flow_wrong_tool,
)
from loadgen.tenants import LOAD_TENANTS

log = logging.getLogger("loadgen.workload")


RACE_KINDS: tuple[str, ...] = (
    "plain",
    "duplicate",
    "lost_response",
    "timeout_retry",
    "race_delete",
    "race_move",
    "decline",
    "cancel_then_accept",
    "answer_changed",
    "changed_args",
    "tampered",
    "foreign",
    "expired",
    "before_expiry",
    "edit_between",
    "archive",
    "silence",
    "list_pages",
    "search",
    "setup",
    "wrong_tool",
    "write_retry",
    "replay_after_expiry",
    "shared_key",
    "concurrent_updates",
    "roots_ungranted",
    "quota_boundary",
    "full_pick",
)
"""Every race kind a run exercises (``loadgen.check.exercise`` holds each to it)."""

KEYED_KINDS: tuple[str, ...] = ()
"""Kinds run only when weighted (none now: ``write_retry`` joined the race kinds once every
node honoured the idempotency key)."""

TOOLS_DRIVEN: dict[str, tuple[str, ...]] = {
    "notes_create": ("every kind (setup)", "quota_boundary"),
    "notes_delete": ("every kind (round 1, the race, cleanup)",),
    "notes_archive": ("archive", "wrong_tool"),
    "notes_move": ("race_move", "write_retry"),
    "notes_update": ("edit_between", "write_retry", "concurrent_updates"),
    "notes_list": ("list_pages",),
    "notes_search": ("search", "roots_ungranted"),
    "notes_setup": ("setup",),
}
"""Which kinds drive each tool the node serves (tests/test_workload_surface.py holds this to
the node's ``tools/list``)."""

DEFAULT_WEIGHTS: dict[str, float] = dict.fromkeys(RACE_KINDS, 1.0) | {
    "plain": 3.0,
    "duplicate": 3.0,
    "expired": 0.7,
    "before_expiry": 0.7,
    "full_pick": 0.7,
}


FLOWS_PER_TENANT = 5_000
"""``tenants_for``: a run gets a tenant per this many flows, so that the checker, which holds one
tenant's history at a time, needs the same memory for any run length."""

MAX_TENANTS = 1_000


def tenants_for(flows: int) -> int:
    """Load tenants for a run of ``flows`` flows (at least ``LOAD_TENANTS``)."""
    return max(LOAD_TENANTS, min(MAX_TENANTS, -(-flows // FLOWS_PER_TENANT)))


FLOWS: dict[str, Callable[[FlowEnv, Asked, str], Awaitable[None]]] = {
    "plain": flow_plain,
    "duplicate": flow_duplicate,
    "lost_response": flow_lost_response,
    "timeout_retry": flow_timeout_retry,
    "race_delete": flow_race_delete,
    "race_move": flow_race_move,
    "decline": flow_decline,
    "cancel_then_accept": flow_cancel_then_accept,
    "answer_changed": flow_answer_changed,
    "changed_args": flow_changed_args,
    "tampered": flow_tampered,
    "foreign": flow_foreign,
    "expired": flow_expired,
    "before_expiry": flow_before_expiry,
    "edit_between": flow_edit_between,
    "archive": flow_archive,
    "silence": flow_silence,
    "list_pages": flow_list_pages,
    "search": flow_search,
    "setup": flow_setup,
    "wrong_tool": flow_wrong_tool,
    "write_retry": flow_write_retry,
    "replay_after_expiry": flow_replay_after_expiry,
    "shared_key": flow_shared_key,
    "concurrent_updates": flow_concurrent_updates,
    "roots_ungranted": flow_roots_ungranted,
    "quota_boundary": flow_quota_boundary,
    "full_pick": flow_full_pick,
}


MOVES_AWAY = {"race_move": True, "archive": True}
"""Kinds whose race may leave the flow's note in the archive workspace."""


STOP_CLEANUP_S = 10.0
"""How long a flow cut short (the run stopped by a signal, failed, or reached its duration) may
spend deleting what it created, shielded from the cancellation that cut it."""

LEFT_BEHIND: list[str] = []
"""Titles of flows cut short whose notes could not all be deleted in ``STOP_CLEANUP_S`` (nodes
unreachable, say): the command names their number at exit."""


async def run_flow(env: FlowEnv) -> bool:
    """Run one flow of ``env.kind`` and clean up after it; False when its setup (create, round
    1) did not complete (``env.outcome`` says where it stopped).

    With ``clean_up_cut_short``, a flow cut short (cancelled or failed) still deletes what it
    may have created, through the nodes by confirmed deletes of kind ``cleanup`` like any
    flow's, within ``STOP_CLEANUP_S``: it looks only for its own title, which holds the run's
    random tag and the flow id, so it never meets a note another run or a user made."""
    try:
        return await _run_flow(env)
    except BaseException:
        if env.clean_up_cut_short:
            await _cleanup_cut_short(env)
        raise


async def _cleanup_cut_short(env: FlowEnv) -> None:
    # Its note and twins may all be there (counting more is harmless: a look that finds none
    # ends the workspace's cleanup).
    env.leave(env.inbox, 1 + TWINS.get(env.kind, 0))
    if env.kind in MOVES_AWAY and env.archive not in env.leftovers:
        env.leave(env.archive)
    finished = False
    with trio.CancelScope(shield=True, deadline=trio.current_time() + STOP_CLEANUP_S):
        try:
            finished = await cleanup(env)
        except Exception:
            log.debug("cleanup of flow %d failed", env.flow, exc_info=True)
    if not finished:
        LEFT_BEHIND.append(env.title)


async def _run_flow(env: FlowEnv) -> bool:
    started = await start_flow(env)
    if started is not None:
        asked, note = started
        await FLOWS[env.kind](env, asked, note)
        if env.kind in MOVES_AWAY:
            env.leave(env.archive)
        if not env.done:
            env.leave(env.inbox)
    elif env.outcome != "create_refused":
        env.leave(env.inbox)
    await cleanup(env)
    return started is not None
