"""The race workload: each flow is a real two-round ``notes_delete`` with one race forced into it
(the ``archive`` flow: a two-round ``notes_archive``, its confirmation sent to several nodes).
Beside the confirmations, flows drive the rest of the tool surface (``TOOLS_DRIVEN``): every
write (create, update, move, archive), the reads (``notes_list`` page by page, ``notes_search``
with and without roots), ``notes_setup`` up to its URL-mode elicitation, and their misuses (a
state or a cursor used by another principal, for another workspace or title, for another tool).

Layer: loadgen. Drives nodes through ``loadgen.clients``; learns each state's nonce and expiry
for the history through a ``loadgen.states.StateReader`` (our nodes: the key ring opens it, a
trusted harness like a Jepsen client with access to the database's own ids; a foreign server:
the token's digest and the client's clock). It never reads the store while running.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from loadgen.clients import (
    ROOTS_CAPABILITIES,
    URL_CAPABILITIES,
    Client,
    Outcome,
    request,
)
from loadgen.states import StateReader
from loadgen.tenants import LOAD_TENANTS

log = logging.getLogger("loadgen.workload")

TITLES = ("Weekly report", "TPS report", "Minutes", "Todo")
"""Title stems; every flow adds its run tag and flow id (``flow_title``), so no flow ever meets
another flow's notes: whatever a flow leaves behind never grows a later flow's candidate list."""
FORM_KEY = "confirm_delete"
DELETE_TOOL = "notes_delete"
ARCHIVE_TOOL = "notes_archive"
FORM_KEYS = {DELETE_TOOL: FORM_KEY, ARCHIVE_TOOL: "confirm_archive"}

EXPIRY_MARGIN_MS = 400
"""How far before (or after) a state's expiry the ``before_expiry`` (``expired``) flows answer,
by the load generator's estimate of the Redis clock. Generous against scheduling noise."""

UNKNOWN_OUTCOME_RETRIES = 4
"""How often a client retries an answer whose outcome it could not learn (node down, store
unavailable), each time on another node. The replay store makes every retry safe."""

RETRY_BACKOFF_S = 0.05
"""Pause before such a retry, so a briefly unavailable store has a moment to recover."""

SETUP_ATTEMPTS = 10
"""Tries of each setup step (create, round 1) whose outcome stays unknown, each on another node,
with exponential backoff from ``RETRY_BACKOFF_S``: faults cost a flow latency, not its race.
Ten tries with the cap below span about ten seconds, longer than any outage ``--faults``
plays (a node restart, a Redis pause of up to 1.3 s, their overlaps)."""

SETUP_BACKOFF_MAX_S = 2.0
"""Longest pause between two setup tries."""

TWINS: dict[str, int] = {"duplicate": 1, "race_delete": 1, "list_pages": 3}
"""Notes each kind creates beside its own under the same title, so that round 1 shows a
candidate list to pick from and the race is over one pick among several (the other kinds race
on a single candidate: a twin would only add a create and a cleanup to them)."""

CLEANUP_ROUNDS = 4
"""Most notes one flow's cleanup deletes per workspace (its twins, a declined or expired note,
a note moved away, a create that landed twice): candidate sets stay bounded by design."""

CLEANUP_KIND = "cleanup"
"""The ``kind`` of a flow's cleanup operations in the history: confirmed deletes like any other,
checked by every invariant, but not part of the flow's race."""

SetupOutcome = Literal[
    "completed",
    "create_refused",
    "create_unknown",
    "ask_refused",
    "ask_unknown",
    "not_candidate",
]
"""How a flow ended: ``completed`` (past round 1, its race ran) or where its setup stopped."""

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
)
"""Every race kind a run exercises (``loadgen.check.exercise`` holds each to it)."""

KEYED_KINDS: tuple[str, ...] = ()
"""Kinds run only when weighted (none now: ``write_retry`` joined the race kinds once every
node honoured the idempotency key)."""

TOOLS_DRIVEN: dict[str, tuple[str, ...]] = {
    "notes_create": ("every kind (setup)",),
    "notes_delete": ("every kind (round 1, the race, cleanup)",),
    "notes_archive": ("archive", "wrong_tool"),
    "notes_move": ("race_move", "write_retry"),
    "notes_update": ("edit_between", "write_retry"),
    "notes_list": ("list_pages",),
    "notes_search": ("search",),
    "notes_setup": ("setup",),
}
"""Which kinds drive each tool the node serves (tests/test_workload_surface.py holds this to
the node's ``tools/list``)."""

DEFAULT_WEIGHTS: dict[str, float] = dict.fromkeys(RACE_KINDS, 1.0) | {
    "plain": 3.0,
    "duplicate": 3.0,
    "expired": 0.5,
    "before_expiry": 0.5,
}


FLOWS_PER_TENANT = 5_000
"""``tenants_for``: a run gets a tenant per this many flows, so that the checker, which holds one
tenant's history at a time, needs the same memory for any run length."""

MAX_TENANTS = 1_000


def tenants_for(flows: int) -> int:
    """Load tenants for a run of ``flows`` flows (at least ``LOAD_TENANTS``)."""
    return max(LOAD_TENANTS, min(MAX_TENANTS, -(-flows // FLOWS_PER_TENANT)))


@dataclass
class Asked:
    """What round 1 gave the client."""

    token: str
    nonce: str
    exp_ms: int
    candidates: list[tuple[str, int]]
    arguments: dict[str, Any]
    tool: str = DELETE_TOOL


LIST_MISUSES = ("principal", "workspace", "title", "tampered", "state")
"""What a ``list_pages`` flow does with a cursor that does not belong: another principal, another
workspace, another title filter, a changed byte, or a ``requestState`` passed as the cursor.
Each must be refused (``isError``), showing nothing."""

SETUP_TOOL = "notes_setup"
SETUP_KEY = "report_service"


@dataclass
class FlowEnv:
    """Everything one flow needs."""

    flow: int
    kind: str
    client: Client
    rival: Client
    states: StateReader
    """Reads each round-1 state's facts (opens it with the key ring, or not at all)."""
    principal: str
    foreigner: str
    tenant: str
    inbox: str
    archive: str
    redis_offset_ms: int
    rng: random.Random
    tag: str = "run"
    root: str = ""
    """The root both principals of the tenant are granted (``notes_search``'s roots)."""
    clean_up_cut_short: bool = False
    """Whether this flow, cut short, deletes what it created (``run_flow``)."""
    exact_expiry: bool = False
    """Aim expiry races at the exact millisecond (``EXACT_EXPIRY``), not a margin away: only
    where the Redis-clock estimate is exact (a deterministic run's virtual clock)."""
    steps: list[str] = field(default_factory=list)
    outcome: SetupOutcome = "completed"
    done: bool = False
    """Some answer of this flow said its note was deleted or archived."""
    leftovers: dict[str, int] = field(default_factory=dict)
    """Workspace -> notes this flow may have left there (its cleanup deletes them)."""

    @property
    def title(self) -> str:
        """This flow's own title (see ``flow_title``)."""
        return flow_title(self.tag, self.flow)

    def leave(self, workspace: str, notes: int = 1) -> None:
        """Note that up to ``notes`` more notes of this flow may remain in ``workspace``."""
        self.leftovers[workspace] = self.leftovers.get(workspace, 0) + notes

    def redis_now_ms(self) -> int:
        """The load generator's estimate of the Redis clock."""
        return int(time.time() * 1000) + self.redis_offset_ms


def flow_title(tag: str, flow: int) -> str:
    """A title no other flow uses: a stem, the run's tag and the flow id."""
    return f"{TITLES[flow % len(TITLES)]} {tag}-{flow}"


def backoff_s(attempt: int, rng: random.Random) -> float:
    """Pause before setup try ``attempt`` (1, 2, ...): exponential, jittered, capped."""
    base = min(SETUP_BACKOFF_MAX_S, RETRY_BACKOFF_S * 2.0 ** (attempt - 1))
    return base * (0.5 + rng.random() / 2)


async def create_once(env: FlowEnv, title: str, node: int, client: Client | None = None) -> Outcome:
    """One ``notes_create`` of ``title`` in the inbox, on ``node``."""
    c = client or env.client
    args = {"workspaceUri": env.inbox, "title": title, "body": f"flow {env.flow}"}
    msg = request("tools/call", {"name": "notes_create", "arguments": args})
    invoke = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": env.inbox,
        "title": title,
    }
    return await c.op("create", env.flow, env.kind, invoke, node, env.principal, msg)


def _created(out: Outcome) -> str | None:
    if out.type != "ok" or out.value["isError"]:
        return None
    note_id: str = out.value["noteId"]  # classify copies it from structuredContent
    return note_id


async def create(env: FlowEnv, title: str, client: Client | None = None) -> str | None:
    """Create a note titled ``title`` as a careful client: an answer of unknown outcome is
    resolved first, by round 1 on ``title`` (the title is the flow's own, so any note it shows
    is the one that landed), and only then tried again, on another node. None: refused, or still
    unknown after ``SETUP_ATTEMPTS`` (``env.outcome`` says which)."""
    c = client or env.client
    node = c.pick_node()
    for attempt in range(1, SETUP_ATTEMPTS + 1):
        out = await create_once(env, title, node, c)
        if out.type != "info":
            note = _created(out)
            env.outcome = "completed" if note else "create_refused"
            return note
        await trio.sleep(backoff_s(attempt, env.rng))
        landed = await _lookup(env, title, c)
        if landed is None:
            break  # unresolved: never make another note that may be a second one
        if landed:
            env.leave(env.inbox, len(landed) - 1)  # an earlier try may have landed too
            return landed[0]
        node = c.pick_node(avoid=node)
    env.outcome = "create_unknown"
    return None


async def _lookup(env: FlowEnv, title: str, c: Client) -> list[str] | None:
    """Note ids titled ``title`` in the inbox, oldest first, by round 1 of ``notes_delete``
    (a read: safe to retry). [] when there are none; None when no node answered."""
    for attempt in range(1, SETUP_ATTEMPTS + 1):
        out = await ask_once(env, title, c.pick_node(), c, DELETE_TOOL, env.inbox)
        asked = _opened(out, {})
        if asked is not None:
            return [n for n, _ in asked.candidates]
        if out.type != "info":
            return []  # "No note titled ...": the create did not land
        await trio.sleep(backoff_s(attempt, env.rng))
    return None


def _state_facts(env: FlowEnv, out: Outcome, tool: str) -> dict[str, Any]:
    """The nonce, expiry and candidates of the state in an input_required answer (if any)."""
    res = out.result or {}
    if out.type != "ok" or res.get("resultType") != "input_required":
        return {}
    return env.states.facts(tool, res)


def _opened(out: Outcome, arguments: dict[str, Any], tool: str = DELETE_TOOL) -> Asked | None:
    facts = out.value  # annotated with the state's facts by Client.op (see _state_facts)
    if "nonce" not in facts:
        return None
    token = str((out.result or {})["requestState"])
    cands = [(str(c[0]), int(c[1])) for c in facts["candidates"]]
    return Asked(token, facts["nonce"], facts["exp_ms"], cands, arguments, tool)


async def ask_once(
    env: FlowEnv,
    title: str,
    node: int,
    client: Client | None = None,
    tool: str = DELETE_TOOL,
    workspace: str | None = None,
    kind: str | None = None,
) -> Outcome:
    """One round 1 of ``tool`` on ``title`` in ``workspace`` (default: the inbox)."""
    c = client or env.client
    ws = workspace or env.inbox
    args = {"workspaceUri": ws, "title": title}
    msg = request("tools/call", {"name": tool, "arguments": args})
    invoke = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": ws,
        "title": title,
        "redis_ms": env.redis_now_ms(),
    }
    return await c.op(
        "ask",
        env.flow,
        kind or env.kind,
        invoke,
        node,
        env.principal,
        msg,
        annotate=lambda o: _state_facts(env, o, tool),
    )


async def ask(
    env: FlowEnv,
    title: str,
    client: Client | None = None,
    tool: str = DELETE_TOOL,
    workspace: str | None = None,
    kind: str | None = None,
) -> Asked | None:
    """Round 1, retried on another node (with backoff) while its outcome is unknown: a round 1
    only reads, so every retry is safe. None: refused, or unknown after ``SETUP_ATTEMPTS``."""
    c = client or env.client
    ws = workspace or env.inbox
    node = c.pick_node()
    for attempt in range(1, SETUP_ATTEMPTS + 1):
        out = await ask_once(env, title, node, c, tool, ws, kind)
        if out.type != "info":
            return _opened(out, {"workspaceUri": ws, "title": title}, tool)
        await trio.sleep(backoff_s(attempt, env.rng))
        node = c.pick_node(avoid=node)
    return None


async def confirm(
    env: FlowEnv,
    asked: Asked,
    note_id: str | None,
    *,
    action: str = "accept",
    yes: bool = True,
    expect: str = "execute",
    node: int | None = None,
    client: Client | None = None,
    principal: str | None = None,
    token: str | None = None,
    arguments: dict[str, Any] | None = None,
    lose: bool = False,
    timeout_s: float | None = None,
    extra: dict[str, Any] | None = None,
    kind: str | None = None,
) -> Outcome:
    """Round 2: answer the form under ``asked``'s state (or a deliberately wrong variant)."""
    c = client or env.client
    who = principal or env.principal
    if action == "accept":
        answer: dict[str, Any] = {
            "action": "accept",
            "content": {"noteId": note_id, "confirm": yes},
        }
    else:
        answer = {"action": action}
    params: dict[str, Any] = {
        "name": asked.tool,
        "arguments": arguments or asked.arguments,
        "requestState": token or asked.token,
    }
    if action != "silence":  # silence: the retry carries the state but no answer at all
        params["inputResponses"] = {FORM_KEYS[asked.tool]: answer}
    invoke = {
        "principal": who,
        "tenant": env.tenant,
        "nonce": asked.nonce,
        "action": action,
        "noteId": note_id,
        "confirm": yes,
        "expect": expect,
        **(extra or {}),
    }
    target = c.pick_node() if node is None else node
    # A deliberately lost or cut-short answer is retried by the flow itself; any other unknown
    # outcome (node down, store unavailable) is retried here, on another node, as a client would.
    retries = 0 if lose or timeout_s is not None else UNKNOWN_OUTCOME_RETRIES
    while True:
        out = await c.op(
            "confirm",
            env.flow,
            kind or env.kind,
            invoke,
            target,
            who,
            request("tools/call", params),
            timeout_s=timeout_s,
            lose_response=lose,
            annotate=lambda o: _state_facts(env, o, asked.tool),
        )
        if out.type != "info" or retries == 0:
            env.done = env.done or _executed(out)
            return out
        retries -= 1
        await trio.sleep(RETRY_BACKOFF_S)
        target = c.pick_node(avoid=target)
        if "redis_send_ms" in invoke:  # each attempt is held to its own send time
            invoke["redis_send_ms"] = env.redis_now_ms()


def _executed(out: Outcome) -> bool:
    sc = (out.result or {}).get("structuredContent") or {}
    return out.type == "ok" and (sc.get("deleted") is True or sc.get("archived") is True)


def _reasked(out: Outcome, asked: Asked) -> Asked | None:
    return _opened(out, asked.arguments, asked.tool)


async def _start(env: FlowEnv) -> tuple[Asked, str] | None:
    title = env.title
    note = await create(env, title)
    if note is None:
        return None
    for _ in range(TWINS.get(env.kind, 0)):  # placed on purpose: a list to pick from
        env.leave(env.inbox)
        await create(env, title)
    env.outcome = "completed"
    tool = ARCHIVE_TOOL if env.kind == "archive" else DELETE_TOOL
    asked = await ask(env, title, tool=tool)
    if asked is None:
        env.outcome = "ask_unknown" if _last_unknown(env) else "ask_refused"
        return None
    if note not in {c[0] for c in asked.candidates}:
        env.outcome = "not_candidate"
        return None
    return asked, note


def _last_unknown(env: FlowEnv) -> bool:
    """Whether the flow's last recorded answer was of unknown outcome."""
    return env.client.last_type == "info"


async def cleanup(env: FlowEnv) -> bool:
    """Delete what the flow may have left behind (twins, a declined, expired or moved note),
    each by a confirmed ``notes_delete`` of kind ``cleanup``: the history and the journal show
    them like any deletion, and no later flow meets them. False when some workspace could not
    be looked at (no node answered round 1)."""
    seen_all = True
    for workspace, most in env.leftovers.items():
        for _ in range(min(most, CLEANUP_ROUNDS)):
            asked = await ask(env, env.title, workspace=workspace, kind=CLEANUP_KIND)
            if asked is None:  # refused (no such note), or no node answered
                seen_all = seen_all and not _last_unknown(env)
                break
            if not asked.candidates:
                break
            await confirm(env, asked, asked.candidates[0][0], kind=CLEANUP_KIND)
    return seen_all


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


def _tamper(token: str, rng: random.Random) -> str:
    i = rng.randrange(len(token) - 20, len(token))
    ch = "A" if token[i] != "A" else "B"
    return token[:i] + ch + token[i + 1 :]


async def flow_tampered(env: FlowEnv, asked: Asked, note: str) -> None:
    tampered = _tamper(asked.token, env.rng)
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
    again = _reasked(out, asked)
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
    await confirm(env, _reasked(out, asked) or asked, note)


# --- the rest of the surface: reads, setup, misuse, keyed writes -----------------------------


async def list_page(
    env: FlowEnv,
    listing: int,
    page: int,
    *,
    cursor: str | None = None,
    principal: str | None = None,
    workspace: str | None = None,
    title: str | None = None,
    misuse: str | None = None,
) -> Outcome:
    """One ``notes_list`` page of ``title`` (default: the flow's) in ``workspace`` (default:
    the inbox); ``listing`` numbers the flow's page sequences, ``page`` the page in it."""
    ws = workspace or env.inbox
    args: dict[str, Any] = {"workspaceUri": ws, "title": title or env.title}
    if cursor is not None:
        args["cursor"] = cursor
    who = principal or env.principal
    invoke: dict[str, Any] = {
        "principal": who,
        "tenant": env.tenant,
        "workspace": ws,
        "title": args["title"],
        "listing": listing,
        "page": page,
        "cursor": cursor is not None,
    }
    if misuse is not None:
        invoke["misuse"] = misuse
    msg = request("tools/call", {"name": "notes_list", "arguments": args})
    c = env.client
    return await c.op("list", env.flow, env.kind, invoke, c.pick_node(), who, msg)


async def _page(env: FlowEnv, listing: int, page: int, cursor: str | None) -> Outcome:
    """A page, asked again (another node, backoff) while its outcome is unknown: a read."""
    out = await list_page(env, listing, page, cursor=cursor)
    for attempt in range(1, SETUP_ATTEMPTS):
        if out.type != "info":
            break
        await trio.sleep(backoff_s(attempt, env.rng))
        out = await list_page(env, listing, page, cursor=cursor)
    return out


def _cursor(out: Outcome) -> str | None:
    sc = (out.result or {}).get("structuredContent") or {}
    cursor = sc.get("nextCursor")
    return cursor if out.type == "ok" and isinstance(cursor, str) else None


async def flow_list_pages(env: FlowEnv, asked: Asked, note: str) -> None:
    # Page through the flow's notes (four, two per page in simulations); one more is created
    # after the first page (it may or may not show). Then a cursor is used where it does not
    # belong, and the delete state is passed as a cursor and a cursor as a delete state.
    first = await _page(env, 0, 0, None)
    cursor, page, misused = _cursor(first), 1, _cursor(first)
    env.leave(env.inbox)
    await create(env, env.title)
    while cursor is not None and page < CLEANUP_ROUNDS * 4:
        out = await _page(env, 0, page, cursor)
        cursor, page = _cursor(out), page + 1
    if misused is not None:
        misuse = env.rng.choice(LIST_MISUSES)
        kw: dict[str, Any] = {"cursor": misused, "misuse": misuse}
        if misuse == "principal":
            kw["principal"] = env.foreigner
        elif misuse == "workspace":
            kw["workspace"] = env.archive
        elif misuse == "title":
            kw["title"] = env.title + " (other)"
        elif misuse == "tampered":
            kw["cursor"] = _tamper(misused, env.rng)
        else:
            kw["cursor"] = asked.token
        await list_page(env, 1, 1, **kw)
        altered = {"altered": "token"}
        await confirm(env, asked, note, token=misused, expect="no_mutation", extra=altered)
    await confirm(env, asked, note)


async def search_call(
    env: FlowEnv,
    listing: int,
    *,
    workspace: str | None,
    responses: dict[str, Any] | None = None,
    shows: str = "",
) -> Outcome:
    """One ``notes_search`` of the flow's title: in ``workspace``, or (None) in the roots the
    client gives when asked; ``shows`` names the workspace a complete answer searches."""
    args: dict[str, Any] = {"title": env.title}
    if workspace is not None:
        args["workspaceUri"] = workspace
    params: dict[str, Any] = {"name": "notes_search", "arguments": args}
    if responses is not None:
        params["inputResponses"] = responses
    invoke = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": workspace or shows,
        "title": env.title,
        "listing": listing,
        "page": 0,
        "cursor": False,
        "roots": workspace is None,
    }
    msg = request("tools/call", params, capabilities=ROOTS_CAPABILITIES)
    c = env.client
    return await c.op("search", env.flow, env.kind, invoke, c.pick_node(), env.principal, msg)


async def flow_search(env: FlowEnv, asked: Asked, note: str) -> None:
    # By workspace, then by roots: the tenant's root covers the inbox and the archive, so the
    # node asks again for the roots and which workspace; the inbox alone needs no pick.
    await search_call(env, 0, workspace=env.inbox)
    asked_roots = await search_call(env, 1, workspace=None)
    if asked_roots.type == "ok" and asked_roots.value.get("reask"):
        root = env.rng.choice((env.root, env.inbox)) if env.root else env.inbox
        roots = {"roots": {"roots": [{"uri": root}]}}
        out = await search_call(env, 2, workspace=None, responses=roots, shows=env.inbox)
        if out.type == "ok" and out.value.get("reask"):
            pick = {"action": "accept", "content": {"workspaceUri": env.inbox}}
            responses = roots | {"workspace": pick}
            await search_call(env, 3, workspace=None, responses=responses, shows=env.inbox)
    await confirm(env, asked, note)


async def setup_call(
    env: FlowEnv,
    action: str,
    *,
    token: str | None = None,
    tool: str = SETUP_TOOL,
    misuse: str | None = None,
) -> Outcome:
    """One ``notes_setup`` call (round 1 when ``token`` is None; else a retry answering the
    URL elicitation with ``action``, or ``silence``); ``tool`` other than ``notes_setup``
    presents a setup state to another tool (``misuse``)."""
    args: dict[str, Any] = {"workspaceUri": env.inbox}
    if tool != SETUP_TOOL:
        args["title"] = env.title
    params: dict[str, Any] = {"name": tool, "arguments": args}
    if token is not None:
        params["requestState"] = token
        if action not in ("silence", "round1"):
            params["inputResponses"] = {SETUP_KEY: {"action": action}}
    invoke: dict[str, Any] = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": env.inbox,
        "action": action,
        "tool": tool,
        "redis_ms": env.redis_now_ms(),
    }
    if misuse is not None:
        invoke["misuse"] = misuse
    msg = request("tools/call", params, capabilities=URL_CAPABILITIES)
    c = env.client
    return await c.op(
        "setup",
        env.flow,
        env.kind,
        invoke,
        c.pick_node(),
        env.principal,
        msg,
        annotate=lambda o: _setup_facts(env, o, tool),
    )


def _setup_facts(env: FlowEnv, out: Outcome, tool: str) -> dict[str, Any]:
    """A setup state's nonce and expiry, under names the confirmation checks do not read."""
    facts = _state_facts(env, out, tool)
    if not facts:
        return {}
    return {"state_nonce": facts["nonce"], "exp_ms": facts["exp_ms"], "state_tool": facts["tool"]}


async def flow_setup(env: FlowEnv, asked: Asked, note: str) -> None:
    # Up to the URL-mode elicitation (the setup page is not driven: nobody completes it, so
    # the tool may never say configured). Silence or an accept re-offer the link; decline and
    # cancel end it unconfigured; the setup state is refused by notes_delete, and the delete
    # state by notes_setup.
    first = await setup_call(env, "round1")
    token = str((first.result or {}).get("requestState") or "")
    if token:
        await setup_call(env, env.rng.choice(("silence", "accept")), token=token)
        await setup_call(env, "accept", token=token, tool=DELETE_TOOL, misuse="setup_state")
        await setup_call(env, env.rng.choice(("decline", "cancel")), token=token)
    await setup_call(env, "accept", token=asked.token, misuse="delete_state")
    await confirm(env, asked, note)


async def flow_wrong_tool(env: FlowEnv, asked: Asked, note: str) -> None:
    # The delete state presented to notes_archive with the same arguments: the fixed refusal
    # (the state binds its tool), and the state stays usable for the accept that follows.
    wrong = Asked(
        asked.token, asked.nonce, asked.exp_ms, asked.candidates, asked.arguments, ARCHIVE_TOOL
    )
    altered = {"altered": "tool"}
    await confirm(env, wrong, note, expect="no_mutation", extra=altered)
    await confirm(env, asked, note)


WRITE_FS = {"notes_create": "create", "notes_update": "update", "notes_move": "move"}


async def write(
    env: FlowEnv,
    tool: str,
    args: dict[str, Any],
    *,
    key: str | None = None,
    node: int | None = None,
    lose: bool = False,
    expect: str = "apply",
) -> Outcome:
    """One write (``notes_create``, ``notes_update``, ``notes_move``) with an idempotency key
    when given; ``lose`` drops the reply after the node answered (the outcome is unknown to
    the client). ``expect`` ``key_conflict``: the key was used before with other arguments."""
    f = WRITE_FS[tool]
    invoke: dict[str, Any] = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": args["workspaceUri"],
        "expect": expect,
    }
    if f == "create":
        invoke["title"] = args["title"]
    else:
        invoke["noteId"] = args["noteId"]
    if f == "move":
        invoke["from"], invoke["to"] = args["workspaceUri"], args["targetWorkspaceUri"]
    if key is not None:
        invoke["key"] = key
    msg = request("tools/call", {"name": tool, "arguments": args}, idempotency_key=key)
    c = env.client
    target = c.pick_node() if node is None else node
    return await c.op(f, env.flow, env.kind, invoke, target, env.principal, msg, lose_response=lose)


async def keyed(env: FlowEnv, tool: str, args: dict[str, Any], key: str) -> Outcome:
    """A write whose first reply is lost, retried with the same key on another node until its
    outcome is known (the node answers the recorded result, marked as a replay)."""
    first = env.client.pick_node()
    out = await write(env, tool, args, key=key, node=first, lose=True)
    node = first
    for attempt in range(1, SETUP_ATTEMPTS + 1):
        node = env.client.pick_node(avoid=node)
        out = await write(env, tool, args, key=key, node=node)
        if out.type != "info":
            break
        await trio.sleep(backoff_s(attempt, env.rng))
    return out


async def flow_write_retry(env: FlowEnv, asked: Asked, note: str) -> None:
    # Every write retried with its idempotency key after a lost reply: a create (one note),
    # a move of that note (one move), an edit of the flow's note (one version step); the same
    # key with other arguments is refused. Then the accept, re-asked since the note changed.
    tag = f"flow.{env.tag}.{env.flow}.{env.rng.getrandbits(64):016x}"  # 16-128 characters
    args = {"workspaceUri": env.inbox, "title": env.title, "body": f"keyed {env.flow}"}
    env.leave(env.inbox)
    made = await keyed(env, "notes_create", args, f"{tag}-create")
    extra = made.value.get("noteId") if made.type == "ok" else None
    if isinstance(extra, str):
        env.leave(env.archive)
        move = {"workspaceUri": env.inbox, "noteId": extra, "targetWorkspaceUri": env.archive}
        await keyed(env, "notes_move", move, f"{tag}-move")
    edit = {"workspaceUri": env.inbox, "noteId": note, "body": f"keyed edit {env.flow}"}
    await keyed(env, "notes_update", edit, f"{tag}-update")
    other = {**edit, "body": f"another edit {env.flow}"}
    await write(env, "notes_update", other, key=f"{tag}-update", expect="key_conflict")
    out = await confirm(env, asked, note)
    again = _reasked(out, asked)
    if again is not None:
        await confirm(env, again, note)


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
    started = await _start(env)
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
