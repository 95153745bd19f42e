"""Flows for the cases the other kinds never reach: a decided answer retried after its state
expired (inside the replay grace), one idempotency key sent by two principals, two concurrent
updates of one note, a pick list as long as its limit answered with a drawn pick.

Layer: loadgen. Built of ``loadgen.flow_steps`` and the writes of ``loadgen.surface_flows``;
listed by ``loadgen.workload``.
"""

from __future__ import annotations

from functools import partial

import trio

from loadgen.flow_steps import (
    CLEANUP_KIND,
    EXPIRY_MARGIN_MS,
    FULL_PICK_EXTRA_ROUNDS,
    Asked,
    FlowEnv,
    ask,
    confirm,
    create,
    reasked,
)
from loadgen.surface_flows import write

KEY_BITS = 64
"""Random bits in a shared idempotency key (with the run's tag and the flow id: 16 to 128
characters, as the node requires)."""


async def flow_replay_after_expiry(env: FlowEnv, asked: Asked, note: str) -> None:
    # The accept, then the same accept again once the state has expired: inside the replay
    # grace the recorded outcome must come back as a replay, not a refusal. Aimed at the first
    # millisecond past the expiry (a key is gone once its deadline's millisecond has passed)
    # where the Redis-clock estimate is exact.
    await confirm(env, asked, note)
    aim, margin = (1, 1) if env.exact_expiry else (EXPIRY_MARGIN_MS, EXPIRY_MARGIN_MS)
    await trio.sleep(max(0.0, (asked.exp_ms + aim - env.redis_now_ms()) / 1000))
    extra = {"redis_send_ms": env.redis_now_ms(), "margin_ms": margin}
    await confirm(env, asked, note, extra=extra)


async def flow_shared_key(env: FlowEnv, asked: Asked, note: str) -> None:
    # Both principals of the tenant create a note under one idempotency key: a key is the
    # principal's own, so each create applies once and neither is the other's replay.
    key = f"shared.{env.tag}.{env.flow}.{env.rng.getrandbits(KEY_BITS):016x}"
    for who in (env.principal, env.foreigner):
        env.leave(env.inbox)
        body = f"shared key {env.flow} by {who}"
        args = {"workspaceUri": env.inbox, "title": env.title, "body": body}
        await write(env, "notes_create", args, key=key, principal=who)
    await confirm(env, asked, note)


async def flow_concurrent_updates(env: FlowEnv, asked: Asked, note: str) -> None:
    # Two edits of the flow's note at once, from two clients on two nodes: at most one
    # version step each, the journal's steps one at a time; then the accept, re-asked since
    # the note changed.
    async with trio.open_nursery() as nursery:
        for i, client in enumerate((env.client, env.rival)):
            edit = {"workspaceUri": env.inbox, "noteId": note, "body": f"edit {env.flow}.{i}"}
            nursery.start_soon(partial(write, env, "notes_update", edit, client=client))
    out = await confirm(env, asked, note)
    again = reasked(out, asked)
    if again is not None:
        await confirm(env, again, note)


async def flow_full_pick(env: FlowEnv, asked: Asked, note: str) -> None:
    # As many notes of the flow's title as a pick list may offer (the limit, exactly), round 1
    # again, and an accept of a pick drawn among all it offers (a form offering a wrong note
    # can be answered with it). Then the title is cleared, one confirmed delete at a time. The
    # flow's first state (``asked``, for ``note`` alone) is left unanswered, as ``silence``
    # leaves one.
    for _ in range(env.pick_limit - 1):
        env.leave(env.inbox)
        if await create(env, env.title) is None:
            break
    env.outcome = "completed"  # the flow's own setup completed; these creates are its race
    full = await ask(env, env.title)
    if full is not None and full.candidates:
        picked = str(env.rng.choice(full.candidates)[0])
        await confirm(env, full, picked)
    for _ in range(env.pick_limit + FULL_PICK_EXTRA_ROUNDS):
        left = await ask(env, env.title, kind=CLEANUP_KIND)
        if left is None or not left.candidates:
            break
        await confirm(env, left, left.candidates[0][0], kind=CLEANUP_KIND)
