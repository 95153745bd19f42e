"""The steps every race flow is made of: the flow's environment (``FlowEnv``), creating its
notes, round 1 (``ask``), answering (``confirm``) and cleaning up after it.

Layer: loadgen. Drives nodes through ``loadgen.clients``; learns each state's nonce and expiry
for the history through a ``loadgen.states.StateReader``. The flows themselves are in
``loadgen.race_flows`` (the confirmation races) and ``loadgen.surface_flows`` (the rest of the
tool surface); ``loadgen.workload`` lists them.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from loadgen.check.limits import MAX_OFFERED
from loadgen.clients import (
    Client,
    Outcome,
    request,
)
from loadgen.states import StateReader

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

FULL_PICK_EXTRA_ROUNDS = 4
"""Cleanup rounds a ``full_pick`` flow makes beyond its pick list's limit (``FlowEnv.pick_limit``):
it fills the list to the limit, plus a few notes whose create's outcome was unknown."""

CLEANUP_KIND = "cleanup"
"""The ``kind`` of a flow's cleanup operations in the history: confirmed deletes like any other,
checked by every invariant, but not part of the flow's race."""

SetupFlowOutcome = Literal[
    "completed",
    "create_refused",
    "create_unknown",
    "ask_refused",
    "ask_unknown",
    "not_candidate",
]
"""How a flow ended: ``completed`` (past round 1, its race ran) or where its setup stopped."""


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
    stranger_root: str = "file:///load/ungranted"
    """A root the flow's principal is not granted (another tenant's): ``roots_ungranted``."""
    clean_up_cut_short: bool = False
    """Whether this flow, cut short, deletes what it created (``run_flow``)."""
    exact_expiry: bool = False
    pick_limit: int = MAX_OFFERED
    """The nodes' pick-list limit (``loadgen.check.limits.Limits.max_offered``)."""
    """Aim expiry races at the exact millisecond (``EXACT_EXPIRY``), not a margin away: only
    where the Redis-clock estimate is exact (a deterministic run's virtual clock)."""
    steps: list[str] = field(default_factory=list)
    outcome: SetupFlowOutcome = "completed"
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


def state_facts(env: FlowEnv, out: Outcome, tool: str) -> dict[str, Any]:
    """The nonce, expiry and candidates of the state in an input_required answer (if any)."""
    res = out.result or {}
    if out.type != "ok" or res.get("resultType") != "input_required":
        return {}
    return env.states.facts(tool, res)


def _opened(out: Outcome, arguments: dict[str, Any], tool: str = DELETE_TOOL) -> Asked | None:
    facts = out.value  # annotated with the state's facts by Client.op (see state_facts)
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
        annotate=lambda o: state_facts(env, o, tool),
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
            annotate=lambda o: state_facts(env, o, asked.tool),
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


def reasked(out: Outcome, asked: Asked) -> Asked | None:
    return _opened(out, asked.arguments, asked.tool)


async def start_flow(env: FlowEnv) -> tuple[Asked, str] | None:
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
        rounds = (
            env.pick_limit + FULL_PICK_EXTRA_ROUNDS if env.kind == "full_pick" else CLEANUP_ROUNDS
        )
        for _ in range(min(most, rounds)):
            asked = await ask(env, env.title, workspace=workspace, kind=CLEANUP_KIND)
            if asked is None:  # refused (no such note), or no node answered
                seen_all = seen_all and not _last_unknown(env)
                break
            if not asked.candidates:
                break
            await confirm(env, asked, asked.candidates[0][0], kind=CLEANUP_KIND)
    return seen_all
