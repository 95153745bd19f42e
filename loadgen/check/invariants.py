"""The invariant checker: a recorded history against the store's journal and final state.

Layer: loadgen.check, the top of the invariants (see the package's docstring). Pure module: no
I/O, no Redis (the store is read beforehand by ``store.journal``).

Each invariant of design.md §1 (exactly-once mutation, no lost answer, correct expiry) becomes
one or more Verdicts (valid, invalid or unknown, with the history indices and journal entry ids
that prove it). Beside them, every answer is held to the sequential model of its confirmation
state (``loadgen.check.model_search``, ``loadgen.check.model``): two more verdicts, safety
and liveness.
Definitions used throughout:

- an *execution* is a journal ``delete`` or ``move`` carrying a nonce (confirm.lua); a
  *decision* is an execution or a ``decline``. Plain ``notes_move`` entries carry no nonce.
- a *state* is what an ``ask`` ok (or a confirm ok that re-asked) taught the history: nonce,
  tenant, workspace, principal, exp_ms, candidates and tool. A re-asked state inherits the
  tenant, workspace and principal of the state it replaced.
- a confirm *accepts* entry ``e`` when its invoke has the nonce, tenant and principal of ``e``,
  action ``accept``, ``confirm: true`` and noteId ``e.note``; it is *legit* when it also has
  ``expect == "execute"``. A confirm is *decline-shaped* when its action is ``decline`` or it
  accepts with ``confirm: false``.
- each completion is paired with the invoke it names (``completes``; in histories written
  before completions named it, per (process, flow, f), first in first out:
  ``loadgen.check.pairing``); an invoke with no completion counts as ``info``.
- a confirm ok *told executed* when its value says ``executed: true`` (``op`` delete or archive,
  as ``loadgen.clients.classify`` reads the wire; histories recorded before it say
  ``deleted: true``). It matches the journal execution (a ``delete``, or the nonce-carrying
  ``move`` of an archive) of its tenant, nonce and note.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from loadgen.check import bounds_reached, quotas, reads, roots, writes
from loadgen.check import legacy as legacy_check
from loadgen.check import limits as bounds
from loadgen.check import records as records_check
from loadgen.check.context import (
    INVALID_PARAMS,
    INVALID_STATE_MESSAGE,
    INVALID_STATE_REASON,
    JOURNAL_OP,
    Call,
    Context,
    build_context,
    int_or_none,
    is_decision,
    is_execution,
    told_executed,
)
from loadgen.check.model_search import ModelReport, check_answers
from loadgen.check.verdict import CheckResult, Finding, Verdict, verdict
from loadgen.history import Op

if TYPE_CHECKING:
    from loadgen.check.legacy import LegacyFacts
    from loadgen.check.limits import FaultWindow, Limits
    from loadgen.check.records import StoreRecords
    from store.journal import JournalEntry

REPLAY_TTL_SLACK_MS = 1_000
"""A replay entry may report a TTL this much past its state's exp_ms + grace before it counts as
outliving it: ``redis_end_ms`` and the PTTL reads are separate commands."""


def _duplicates(
    entries: Iterable[JournalEntry], key: Callable[[JournalEntry], tuple[str, str]]
) -> list[list[JournalEntry]]:
    groups: dict[tuple[str, str], list[JournalEntry]] = defaultdict(list)
    for e in entries:
        groups[key(e)].append(e)
    return [g for g in groups.values() if len(g) > 1]


def check_no_double_delete(ctx: Context) -> Verdict:
    """1. No (tenant, note) has two ``delete`` journal entries."""
    deletes = [e for e in ctx.journal if e.op == "delete"]
    bad = [
        Finding(
            f"note {g[0].note} of tenant {g[0].tenant} deleted {len(g)} times",
            [i for e in g for i in ctx.flow_ops(e.nonce)],
            [e.id for e in g],
        )
        for g in _duplicates(deletes, lambda e: (e.tenant, e.note))
    ]
    return verdict("no_double_delete", f"All {len(deletes)} deletes hit distinct notes.", bad)


def check_no_double_execution(ctx: Context) -> Verdict:
    """2. No (tenant, nonce) has more than one decision (execution or decline)."""
    decisions = [e for e in ctx.journal if is_decision(e)]
    bad = [
        Finding(
            f"nonce {g[0].nonce} decided {len(g)} times ({', '.join(e.op for e in g)})",
            ctx.flow_ops(g[0].nonce),
            [e.id for e in g],
        )
        for g in _duplicates(decisions, lambda e: (e.tenant, e.nonce))
    ]
    return verdict("no_double_execution", f"All {len(decisions)} decisions have own nonces.", bad)


def _untraced(ctx: Context, e: JournalEntry) -> str | None:
    """Why execution-like entry ``e`` does not trace to a state and an accept (None: it does)."""
    if not e.nonce:
        return f"deletion without a confirmation: {e.op} of {e.note} carries no nonce"
    st = ctx.states.get(e.nonce)
    if st is None:
        return f"deletion without a confirmation: no ask knows nonce {e.nonce}"
    if (st.tenant, st.workspace, st.principal) != (e.tenant, e.ws, e.principal):
        return f"{e.op} of {e.note} outside the tenant, workspace or principal of its state"
    if st.candidates.get(e.note) != e.version:
        return f"{e.note} at version {e.version} was not a candidate of state {e.nonce}"
    if st.exp_ms != e.exp_ms or (st.tool and e.tool and st.tool != e.tool):
        return f"{e.op} of {e.note} used another expiry or tool than state {e.nonce}"
    if st.title and e.title and st.title != e.title:
        return f"{e.op} of {e.note} titled {e.title!r}, state {e.nonce} asked for {st.title!r}"
    if e.op == "move" and st.target and e.to != st.target:
        return f"archive of {e.note} moved it to {e.to}, state {e.nonce} sealed {st.target}"
    if not any(c.accepts(e) for c in ctx.confirms.get(e.nonce, [])):
        return f"no confirm accepted {e.note} under nonce {e.nonce} as {e.principal}"
    return None


def check_executions_trace(ctx: Context) -> Verdict:
    """3. Every delete (and nonce-carrying move) traces to its state and an accept of its note."""
    checked = [e for e in ctx.journal if e.op == "delete" or is_execution(e)]
    bad = []
    for e in checked:
        why = _untraced(ctx, e)
        if why is not None:
            bad.append(Finding(why, ctx.flow_ops(e.nonce) if e.nonce else [], [e.id]))
    ok = f"All {len(checked)} executions trace to a shown candidate and an accept."
    return verdict("executions_trace_to_confirmations", ok, bad)


def _refused_decision(ctx: Context, e: JournalEntry) -> str | None:
    """Why decision ``e`` is attributable only to refused answers (None: it is not)."""
    cs = ctx.confirms.get(e.nonce, [])
    if e.op == "decline":
        if any(c.is_decline and c.same_flow_as(e) for c in cs):
            return None
        return f"decline recorded for nonce {e.nonce} that no decline answer asked for"
    if any(c.legit_for(e) for c in cs) or not any(c.v.get("expect") == "no_mutation" for c in cs):
        return None  # a legit accept exists, or nothing refused: invariant 3's business
    return f"{e.op} of {e.note} under nonce {e.nonce} has only no_mutation answers"


def _told_executed(ctx: Context) -> Iterable[tuple[str, Call]]:
    """no_mutation confirms answered ok executed without replay: told they executed."""
    for nonce, cs in ctx.confirms.items():
        for c in cs:
            r = c.result
            told = c.outcome == "ok" and told_executed(r) and r.get("replay") is not True
            if told and c.v.get("expect") == "no_mutation":
                yield nonce, c


def check_no_mutation_from_refused(ctx: Context) -> Verdict:
    """4. No decision comes from refused answers only, and no no_mutation confirm was told it
    executed (ok executed, replay:false). An unlanded decline (see Context) makes the
    no_mutation label of a later accept unreliable: such cases are unknown, not invalid."""
    bad: list[Finding] = []
    undecided: list[Finding] = []
    for e in ctx.journal:
        why = _refused_decision(ctx, e) if is_decision(e) else None
        if why is not None:
            soft = e.op != "decline" and ctx.unlanded_decline(e.nonce)
            (undecided if soft else bad).append(Finding(why, ctx.flow_ops(e.nonce), [e.id]))
    for nonce, c in _told_executed(ctx):
        text = f"no_mutation confirm at {c.invoke.index} was told it executed"
        (undecided if ctx.unlanded_decline(nonce) else bad).append(Finding(text, c.indices))
    ok = "No refused, declined or cancelled answer mutated anything."
    return verdict("no_mutation_from_refused", ok, bad, undecided)


def _execution_index(ctx: Context) -> dict[tuple[str, str, str], list[JournalEntry]]:
    """(tenant, nonce, note) -> the journal executions (deletes, archive moves) under it."""
    out: dict[tuple[str, str, str], list[JournalEntry]] = defaultdict(list)
    for e in ctx.journal:
        if is_execution(e):
            out[(e.tenant, e.nonce, e.note)].append(e)
    return out


def check_ok_deletes_match_journal(ctx: Context) -> Verdict:
    """5. Every ok told executed matches exactly one journal execution (tenant, nonce, note), and
    at most one of a nonce's answers says it executed without being a replay (a second one means
    the store forgot the first: a replica promoted without it, say); a legit accept answered ok
    without executing and without a re-ask (isError, deleted/archived false) has no journal
    execution of its note under its nonce: that answer would mislead its client."""
    index = _execution_index(ctx)
    bad: list[Finding] = []
    told = 0
    for c in (c for cs in ctx.confirms.values() for c in cs if c.outcome == "ok"):
        r = c.result
        tenant, note = str(c.v.get("tenant", "")), str(r.get("noteId") or c.v.get("noteId"))
        found = index.get((tenant, c.nonce, note), [])
        if told_executed(r):
            told += 1
            found = [e for e in found if e.op == JOURNAL_OP.get(str(r.get("op")), e.op)]
            if len(found) != 1:
                text = f"confirm at {c.invoke.index} told executed {note}; journal has {len(found)}"
                bad.append(Finding(text, c.indices, [e.id for e in found]))
        elif c.is_accept and c.v.get("expect") == "execute" and not r.get("reask") and found:
            text = f"confirm at {c.invoke.index} told not deleted (or archived), but {note} was"
            bad.append(Finding(text, c.indices, [e.id for e in found]))
    for (tenant, nonce), cs in sorted(_told_executed_fresh(ctx).items()):
        if len(cs) > 1:
            at = ", ".join(str(c.invoke.index) for c in cs)
            text = f"nonce {nonce} of {tenant} told {len(cs)} answers it executed afresh ({at})"
            bad.append(Finding(text, [i for c in cs for i in c.indices]))
    ok = f"All {told} executed answers match exactly one journal execution."
    return verdict("ok_deletes_match_journal", ok, bad)


def _told_executed_fresh(ctx: Context) -> dict[tuple[str, str], list[Call]]:
    """(tenant, nonce) -> confirms answered ok executed that were not replays."""
    out: dict[tuple[str, str], list[Call]] = defaultdict(list)
    for cs in ctx.confirms.values():
        for c in cs:
            r = c.result
            if c.outcome == "ok" and told_executed(r) and r.get("replay") is not True:
                out[(str(c.v.get("tenant", "")), c.nonce)].append(c)
    return out


def _forgotten(ctx: Context) -> dict[str, int]:
    """Acknowledged writes the store no longer knows: nonces told executed whose execution is
    not in the journal or that executed afresh twice, and creates answered ok whose note the
    journal never created (what a failover to a stale replica loses)."""
    index = _execution_index(ctx)
    lost: set[tuple[str, str]] = set()
    for cs in ctx.confirms.values():
        for c in (c for c in cs if c.outcome == "ok" and told_executed(c.result)):
            tenant = str(c.v.get("tenant", ""))
            note = str(c.result.get("noteId") or c.v.get("noteId"))
            if not index.get((tenant, c.nonce, note)):
                lost.add((tenant, c.nonce))
    lost |= {key for key, cs in _told_executed_fresh(ctx).items() if len(cs) > 1}
    archives = sum(1 for _, n in lost if n in ctx.states and ctx.states[n].tool == "notes_archive")
    journaled = {(e.tenant, e.note) for e in ctx.journal if e.op == "create"}
    creates = sum(
        1
        for c in ctx.calls
        if c.invoke.f == "create"
        and c.outcome == "ok"
        and isinstance(c.result.get("noteId"), str)
        and (str(c.v.get("tenant", "")), c.result["noteId"]) not in journaled
    )
    return {
        "confirms_forgotten": len(lost),
        "archive_confirms_forgotten": archives,
        "creates_forgotten": creates,
    }


def _info_fate(ctx: Context, c: Call) -> str:
    """executed | refused | nothing | unknown: what the journal says of an info confirm."""
    decided = [e for e in ctx.decisions.get(c.nonce, []) if e.tenant == c.v.get("tenant")]
    if any(c.accepts(e) or (e.op == "decline" and c.is_decline) for e in decided):
        return "executed"
    if decided:
        return "refused"  # another answer decided the state: this one could not have
    if c.v.get("action") == "cancel" or c.nonce in ctx.states:
        return "nothing"  # cancel writes nothing; a known state with no decision never had one
    return "unknown"


def check_info_resolved(ctx: Context, counts: dict[str, int]) -> Verdict:
    """6. Every info confirm is resolved by the journal: its nonce was decided (by it or by a
    sibling answer) or, for a state the history knows, never decided. A nonce no state and no
    decision knows is undecidable: unknown."""
    undecided: list[Finding] = []
    for c in (c for cs in ctx.confirms.values() for c in cs if c.outcome == "info"):
        fate = _info_fate(ctx, c)
        counts[f"info_{fate}"] = counts.get(f"info_{fate}", 0) + 1
        if fate == "unknown":
            undecided.append(Finding(f"info confirm at {c.invoke.index}: unknown nonce", c.indices))
    resolved = sum(counts.get(f"info_{k}", 0) for k in ("executed", "refused", "nothing"))
    counts["info_resolved"] = resolved
    counts["info_unknown"] = len(undecided)
    ok = f"All {resolved} info confirms are resolved by the journal."
    return verdict("info_resolved", ok, [], undecided)


def check_no_execution_after_expiry(ctx: Context) -> Verdict:
    """7. Every decision happened strictly before its state's expiry (at_ms < exp_ms, both on
    the Redis clock); a decision without ``exp`` is unknown."""
    bad: list[Finding] = []
    undecided: list[Finding] = []
    decisions = [e for e in ctx.journal if is_decision(e)]
    for e in decisions:
        if e.exp_ms is None:
            undecided.append(Finding(f"{e.op} {e.id} has no exp", ctx.flow_ops(e.nonce), [e.id]))
        elif e.at_ms >= e.exp_ms:
            text = f"{e.op} of nonce {e.nonce} at {e.at_ms} ms, expiry {e.exp_ms} ms"
            bad.append(Finding(text, ctx.flow_ops(e.nonce), [e.id]))
    ok = f"All {len(decisions)} decisions happened before their state's expiry."
    return verdict("no_execution_after_expiry", ok, bad, undecided)


def check_replay_entries_expire(ctx: Context) -> Verdict:
    """8. No replay entry outlives its state's exp_ms + grace_ms: none is left past it at
    ``redis_end_ms``, none lacks a TTL, none has a TTL reaching past it (plus slack). The exp
    comes from the history's state, else from a decision; a nonce neither knows is unknown."""
    bad: list[Finding] = []
    undecided: list[Finding] = []
    for (tenant, nonce), ttl in sorted(ctx.replay_left.items()):
        st = ctx.states.get(nonce)
        exps = [e.exp_ms for e in ctx.decisions.get(nonce, []) if e.exp_ms is not None]
        exp = st.exp_ms if st and st.exp_ms is not None else (exps[0] if exps else None)
        if exp is None:
            undecided.append(Finding(f"replay entry {tenant}/{nonce} of unknown nonce"))
            continue
        deadline = exp + ctx.grace_ms
        if (
            ttl < 0
            or deadline < ctx.redis_end_ms
            or ctx.redis_end_ms + ttl > deadline + REPLAY_TTL_SLACK_MS
        ):
            text = f"replay entry {tenant}/{nonce} (ttl {ttl} ms) outlives exp+grace {deadline} ms"
            bad.append(Finding(text, ctx.flow_ops(nonce)))
    ok = f"All {len(ctx.replay_left)} replay entries left expire with their state."
    return verdict("replay_entries_expire", ok, bad, undecided)


def _created_notes(ctx: Context) -> dict[tuple[str, str], tuple[str, list[int]]]:
    """(tenant, note) -> (creation workspace, history indices) for history and journal creates."""
    out: dict[tuple[str, str], tuple[str, list[int]]] = {}
    for c in ctx.calls:
        note = c.result.get("noteId") if c.invoke.f == "create" and c.outcome == "ok" else None
        if isinstance(note, str):
            out[(str(c.v.get("tenant", "")), note)] = (
                str(c.v.get("workspace", "")),
                list(c.indices),
            )
    for e in ctx.journal:
        if e.op == "create":
            out.setdefault((e.tenant, e.note), (e.ws, []))
    return out


def check_no_lost_note(ctx: Context) -> Verdict:
    """9. Every note the run created (create ok in the history, or a journal create) and never
    deleted in the journal still exists, in its last journal move's target workspace (else its
    creation workspace); every note deleted in the journal is gone."""
    last: dict[tuple[str, str], JournalEntry] = {}
    for entry in ctx.journal:
        if entry.op in ("create", "move", "delete"):
            last[(entry.tenant, entry.note)] = entry
    bad: list[Finding] = []
    created = _created_notes(ctx)
    for key, (ws, ops) in sorted(created.items()):
        e = last.get(key)
        want = None if e and e.op == "delete" else (e.to if e and e.op == "move" else ws)
        have = ctx.final_notes.get(key)
        if have != want:
            text = f"note {key[1]} of {key[0]} should be {want or 'deleted'}, is {have or 'gone'}"
            bad.append(Finding(text, ops, [e.id] if e else []))
    ok = f"All {len(created)} notes created are where the journal says, or deleted."
    return verdict("no_lost_note", ok, bad)


def _invalid_state_error(r: Mapping[str, Any]) -> bool:
    data = r.get("data")
    reason = data.get("reason") if isinstance(data, dict) else None
    return r.get("code") == INVALID_PARAMS and (
        reason == INVALID_STATE_REASON or r.get("message") == INVALID_STATE_MESSAGE
    )


def check_before_expiry_honoured(ctx: Context, counts: dict[str, int]) -> Verdict:
    """10. A before_expiry confirm meant to execute is never refused with the invalid-state
    error when it was sent by the Redis-clock estimate at least ``margin_ms`` before its state's
    exp_ms (``redis_send_ms + margin_ms <= exp_ms``) and answered that early too (the store
    decides somewhere in between). The same holds for the replay grace: a decided answer sent
    again (``replay_after_expiry``) that early before ``exp_ms + grace`` is never refused.
    Without the estimate or the state: skipped."""
    bad: list[Finding] = []
    for c in (c for cs in ctx.confirms.values() for c in cs):
        kind = c.invoke.kind
        if kind not in ("before_expiry", "replay_after_expiry") or c.v.get("expect") != "execute":
            continue
        st = ctx.states.get(c.nonce)
        sent, margin = int_or_none(c.v.get("redis_send_ms")), int_or_none(c.v.get("margin_ms"))
        if kind == "replay_after_expiry" and sent is None:
            continue  # the answer that decided: held to the model
        if st is None or st.exp_ms is None or sent is None or margin is None:
            counts["before_expiry_skipped"] = counts.get("before_expiry_skipped", 0) + 1
            continue
        deadline = st.exp_ms
        if kind == "replay_after_expiry":
            if not any(c.accepts(e) for e in ctx.decisions.get(c.nonce, [])):
                continue  # nothing was decided: nothing to replay
            deadline += ctx.grace_ms
        if sent + margin > deadline or _answered_ms(c, sent) + margin > deadline:
            # Sent too late by its own estimate, or answered so late (a paused or failing store)
            # that the store may have decided after the expiry: no claim either way.
            counts["before_expiry_late"] = counts.get("before_expiry_late", 0) + 1
            continue
        counts["before_expiry_checked"] = counts.get("before_expiry_checked", 0) + 1
        if c.outcome == "fail" and _invalid_state_error(c.result):
            what = (
                "expiry" if kind == "before_expiry" else "its replay entry's end (expiry + grace)"
            )
            text = f"confirm at {c.invoke.index} refused {deadline - sent} ms before {what}"
            bad.append(Finding(text, [*st.ops, *c.indices]))
    ok = "No confirm sent safely before its expiry was refused as expired."
    return verdict("before_expiry_honoured", ok, bad)


def _answered_ms(c: Call, sent_ms: int) -> int:
    """When the answer to ``c`` arrived, on the same Redis-clock estimate as its ``sent_ms``
    (the history's wall times shifted by the estimate's offset at the invoke)."""
    if c.done is None:
        return sent_ms
    return sent_ms + (c.done.time_ms - c.invoke.time_ms)


def _counts(ctx: Context) -> dict[str, int]:
    confirms = [c for cs in ctx.confirms.values() for c in cs]
    return {
        "ops": sum(1 + (c.done is not None) for c in ctx.calls),
        "states": len(ctx.states),
        "confirms": len(confirms),
        "executions": sum(is_execution(e) for e in ctx.journal),
        "declines": sum(e.op == "decline" for e in ctx.journal),
        "deletes": sum(e.op == "delete" for e in ctx.journal),
        "replays": sum(c.outcome == "ok" and c.result.get("replay") is True for c in confirms),
        "replay_entries_left": len(ctx.replay_left),
    } | _forgotten(ctx)


def check(
    history: Sequence[Op],
    journal: Sequence[JournalEntry],
    final_notes: Mapping[tuple[str, str], str],
    replay_left: Mapping[tuple[str, str], int],
    *,
    redis_end_ms: int,
    grace_ms: int,
    limits: Limits | None = None,
    faults: Sequence[FaultWindow] | None = None,
    records: StoreRecords | None = None,
    legacy: LegacyFacts | None = None,
) -> CheckResult:
    """Every invariant of one run. ``journal`` comes from ``store.journal.read_journal``,
    ``final_notes`` and ``replay_left`` from the store after the run, ``redis_end_ms`` is the
    Redis clock read after listing the replay entries, ``grace_ms`` the store's replay grace,
    ``limits`` the nodes' configured bounds, ``faults`` the run's fault windows (None: not
    recorded, so unknown outcomes are not held to them), ``records`` the operation records and
    usage counters left, ``legacy`` the legacy session keyspace (None: not recorded, so their
    verdicts say they were not checked)."""
    ctx = build_context(history, journal, final_notes, replay_left, redis_end_ms, grace_ms)
    counts = _counts(ctx)
    seen: dict[str, int] = {}
    quotas_held = quotas.judge_quotas(
        ctx,
        None if limits is None else limits.quotas,
        seen,
        0 if limits is None else limits.idempotency_window_ms,
    )
    counts |= quotas.reached_counts(seen)
    counts |= bounds_reached.reached(ctx, limits, counts, _invalid_state_error)
    verdicts = (
        check_no_double_delete(ctx),
        check_no_double_execution(ctx),
        check_executions_trace(ctx),
        check_no_mutation_from_refused(ctx),
        check_ok_deletes_match_journal(ctx),
        check_info_resolved(ctx, counts),
        check_no_execution_after_expiry(ctx),
        check_replay_entries_expire(ctx),
        check_no_lost_note(ctx),
        check_before_expiry_honoured(ctx, counts),
        writes.check_creates(ctx),
        writes.check_updates(ctx),
        writes.check_moves(ctx),
        reads.check_reads(ctx, faults),
        reads.check_setup(ctx),
        roots.check_roots(ctx),
        quotas_held,
        bounds.check_bounds(ctx, limits),
        bounds.check_unknown_outcomes(ctx, faults),
        records_check.check_op_records(
            records, 0 if limits is None else limits.idempotency_window_ms
        ),
        records_check.check_usage(records),
        records_check.check_keyed_retries(ctx),
        legacy_check.check_legacy_keys(ctx, legacy, limits),
        legacy_check.check_legacy_answers_once(ctx, legacy),
        legacy_check.check_legacy_answers_heard(ctx),
        legacy_check.check_legacy_sessions_bound(ctx),
    )
    # The sequential model of each state: loadgen.check.model_search.
    if limits is None:
        report = check_answers(ctx, faults)
    else:
        report = check_answers(ctx, faults, limits.max_offered)
    counts |= report.counts
    oddities = check_oddities_explained(counts, faults)
    return CheckResult((*verdicts, *model_verdicts(report), oddities), counts, report.table)


TOLERATED_ODDITIES = {
    "confirms_forgotten": "acknowledged executions the journal does not hold",
    "creates_forgotten": "acknowledged creates the journal never made",
    "model_unchecked": "confirms under a state the history never learned (not held to the model)",
}
"""Counters of what the checker tolerates only where a fault explains it: an acknowledged
write forgotten by a replica promoted in a failover, an answer under a state the load could
not learn because round 1's reply was lost."""


def check_oddities_explained(
    counts: Mapping[str, int], faults: Sequence[FaultWindow] | None
) -> Verdict:
    """``oddities_explained``: every counter of ``TOLERATED_ODDITIES`` is zero, unless a fault of
    the run explains it (a failover, for forgotten writes; any fault, for unchecked confirms).
    A run that recorded no faults cannot explain one: unknown."""
    unbounded = [f for f in faults or () if f.kind not in bounds.BOUNDED_KINDS]
    bad: list[Finding] = []
    undecided: list[Finding] = []
    for name, what in TOLERATED_ODDITIES.items():
        n = counts.get(name, 0)
        if n == 0:
            continue
        explained = bool(faults) if name == "model_unchecked" else bool(unbounded)
        if explained:
            continue
        text = f"{name} = {n}: {n} {what}, with no fault in the run to explain it"
        (undecided if faults is None else bad).append(Finding(text))
    return verdict(
        "oddities_explained",
        "Every oddity the checker tolerates is zero or explained by a fault of the run.",
        bad,
        undecided,
    )


def model_verdicts(report: ModelReport) -> tuple[Verdict, Verdict]:
    """The model's findings as two verdicts: replies the model never gives (safety) and
    refusals or errors where it owed progress (liveness); the summary names the race kinds."""
    out = []
    for name, severity, ok in (
        ("answers_conform_to_model", "safety", "Every reply is one the model allows."),
        ("answers_make_progress", "liveness", "No answer owed progress got a refusal or error."),
    ):
        bad = [f for f in report.findings if f.severity == severity]
        undecided = [f for f in report.findings if f.severity == "undecided"]
        kinds = sorted({f.kind for f in bad or undecided})
        v = verdict(
            name,
            ok,
            [Finding(f.text, f.ops, f.journal) for f in bad],
            [Finding(f.text, f.ops, f.journal) for f in undecided if severity == "safety"],
        )
        summary = f"{v.summary} Kinds: {', '.join(kinds)}." if kinds else v.summary
        out.append(Verdict(v.name, v.status, summary, v.ops, v.journal))
    return out[0], out[1]
