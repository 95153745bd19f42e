"""What the nodes see of the store: records, outcomes and the async interface.

Layer: store. Pure module: no Redis or trio imports, so the node's protocol core can depend on
this file while staying free of I/O. ``store.notes.NoteStore`` implements ``NoteStoreAPI``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Protocol

from store import randomness
from store.fast_init import slot_init

ConfirmStatus = Literal[
    "executed",
    "replay",
    "conflict",
    "expired",
    "cancelled",
    "declined",
    "gone",
    "moved",
    "changed",
    "full",
]
QuotaName = Literal["notes", "bytes", "share", "writes"]
"""Which per-principal quota refused a write: notes owned in the tenant, bytes those notes hold,
or notes owned in one shared workspace (a principal's share of it)."""


@slot_init
@dataclass(frozen=True, slots=True)
class Quota:
    """What the owner of the notes a write touches may hold (0: no bound); checked by the same
    script that writes. Owners are counted per tenant (every key of a tenant is in one slot)."""

    notes: int = 0
    """Notes one principal may own in the tenant."""
    bytes: int = 0
    """UTF-8 bytes (titles plus bodies) one principal's notes may hold in the tenant."""
    workspace_notes: int = 0
    """Notes one principal may own in the target workspace (its share of a shared workspace)."""
    writes: int = 0
    """Writes (create, update, move) one principal may make in the tenant per ``window_ms``,
    updates included: every write leaves an operation record living at most one window, so a
    principal holds at most twice this many records (``scripts/op_record.lua``)."""
    window_ms: int = 0
    """The window of ``writes`` (the idempotency window: an operation record's longest life)."""
    reachable_by: tuple[str, ...] = ()
    """The principals granted the target workspace: a move by another principal than the
    note's owner is refused (``unreachable``) when the owner is not among them, since the owner
    could then neither list nor delete a note that still counts against their quota. Empty: no
    check."""


NO_QUOTA = Quota()
ConfirmAction = Literal["accept", "decline", "cancel"]
StoreOp = Literal["delete", "move"]
"""The mutations ``confirm.lua`` performs on an accepted answer."""
RecordedDecision = Literal["executed", "declined"]
"""What a state's replay entry says was decided under its nonce."""


@slot_init
@dataclass(frozen=True, slots=True)
class NoteHead:
    """A note without its body: what listings and pick lists read and show. ``version`` is
    bumped by every change (edit, move)."""

    note_id: str
    title: str
    workspace: str
    version: int
    created_ms: int
    updated_ms: int

    @property
    def uri(self) -> str:
        """Where the note lives, for people: inside its workspace."""
        return f"{self.workspace.rstrip('/')}/{self.note_id}.md"


@slot_init
@dataclass(frozen=True, slots=True)
class Note(NoteHead):
    """One note as stored, body included."""

    body: str
    replayed: bool = field(default=False, compare=False, repr=False)
    """Set only on the note ``create`` returns: the create was recorded by an earlier request
    under the same operation id (an idempotency key), so this call wrote nothing and returns
    that create's note. Not part of the note's value (equality ignores it)."""


OP_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,64}")
"""Operation ids go into a key name (after the tenant's hash tag): plain tokens only."""

OP_RECORD_TTL_MS = 60_000
"""How long the record of a write made without an idempotency key is kept. It serves only the
node's own re-sends of that write after a lost reply, which all happen within a few stream
timeouts of the first send; a minute is far past that and keeps memory small."""


@slot_init
@dataclass(frozen=True, slots=True)
class WriteOp:
    """The operation id a write script records atomically with its write (``<base>:op:<id>``,
    kept ``ttl_ms``), so running the script again with it writes nothing and returns the first
    run's result. ``digest`` names what the operation does (a digest of tool and arguments when
    a client sent an idempotency key, "" otherwise): a record under the same id with another
    digest is an ``IdempotencyConflict``. ``call`` is fresh per store call, so the store can
    tell its own re-send (same call) from a later request with the same id (a replay)."""

    op_id: str
    digest: str = ""
    ttl_ms: int = OP_RECORD_TTL_MS

    def __post_init__(self) -> None:
        if not OP_ID_PATTERN.fullmatch(self.op_id):
            raise ValueError("invalid operation id")
        if self.ttl_ms <= 0:
            raise ValueError("an operation record needs a positive TTL")

    @classmethod
    def fresh(cls) -> WriteOp:
        """A random operation id for a write no client will name again."""
        return cls("r" + randomness.token_hex(16))


@slot_init
@dataclass(frozen=True, slots=True)
class RecordedWrite:
    """What a write script recorded under an operation id: its status (``created``,
    ``updated``, ``moved``), the digest it was recorded with and the note after the write."""

    status: str
    digest: str
    note: NoteHead


@slot_init
@dataclass(frozen=True, slots=True)
class Snapshot:
    """One page of notes (no bodies) read in one step, with the Redis server clock at that step.
    ``next_after`` is where the next page starts (a note id), or "" when this page is the last."""

    redis_now_ms: int
    notes: tuple[NoteHead, ...]
    next_after: str = ""


@slot_init
@dataclass(frozen=True, slots=True)
class Confirmation:
    """One answer to a sealed confirmation, ready for the store's atomic decision. ``title`` and
    ``expected_version`` are the note as shown: the script acts only if the version still matches,
    so the title (which names the index entry) is then also still the one shown."""

    tenant: str
    nonce: str
    action: ConfirmAction
    answer_digest: str
    exp_ms: int
    note_id: str
    expected_version: int
    title: str
    workspace: str
    principal: str
    tool: str
    op: StoreOp = "delete"
    target_workspace: str = ""
    max_notes: int = 0
    """For ``move``: most notes the target may hold (0: no limit); status ``full`` otherwise."""
    max_owner_notes: int = 0
    """For ``move``: most notes the note's owner may own in the target (0: no limit); status
    ``full`` with ``quota == "share"`` otherwise."""
    max_writes: int = 0
    """Most writes the principal may make per ``window_ms`` (``Quota.writes``): a decline and
    an accepted move count; status ``full`` with ``quota == "writes"`` past it."""
    window_ms: int = 0


@slot_init
@dataclass(frozen=True, slots=True)
class ConfirmOutcome:
    """What the store decided about one answer, parsed once from ``confirm.lua``'s reply.

    ``op`` and ``note_id`` name the mutation recorded under the nonce: set when ``status`` is
    ``executed``, and for a ``replay`` or ``conflict`` of an answer that executed; both None when
    the recorded outcome is a decline, or when nothing was recorded (every other status)."""

    status: ConfirmStatus
    op: StoreOp | None
    note_id: str | None
    redis_now_ms: int
    quota: QuotaName | None = None
    """For ``full``: set when the owner's share of the target refused it, not the target's cap."""

    @property
    def recorded(self) -> RecordedDecision | None:
        """The decision recorded under the nonce, if any: the one this answer made (executed,
        declined) or the one a replay or conflict found."""
        if self.op is not None:
            return "executed"
        if self.status in ("declined", "replay", "conflict"):
            return "declined"
        return None


@slot_init
@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """Result of a create, update or move: ``status`` is the script's word, ``note`` the record
    after the write when it happened."""

    status: str
    note: NoteHead | None
    redis_now_ms: int
    replayed: bool = False
    """The write was recorded by an earlier request under the same operation id: nothing was
    written now, ``note`` is that write's result."""


SetupStatus = Literal["completed", "used", "expired"]


@slot_init
@dataclass(frozen=True, slots=True)
class SetupOutcome:
    """What the store decided about completing one setup link: ``principal`` is who completed
    it (now for ``completed``, earlier for ``used``; empty for ``expired``)."""

    status: SetupStatus
    principal: str
    redis_now_ms: int


class StoreUnavailable(Exception):
    """A store call failed in a way that leaves its outcome unknown (timeout, dropped connection).
    The caller must not claim that nothing happened."""


class StoreFull(StoreUnavailable):
    """Redis refused a write for lack of memory (``maxmemory`` under ``noeviction``). Redis
    refuses a script at its first write, so nothing was written: a caller that only knows
    ``StoreUnavailable`` still answers safely ("outcome unknown"), one that knows this can say
    more."""


class StoreRefused(StoreUnavailable):
    """Redis kept refusing the call until its deadline with a reply that says the command did
    not run (a slot being migrated, a cluster failing over, a replica, a server loading:
    ``store.refusals``). ``reason`` names which; ``maybe_ran`` is True when an earlier try of
    the same call lost its reply, so the call as a whole may still have taken effect."""

    def __init__(self, message: str, reason: str, *, maybe_ran: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.maybe_ran = maybe_ran


class LookalikeTitle(Exception):
    """A create, edit or move was refused because the workspace holds a different title that
    looks like the note's (the same UTS #39 skeleton, ``store.skeletons``): ``existing`` is
    that title. Nothing was written."""

    def __init__(self, existing: str) -> None:
        super().__init__(f"a title that looks like this one is in the workspace: {existing!r}")
        self.existing = existing


class IdempotencyConflict(Exception):
    """The operation id was recorded for another operation (another digest: other arguments,
    another tool). Nothing was written."""


class WorkspaceFull(Exception):
    """A create or move was refused because the target workspace holds its maximum number of
    notes (the count is checked and the write made in one script). Nothing was written."""

    def __init__(self, workspace: str, limit: int) -> None:
        super().__init__(f"{workspace} holds {limit} notes, its limit")
        self.workspace = workspace
        self.limit = limit


class QuotaExceeded(Exception):
    """A write was refused because the owner of the note would exceed one of its quotas
    (``Quota``); nothing was written. ``used`` is what the owner holds now."""

    def __init__(self, quota: QuotaName, used: int, limit: int) -> None:
        super().__init__(f"quota {quota}: {used} held, limit {limit}")
        self.quota: QuotaName = quota
        self.used = used
        self.limit = limit


class NoteStoreAPI(Protocol):
    """The async interface the node's protocol core uses."""

    async def redis_time_ms(self) -> int:
        """The Redis server clock, in milliseconds since the epoch."""
        ...

    async def create(
        self,
        tenant: str,
        workspace: str,
        title: str,
        body: str,
        principal: str,
        created_ms: int = 0,
        *,
        max_notes: int = 0,
        op: WriteOp | None = None,
        quota: Quota = NO_QUOTA,
    ) -> Note:
        """Create a note owned by ``principal``; ids are chosen by the store. WorkspaceFull when
        the workspace holds ``max_notes`` already (0: no limit), QuotaExceeded past ``quota``.
        ``op``: the operation id recorded with the write (None: a fresh one);
        IdempotencyConflict when it names another operation."""
        ...

    async def get(self, tenant: str, note_id: str) -> Note | None:
        """One note by id, or None."""
        ...

    async def find(
        self, tenant: str, workspace: str, title: str, limit: int, after: str = ""
    ) -> Snapshot:
        """One page of the notes with exactly this title in this workspace (title index), in
        note id order after ``after``; no bodies."""
        ...

    async def list(self, tenant: str, workspace: str, limit: int, after: str = "") -> Snapshot:
        """One page of the notes in this workspace, in note id order after ``after``; no
        bodies."""
        ...

    async def update(
        self,
        tenant: str,
        note: Note,
        title: str,
        body: str,
        principal: str,
        *,
        op: WriteOp | None = None,
        quota: Quota = NO_QUOTA,
    ) -> WriteOutcome:
        """Edit ``note`` if it is unchanged since it was read (status ``quota_bytes`` when its
        owner's notes would hold more than ``quota.bytes``; ``op`` as for ``create``)."""
        ...

    async def move(
        self,
        tenant: str,
        note_id: str,
        source: str,
        target: str,
        principal: str,
        *,
        max_notes: int = 0,
        op: WriteOp | None = None,
        quota: Quota = NO_QUOTA,
    ) -> WriteOutcome:
        """Move a note between two workspaces of one tenant (status ``full`` when the target
        holds ``max_notes`` already, 0: no limit; ``quota_share`` when the note's owner owns
        ``quota.workspace_notes`` there already; ``op`` as for ``create``)."""
        ...

    async def recorded_write(self, tenant: str, op_id: str) -> RecordedWrite | None:
        """What a create, update or move recorded under ``op_id``, or None (none did, or the
        record expired)."""
        ...

    async def confirm(self, confirmation: Confirmation) -> ConfirmOutcome:
        """The one atomic step that decides a confirmation (see scripts/confirm.lua)."""
        ...

    async def complete_setup(
        self, tenant: str, nonce: str, principal: str, exp_ms: int
    ) -> SetupOutcome:
        """Record that ``principal`` completed setup link ``nonce``, once, before ``exp_ms``
        (Redis clock; see scripts/setup.lua)."""
        ...

    async def setup_completed_by(self, tenant: str, nonce: str) -> str | None:
        """Who completed setup link ``nonce`` (None: nobody yet, or the record expired)."""
        ...
