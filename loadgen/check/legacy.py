"""The legacy (2025-11-25) surface held to the run: the session keyspace the store kept, the
answers legacy clients posted, and the requests that carried a session they may not use.

Layer: loadgen.check. Pure module: no I/O, no node code. Four verdicts for
``loadgen.check.invariants.check``:

- ``legacy_keys_expire``: every key of a session the history names (``store.session_facts``:
  its record, its inbox, its request markers, its pending-call set) has a TTL, and none longer
  than its bound (``Limits``: the session idle TTL for the record and the inbox; the state TTL
  plus the adapter's request grace for a marker); every principal's set of tracked sessions
  holds at most the per-principal cap (the set itself has no TTL: the cap bounds it).
- ``legacy_answers_act_once``: a legacy answer the node took (202) is recorded as taken: its
  request's marker, while it lasts, reads ``answered`` (a marker still ``open`` takes the next
  copy as a fresh answer), and no inbox holds two answers to one request.
- ``legacy_answers_heard``: a legacy answer is judged at the moment it was posted. An answer
  the node took while its state still had ``CLOCK_SLACK_MS`` to live (by the load generator's
  Redis-clock estimate at the 202) could have been told "executed" then; a call that instead
  ends saying it heard no answer in time dropped it. (Judged when the call ends, such an answer
  looks expired: the call waits out the state's lifetime.)
- ``legacy_sessions_bound``: a request carrying another principal's session id, the id of a
  session already deleted, or of one the per-principal cap evicted, is refused as an unknown
  session (404) and creates nothing: the journal holds no note of its title. A session's roots
  only narrow what its principal may touch: a create in a workspace its roots cover but nobody
  is granted is refused too (an error or an ``isError`` result), creating nothing.

Without ``LegacyFacts`` (a synthetic history, a folder written before the facts held them) the
first two say "Not checked" of the store's side, as ``op_records_expire`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loadgen.check.limits import CLOCK_SLACK_MS
from loadgen.check.verdict import Finding, Verdict, verdict

if TYPE_CHECKING:
    from loadgen.check.context import Call, Context
    from loadgen.check.limits import Limits

NOT_RECORDED = "the store facts hold no legacy session keyspace"


@dataclass(frozen=True)
class LegacyFacts:
    """The legacy session keyspace after the run (``store.session_facts.read_session_facts``)."""

    sessions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    inboxes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    markers: Mapping[str, Mapping[str, list[Any]]] = field(default_factory=dict)
    calls: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    principals: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LegacyFacts:
        """From ``read_session_facts``' dict (as written into a run folder)."""
        return cls(
            d.get("sessions", {}),
            d.get("inboxes", {}),
            d.get("markers", {}),
            d.get("calls", {}),
            d.get("principals", {}),
        )


def _named_sessions(ctx: Context) -> set[str]:
    return {str(c.v["session"]) for c in ctx.calls if c.v.get("session")}


def _named_principals(ctx: Context) -> set[str]:
    out = {str(c.v["owner"]) for c in ctx.calls if c.v.get("owner")}
    return out | {str(c.v["principal"]) for c in ctx.calls if c.v.get("session")}


def check_legacy_keys(ctx: Context, facts: LegacyFacts | None, limits: Limits | None) -> Verdict:
    """``legacy_keys_expire`` (module docstring)."""
    name = "legacy_keys_expire"
    if facts is None:
        return Verdict(name, "valid", f"Not checked: {NOT_RECORDED}.")
    named = _named_sessions(ctx)
    session_ttl = 0 if limits is None else limits.legacy_session_ttl_ms
    marker_ttl = 0 if limits is None else limits.legacy_marker_ttl_ms
    cap = 0 if limits is None else limits.sessions_per_principal
    bad: list[Finding] = []
    checked = 0

    def held(what: str, ttl: int, bound: int) -> None:
        nonlocal checked
        checked += 1
        if ttl < 0:
            bad.append(Finding(f"{what} has no TTL: it never expires"))
        elif bound and ttl > bound:
            bad.append(Finding(f"{what} expires in {ttl} ms, past its {bound} ms"))

    for sid in sorted(named):
        if sid in facts.sessions:
            held(f"session {sid}", int(facts.sessions[sid]["ttl"]), session_ttl)
        if sid in facts.inboxes:
            held(f"the inbox of session {sid}", int(facts.inboxes[sid]["ttl"]), session_ttl)
        if sid in facts.calls:
            held(f"the pending calls of session {sid}", int(facts.calls[sid]["ttl"]), 0)
        for rid, (_, ttl) in sorted(facts.markers.get(sid, {}).items()):
            held(f"the marker of request {rid} (session {sid})", int(ttl), marker_ttl)
    for principal in sorted(_named_principals(ctx)):
        tracked = facts.principals.get(principal)
        if tracked is None:
            continue
        checked += 1
        if cap and int(tracked["n"]) > cap:
            bad.append(
                Finding(f"principal {principal} has {tracked['n']} sessions tracked, past {cap}")
            )
    return verdict(
        name, f"All {checked} legacy session keys left expire within their bound.", bad, []
    )


def _taken(c: Call) -> bool:
    """The node took this answer POST (202): the first POST, recorded with the moment it was
    taken, or a copy completed on its 202."""
    r = c.result
    return "posted_redis_ms" in r or (c.outcome == "info" and r.get("status") == 202)


def check_legacy_answers_once(ctx: Context, facts: LegacyFacts | None) -> Verdict:
    """``legacy_answers_act_once`` (module docstring)."""
    name = "legacy_answers_act_once"
    taken: dict[tuple[str, str], list[Call]] = {}
    for c in ctx.calls:
        if c.invoke.f == "confirm" and c.v.get("request") and _taken(c):
            taken.setdefault((str(c.v["session"]), str(c.v["request"])), []).append(c)
    if facts is None:
        return Verdict(name, "valid", f"Not checked: {NOT_RECORDED}.")
    bad: list[Finding] = []
    seen = 0
    for (sid, rid), calls in sorted(taken.items()):
        ops = tuple(sorted(i for c in calls for i in c.indices))
        marker = facts.markers.get(sid, {}).get(rid)
        if marker is not None:
            seen += 1
            if marker[0] != "answered":
                bad.append(
                    Finding(
                        f"request {rid} of session {sid} was answered (202) but its marker "
                        f"reads {marker[0]!r}: a copy of the answer is taken again",
                        ops,
                    )
                )
        inbox = facts.inboxes.get(sid)
        n = 0 if inbox is None else int(inbox["answers"].get(rid, 0))
        if n > 1:
            bad.append(Finding(f"the inbox of session {sid} holds {n} answers to {rid}", ops))
    summary = (
        f"All {len(taken)} legacy answers taken are recorded once "
        f"({seen} markers still held read answered)."
    )
    return verdict(name, summary, bad, [])


def check_legacy_answers_heard(ctx: Context) -> Verdict:
    """``legacy_answers_heard`` (module docstring)."""
    name = "legacy_answers_heard"
    bad: list[Finding] = []
    judged = 0
    for c in ctx.calls:
        r = c.result
        if c.invoke.f != "confirm" or "posted_redis_ms" not in r:
            continue
        state = ctx.states.get(c.nonce)
        if state is None or state.exp_ms is None:
            continue
        judged += 1
        posted = int(r["posted_redis_ms"])
        if r.get("no_answer") is True and posted + CLOCK_SLACK_MS < state.exp_ms:
            bad.append(
                Finding(
                    f"[{c.invoke.kind}] the answer at {c.invoke.index} was taken (202) "
                    f"{state.exp_ms - posted} ms before its state expired, and the call ended "
                    "saying it heard no answer in time",
                    c.indices,
                )
            )
    return verdict(
        name,
        f"All {judged} legacy answers a node took were judged when posted: none was dropped.",
        bad,
        [],
    )


def check_legacy_sessions_bound(ctx: Context) -> Verdict:
    """``legacy_sessions_bound`` (module docstring)."""
    name = "legacy_sessions_bound"
    created = {(e.tenant, e.title) for e in ctx.journal if e.op == "create"}
    bad: list[Finding] = []
    undecided: list[Finding] = []
    n = 0
    for c in ctx.calls:
        if c.invoke.f != "session":
            continue
        n += 1
        misuse, sid = c.v.get("misuse"), c.v.get("session")
        whose = {
            "foreign": f"{c.v.get('owner')}'s",
            "evicted": "an evicted",
            "ungranted_root": "its own",
        }.get(str(misuse), "a deleted")
        what = f"[{c.invoke.kind}] the request at {c.invoke.index} carrying {whose} session {sid}"
        if (str(c.v.get("tenant", "")), str(c.v.get("title", ""))) in created:
            bad.append(Finding(f"{what} created a note", c.indices))
        elif misuse == "ungranted_root":
            if c.outcome == "ok" and not c.result.get("isError"):
                served = f"{what} was served in a workspace nobody is granted"
                bad.append(Finding(served, c.indices))
        elif c.outcome == "ok" or (c.outcome == "fail" and c.result.get("status") != 404):
            status = c.result.get("status")
            bad.append(
                Finding(f"{what} was answered {status}, not as an unknown session", c.indices)
            )
        elif c.outcome == "info" and "reason" not in c.result:
            undecided.append(Finding(f"{what} has no outcome", c.indices))
    return verdict(
        name,
        f"All {n} requests carrying a session not theirs were refused as unknown sessions.",
        bad,
        undecided,
    )
