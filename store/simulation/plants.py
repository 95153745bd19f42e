"""Planted defects: realistic bugs a simulation can switch on, to watch the checker catch them.

Layer: store (nothing of ours but ``store``). One registry (``PLANTS``) serves the user's
catalogue (``notes-cluster simulate --deterministic --plant NAME``, its names and what each
breaks in ``--help``) and the suite's mutation test (tests/test_plants.py runs every plant at a
few hundred deterministic flows, each paired with its control, and fails when the checker
misses one).

A plant is one defect, made one of three ways, each applied to a simulation only (the note
store, the legacy session store, or node code):

- **in a Lua script**: a piece of the script's text replaced by another (``ScriptEdit``), the
  edited script then run in place of the real one (``NoteStore.use_script``). Each edit must
  find its text exactly once, so a plant whose target moved fails loudly instead of planting
  nothing;
- **in the store client**: the node's store wrapped (``StoreOptions.wrap``) by a class that
  misbehaves in one method, as a buggy client library or a node that misreads a reply would;
- **in node code** a store cannot reach (which workspaces a search offers for its roots): a
  context manager of ``cluster.deterministic.node_plants``, named by ``Plant.node`` as
  ``module:name`` (this layer imports nothing of the node), that swaps one function of a node
  module for the run's length.

A legacy plant defects the legacy nodes' session store (``Plant.wrap_sessions``: its scripts
edited, or the store wrapped) and shows only in a run with a share of legacy flows
(``Plant.legacy_share``, which ``simulate --plant`` and tests/test_plants.py give the run).

Off unless asked: nothing here runs unless a deterministic simulation names a plant, and no
node process imports this module (tests/test_plants.py checks a node process's imports).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from store.api import (
    Confirmation,
    ConfirmOutcome,
    Note,
    NoteStoreAPI,
    RecordedWrite,
    Snapshot,
    StoreUnavailable,
    WriteOp,
    WriteOutcome,
)
from store.notes import NoteStore, script_source
from store.sessions import SESSION_SCRIPTS, SessionRecord, SessionStore

SEARCH_LIMIT = 1000
"""How many notes ``notes_search`` reads per workspace (``nodes.tools.search``): a search's
``find`` is told from a listing's by it."""

PAGE_LIMIT_MAX = 10
"""A ``find`` or ``list`` this small is a ``notes_list`` page (a round 1 reads 51 candidates,
a search 1000; the simulations' page size is 2)."""


@dataclass(frozen=True)
class ScriptEdit:
    """Replace ``old`` (found exactly once) by ``new`` in script ``script``."""

    script: str
    old: str
    new: str


class Wrapped:
    """A store that answers as ``inner`` does, except where a plant overrides a method."""

    def __init__(self, inner: NoteStoreAPI) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class CreatesTwice(Wrapped):
    """A create re-sent under a fresh operation id after it succeeded (a retry policy that
    forgets the operation id)."""

    async def create(self, *args: Any, **kw: Any) -> Note:
        note = await self.inner.create(*args, **kw)
        await self.inner.create(*args, **{**kw, "op": WriteOp.fresh()})
        return note


class IgnoresIdempotencyKeys(Wrapped):
    """Every write under an operation id of its own: a retry with the same idempotency key is
    not recognised and writes again."""

    async def recorded_write(self, tenant: str, op_id: str) -> RecordedWrite | None:
        return None

    async def create(self, *args: Any, **kw: Any) -> Note:
        return await self.inner.create(*args, **{**kw, "op": WriteOp.fresh()})

    async def update(self, *args: Any, **kw: Any) -> WriteOutcome:
        return await self.inner.update(*args, **{**kw, "op": WriteOp.fresh()})

    async def move(self, *args: Any, **kw: Any) -> WriteOutcome:
        return await self.inner.move(*args, **{**kw, "op": WriteOp.fresh()})


class DropsReplayFlag(Wrapped):
    """The store client reads a recorded write's reply without its ``replayed`` field: a retry
    with an idempotency key gets the recorded result, but unmarked, as if it wrote now."""

    async def recorded_write(self, tenant: str, op_id: str) -> RecordedWrite | None:
        return None

    async def create(self, *args: Any, **kw: Any) -> Note:
        note = await self.inner.create(*args, **kw)
        return replace(note, replayed=False)

    async def update(self, *args: Any, **kw: Any) -> WriteOutcome:
        return replace(await self.inner.update(*args, **kw), replayed=False)

    async def move(self, *args: Any, **kw: Any) -> WriteOutcome:
        return replace(await self.inner.move(*args, **kw), replayed=False)


class UpdatesTwice(Wrapped):
    """An update applied, then applied again on the note as it now is (an optimistic retry
    after a re-sent script said "changed")."""

    async def update(self, tenant: str, note: Note, *args: Any, **kw: Any) -> WriteOutcome:
        out = await self.inner.update(tenant, note, *args, **kw)
        now = await self.inner.get(tenant, note.note_id)
        if out.note is not None and now is not None:
            await self.inner.update(tenant, now, *args, **{**kw, "op": WriteOp.fresh()})
        return out


class MovesButSaysGone(Wrapped):
    """A move done, answered as if the note was not in the source."""

    async def move(self, *args: Any, **kw: Any) -> WriteOutcome:
        out = await self.inner.move(*args, **kw)
        return WriteOutcome("gone", None, out.redis_now_ms)


class ArchivesInPlace(Wrapped):
    """An archive that "moves" the note into the workspace it is already in, not the sealed
    archive."""

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        if c.op == "move":
            fields = {name: getattr(c, name) for name in Confirmation.__dataclass_fields__}
            c = Confirmation(**{**fields, "target_workspace": c.workspace})
        return await self.inner.confirm(c)


class PagesSkipANote(Wrapped):
    """A listing's later pages lose their first note."""

    async def find(self, tenant: str, ws: str, title: str, limit: int, after: str = "") -> Snapshot:
        snap = await self.inner.find(tenant, ws, title, limit, after)
        if not after:
            return snap
        return Snapshot(snap.redis_now_ms, snap.notes[1:], snap.next_after)


class PagesTooBig(Wrapped):
    """Every listing page one note longer than the configured page size."""

    async def find(self, tenant: str, ws: str, title: str, limit: int, after: str = "") -> Snapshot:
        grown = limit + 1 if limit <= PAGE_LIMIT_MAX else limit
        return await self.inner.find(tenant, ws, title, grown, after)


class SearchDropsANote(Wrapped):
    """``notes_search`` misses the newest note it found."""

    async def find(self, tenant: str, ws: str, title: str, limit: int, after: str = "") -> Snapshot:
        snap = await self.inner.find(tenant, ws, title, limit, after)
        if limit != SEARCH_LIMIT or not snap.notes:
            return snap
        return Snapshot(snap.redis_now_ms, snap.notes[:-1], snap.next_after)


class ClockFast(Wrapped):
    """The node reads the Redis clock three seconds fast, so its states expire late."""

    async def redis_time_ms(self) -> int:
        return int(await self.inner.redis_time_ms()) + 3_000

    async def find(self, *args: Any, **kw: Any) -> Snapshot:
        snap = await self.inner.find(*args, **kw)
        return Snapshot(snap.redis_now_ms + 3_000, snap.notes, snap.next_after)


class SetupSaysCompleted(Wrapped):
    """Every setup link reads as completed by the principal who last created a note in its
    tenant (a flow's own create comes right before its round 1), though nobody opened it."""

    def __init__(self, inner: NoteStoreAPI) -> None:
        super().__init__(inner)
        self.creators: dict[str, str] = {}

    async def create(self, tenant: str, *args: Any, **kw: Any) -> Note:
        note = await self.inner.create(tenant, *args, **kw)
        principal = kw.get("principal", args[3] if len(args) > 3 else None)
        if isinstance(principal, str):
            self.creators[tenant] = principal
        return note

    async def setup_completed_by(self, tenant: str, nonce: str) -> str | None:
        return self.creators.get(tenant)


class SetupCompletionMisfiled(Wrapped):
    """The setup page's completion recorded under another link's key: the page says done,
    the tool never learns it."""

    async def complete_setup(self, tenant: str, nonce: str, principal: str, exp_ms: int) -> Any:
        return await self.inner.complete_setup(tenant, nonce + "-misfiled", principal, exp_ms)


class PretendsLostReplies(Wrapped):
    """Every second create a node sends answered "outcome unknown", though it landed and
    nothing failed."""

    def __init__(self, inner: NoteStoreAPI) -> None:
        super().__init__(inner)
        self.creates = 0

    async def create(self, *args: Any, **kw: Any) -> Note:
        note = await self.inner.create(*args, **kw)
        self.creates += 1
        if self.creates % 2 == 0:
            raise StoreUnavailable("planted: a reply the node pretends it lost")
        return note


@dataclass(frozen=True)
class Plant:
    """One defect: its name, what it breaks (for ``--help``), the invariant that must catch it,
    the flow kinds that expose it, how it is made, and fault kinds it needs to show."""

    name: str
    breaks: str
    invariant: str
    kinds: tuple[str, ...]
    edits: tuple[ScriptEdit, ...] = ()
    wrapper: Callable[[NoteStoreAPI], NoteStoreAPI] | None = None
    faults: frozenset[str] = frozenset()
    """Fault kinds the run must inject for the defect to show (added to the run's)."""
    also: tuple[str, ...] = ()
    """Other invariants it breaks (the suite holds it to them too)."""
    node: str = ""
    """``module:name`` of a context manager that plants the defect in node code for the run
    (``cluster.deterministic.node_plants``); "" for a plant in the store."""
    session_edits: tuple[ScriptEdit, ...] = ()
    """Edits of the legacy session scripts (``store.sessions.SESSION_SCRIPTS``)."""
    session_wrapper: Callable[[SessionStore], SessionStore] | None = None
    legacy_share: float = 0.0
    """The share of legacy flows a run needs for the defect to show (0: none)."""

    def wrap(self, store: NoteStoreAPI) -> NoteStoreAPI:
        """``store`` with the defect in it (its scripts edited, then wrapped)."""
        if self.edits:
            if not isinstance(store, NoteStore):
                raise TypeError(f"plant {self.name} edits scripts: it needs a NoteStore")
            for script in sorted({e.script for e in self.edits}):
                store.use_script(script, self.source(script))
        return store if self.wrapper is None else self.wrapper(store)

    def wrap_sessions(self, store: SessionStore) -> SessionStore:
        """The legacy session store ``store`` with the defect in it (scripts, then wrapper)."""
        for script in sorted({e.script for e in self.session_edits}):
            store.use_script(
                script, _edited(self.name, script, SESSION_SCRIPTS[script], self.session_edits)
            )
        return store if self.session_wrapper is None else self.session_wrapper(store)

    def source(self, script: str) -> str:
        """Script ``script``'s source with this plant's edits of it."""
        return _edited(self.name, script, script_source(script), self.edits)


def _edited(plant: str, script: str, text: str, edits: tuple[ScriptEdit, ...]) -> str:
    """``text`` (script ``script``'s source) with ``edits`` of it made, each found once."""
    for e in edits:
        if e.script != script:
            continue
        found = text.count(e.old)
        if found != 1:
            raise ValueError(
                f"plant {plant}: {e.old!r} occurs {found} times in script {script} "
                "(the script changed: update the plant)"
            )
        text = text.replace(e.old, e.new)
    return text


def _flagged(value: Any) -> Any:
    """``value`` with every ``false`` read as a flag that is present: ``true``."""
    if value is False:
        return True
    if isinstance(value, dict):
        return {k: _flagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_flagged(v) for v in value]
    return value


def flags_booleans(store: SessionStore) -> SessionStore:
    """The session store re-encodes a delivered answer with its booleans as presence flags (a
    field that is there is true): an accept with ``confirm: false`` reaches the waiting call
    as ``confirm: true``."""
    deliver = store.deliver

    async def flagged(session_id: str, request_id: str, body: str) -> Any:
        try:
            answer = json.loads(body)
        except ValueError:
            return await deliver(session_id, request_id, body)
        return await deliver(session_id, request_id, json.dumps(_flagged(answer)))

    store.deliver = flagged  # type: ignore[method-assign]
    return store


class _Anyone(str):
    """A principal's name that compares equal to every name."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, str)

    __hash__ = str.__hash__


def shares_sessions(store: SessionStore) -> SessionStore:
    """The session store reads a session's owner as anybody: any principal's token may use
    any session id it holds."""
    load = store.load

    async def anyones(session_id: str) -> SessionRecord | None:
        found = await load(session_id)
        return None if found is None else replace(found, principal=_Anyone(found.principal))

    store.load = anyones  # type: ignore[method-assign]
    return store


_LEGACY_SHARE = 0.3
"""The legacy share the legacy plants run at (``simulate --legacy-share 0.3``)."""


NODE_PLANTS = "cluster.deterministic.node_plants"
"""Where the plants in node code live (above this layer: named, never imported here)."""

_EXPIRED = "if now >= exp then return {'expired', '', now} end"
_NOTES_QUOTA = "if max_notes > 0 and notes >= max_notes then"
_ACCEPT_KEEP = """  'call', ARGV[16] or '')
redis.call('PEXPIREAT', KEYS[1], keep_until)
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[12], '*', 'op', ARGV[10],"""

PLANTS: dict[str, Plant] = {
    p.name: p
    for p in (
        Plant(
            "expiry-unchecked",
            "confirm.lua forgets the expiry check: an answer after the state expired still deletes",
            "no_execution_after_expiry",
            ("expired",),
            (ScriptEdit("confirm", _EXPIRED, ""),),
            also=("no_mutation_from_refused", "answers_conform_to_model"),
        ),
        Plant(
            "expiry-off-by-one",
            "confirm.lua compares now > exp: an answer at the exact expiry millisecond still "
            "deletes",
            "no_execution_after_expiry",
            ("expired",),
            (ScriptEdit("confirm", _EXPIRED, _EXPIRED.replace(">=", ">")),),
        ),
        Plant(
            "version-unchecked",
            "confirm.lua skips the version check: a note edited after it was shown is deleted "
            "without a re-ask",
            "answers_conform_to_model",
            ("edit_between",),
            (
                ScriptEdit(
                    "confirm", "if cur[2] ~= ARGV[6] then return {'changed', '', now} end", ""
                ),
            ),
            also=("executions_trace_to_confirmations",),
        ),
        Plant(
            "any-answer-replays",
            "confirm.lua replays the recorded outcome to any answer: a changed answer is told "
            "the first one's outcome instead of refused",
            "answers_conform_to_model",
            ("answer_changed", "decline"),
            (ScriptEdit("confirm", "if rec[1] == ARGV[2] then", "if rec[1] then"),),
        ),
        Plant(
            "replay-told-fresh",
            "confirm.lua compares the call id wrongly: a client's retry of a decided answer is "
            "told 'executed' afresh, not 'replay'",
            "answers_conform_to_model",
            ("duplicate", "timeout_retry"),
            (ScriptEdit("confirm", "rec[3] == ARGV[16]", "rec[3] ~= ARGV[16]"),),
            also=("ok_deletes_match_journal", "oddities_explained"),
        ),
        Plant(
            "resend-told-replay",
            "confirm.lua ignores the call id: the node's own re-send after a lost Redis reply "
            "tells the deciding answer 'replay'",
            "answers_conform_to_model",
            (),
            (ScriptEdit("confirm", "if ARGV[16] and ARGV[16] ~= '' and", "if false and"),),
            faults=frozenset({"lost-reply"}),
        ),
        Plant(
            "replay-entry-kept",
            "confirm.lua never sets the replay entry's expiry after an execution: replay "
            "entries pile up forever",
            "replay_entries_expire",
            ("plain",),
            (
                ScriptEdit(
                    "confirm",
                    _ACCEPT_KEEP,
                    _ACCEPT_KEEP.replace("redis.call('PEXPIREAT', KEYS[1], keep_until)\n", ""),
                ),
            ),
        ),
        Plant(
            "usage-kept-on-delete",
            "confirm.lua deletes a note without releasing its owner's usage: the quota fills "
            "with notes that are gone",
            "usage_matches_notes",
            ("plain",),
            (
                ScriptEdit(
                    "confirm",
                    "if redis.call('HINCRBY', KEYS[8], 'n:' .. cur[4], -1) <= 0 then",
                    "if false then",
                ),
            ),
        ),
        Plant(
            "op-record-kept",
            "op_record.lua records a write without an expiry: operation records never go",
            "op_records_expire",
            ("write_retry",),
            (
                ScriptEdit(
                    "create",
                    "  redis.call('HSET', key, unpack(flat))\n"
                    "  redis.call('PEXPIREAT', key, until_ms)\n",
                    "  redis.call('HSET', key, unpack(flat))\n",
                ),
            ),
        ),
        Plant(
            "grace-ignored",
            "confirm.lua keeps a replay entry only until the state's expiry, not expiry plus "
            "grace: a decided answer retried just after the expiry is refused, not replayed",
            "before_expiry_honoured",
            ("replay_after_expiry",),
            (
                ScriptEdit(
                    "confirm",
                    "local keep_until = exp + tonumber(ARGV[4])",
                    "local keep_until = exp",
                ),
            ),
        ),
        Plant(
            "cancel-recorded",
            "confirm.lua records a cancel as a decline: the state can no longer be accepted, "
            "though a cancel must leave it usable",
            "answers_conform_to_model",
            ("cancel_then_accept",),
            (
                ScriptEdit(
                    "confirm",
                    "if ARGV[1] == 'cancel' then return {'cancelled', '', now} end\n"
                    "local keep_until = exp + tonumber(ARGV[4])\n"
                    "if ARGV[1] == 'decline' then",
                    "local keep_until = exp + tonumber(ARGV[4])\n"
                    "if ARGV[1] == 'decline' or ARGV[1] == 'cancel' then",
                ),
            ),
        ),
        Plant(
            "replay-entry-unread",
            "confirm.lua never reads the replay entry: a repeated decline decides the same "
            "state twice",
            "no_double_execution",
            ("answer_changed", "decline"),
            (ScriptEdit("confirm", "if rec[1] then", "if false then"),),
            also=("answers_make_progress", "no_mutation_from_refused", "ok_deletes_match_journal"),
        ),
        Plant(
            "expires-early",
            "confirm.lua refuses from half a second before the expiry: an answer sent in time "
            "is told the state expired",
            "before_expiry_honoured",
            ("before_expiry",),
            (ScriptEdit("confirm", _EXPIRED, _EXPIRED.replace("exp then", "exp - 500 then")),),
            also=("answers_make_progress",),
        ),
        Plant(
            "create-resent",
            "the store client re-sends a create under a fresh operation id: one request, two notes",
            "creates_exactly_once",
            ("plain",),
            wrapper=CreatesTwice,
        ),
        Plant(
            "idempotency-key-ignored",
            "the node writes every keyed retry under a fresh operation id: a retried create "
            "makes a second note",
            "creates_exactly_once",
            ("write_retry",),
            wrapper=IgnoresIdempotencyKeys,
            also=("updates_one_step", "keyed_retries_marked"),
        ),
        Plant(
            "replay-mark-dropped",
            "the store client drops a recorded write's 'replayed' flag: a keyed retry is "
            "answered as a fresh write, without the replay marker",
            "keyed_retries_marked",
            ("write_retry",),
            wrapper=DropsReplayFlag,
        ),
        Plant(
            "update-applied-twice",
            "the node retries an update on the note as it now is: one request, two versions",
            "updates_one_step",
            ("edit_between",),
            wrapper=UpdatesTwice,
        ),
        Plant(
            "move-says-gone",
            "the node answers a move that happened as 'no such note'",
            "moves_land",
            ("race_move",),
            wrapper=MovesButSaysGone,
        ),
        Plant(
            "archive-in-place",
            "notes_archive moves the note into the workspace it is in, not the sealed archive",
            "executions_trace_to_confirmations",
            ("archive",),
            wrapper=ArchivesInPlace,
        ),
        Plant(
            "page-skips-note",
            "notes_list loses the first note of every page after the first",
            "reads_show_every_note_once",
            ("list_pages",),
            wrapper=PagesSkipANote,
        ),
        Plant(
            "page-too-big",
            "notes_list pages hold one note more than the configured page size",
            "bounds_respected",
            ("list_pages",),
            wrapper=PagesTooBig,
        ),
        Plant(
            "search-drops-note",
            "notes_search misses the newest note it found",
            "reads_show_every_note_once",
            ("search",),
            wrapper=SearchDropsANote,
        ),
        Plant(
            "clock-fast",
            "the node reads the Redis clock 3 s fast: its states live 3 s past their TTL",
            "bounds_respected",
            ("plain",),
            wrapper=ClockFast,
        ),
        Plant(
            "setup-says-completed",
            "notes_setup reports a link completed that nobody opened",
            "setup_answers",
            ("setup",),
            wrapper=SetupSaysCompleted,
        ),
        Plant(
            "pick-outside-roots",
            "notes_search's pick form offers every workspace the principal is granted, not only "
            "those inside the roots the client gave",
            "roots_respected",
            ("search",),
            node=f"{NODE_PLANTS}:pick_outside_roots",
        ),
        Plant(
            "roots-ungranted-honoured",
            "notes_search honours a root its principal is not granted: another tenant's "
            "workspaces are offered and searched",
            "roots_respected",
            ("roots_ungranted",),
            node=f"{NODE_PLANTS}:roots_ungranted_honoured",
        ),
        Plant(
            "quota-off-by-one",
            "create.lua compares notes > max_notes: a principal at its notes quota may create "
            "one note more",
            "quotas_held",
            ("quota_boundary",),
            (ScriptEdit("create", _NOTES_QUOTA, _NOTES_QUOTA.replace(">=", ">")),),
        ),
        Plant(
            "quota-refused-early",
            "create.lua refuses a create one note under the notes quota",
            "quotas_held",
            ("quota_boundary",),
            (ScriptEdit("create", _NOTES_QUOTA, _NOTES_QUOTA.replace(">=", ">= -1 +")),),
        ),
        Plant(
            "setup-completion-misfiled",
            "the setup page records its completion under another key: notes_setup keeps "
            "offering a link that was completed",
            "setup_answers",
            ("setup",),
            wrapper=SetupCompletionMisfiled,
        ),
        Plant(
            "legacy-false-read-true",
            "the legacy session store re-encodes an answer's booleans as presence flags: an "
            "accept with confirm false reaches the waiting call as confirm true, and deletes",
            "no_mutation_from_refused",
            ("legacy_decline",),
            session_wrapper=flags_booleans,
            legacy_share=_LEGACY_SHARE,
            also=("answers_conform_to_model",),
        ),
        Plant(
            "legacy-answer-taken-twice",
            "the legacy deliver script never marks a request answered: every copy of an answer "
            "is taken again as a fresh one",
            "legacy_answers_act_once",
            ("legacy_plain",),
            session_edits=(
                ScriptEdit("deliver", "redis.call('SET', KEYS[2], 'answered', 'KEEPTTL')\n", ""),
            ),
            legacy_share=_LEGACY_SHARE,
        ),
        Plant(
            "legacy-marker-kept",
            "a legacy request's marker is set without an expiry: markers pile up forever",
            "legacy_keys_expire",
            ("legacy_plain",),
            session_edits=(
                ScriptEdit(
                    "open_request",
                    "redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])",
                    "redis.call('SET', KEYS[2], ARGV[1])",
                ),
            ),
            legacy_share=_LEGACY_SHARE,
        ),
        Plant(
            "legacy-answers-dropped",
            "the legacy deliver script says 'ok' and appends nothing: every legacy answer is "
            "lost, and each call waits out its state",
            "legacy_answers_heard",
            ("legacy_plain",),
            session_edits=(
                ScriptEdit(
                    "deliver",
                    "redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'kind', 'answer', "
                    "'rid', ARGV[1],\n  'body', ARGV[2])\n",
                    "",
                ),
            ),
            legacy_share=_LEGACY_SHARE,
        ),
        Plant(
            "legacy-session-shared",
            "the session store reads a legacy session without its owner: another principal's "
            "token may use it",
            "legacy_sessions_bound",
            ("legacy_foreign_session",),
            session_wrapper=shares_sessions,
            legacy_share=_LEGACY_SHARE,
        ),
        Plant(
            "pretends-lost-replies",
            "the node answers every second create 'outcome unknown' where nothing failed",
            "unknown_outcomes_explained",
            ("plain",),
            wrapper=PretendsLostReplies,
        ),
    )
}
"""Every planted defect, by name (the catalogue ``--plant`` lists)."""


def plant(name: str) -> Plant:
    """The plant called ``name``; ValueError naming the known ones."""
    found = PLANTS.get(name)
    if found is None:
        raise ValueError(f"no plant {name!r}; known: {', '.join(sorted(PLANTS))}")
    return found


def catalogue() -> str:
    """One line per plant: its name and what it breaks (``simulate --help``)."""
    return "\n".join(f"{p.name}: {p.breaks}" for p in PLANTS.values())
