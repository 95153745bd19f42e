"""Every acknowledged write held to the journal: creates, updates and plain moves.

Layer: loadgen.check. Pure module: no I/O, no node code. Reads the checker's paired history
(``loadgen.check.context.Context``); ``loadgen.check.invariants.check`` adds the three verdicts:

- ``creates_exactly_once``: a workspace holds no more journal creates of a title than create
  requests of it that may have landed (answered without ``isError``, or of unknown outcome;
  the requests sharing an idempotency key count once: the titles are the flows' own), and every
  create answered ok is the journal's create of that note, in that workspace, with that title,
  by that principal.
- ``updates_one_step``: a note has no more journal updates than update requests of it that may
  have landed (keyed ones count once), every update answered ok is one journal update of that
  note by that principal at the version it was told, one step after the note's version before
  it, and along the journal every note's version steps by exactly one per change.
- ``moves_land``: a note has no more plain journal moves than move requests of it that may have
  landed, every move answered ok is one journal move of that note from the request's workspace
  to its target at the version it was told, every journal move goes where some request of it
  asked, and a move answered ``isError`` ("no note ...") did not happen unless another request
  explains it.

A request sent again with its idempotency key is one request; the same key with other arguments
(``expect: key_conflict``) must be refused and counts as a request that may not land. All
replies under one key must agree (the same note, the same version).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from loadgen.check.context import Call
from loadgen.check.verdict import Finding, Verdict, verdict

if TYPE_CHECKING:
    from loadgen.check.context import Context
    from store.journal import JournalEntry

KEY_CONFLICT = "key_conflict"
"""``expect`` of a write that reuses an idempotency key with other arguments."""


def may_land(c: Call) -> bool:
    """The request may have been applied: answered ok without ``isError``, or unknown."""
    if c.v.get("expect") == KEY_CONFLICT:
        return False
    return c.outcome == "info" or (c.outcome == "ok" and not c.result.get("isError"))


def acknowledged(c: Call) -> bool:
    """Answered ok, without ``isError``, as a write that happened."""
    return c.outcome == "ok" and not c.result.get("isError") and not c.result.get("reask")


def requests(calls: Iterable[Call]) -> list[list[Call]]:
    """Calls grouped into requests: one per idempotency key (tenant, principal, key), one per
    call without a key; a key reused with other arguments is a request of its own."""
    keyed: dict[tuple[str, str, str], list[Call]] = defaultdict(list)
    out: list[list[Call]] = []
    for c in calls:
        key = c.v.get("key")
        if isinstance(key, str) and c.v.get("expect") != KEY_CONFLICT:
            keyed[(str(c.v.get("tenant", "")), str(c.v.get("principal", "")), key)].append(c)
        else:
            out.append([c])
    return out + list(keyed.values())


def landing(calls: Iterable[Call]) -> int:
    """How many requests among ``calls`` may have been applied."""
    return sum(any(may_land(c) for c in group) for group in requests(calls))


def _ops(calls: Iterable[Call]) -> list[int]:
    return [i for c in calls for i in c.indices]


def _by(
    calls: Iterable[Call], f: str, key: Callable[[Call], tuple[str, ...]]
) -> dict[tuple[str, ...], list[Call]]:
    out: dict[tuple[str, ...], list[Call]] = defaultdict(list)
    for c in calls:
        if c.invoke.f == f:
            out[key(c)].append(c)
    return out


def _key_conflicts(calls: Iterable[Call], what: str) -> list[Finding]:
    """Writes reusing a key with other arguments that were not refused."""
    return [
        Finding(
            f"{what} at {c.invoke.index} reused idempotency key {c.v.get('key')!r} with other "
            "arguments and was applied (answered ok without isError)",
            c.indices,
        )
        for c in calls
        if c.v.get("expect") == KEY_CONFLICT and acknowledged(c)
    ]


def _disagreeing(calls: Iterable[Call], what: str, field: str) -> list[Finding]:
    """Replies under one idempotency key that name different notes or versions."""
    out = []
    for group in requests(calls):
        told = {str(c.result.get(field)) for c in group if acknowledged(c)}
        if len(told) > 1:
            key = group[0].v.get("key")
            text = f"{what}s under idempotency key {key!r} were told {sorted(told)}"
            out.append(Finding(text, _ops(group)))
    return out


def _op_ids(ctx: Context, op: str) -> list[Finding]:
    """Journal entries of ``op`` sharing an operation id: one operation wrote twice."""
    seen: dict[tuple[str, str], list[JournalEntry]] = defaultdict(list)
    for e in ctx.journal:
        if e.op == op and e.op_id and not e.nonce:
            seen[(e.tenant, e.op_id)].append(e)
    return [
        Finding(
            f"operation {key[1]} journaled {len(es)} {op}s (of {es[0].note})",
            (),
            [e.id for e in es],
        )
        for key, es in seen.items()
        if len(es) > 1
    ]


def check_creates(ctx: Context) -> Verdict:
    """``creates_exactly_once``; see the module."""
    calls = _by(
        ctx.calls,
        "create",
        lambda c: (
            str(c.v.get("tenant", "")),
            str(c.v.get("workspace", "")),
            str(c.v.get("title")),
        ),
    )
    made: dict[tuple[str, ...], list[JournalEntry]] = defaultdict(list)
    by_note: dict[tuple[str, str], JournalEntry] = {}
    for e in ctx.journal:
        if e.op == "create":
            made[(e.tenant, e.ws, e.title)].append(e)
            by_note[(e.tenant, e.note)] = e
    bad: list[Finding] = []
    told = 0
    for (tenant, ws, title), cs in sorted(calls.items()):
        entries = made.get((tenant, ws, title), [])
        possible = landing(cs)
        if len(entries) > possible:
            text = (
                f"{len(entries)} notes titled {title!r} created in {ws} ({tenant}) by "
                f"{possible} create request(s) that may have landed"
            )
            bad.append(Finding(text, _ops(cs), [e.id for e in entries]))
        for c in cs:
            note = c.result.get("noteId")
            if not acknowledged(c) or not isinstance(note, str):
                continue
            told += 1
            made_it = by_note.get((tenant, note))
            mine = (ws, title, c.v.get("principal"))
            if made_it is None or (made_it.ws, made_it.title, made_it.principal) != mine:
                where = "no journal create" if made_it is None else f"one in {made_it.ws}"
                text = f"create at {c.invoke.index} was told note {note}; {where}"
                bad.append(Finding(text, c.indices, [made_it.id] if made_it else []))
        bad += _key_conflicts(cs, "create")
        bad += _disagreeing(cs, "create", "noteId")
    bad += _op_ids(ctx, "create")
    ok = f"All {told} acknowledged creates are one journal create each, and no title has more."
    return verdict("creates_exactly_once", ok, bad)


def note_changes(journal: Sequence[JournalEntry]) -> dict[tuple[str, str], list[JournalEntry]]:
    """(tenant, note) -> its create, updates, moves and deletes, in journal order."""
    out: dict[tuple[str, str], list[JournalEntry]] = defaultdict(list)
    for e in journal:
        if e.note and e.op in ("create", "update", "move", "delete"):
            out[(e.tenant, e.note)].append(e)
    return out


def version_steps(entries: Sequence[JournalEntry]) -> Iterable[tuple[JournalEntry, int, int]]:
    """(entry, version it should carry, version it carries) where a note's journal breaks the
    rule: a create writes 1; an update or a plain move writes one more than the version before;
    a confirmation (delete, archive move) journals the version it found, and an archive move
    leaves one more. Only for notes whose create the journal holds."""
    if not entries or entries[0].op != "create":
        return
    version = 0
    for e in entries:
        if e.op == "create":
            want, after = 1, 1
        elif e.nonce:  # confirm.lua: the version found; a move bumps it
            want, after = version, version + 1
        else:
            want, after = version + 1, version + 1
        if e.version != want:
            yield e, want, e.version
            after = e.version + (1 if e.nonce and e.op == "move" else 0)
        version = after


def _note_of(c: Call) -> tuple[str, ...]:
    return (str(c.v.get("tenant", "")), str(c.v.get("noteId", "")))


def check_updates(ctx: Context) -> Verdict:
    """``updates_one_step``; see the module."""
    calls = _by(ctx.calls, "update", _note_of)
    changes = note_changes(ctx.journal)
    bad: list[Finding] = []
    told = 0
    for key, entries in sorted(changes.items()):
        updates = [e for e in entries if e.op == "update"]
        cs = calls.get(key, [])
        possible = landing(cs)
        if len(updates) > possible:
            text = (
                f"note {key[1]} ({key[0]}) updated {len(updates)} times by {possible} update "
                "request(s) that may have landed"
            )
            bad.append(Finding(text, _ops(cs), [e.id for e in updates]))
        for e, want, have in version_steps(entries):
            text = f"{e.op} of note {e.note} journaled version {have} where one step gives {want}"
            bad.append(Finding(text, _ops(cs), [e.id]))
    for (tenant, note), cs in sorted(calls.items()):
        entries = changes.get((tenant, note), [])
        for c in cs:
            version = c.result.get("version")
            if not acknowledged(c) or not isinstance(version, int):
                continue
            told += 1
            mine = [
                i
                for i, e in enumerate(entries)
                if e.op == "update" and e.version == version and e.principal == c.v.get("principal")
            ]
            before = entries[mine[0] - 1].version if mine and mine[0] > 0 else None
            if len(mine) != 1 or before is None or before + 1 != version:
                text = (
                    f"update at {c.invoke.index} was told version {version} of {note}; the "
                    f"journal has {len(mine)} such update(s), after version {before}"
                )
                bad.append(Finding(text, c.indices, [entries[i].id for i in mine]))
        bad += _key_conflicts(cs, "update")
        bad += _disagreeing(cs, "update", "version")
    bad += _op_ids(ctx, "update")
    ok = f"All {told} acknowledged updates are one journal version step each, and no note has more."
    return verdict("updates_one_step", ok, bad)


def check_moves(ctx: Context) -> Verdict:
    """``moves_land``; see the module."""
    calls = _by(ctx.calls, "move", _note_of)
    moves: dict[tuple[str, str], list[JournalEntry]] = defaultdict(list)
    for e in ctx.journal:
        if e.op == "move" and not e.nonce:
            moves[(e.tenant, e.note)].append(e)
    bad: list[Finding] = []
    told = 0
    for key in sorted(set(moves) | {(k[0], k[1]) for k in calls}):
        entries, cs = moves.get(key, []), calls.get(key, [])
        possible = landing(cs)
        if len(entries) > possible:
            refused = [c for c in cs if c.outcome == "ok" and c.result.get("isError")]
            why = f", {len(refused)} told isError" if refused else ""
            text = (
                f"note {key[1]} ({key[0]}) moved {len(entries)} times by {possible} move "
                f"request(s) that may have landed{why}"
            )
            bad.append(Finding(text, _ops(cs), [e.id for e in entries]))
        asked = {(str(c.v.get("from")), str(c.v.get("to"))) for c in cs}
        for e in entries:
            if (e.ws, e.to) not in asked:
                text = f"note {e.note} moved from {e.ws} to {e.to}, where no request sent it"
                bad.append(Finding(text, _ops(cs), [e.id]))
        for c in cs:
            if not acknowledged(c):
                continue
            told += 1
            mine = [
                e
                for e in entries
                if (e.ws, e.to, e.principal)
                == (c.v.get("from"), c.v.get("to"), c.v.get("principal"))
                and e.version == c.result.get("version", e.version)
            ]
            if len(mine) != 1:
                text = (
                    f"move at {c.invoke.index} of {key[1]} to {c.v.get('to')} was acknowledged; "
                    f"the journal has {len(mine)} such move(s)"
                )
                bad.append(Finding(text, c.indices, [e.id for e in mine]))
        bad += _key_conflicts(cs, "move")
        bad += _disagreeing(cs, "move", "version")
    bad += _op_ids(ctx, "move")
    ok = f"All {told} acknowledged moves landed where asked, once, and no note moved more."
    return verdict("moves_land", ok, bad)
