"""The confirmation races: each flow a real two-round ``notes_delete`` (or ``notes_archive``)
with one race forced into it (duplicates, lost replies, timeouts, a concurrent delete or move,
declines, cancels, changed answers or arguments, tampered or foreign states, expiry on either
side, an edit between the rounds, silence).

Layer: loadgen. Built of ``loadgen.flow_steps``; listed by ``loadgen.workload``.
"""

from __future__ import annotations

import logging
import random

import trio

from loadgen.clients import (
    request,
)
from loadgen.flow_steps import EXPIRY_MARGIN_MS, Asked, FlowEnv, ask, confirm, reasked

log = logging.getLogger("loadgen.workload")


async def flow_plain(env: FlowEnv, asked: Asked, note: str) -> None:
    await confirm(env, asked, note)


async def flow_duplicate(env: FlowEnv, asked: Asked, note: str) -> None:
    copies = env.rng.randint(2, 4)
    async with trio.open_nursery() as nursery:
        for _ in range(copies):
            nursery.start_soon(lambda: confirm(env, asked, note))


async def flow_lost_response(env: FlowEnv, asked: Asked, note: str) -> None:
    first = env.client.pick_node()
    await confirm(env, asked, note, node=first, lose=True)
    await confirm(env, asked, note, node=env.client.pick_node(avoid=first))


async def flow_timeout_retry(env: FlowEnv, asked: Asked, note: str) -> None:
    first = env.client.pick_node()
    await confirm(env, asked, note, node=first, timeout_s=env.rng.choice((0.0, 0.0002, 0.001)))
    await confirm(env, asked, note, node=env.client.pick_node(avoid=first))


async def flow_race_delete(env: FlowEnv, asked: Asked, note: str) -> None:
    theirs = await ask(env, asked.arguments["title"], client=env.rival)
    if theirs is not None and note in {c[0] for c in theirs.candidates}:
        await confirm(env, theirs, note, client=env.rival)
    await confirm(env, asked, note)


async def flow_race_move(env: FlowEnv, asked: Asked, note: str) -> None:
    args = {"workspaceUri": env.inbox, "noteId": note, "targetWorkspaceUri": env.archive}
    invoke = {
        "principal": env.principal,
        "tenant": env.tenant,
        "noteId": note,
        "from": env.inbox,
        "to": env.archive,
    }
    msg = request("tools/call", {"name": "notes_move", "arguments": args})
    await env.rival.op(
        "move", env.flow, env.kind, invoke, env.rival.pick_node(), env.principal, msg
    )
    await confirm(env, asked, note)


async def flow_decline(env: FlowEnv, asked: Asked, note: str) -> None:
    if env.rng.random() < 0.5:
        await confirm(env, asked, None, action="decline", expect="no_mutation")
    else:
        await confirm(env, asked, note, yes=False, expect="no_mutation")
    await confirm(env, asked, note, expect="no_mutation")


async def flow_cancel_then_accept(env: FlowEnv, asked: Asked, note: str) -> None:
    await confirm(env, asked, None, action="cancel", expect="no_mutation")
    await confirm(env, asked, note)


async def flow_answer_changed(env: FlowEnv, asked: Asked, note: str) -> None:
    await confirm(env, asked, note)
    await confirm(env, asked, note, yes=False, expect="no_mutation")


async def flow_changed_args(env: FlowEnv, asked: Asked, note: str) -> None:
    # Another title, or the same title in another workspace: the state binds both.
    if env.rng.random() < 0.5:
        changed = {**asked.arguments, "title": asked.arguments["title"] + " (other)"}
    else:
        changed = {**asked.arguments, "workspaceUri": env.archive}
    altered = {"altered": "arguments"}  # the model: a state that does not bind these arguments
    await confirm(env, asked, note, arguments=changed, expect="no_mutation", extra=altered)
    await confirm(env, asked, note)


def tamper(token: str, rng: random.Random) -> str:
    i = rng.randrange(len(token) - 20, len(token))
    ch = "A" if token[i] != "A" else "B"
    return token[:i] + ch + token[i + 1 :]


async def flow_tampered(env: FlowEnv, asked: Asked, note: str) -> None:
    tampered = tamper(asked.token, env.rng)
    altered = {"altered": "token"}
    await confirm(env, asked, note, token=tampered, expect="no_mutation", extra=altered)
    await confirm(env, asked, note)


async def flow_foreign(env: FlowEnv, asked: Asked, note: str) -> None:
    altered = {"altered": "principal"}
    await confirm(env, asked, note, principal=env.foreigner, expect="no_mutation", extra=altered)
    await confirm(env, asked, note)


async def _sleep_until_redis(env: FlowEnv, target_ms: int) -> None:
    await trio.sleep(max(0.0, (target_ms - env.redis_now_ms()) / 1000))


EXACT_EXPIRY = {"before_expiry": (-1, 1), "expired": (0, 0)}
"""With ``FlowEnv.exact_expiry``: kind -> (where the answer is aimed, in ms from the expiry on
the Redis clock; the margin it records). One millisecond before (honoured), at it (refused)."""


async def flow_expired(env: FlowEnv, asked: Asked, note: str) -> None:
    aim, margin = EXACT_EXPIRY["expired"] if env.exact_expiry else (EXPIRY_MARGIN_MS,) * 2
    await _sleep_until_redis(env, asked.exp_ms + aim)
    await confirm(
        env,
        asked,
        note,
        expect="no_mutation",
        extra={"redis_send_ms": env.redis_now_ms(), "margin_ms": margin},
    )


async def flow_before_expiry(env: FlowEnv, asked: Asked, note: str) -> None:
    # Aim at twice the margin before expiry, so that the send time recorded after waking is
    # still at least one margin before it (the checker holds the node to that).
    aim, margin = (-2 * EXPIRY_MARGIN_MS, EXPIRY_MARGIN_MS)
    if env.exact_expiry:
        aim, margin = EXACT_EXPIRY["before_expiry"]
    await _sleep_until_redis(env, asked.exp_ms + aim)
    sent = env.redis_now_ms()
    await confirm(env, asked, note, extra={"redis_send_ms": sent, "margin_ms": margin})


async def flow_edit_between(env: FlowEnv, asked: Asked, note: str) -> None:
    args = {"workspaceUri": env.inbox, "noteId": note, "body": f"edited by flow {env.flow}"}
    msg = request("tools/call", {"name": "notes_update", "arguments": args})
    invoke = {"principal": env.principal, "tenant": env.tenant, "noteId": note}
    await env.rival.op(
        "update", env.flow, env.kind, invoke, env.rival.pick_node(), env.principal, msg
    )
    out = await confirm(env, asked, note)
    again = reasked(out, asked)
    if again is not None:
        await confirm(env, again, note)


async def flow_archive(env: FlowEnv, asked: Asked, note: str) -> None:
    # An archive state (round 1 asked notes_archive): the accept goes to 1-3 nodes at once.
    copies = env.rng.randint(1, 3)
    async with trio.open_nursery() as nursery:
        for _ in range(copies):
            nursery.start_soon(lambda: confirm(env, asked, note))


async def flow_silence(env: FlowEnv, asked: Asked, note: str) -> None:
    # The retry carries the state but no answer: the form is asked again (with a fresh state),
    # and the accept goes under that one (or the first, which silence leaves usable).
    out = await confirm(env, asked, None, action="silence", expect="no_mutation")
    await confirm(env, reasked(out, asked) or asked, note)


# --- the rest of the surface: reads, setup, misuse, keyed writes -----------------------------
