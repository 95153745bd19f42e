"""Reads held to the journal: every page sequence of ``notes_list`` (and every ``notes_search``)
shows each note exactly once; a cursor used where it does not belong shows nothing; and
``notes_setup`` answers as its URL-mode flow promises.

Layer: loadgen.check. Pure module: no I/O, no node code. Two verdicts for
``loadgen.check.invariants.check``:

- ``reads_show_every_note_once``. A *listing* is one flow's page sequence (``listing`` in the
  invoke; a search is a listing of one page). A complete listing (every page answered, the last
  without ``nextCursor``) shows no note twice; shows only notes that the journal put in that
  workspace under that title at some point; and shows every note that was there throughout:
  created (its create answered) before the first page was sent, and changed by nothing that may
  have run before the last page's answer (every request that could have changed it was sent
  after that answer). A note the journal never mentions is "never there" too, unless a failover
  may have taken it: a master shows a write as soon as it ran, before any replica has it (a read
  does not wait), so a create of unknown outcome (its ``WAIT`` timed out, say) sent before a
  failover ended, of that title in that workspace, sent before the last page was answered, may
  be the note shown and then forgotten with the old master; each such create explains one note.
  A page sent with a cursor that does not belong (``misuse``: another
  principal, workspace or title, a changed byte, a ``requestState`` as the cursor) must be an
  ``isError`` result.
- ``setup_answers``. Round 1 of ``notes_setup`` and a retry without an answer or with an accept
  offer the link again (``input_required``) until the flow's principal completed the setup page
  (a ``setup_page`` op answered 200), and say ``configured: true`` after it; a decline or
  cancel answers ``configured: false``; past the state's expiry the fixed refusal is legal too;
  a setup state presented to another tool, or another tool's state to ``notes_setup``, gets the
  fixed refusal; nothing says ``configured: true`` for a link no completion may have reached.
  The page itself answers a first completion of an unexpired link with 200 (410 past its
  expiry, 503 when the store failed).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loadgen.check.context import INVALID_PARAMS, INVALID_STATE_MESSAGE, Call
from loadgen.check.timeline import forgettable_creates, precedes
from loadgen.check.verdict import Finding, Verdict, verdict

if TYPE_CHECKING:
    from loadgen.check.context import Context
    from loadgen.check.limits import FaultWindow
    from store.journal import JournalEntry

READS = ("list", "search")
PAGE_DONE = 200
"""The setup page's answer to a completion (``nodes.setup_page``); 409 once used, 410 past
the link's expiry, 503 when the store did not answer."""
PAGE_EXPIRED = 410
PAGE_UNAVAILABLE = 503
REFUSAL_STATUS = 400
EXPIRY_SLACK_MS = 500
"""How close to a state's expiry (by the load generator's Redis-clock estimate) an answer may
be refused as expired: the estimate is the offset measured once at the start."""


def _listings(ctx: Context) -> dict[tuple[int, int, str, int], list[Call]]:
    out: dict[tuple[int, int, str, int], list[Call]] = defaultdict(list)
    for c in ctx.calls:
        if c.invoke.f in READS and "listing" in c.v and "misuse" not in c.v:
            key = (c.invoke.process, c.invoke.flow, c.invoke.f, int(c.v["listing"]))
            out[key].append(c)
    return out


def _pages(calls: list[Call]) -> list[Call] | None:
    """The answered pages in order, or None when the listing is not complete."""
    by_page: dict[int, Call] = {}
    for c in calls:
        answered = c.outcome == "ok" and not c.result.get("isError")
        if answered and not c.result.get("reask"):
            by_page.setdefault(int(c.v.get("page", 0)), c)
    pages = [by_page.get(i) for i in range(len(by_page))]
    if not pages or any(p is None for p in pages):
        return None
    done = [p for p in pages if p is not None]
    if done[-1].result.get("more") or not all(p.result.get("more") for p in done[:-1]):
        return None
    return done


def _placed(journal: list[JournalEntry]) -> set[tuple[str, str, str, str]]:
    """(tenant, workspace, title, note) for every note the journal ever put there."""
    out = set()
    for e in journal:
        if e.op in ("create", "update"):
            out.add((e.tenant, e.ws, e.title, e.note))
        elif e.op == "move":
            out.add((e.tenant, e.to, e.title, e.note))
    return out


@dataclass
class _Index:
    """The history and journal indexed once for every listing of a partition."""

    created: dict[tuple[str, str, str], dict[str, Call]]
    """(tenant, workspace, title) -> note -> its create, answered ok."""
    by_nonce: dict[str, list[Call]]
    """Confirms by nonce (they may delete or move a note)."""
    by_note: dict[tuple[str, str], list[Call]]
    """Updates and moves by (tenant, note)."""
    later: dict[tuple[str, str], list[JournalEntry]]
    """(tenant, note) -> its journal entries after its create."""

    @classmethod
    def build(cls, ctx: Context) -> _Index:
        created: dict[tuple[str, str, str], dict[str, Call]] = defaultdict(dict)
        by_nonce: dict[str, list[Call]] = defaultdict(list)
        by_note: dict[tuple[str, str], list[Call]] = defaultdict(list)
        for c in ctx.calls:
            tenant = str(c.v.get("tenant", ""))
            note = c.result.get("noteId")
            if c.invoke.f == "create" and c.outcome == "ok" and isinstance(note, str):
                where = (tenant, str(c.v.get("workspace", "")), str(c.v.get("title", "")))
                created[where][note] = c
            elif c.invoke.f == "confirm":
                by_nonce[c.nonce].append(c)
            elif c.invoke.f in ("update", "move"):
                by_note[(tenant, str(c.v.get("noteId", "")))].append(c)
        later: dict[tuple[str, str], list[JournalEntry]] = defaultdict(list)
        for e in ctx.journal:
            if e.note and e.op != "create":
                later[(e.tenant, e.note)].append(e)
        return cls(created, by_nonce, by_note, later)

    def throughout(self, first: Call, last: Call, tenant: str, ws: str, title: str) -> set[str]:
        """Notes in ``ws`` titled ``title`` from before ``first`` was sent until after
        ``last`` was answered, as far as the history can tell."""
        out = set()
        for note, c in self.created.get((tenant, ws, title), {}).items():
            if not precedes(c, first):
                continue
            causes: list[Call] = []
            for e in self.later.get((tenant, note), []):
                cs = self.by_nonce.get(e.nonce, []) if e.nonce else self.by_note.get((tenant, note))
                causes.extend(cs or [first])  # no known cause: it may have been any time
            if all(precedes(last, cause) for cause in causes):
                out.add(note)
        return out


def check_reads(ctx: Context, faults: Sequence[FaultWindow] | None = None) -> Verdict:
    """``reads_show_every_note_once``; see the module. ``faults``: the run's fault windows
    (None: not recorded, so no note shown is explained by a failover)."""
    placed = _placed(list(ctx.journal))
    journaled = {(e.tenant, e.note) for e in ctx.journal if e.note}
    lost = forgettable_creates(ctx.calls, faults)
    index = _Index.build(ctx)
    bad: list[Finding] = []
    complete = 0
    for calls in _listings(ctx).values():
        pages = _pages(calls)
        if pages is None:
            continue
        complete += 1
        v = pages[0].v
        tenant, ws, title = str(v.get("tenant", "")), str(v.get("workspace", "")), v.get("title")
        if not ws:
            continue
        shown = [str(n[0]) for p in pages for n in p.result.get("notes") or []]
        last_ms = pages[-1].done.time_ms if pages[-1].done else pages[-1].invoke.time_ms
        ops = [i for p in pages for i in p.indices]
        twice = sorted({n for n in shown if shown.count(n) > 1})
        if twice:
            bad.append(Finding(f"listing of {title!r} in {ws} showed {twice} twice", ops))
        stray = sorted({n for n in shown if (tenant, ws, title, n) not in placed})
        forgotten = [n for n in stray if (tenant, n) not in journaled]
        maybe = [t for t in lost.get((tenant, ws, str(title)), []) if t <= last_ms]
        if forgotten and len(forgotten) <= len(maybe):
            stray = [n for n in stray if n not in forgotten]
        if stray:
            text = f"listing of {title!r} in {ws} showed {stray}, never there under that title"
            bad.append(Finding(text, ops))
        missing = sorted(index.throughout(pages[0], pages[-1], tenant, ws, str(title)) - set(shown))
        if missing:
            text = f"listing of {title!r} in {ws} skipped {missing}, there throughout"
            bad.append(Finding(text, ops))
    misused = 0
    for c in ctx.calls:
        if c.invoke.f == "list" and "misuse" in c.v and c.outcome != "info":
            misused += 1
            if not (c.outcome == "ok" and c.result.get("isError")):
                text = f"a cursor misused ({c.v['misuse']}) at {c.invoke.index} was not refused"
                bad.append(Finding(text, c.indices))
    ok = (
        f"All {complete} complete listings showed every note once; all {misused} misused "
        "cursors were refused."
    )
    return verdict("reads_show_every_note_once", ok, bad)


def _refusal(r: Mapping[str, Any]) -> bool:
    return (r.get("code"), r.get("message"), r.get("status")) == (
        INVALID_PARAMS,
        INVALID_STATE_MESSAGE,
        REFUSAL_STATUS,
    )


def _states(ctx: Context) -> dict[tuple[int, int], int]:
    """(process, flow) -> the expiry of the setup state its round 1 got."""
    out: dict[tuple[int, int], int] = {}
    for c in ctx.calls:
        exp = c.result.get("exp_ms")
        if c.invoke.f == "setup" and c.outcome == "ok" and isinstance(exp, int):
            out.setdefault((c.invoke.process, c.invoke.flow), exp)
    return out


def _late(c: Call, exp: int | None) -> bool:
    """The answer may have been decided at or past the state's expiry."""
    sent = c.v.get("redis_ms")
    if exp is None or not isinstance(sent, int) or c.done is None:
        return True
    return sent + (c.done.time_ms - c.invoke.time_ms) + EXPIRY_SLACK_MS >= exp


def _pages_opened(ctx: Context) -> dict[tuple[int, int], list[Call]]:
    """(process, flow) -> its ``setup_page`` completions, in history order."""
    out: dict[tuple[int, int], list[Call]] = defaultdict(list)
    for c in ctx.calls:
        if c.invoke.f == "setup_page":
            out[(c.invoke.process, c.invoke.flow)].append(c)
    return out


def _completed(c: Call) -> bool:
    return c.outcome == "ok" and c.result.get("status") == PAGE_DONE


def check_setup(ctx: Context) -> Verdict:
    """``setup_answers``; see the module."""
    exps = _states(ctx)
    opened = _pages_opened(ctx)
    bad: list[Finding] = []
    seen = 0
    for c in ctx.calls:
        if c.invoke.f == "setup_page":
            seen += 1
            want = _page_want(c, opened, exps)
            if want:
                got = c.result.get("status", c.result.get("reason"))
                text = f"setup page at {c.invoke.index} answered {got}; expected {want}"
                bad.append(Finding(text, c.indices))
            continue
        if c.invoke.f != "setup" or c.outcome == "info":
            continue
        seen += 1
        r, action = c.result, c.v.get("action")
        refused = c.outcome == "fail" and _refusal(r)
        late = refused and _late(c, exps.get((c.invoke.process, c.invoke.flow)))
        pages = opened.get((c.invoke.process, c.invoke.flow), [])
        end = c.done.index if c.done is not None else c.invoke.index
        # Completed for sure before this was sent; or perhaps (a page sent before it ended).
        done = any(
            _completed(p) and p.done is not None and p.done.index < c.invoke.index for p in pages
        )
        maybe = any(p.invoke.index < end and (_completed(p) or p.outcome == "info") for p in pages)
        if r.get("configured") is True and ("misuse" in c.v or not maybe):
            want = "nothing configured (no setup page was completed)"
        elif "misuse" in c.v:
            want = "" if refused else "the fixed refusal"
        elif action in ("round1", "silence", "accept") and done:
            want = "" if r.get("configured") is True or late else "configured: true"
        elif action in ("round1", "silence", "accept"):
            ok = r.get("reask") or r.get("configured") is True or late
            want = "" if ok else "the link offered again"
        else:
            ok = c.outcome == "ok" and r.get("configured") is False and not r.get("isError")
            want = "" if ok or late else "configured: false"
        if want:
            got = r.get("message") if c.outcome == "fail" else {k: r.get(k) for k in r}
            text = f"setup {action} at {c.invoke.index} answered {got}; expected {want}"
            bad.append(Finding(text, c.indices))
    return verdict("setup_answers", f"All {seen} setup answers are the legal ones.", bad)


def _page_want(
    c: Call, opened: Mapping[tuple[int, int], list[Call]], exps: Mapping[tuple[int, int], int]
) -> str:
    """What a ``setup_page`` completion should have answered ("" when its answer is legal):
    200 for a link nobody completed before, unexpired; 409 once completed; 410 past expiry."""
    if c.outcome != "ok":
        return ""
    key = (c.invoke.process, c.invoke.flow)
    earlier = [p for p in opened.get(key, []) if p.invoke.index < c.invoke.index]
    if earlier:
        return ""  # used already, or perhaps: 409 and 200 may both be right
    status = c.result.get("status")
    if status == PAGE_DONE:
        return ""
    if status == PAGE_EXPIRED and _late(c, exps.get(key)):
        return ""
    if status == PAGE_UNAVAILABLE:
        return ""  # the store did not answer: a fault's doing (unknown_outcomes_explained)
    return f"{PAGE_DONE} (the link was fresh and unused)"
