"""The note store and replay store over Redis: an async API around the Lua scripts.

Layer: store. Knows Redis (through the store's own client, ``store.resp_client`` or on a Redis
Cluster ``store.resp_cluster``; coredis when ``store.client_factory.CLIENT_ENV`` asks for it;
each runs on trio and asyncio) and the key layout; knows nothing of MCP, sealing or HTTP. The
same scripts run unchanged on the embedded store (fakeredis over TCP), on a real Redis and on a
Redis Cluster, because every script touches one tenant's slot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

import anyio
import coredis
import coredis.exceptions

from store import randomness
from store.api import (
    NO_QUOTA,
    Confirmation,
    ConfirmOutcome,
    IdempotencyConflict,
    Note,
    NoteHead,
    Quota,
    RecordedWrite,
    SetupOutcome,
    SetupStatus,
    Snapshot,
    StoreFull,
    StoreRefused,
    StoreUnavailable,
    WorkspaceFull,
    WriteOp,
    WriteOutcome,
)
from store.client_factory import before_resend, report_lost_reply
from store.fault_points import buggify_delay
from store.keys import TenantKeys
from store.redis_errors import ConnectionLost, NotSent, RedisClientError, ReplyTimeout
from store.refusals import REFUSAL_WAIT_S, pause_s, refusal_deadline, refusal_reason
from store.replies import (
    HEAD_FIELDS,
    QUOTA_STATUSES,
    SETUP_STATUSES,
    head_from_fields,
    note_from_fields,
    parse_confirm_reply,
    parse_write_reply,
    quota_exceeded,
)
from store.resp import ReplyError
from store.resp_client import RespRedis
from store.resp_cluster import RespCluster

T = TypeVar("T")

DEFAULT_PREFIX = "nc"
REPLAY_GRACE_MS = 60_000
"""How long a replay entry outlives its state's expiry. Past the expiry no answer can execute, so
the entry only serves late retries of an answer that did; a minute covers any sane client retry."""

JOURNAL_MAXLEN = 1_000_000
"""Approximate cap of each tenant's journal stream, so memory stays bounded on long runs."""

TENANT_KEYS_CACHE = 1024
"""Tenants whose ``TenantKeys`` a store keeps (cleared when full: a bound, not an LRU)."""

READ_LIMIT = 1000
"""Most notes one read returns; a title with more matches than this is not a pickable list."""

_TIME_SCRIPT = "local t = redis.call('TIME') return {t[1], t[2]}"
"""The Redis server clock, read raw: seconds and microseconds, as the other scripts read it."""

WAIT_TIMEOUT_MS = 500
"""With ``wait_replicas``: how long a write waits (``WAIT``) for its replicas before the node
gives up and answers "outcome unknown". Replication on a healthy link takes well under a
millisecond; half a second rides out a hiccup without holding clients for long."""

WRITE_SCRIPTS = frozenset({"create", "update", "move", "confirm", "setup", "op_lookup"})
"""The scripts that change data, so the ones ``wait_replicas`` holds until replicated; and
``op_lookup``, which reads a write's record found for a retry's replay again: a replay is an
answer that the write happened, so it waits for the record to be replicated like the write
itself (the script touches the record's expiry so that its ``WAIT`` covers it)."""

OP_RECORD_SCRIPTS = frozenset({"create", "update", "move", "setup"})
"""The scripts that record their write under an operation id (``scripts/op_record.lua`` is
prepended to each). With ``confirm`` (its replay entry, keyed by the state's nonce, holds the
store call id), ``read_notes`` (reads only) and ``op_lookup`` (rewrites an expiry with its own
value), every script is safe to run twice."""

RESENDS = 2
"""How often a script is sent again after its reply was lost (dropped connection, timeout)
before the call fails with StoreUnavailable (the client picks the connection; a dead one fails
fast and costs one of these). Safe because every script is safe to run twice
(``OP_RECORD_SCRIPTS``): the re-send returns what the first run did. The Redis client itself
never re-sends (the store's own never does; coredis is given
``store.client_factory.no_resend_policy``)."""

_LOST_REPLY: tuple[type[Exception], ...] = (
    coredis.exceptions.ConnectionError,
    TimeoutError,
    OSError,
    ConnectionLost,
    ReplyTimeout,
    NotSent,
)
"""Errors after which the command may have run but its reply is lost: re-sent (``RESENDS``).
The store's own client: ``ConnectionLost``, ``ReplyTimeout``, and ``NotSent`` (it did not run).
A ``WAIT`` that found too few replicas (ReplicationError) is not: the script ran and answered;
only its durability is unknown, which a re-send would not settle."""

_UNKNOWN_OUTCOME: tuple[type[BaseException], ...] = (
    coredis.exceptions.ConnectionError,
    coredis.exceptions.ReplicationError,
    coredis.exceptions.ClusterError,
    coredis.exceptions.ClusterDownError,
    coredis.exceptions.ClusterRoutingError,
    coredis.exceptions.TryAgainError,
    coredis.exceptions.AskError,
    coredis.exceptions.ReadOnlyError,
    coredis.exceptions.UnblockedError,
    TimeoutError,
    OSError,
    RedisClientError,
)
"""Errors after which a call may or may not have taken effect: a dropped connection or a
timeout (the script may have run), too few replicas acknowledged (it ran, but may be lost),
a cluster between masters (failover), a ``WAIT`` unblocked by a failover (``UNBLOCKED``: the
script ran, its replication is unknown). The node must answer "outcome unknown", never "no".
The store's own client raises ``RedisClientError`` for all of these (``store.redis_errors``);
its ``NotSent`` (the command never left) is answered the same way: safe, if pessimistic."""

_REPLY_ERRORS = (coredis.exceptions.ResponseError, ReplyError)
"""A server's error reply, as coredis and as the store's own client raise it."""

_UNKNOWN_REPLY_PREFIXES = ("LOADING", "BUSY", "MASTERDOWN", "NOREPLICAS", "CLUSTERDOWN", "OOM")
"""Error replies of a server that is starting, busy, failing over or full: transient, like the
above. A full server (``OOM``) wrote nothing, which ``store_error`` says more precisely; callers
that only ask ``outcome_unknown`` stay safe."""


def outcome_unknown(exc: BaseException) -> bool:
    """True when ``exc`` leaves a store call's outcome unknown (see ``_UNKNOWN_OUTCOME``)."""
    if isinstance(exc, _UNKNOWN_OUTCOME):
        return True
    return isinstance(exc, _REPLY_ERRORS) and str(exc).startswith(_UNKNOWN_REPLY_PREFIXES)


def store_error(exc: BaseException, what: str) -> StoreUnavailable | None:
    """The store error ``exc`` amounts to (``StoreFull`` for a Redis out of memory, which wrote
    nothing; ``StoreUnavailable`` when the outcome is unknown), or None for any other error."""
    if isinstance(exc, _REPLY_ERRORS) and str(exc).startswith("OOM"):
        return StoreFull(f"{what}: Redis is out of memory (maxmemory, noeviction)")
    if outcome_unknown(exc):
        return StoreUnavailable(f"{what}: {type(exc).__name__}: {exc}")
    return None


def script_source(name: str) -> str:
    """A script's source as the store runs it; the write scripts get the operation-record
    functions prepended."""
    scripts = resources.files("store").joinpath("scripts")
    source = scripts.joinpath(f"{name}.lua").read_text("utf-8")
    if name in OP_RECORD_SCRIPTS or name == "confirm":  # confirm: for its charge_write
        return scripts.joinpath("op_record.lua").read_text("utf-8") + "\n" + source
    return source


def _call_id() -> str:
    """A fresh id for one store call: its re-sends carry it, a later request does not."""
    return randomness.token_hex(8)


@dataclass
class StoreStatistics:
    """Counters of one NoteStore: script calls by name and confirmation outcomes by status."""

    calls: dict[str, int] = field(default_factory=dict)
    confirmations: dict[str, int] = field(default_factory=dict)
    unavailable: int = 0
    resent: int = 0
    """Scripts sent again after a lost reply (``RESENDS``)."""
    refused: int = 0
    """Commands sent again after a refusal that says they did not run (``store.refusals``)."""


class NoteStore:
    """Notes, title index, replay store and journal of every tenant under one key prefix."""

    def __init__(
        self,
        client: coredis.Redis[str] | coredis.RedisCluster[str] | RespRedis | RespCluster,
        *,
        prefix: str = DEFAULT_PREFIX,
        replay_grace_ms: int = REPLAY_GRACE_MS,
        journal_maxlen: int = JOURNAL_MAXLEN,
        wait_replicas: int = 0,
        wait_timeout_ms: int = WAIT_TIMEOUT_MS,
        refusal_wait_s: float = REFUSAL_WAIT_S,
    ) -> None:
        self.client = client
        self.refusal_wait_s = refusal_wait_s
        """How long a refused command (``store.refusals``) is re-sent when the request sets no
        earlier deadline."""
        self.prefix = prefix
        self.replay_grace_ms = replay_grace_ms
        self.journal_maxlen = journal_maxlen
        self.wait_replicas = wait_replicas
        """Replicas that must acknowledge every write (``WAIT``, on the write's own connection)
        before it counts as done; fewer within ``wait_timeout_ms`` is StoreUnavailable (the
        write ran on the master but may be lost in a failover). 0: asynchronous replication."""
        self.wait_timeout_ms = wait_timeout_ms
        # confirm's constant arguments as the text Redis receives for them either way: hiredis
        # formats an int with repr, about 500 instructions each time (Lua sees strings).
        self._grace_arg = str(replay_grace_ms)
        self._maxlen_arg = str(journal_maxlen)
        self._stats = StoreStatistics()
        self.lost_reply_observer: Callable[[str, float], None] | None = None
        """Told of every reply this store lost (a timeout, a dropped connection, a command not
        sent): what was sent and the seconds it waited. A simulation's harness records them as
        observed faults, the honest cause of the "outcome unknown" answers they lead to."""
        self._keys: dict[str, TenantKeys] = {}
        # A script goes by EVALSHA and, on NOSCRIPT (it did not run), once in full
        # (``RespRedis.evalsha``): a restarted or failed-over Redis that forgot its script cache
        # is handled transparently.
        self._scripts = {
            name: client.register_script(script_source(name))
            for name in ("create", "update", "move", "read_notes", "confirm", "setup", "op_lookup")
        }
        self._time = client.register_script(_TIME_SCRIPT)

    def keys(self, tenant: str) -> TenantKeys:
        """The key layout of one tenant (made once per tenant: its checks cost a regex)."""
        keys = self._keys.get(tenant)
        if keys is None:
            keys = TenantKeys(self.prefix, tenant)
            if len(self._keys) >= TENANT_KEYS_CACHE:
                self._keys.clear()
            self._keys[tenant] = keys
        return keys

    def use_script(self, name: str, source: str) -> None:
        """Run ``source`` as script ``name`` from now on: the seam through which a simulation
        plants a defect in a script (``store.simulation.plants``); nothing else calls it."""
        if name not in self._scripts:
            raise KeyError(f"no script {name!r}")
        self._scripts[name] = self.client.register_script(source)

    def script_digests(self) -> dict[str, str]:
        """Script name -> the SHA1 that ``EVALSHA`` names it by: a fault injector picks the
        commands of one script by it (``cluster.reply_dropping_proxy``)."""
        return {name: script.sha for name, script in self._scripts.items()}

    def statistics(self) -> StoreStatistics:
        """A copy of the counters."""
        s = self._stats
        return StoreStatistics(
            dict(s.calls), dict(s.confirmations), s.unavailable, s.resent, s.refused
        )

    async def _run(self, name: str, keys: list[str], args: list[str | int]) -> list[Any]:
        """Run one script; after a lost reply, send it again (``RESENDS``), which every script
        is safe for: the re-send gets the first run's result."""
        return (await self._run_telling(name, keys, args))[0]

    async def _run_telling(
        self, name: str, keys: list[str], args: list[str | int]
    ) -> tuple[list[Any], bool]:
        """``_run``, and whether an earlier send of the script may have run (its reply was
        lost, other than by ``NotSent``): the reply is then a re-send's."""
        self._stats.calls[name] = self._stats.calls.get(name, 0) + 1
        maybe_ran = False

        async def send() -> list[Any]:
            nonlocal maybe_ran
            try:
                return await self._send(name, keys, args)
            except NotSent:
                raise
            except _LOST_REPLY:
                maybe_ran = True
                raise

        return await self._resending(name, send), maybe_ran

    async def _send(self, name: str, keys: list[str], args: list[str | int]) -> list[Any]:
        await buggify_delay("store.before_script")
        if self.wait_replicas > 0 and name in WRITE_SCRIPTS:
            # WAIT goes on the script's own connection right behind it; fewer replicas than
            # asked is ReplicationError (``store.resp_client.ensure_replication``).
            with self.client.ensure_replication(self.wait_replicas, self.wait_timeout_ms):
                reply: Any = await self._scripts[name](keys=keys, args=args)
        else:
            reply = await self._scripts[name](keys=keys, args=args)
        await buggify_delay("store.after_script")
        # The store's own client replies with a fresh list (hiredis'), coredis maybe not.
        return reply if type(reply) is list else list(reply)

    def _failed(self, exc: Exception, what: str) -> StoreUnavailable:
        """The store error to raise for ``exc``; re-raises ``exc`` itself when it is none."""
        error = store_error(exc, what)
        if error is None:
            raise exc
        self._stats.unavailable += 1
        return error

    async def redis_time_ms(self) -> int:
        """The Redis server clock (TIME), in milliseconds since the epoch."""
        reply: Any = await self._query("time", lambda: self._time(keys=[], args=[]))
        # Read by a script, as every other script reads TIME: raw seconds and microseconds,
        # whatever a client's own TIME helper would round them to (coredis' to whole seconds).
        sec, usec = reply
        return int(sec) * 1000 + int(usec) // 1000

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
        """Create a note owned by ``principal`` with a fresh random id (retried on the
        astronomically rare collision). ``created_ms`` backdates it (seeding only); 0 means the
        Redis clock's now. WorkspaceFull when the workspace already holds ``max_notes`` (0: no
        limit), QuotaExceeded past one of ``quota``'s bounds, both checked in the script.
        ``op`` is recorded with the write (None: a fresh id): a create already recorded under
        it returns that note (``replayed`` when an earlier call wrote it), writes nothing and
        charges no quota again."""
        k = self.keys(tenant)
        op = op or WriteOp.fresh()
        call = _call_id()
        for _ in range(4):
            note_id = "n" + randomness.token_hex(8)
            reply = await self._run(
                "create",
                [
                    k.note(note_id),
                    k.workspace(workspace),
                    k.title(workspace, title),
                    k.journal,
                    k.op(op.op_id),
                    k.usage,
                    k.workspace_usage(workspace),
                    k.writes,
                    k.lookalikes(workspace, title),
                ],
                [
                    note_id,
                    title,
                    body,
                    workspace,
                    principal,
                    self.journal_maxlen,
                    created_ms,
                    max_notes,
                    op.op_id,
                    op.digest,
                    call,
                    op.ttl_ms,
                    quota.notes,
                    quota.bytes,
                    quota.workspace_notes,
                    quota.writes,
                    quota.window_ms,
                ],
            )
            status, head, _, replayed = parse_write_reply(reply)
            if status == "full":
                raise WorkspaceFull(workspace, max_notes)
            if status in QUOTA_STATUSES:
                # A quota refusal's version field is what the owner holds now (create.lua).
                raise quota_exceeded(status, int(reply[4]), quota)
            if status == "created" and head is not None:
                return Note(
                    head.note_id,
                    head.title,
                    head.workspace,
                    head.version,
                    head.created_ms,
                    head.updated_ms,
                    body,
                    replayed,
                )
        raise StoreUnavailable("create: could not find a free note id")

    async def get(self, tenant: str, note_id: str) -> Note | None:
        """One note by id, body included, or None."""
        fields = await self._fields(tenant, note_id, with_body=True)
        return None if fields is None else note_from_fields(fields)

    async def head(self, tenant: str, note_id: str) -> NoteHead | None:
        """One note by id without its body, or None."""
        fields = await self._fields(tenant, note_id, with_body=False)
        return None if fields is None else head_from_fields(fields)

    async def _fields(self, tenant: str, note_id: str, *, with_body: bool) -> list[Any] | None:
        names = ["id", "title", "workspace", "version", "created_ms", "updated_ms"]
        key = self.keys(tenant).note(note_id)
        wanted = [*names, "body"] if with_body else names
        fields = await self._query("get", lambda: self.client.hmget(key, wanted))
        return None if fields[0] is None else list(fields)

    async def _read(self, tenant: str, index_key: str, limit: int, after: str) -> Snapshot:
        k = self.keys(tenant)
        reply = await self._run("read_notes", [index_key], [f"{k.base}:note:", limit, after])
        now, next_after = int(reply[0]), str(reply[1] or "")
        heads = [head_from_fields(reply, i) for i in range(2, len(reply), HEAD_FIELDS)]
        notes = tuple(sorted(heads, key=lambda n: (n.created_ms, n.note_id)))
        return Snapshot(now, notes, next_after)

    async def find(
        self, tenant: str, workspace: str, title: str, limit: int = READ_LIMIT, after: str = ""
    ) -> Snapshot:
        """One page of the notes titled exactly ``title`` in ``workspace`` (title index): the
        first ``limit`` in note id order after ``after``, shown oldest first; no bodies."""
        return await self._read(tenant, self.keys(tenant).title(workspace, title), limit, after)

    async def list(
        self, tenant: str, workspace: str, limit: int = READ_LIMIT, after: str = ""
    ) -> Snapshot:
        """One page of the notes in ``workspace``: the first ``limit`` in note id order after
        ``after``, shown oldest first; no bodies."""
        return await self._read(tenant, self.keys(tenant).workspace(workspace), limit, after)

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
        """Edit ``note`` unless it changed since it was read (status ``changed``: read again;
        ``quota_bytes`` when its owner's notes would hold more than ``quota.bytes``). ``op`` as
        for ``create``: an update already recorded under it is returned, not redone."""
        k = self.keys(tenant)
        op = op or WriteOp.fresh()
        reply = await self._run(
            "update",
            [
                k.note(note.note_id),
                k.title(note.workspace, note.title),
                k.title(note.workspace, title),
                k.journal,
                k.op(op.op_id),
                k.usage,
                k.writes,
                k.lookalikes(note.workspace, note.title),
                k.lookalikes(note.workspace, title),
            ],
            [
                note.note_id,
                note.workspace,
                note.version,
                title,
                body,
                principal,
                self.journal_maxlen,
                op.op_id,
                op.digest,
                _call_id(),
                op.ttl_ms,
                quota.bytes,
                quota.writes,
                quota.window_ms,
            ],
        )
        status, head, now, replayed = parse_write_reply(reply)
        if status != "updated":
            return WriteOutcome(status, None, now)
        return WriteOutcome("updated", head, now, replayed)

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
        """Move a note from ``source`` to ``target`` (same tenant). Reads the title first to find
        the index entries; a concurrent edit makes the script refuse and this call retry. Status
        ``full`` when ``target`` already holds ``max_notes`` (0: no limit), ``quota_share`` when
        the note's owner owns ``quota.workspace_notes`` notes there already. ``op`` as for
        ``create``: a move already recorded under it is returned, not redone; it is looked up
        first, since the note it moved is no longer in ``source``."""
        k = self.keys(tenant)
        op = op or WriteOp.fresh()
        call = _call_id()
        for _ in range(8):
            note = await self.head(tenant, note_id)
            if note is None or note.workspace != source:
                # The script decides only for a note it can name the index entries of; a note
                # gone or elsewhere may be one this operation moved: its record says so.
                recorded = await self._recorded_outcome(tenant, op, call)
                if recorded is not None:
                    return recorded
                return WriteOutcome("gone" if note is None else "elsewhere", None, 0)
            reply = await self._run(
                "move",
                [
                    k.note(note_id),
                    k.workspace(source),
                    k.workspace(target),
                    k.title(source, note.title),
                    k.title(target, note.title),
                    k.journal,
                    k.op(op.op_id),
                    k.workspace_usage(source),
                    k.workspace_usage(target),
                    k.writes,
                    k.lookalikes(source, note.title),
                    k.lookalikes(target, note.title),
                ],
                [
                    note_id,
                    source,
                    target,
                    principal,
                    self.journal_maxlen,
                    max_notes,
                    op.op_id,
                    op.digest,
                    call,
                    op.ttl_ms,
                    quota.workspace_notes,
                    quota.writes,
                    quota.window_ms,
                    "".join(f"\n{p}\n" for p in quota.reachable_by),
                ],
            )
            status, head, now, replayed = parse_write_reply(reply)
            if status == "moved":
                return WriteOutcome("moved", head, now, replayed)
            if status != "elsewhere":
                return WriteOutcome(status, None, now)
        return WriteOutcome("changed", None, 0)

    async def _recorded_outcome(self, tenant: str, op: WriteOp, call: str) -> WriteOutcome | None:
        """The outcome recorded under ``op`` (replayed unless this ``call`` wrote it), or None;
        IdempotencyConflict when it was recorded with another digest."""
        found = await self._record(tenant, op.op_id)
        if found is None:
            return None
        recorded, by_call = found
        if recorded.digest != op.digest:
            raise IdempotencyConflict("the operation id was recorded for another operation")
        return WriteOutcome(recorded.status, recorded.note, 0, replayed=by_call != call)

    async def recorded_write(self, tenant: str, op_id: str) -> RecordedWrite | None:
        """What a create, update or move recorded under ``op_id``, or None."""
        found = await self._record(tenant, op_id)
        return None if found is None else found[0]

    async def _record(self, tenant: str, op_id: str) -> tuple[RecordedWrite, str] | None:
        """The record under ``op_id`` and the store call that wrote it, or None."""
        names = ["status", "digest", "note", "title", "ws", "version", "created", "updated"]
        key, fields = self.keys(tenant).op(op_id), [*names, "call"]
        f: Sequence[str | None] = await self._query(
            "recorded write", lambda: self.client.hmget(key, fields)
        )
        if f[0] is not None and self.wait_replicas > 0:
            # A replay answers that the write happened: read the record again by a script whose
            # WAIT covers it (op_lookup.lua), so that a write that ran on the master only (its
            # own WAIT timed out) stays "outcome unknown" and a failover cannot forget it.
            f = await self._run("op_lookup", [key], list[str | int](fields))
            if not f:
                return None
        status, digest, note_id, title, ws, version, created, updated, call = f
        if status is None or not note_id:
            return None
        head = NoteHead(
            str(note_id),
            str(title),
            str(ws),
            int(version or 0),
            int(created or 0),
            int(updated or 0),
        )
        return RecordedWrite(str(status), str(digest or ""), head), str(call or "")

    async def _query(self, what: str, command: Callable[[], Awaitable[T]]) -> T:
        """Run a read-only command, sent again after a lost reply like a script (``RESENDS``)."""
        return await self._resending(what, command)

    async def _resending(self, what: str, command: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``command(*args)``, sent again after each lost reply up to ``RESENDS`` times, and
        after each refusal that says it did not run (``store.refusals``) with a growing pause
        until the request's deadline (then ``StoreRefused``); any other failure, or the last
        lost reply, becomes the store's error (``_failed``)."""
        lost = refused = 0
        until: float | None = None
        observer = self.lost_reply_observer
        while True:
            # The clock is read only for an observer: this runs on every store command.
            sent = 0.0 if observer is None else anyio.current_time()
            try:
                return await command(*args)
            except _LOST_REPLY as exc:
                if observer is not None:
                    observer(what, anyio.current_time() - sent)
                if lost == RESENDS:
                    report_lost_reply(self.client, exc)
                    raise self._failed(exc, what) from exc
                lost += 1
                self._stats.resent += 1
                await before_resend(self.client, exc)
            except Exception as exc:
                reason = refusal_reason(exc)
                if reason is None:
                    raise self._failed(exc, what) from exc
                if until is None:
                    until = refusal_deadline(self.refusal_wait_s)
                pause = pause_s(refused)
                if anyio.current_time() + pause >= until:
                    self._stats.unavailable += 1
                    message = f"{what}: refused until its deadline ({reason}): {exc}"
                    raise StoreRefused(message, reason, maybe_ran=lost > 0) from exc
                refused += 1
                self._stats.refused += 1
                await anyio.sleep(pause)

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        """Decide one confirmation answer in one atomic script (see scripts/confirm.lua)."""
        k = self.keys(c.tenant)
        keys = [
            k.replay(c.nonce),
            k.note(c.note_id),
            k.workspace(c.workspace),
            k.title(c.workspace, c.title),
            k.journal,
        ]
        source_usage = k.workspace_usage(c.workspace)
        lookalikes = k.lookalikes(c.workspace, c.title)
        if c.op == "move":
            keys += [k.workspace(c.target_workspace), k.title(c.target_workspace, c.title)]
            keys += [k.usage, source_usage, k.workspace_usage(c.target_workspace)]
            keys += [lookalikes, k.lookalikes(c.target_workspace, c.title)]
        else:  # the target's keys are unused: the source's stand in for them
            keys += [keys[2], keys[3], k.usage, source_usage, source_usage]
            keys += [lookalikes, lookalikes]
        keys.append(k.writes)
        reply, maybe_ran = await self._run_telling(
            "confirm",
            keys,
            [
                c.action,
                c.answer_digest,
                c.exp_ms,
                self._grace_arg,
                c.note_id,
                c.expected_version,
                c.workspace,
                c.principal,
                c.nonce,
                c.op,
                c.target_workspace,
                self._maxlen_arg,
                c.tool,
                # A replay answer waits for replicas too: the script then rewrites the entry's
                # expiry, a write whose offset covers the recorded outcome it returns.
                "1" if self.wait_replicas > 0 else "0",
                c.max_notes,
                _call_id(),
                c.max_owner_notes,
                c.max_writes,
                c.window_ms,
            ],
        )
        out = parse_confirm_reply(reply)
        if out.status == "expired" and maybe_ran:
            # The record that would say an earlier send ran lives until exp + grace, and this
            # re-send came later: "expired" is no proof that nothing was decided.
            raise StoreUnavailable(
                "confirm: re-sent after a lost reply and found the state expired past its "
                "replay grace: an earlier send may have run"
            )
        self._stats.confirmations[out.status] = self._stats.confirmations.get(out.status, 0) + 1
        return out

    async def complete_setup(
        self, tenant: str, nonce: str, principal: str, exp_ms: int, *, op: WriteOp | None = None
    ) -> SetupOutcome:
        """Record one setup link's completion at most once (see scripts/setup.lua); ``op``
        (None: a fresh id) makes a re-send after a lost reply answer ``completed`` again."""
        op = op or WriteOp.fresh()
        k = self.keys(tenant)
        status, who, now, _ = await self._run(
            "setup",
            [k.setup(nonce), k.op(op.op_id), k.journal],
            [
                principal,
                exp_ms,
                self.replay_grace_ms,
                _call_id(),
                op.ttl_ms,
                nonce,
                self.journal_maxlen,
            ],
        )
        st = str(status)
        if st not in SETUP_STATUSES:  # pragma: no cover - the script returns only these
            raise StoreUnavailable(f"setup: unexpected status {st!r}")
        setup_status: SetupStatus = st  # type: ignore[assignment]
        return SetupOutcome(setup_status, str(who or ""), int(now))

    async def setup_completed_by(self, tenant: str, nonce: str) -> str | None:
        """Who completed setup link ``nonce``, or None."""
        key = self.keys(tenant).setup(nonce)
        who = await self._query("setup status", lambda: self.client.get(key))
        return None if who is None else str(who)

    async def check_ready(self) -> None:
        """Raise StoreUnavailable unless Redis answers and holds every script of this store in
        its script cache (on a cluster: every master). A missing script is loaded here: a Redis
        that restarted forgot them, and loading is what makes it ready again."""
        scripts = [*self._scripts.values(), self._time]
        try:
            await self._check_writable()
            present = await self.client.script_exists([s.sha for s in scripts])
            for script, loaded in zip(scripts, present, strict=True):
                if not loaded:
                    await self.client.script_load(str(script.script))
        except Exception as exc:
            if not (
                outcome_unknown(exc) or isinstance(exc, coredis.exceptions.RedisError | ReplyError)
            ):
                raise
            raise StoreUnavailable(f"ready: {type(exc).__name__}: {exc}") from exc

    async def _check_writable(self) -> None:
        """StoreRefused unless the Redis the writes go to is a master (``ROLE``): a failover
        can leave a node on an address that is a replica now, which refuses every write. A
        server without ``ROLE`` (the embedded store) has no replication: always a master."""
        client = self.client
        if isinstance(client, RespCluster):
            servers = client.masters()
        elif isinstance(client, RespRedis):
            servers = [client]
        else:  # coredis: its cluster client routes by the map it keeps; one Redis is asked
            if isinstance(client, coredis.Redis):
                try:
                    info = await client.role()
                except coredis.exceptions.UnknownCommandError:
                    return
                _refuse_unless_master(str(info.role), "the Redis")
            return
        for server in servers:
            try:
                role = await server.execute("ROLE")
            except ReplyError as exc:
                if "unknown command" in str(exc).lower():
                    return
                raise
            _refuse_unless_master(str(role[0]), server.endpoint.where)


def _refuse_unless_master(role: str, where: str) -> None:
    if role != "master":
        raise StoreRefused(f"ready: {where} is a {role}", "read_only", maybe_ran=False)
