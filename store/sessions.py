"""Legacy (2025-11-25) sessions in Redis: the session record, its inbox, its open requests.

Layer: store. Knows Redis (the store's own client, ``store.resp_client``, or coredis;
backend-neutral through anyio) and this key layout; treats MCP payloads as opaque JSON text. A
session belongs to a principal, not to a tenant, so its keys share a tenant-free hash tag of
their own, ``{s:<sessionId>}``: every script below touches one Redis Cluster slot.

    <prefix>:{s:<sid>}:session    hash    principal version capabilities client roots
                                          roots_epoch roots_read_epoch created_ms initialized
    <prefix>:{s:<sid>}:inbox      stream  what any node hands the nodes holding the session's
                                          streams: client answers, roots changes, cancellations,
                                          the session's end (trimmed to ``inbox_max_entries``)
    <prefix>:{s:<sid>}:req:<rid>  string  a server-to-client request open for its answer
                                          ("open", then "answered"; expires after the wait)
    <prefix>:{s:<sid>}:calls      zset    the session's pending tools/calls (score: until when)
    <prefix>:{p:<digest>}:sessions zset   a principal's sessions by creation (the per-principal
                                          cap; ``digest`` is of the principal's name)
    <prefix>:{w:<reader>}:wake    stream  a node's inbox reader is woken through it (one Redis)

Exactly once: the Redis client never re-sends a command by itself. Each script below is
either safe to run twice, and then sent again after a lost reply (``RESENDABLE``), or never sent
again, and a lost reply is ``StoreUnavailable`` (the outcome is unknown, the client is told so):

    create        safe: the same session id and fields written again
    load          safe: reads, and pushes the same expiry back
    set_fields    safe: the same values written again
    deliver       safe: a second run finds the request answered (``duplicate``), which the adapter
                  accepts (202) as it accepts a client's own copy; the inbox holds the answer once
    open_request  safe: the same marker set again
    end           safe: a second run finds no session (False), and the session is gone
    wake          safe: a second wake of a reader only ends one more blocking read early
    event         never re-sent: a second run would append the event twice
    track         never re-sent: a second run would not return the sessions the first evicted
    begin_call    never re-sent: a second run could count the call against its own limit
    keep_call     safe: the same bound set again on the same entry (never re-adds a lapsed one)
    reads, end_call (ZREM)  safe: sent once more after a lost reply

Any node appends to a session's inbox; the nodes holding the SSE streams of its pending calls read
it. The stream orders what the client sent, whichever node took it: a roots change the client saw
acknowledged before it answered is read before the answer. Reading is multiplexed per node (see
``read_inboxes``): no call holds a connection while it waits. On the store's own client, whose
few connections carry every call pipelined, a blocking ``XREAD`` goes on a client of its own
(``blocking``: one connection), so nothing queues behind it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

import anyio
import coredis
import coredis.exceptions

from store import randomness
from store.api import StoreFull, StoreUnavailable
from store.client_factory import before_resend, report_lost_reply
from store.redis_errors import ConnectionLost, NotSent, RedisClientError, ReplyTimeout
from store.resp import ReplyError
from store.resp_client import RespRedis
from store.resp_cluster import RespCluster

T = TypeVar("T")

SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,64}")
"""Session ids we mint are 32 url-safe characters; anything else names no session (and could not
break the hash tag: no ``{`` or ``}``)."""

REQUEST_ID_PATTERN = re.compile(r"nc-[A-Za-z0-9_-]{16,64}")
"""Ids of the requests a node sends a client: random, so any node mints them uncoordinated."""

SESSION_IDLE_TTL_MS = 3_600_000
"""A session nobody used for an hour is forgotten (the client then gets 404 and re-initializes);
every request, and every open stream while it waits, pushes the expiry back."""

ENDED_INBOX_TTL_MS = 60_000
"""An ended session's inbox lingers a minute so that the nodes holding its streams read the end."""

INBOX_MAXLEN = 256
"""Default approximate cap of one session's inbox: its readers only ever need the newest
entries (Redis trims whole stream nodes, so a stream may briefly hold a node's worth more)."""

WAKE_TTL_MS = 60_000
"""A reader's wake stream outlives its last wake by a minute, then goes."""

InboxKind = Literal["answer", "roots_changed", "cancelled", "ended"]
DeliverStatus = Literal["ok", "duplicate", "unknown", "no-session"]

_CREATE = """
redis.call('HSET', KEYS[1], 'principal', ARGV[1], 'version', ARGV[2], 'capabilities', ARGV[3],
  'client', ARGV[4], 'roots', '', 'roots_epoch', 0, 'roots_read_epoch', -1,
  'created_ms', ARGV[6], 'initialized', 0)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""

_LOAD = """
local v = redis.call('HGETALL', KEYS[1])
if #v == 0 then return v end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return v
"""

_SET_FIELDS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

_DELIVER = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'no-session' end
local state = redis.call('GET', KEYS[2])
if not state then return 'unknown' end
if state == 'answered' then return 'duplicate' end
redis.call('SET', KEYS[2], 'answered', 'KEEPTTL')
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'kind', 'answer', 'rid', ARGV[1],
  'body', ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return 'ok'
"""

_EVENT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local epoch = 0
if ARGV[1] == 'roots_changed' then
  epoch = redis.call('HINCRBY', KEYS[1], 'roots_epoch', 1)
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'kind', ARGV[1], 'body', ARGV[2],
  'epoch', epoch)
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return epoch
"""

_END = """
local existed = redis.call('DEL', KEYS[1])
if existed == 0 then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[2])
  return 1
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', 'kind', 'ended', 'body', '',
  'epoch', 0)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""

# A session's score orders its principal's sessions oldest first: its opening time, or one past
# the newest's score when that is not earlier (sessions opened in the same millisecond, or on a
# node whose clock runs behind another's), so the sessions the cap ends are always the first
# opened, never a later one that tied or was stamped earlier by a slower clock.
_TRACK = """
local score = tonumber(ARGV[2])
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
if newest and tonumber(newest) >= score then score = tonumber(newest) + 1 end
redis.call('ZADD', KEYS[1], score, ARGV[1])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
if over <= 0 then return {} end
local evicted = redis.call('ZRANGE', KEYS[1], 0, over - 1)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over - 1)
return evicted
"""

_BEGIN_CALL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[2])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('PEXPIREAT', KEYS[2], redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
return 1
"""

_KEEP_CALL = """
if redis.call('ZADD', KEYS[1], 'XX', 'GT', 'CH', ARGV[2], ARGV[1]) == 0 then
  return redis.call('ZSCORE', KEYS[1], ARGV[1]) and 1 or 0
end
redis.call('PEXPIREAT', KEYS[1], redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])
return 1
"""

_WAKE = """
redis.call('XADD', KEYS[1], 'MAXLEN', '~', 16, '*', 'kind', 'wake')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""

_OPEN_REQUEST = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
"""

SESSION_SCRIPTS: dict[str, str] = {
    "create": _CREATE,
    "load": _LOAD,
    "set_fields": _SET_FIELDS,
    "deliver": _DELIVER,
    "event": _EVENT,
    "end": _END,
    "open_request": _OPEN_REQUEST,
    "track": _TRACK,
    "begin_call": _BEGIN_CALL,
    "keep_call": _KEEP_CALL,
    "wake": _WAKE,
}
"""Every session script's source, by the name ``SessionStore`` runs it under."""


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The keys of one session under one prefix."""

    prefix: str
    session_id: str

    def __post_init__(self) -> None:
        if not SESSION_ID_PATTERN.fullmatch(self.session_id):
            raise ValueError("invalid session id")
        if not self.prefix or any(c in self.prefix for c in "{}: "):
            raise ValueError(f"invalid key prefix {self.prefix!r}")

    @property
    def base(self) -> str:
        """The common start of every key of this session, hash tag included."""
        return f"{self.prefix}:{{s:{self.session_id}}}"

    @property
    def session(self) -> str:
        """The session record."""
        return f"{self.base}:session"

    @property
    def inbox(self) -> str:
        """The stream every node appends to and the stream holders read."""
        return f"{self.base}:inbox"

    def request(self, request_id: str) -> str:
        """The marker of one open server-to-client request."""
        return f"{self.base}:req:{request_id}"

    @property
    def calls(self) -> str:
        """The session's pending tools/calls."""
        return f"{self.base}:calls"


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session as stored. ``roots`` is what the client last listed, valid only while
    ``roots_read_epoch`` equals ``roots_epoch`` (every ``list_changed`` bumps the epoch)."""

    session_id: str
    principal: str
    version: str
    capabilities: dict[str, Any]
    client_info: dict[str, Any]
    roots: tuple[str, ...]
    roots_epoch: int
    roots_read_epoch: int
    created_ms: int
    initialized: bool

    @property
    def current_roots(self) -> tuple[str, ...] | None:
        """The listed roots if no change was announced since they were read, else None."""
        return self.roots if self.roots_read_epoch == self.roots_epoch else None


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """One entry of a session's inbox. ``request_id`` and ``body`` (JSON text) are set for an
    answer; ``body`` carries the cancelled request's id for a cancellation; ``epoch`` is the new
    roots epoch for a roots change."""

    entry_id: str
    kind: InboxKind
    request_id: str
    body: str
    epoch: int


@dataclass(frozen=True, slots=True)
class InboxBatch:
    """What one multiplexed read brought: per session id, the position to read after next time
    and the entries (possibly none); ``wake_position`` likewise for the reader's wake stream."""

    sessions: dict[str, tuple[str, list[InboxEntry]]] = field(default_factory=dict)
    wake_position: str | None = None


class SessionStoreFull(StoreFull):
    """Redis refused a write for want of memory (``maxmemory``, ``noeviction``): nothing was
    written, so the outcome is known; retrying later may succeed."""


def principal_digest(principal: str) -> str:
    """A fixed-size, brace-free stand-in for a principal's name inside a key's hash tag."""
    return hashlib.sha256(principal.encode("utf-8")).hexdigest()[:32]


def new_session_id() -> str:
    """A fresh, unguessable session id (192 bits, url-safe)."""
    return randomness.token_urlsafe(24)


def new_request_id() -> str:
    """A fresh id for a server-to-client request (visible in the client's answer)."""
    return "nc-" + randomness.token_urlsafe(16)


def _record(session_id: str, flat: list[Any]) -> SessionRecord:
    f = {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}
    roots = tuple(json.loads(f["roots"])) if f.get("roots") else ()
    return SessionRecord(
        session_id=session_id,
        principal=f.get("principal", ""),
        version=f.get("version", ""),
        capabilities=json.loads(f.get("capabilities") or "{}"),
        client_info=json.loads(f.get("client") or "{}"),
        roots=roots,
        roots_epoch=int(f.get("roots_epoch", 0)),
        roots_read_epoch=int(f.get("roots_read_epoch", -1)),
        created_ms=int(f.get("created_ms", 0)),
        initialized=f.get("initialized") == "1",
    )


_KINDS: frozenset[str] = frozenset({"answer", "roots_changed", "cancelled", "ended"})


def _entry(identifier: str, fields: dict[str, str]) -> InboxEntry | None:
    kind = fields.get("kind", "")
    if kind not in _KINDS:
        return None
    return InboxEntry(
        entry_id=identifier,
        kind=kind,  # type: ignore[arg-type]
        request_id=fields.get("rid", ""),
        body=fields.get("body", ""),
        epoch=int(fields.get("epoch", 0) or 0),
    )


def _failure(what: str, exc: Exception) -> StoreUnavailable:
    """The store error for a failed Redis call: full (known outcome) or unavailable."""
    refused = isinstance(exc, coredis.exceptions.ResponseError | ReplyError)
    if refused and str(exc).startswith("OOM"):
        return SessionStoreFull(f"session {what}: Redis is full: {exc}")
    return StoreUnavailable(f"session {what}: {type(exc).__name__}: {exc}")


_REDIS_FAILURES = (
    coredis.exceptions.RedisError,
    RedisClientError,
    ReplyError,
    TimeoutError,
    OSError,
)

RESENDABLE = frozenset(
    {"create", "load", "set_fields", "deliver", "open_request", "end", "wake", "keep_call"}
)
"""The session scripts that are safe to run twice (see the module docstring): sent once more
after a lost reply. The others are never re-sent."""

_LOST_REPLY = (
    coredis.exceptions.ConnectionError,
    TimeoutError,
    OSError,
    ConnectionLost,
    ReplyTimeout,
    NotSent,
)
"""A dropped connection or a timeout: the script may have run, its reply is lost (``NotSent``:
it did not run; sent again the same way)."""

Entries = list[tuple[str, dict[str, str]]]
"""A stream's entries as both clients' replies are read: id and fields."""

OwnClient = RespRedis | RespCluster


def _own_entries(raw: Any) -> Entries:
    """``[[id, [field, value, ...]], ...]`` (the store's own client: RESP as sent)."""
    return [
        (str(ident), {str(k): str(v) for k, v in zip(flat[::2], flat[1::2], strict=True)})
        for ident, flat in raw or ()
    ]


def _coredis_entries(raw: Any) -> Entries:
    return [
        (str(e.identifier), {str(a): str(b) for a, b in e.field_values.items()}) for e in raw or ()
    ]


def _stream_entries(entries: Entries, after: str) -> tuple[str, list[InboxEntry]]:
    out: list[InboxEntry] = []
    position = after
    for position, fields in entries:
        entry = _entry(position, fields)
        if entry is not None:
            out.append(entry)
    return position, out


class SessionStore:
    """Legacy sessions of every principal under one key prefix (the note store's prefix)."""

    def __init__(
        self,
        client: coredis.Redis[str] | coredis.RedisCluster[str] | OwnClient,
        *,
        prefix: str,
        idle_ttl_ms: int = SESSION_IDLE_TTL_MS,
        inbox_max_entries: int = INBOX_MAXLEN,
        blocking: RespRedis | None = None,
    ) -> None:
        """``blocking``: with the store's own client on one Redis, a client of one connection
        for the blocking reads (without it they hold one of ``client``'s connections while
        they wait)."""
        self.client = client
        self.blocking = blocking
        self.prefix = prefix
        self.idle_ttl_ms = idle_ttl_ms
        self.inbox_max_entries = inbox_max_entries
        self.own = isinstance(client, RespRedis | RespCluster)
        """The store's own client (else coredis)."""
        self.clustered = isinstance(client, coredis.RedisCluster | RespCluster)
        """On a Redis Cluster one XREAD cannot span sessions (each has its own slot)."""
        self._scripts = {
            name: client.register_script(code) for name, code in SESSION_SCRIPTS.items()
        }

    def use_script(self, name: str, source: str) -> None:
        """Run ``source`` as script ``name`` from now on: the seam through which a simulation
        plants a defect in a script (``store.simulation.plants``); nothing else calls it."""
        if name not in self._scripts:
            raise KeyError(f"no session script {name!r}")
        self._scripts[name] = self.client.register_script(source)

    def keys(self, session_id: str) -> SessionKeys:
        """The keys of one session (ValueError for an id we could not have minted)."""
        return SessionKeys(self.prefix, session_id)

    def principal_key(self, principal: str) -> str:
        """The principal's sessions, oldest first (the per-principal cap)."""
        return f"{self.prefix}:{{p:{principal_digest(principal)}}}:sessions"

    def wake_key(self, reader: str) -> str:
        """The wake stream of one inbox reader (``reader``: url-safe, brace-free)."""
        return f"{self.prefix}:{{w:{reader}}}:wake"

    async def _query(self, what: str, command: Callable[[], Awaitable[T]]) -> T:
        """Run a command that is safe to run twice (a read, or a removal), sent once more after
        a lost reply."""
        for attempt in range(2):
            try:
                return await command()
            except _LOST_REPLY as exc:
                if attempt == 1:
                    report_lost_reply(self.client, exc)
                    raise _failure(what, exc) from exc
                await before_resend(self.client, exc)
            except _REDIS_FAILURES as exc:
                raise _failure(what, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _run(self, name: str, keys: list[str], args: list[str | int]) -> Any:
        attempts = 2 if name in RESENDABLE else 1
        for attempt in range(attempts):
            try:
                return await self._scripts[name](keys=keys, args=args)
            except _LOST_REPLY as exc:
                if attempt + 1 == attempts:
                    report_lost_reply(self.client, exc)
                    raise _failure(name, exc) from exc
                await before_resend(self.client, exc)
            except _REDIS_FAILURES as exc:
                raise _failure(name, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _own(self, key: str, *args: str | int) -> Awaitable[Any]:
        """One command on the store's own client (on a cluster, to ``key``'s slot)."""
        client = self.client
        if isinstance(client, RespCluster):
            return client.execute_on_key(key, *args)
        return client.execute(*args)  # type: ignore[union-attr]

    async def _xread(
        self, streams: Mapping[str, str], count: int, block_ms: int | None
    ) -> dict[str, Entries]:
        """XREAD of ``streams`` (key -> read after), blocking up to ``block_ms`` when given:
        each stream's entries (streams with none left out)."""
        if not self.own:
            client: Any = self.client
            reply = await self._query(
                "inbox", lambda: client.xread(dict(streams), count=count, block=block_ms)
            )
            return {str(k): _coredis_entries(v) for k, v in (reply or {}).items()}
        head: list[str | int] = ["XREAD", "COUNT", count]
        if block_ms is not None:
            head += ["BLOCK", block_ms]
        args = [*head, "STREAMS", *streams, *streams.values()]
        first = next(iter(streams))
        if block_ms is not None and self.blocking is not None and not self.clustered:
            blocking = self.blocking
            raw = await self._query("inbox", lambda: blocking.execute(*args))
        else:
            raw = await self._query("inbox", lambda: self._own(first, *args))
        return {str(key): _own_entries(entries) for key, entries in raw or ()}

    async def create(
        self,
        principal: str,
        version: str,
        capabilities: dict[str, Any],
        client_info: dict[str, Any],
        now_ms: int,
        max_sessions: int,
    ) -> tuple[str, int]:
        """Store a new session bound to ``principal``; return its id and how many of the
        principal's oldest sessions were ended to keep it within ``max_sessions``. The caller
        stores only small, capped ``capabilities`` and ``client_info``."""
        session_id = new_session_id()
        k = self.keys(session_id)
        # Tracked first: a session that exists is always counted (a failed create leaves only a
        # dead entry, ended like any other when its turn comes).
        evicted = await self._run(
            "track", [self.principal_key(principal)], [session_id, now_ms, max(1, max_sessions)]
        )
        await self._run(
            "create",
            [k.session],
            [
                principal,
                version,
                json.dumps(capabilities, separators=(",", ":")),
                json.dumps(client_info, separators=(",", ":")),
                self.idle_ttl_ms,
                now_ms,
            ],
        )
        ended = 0
        for old in evicted or ():
            if SESSION_ID_PATTERN.fullmatch(str(old)) and await self.end(str(old)):
                ended += 1
        return session_id, ended

    async def load(self, session_id: str) -> SessionRecord | None:
        """The session (its expiry pushed back), or None if it never existed, ended or expired."""
        if not SESSION_ID_PATTERN.fullmatch(session_id):
            return None
        k = self.keys(session_id)
        flat = await self._run("load", [k.session, k.inbox], [self.idle_ttl_ms])
        if not flat:
            return None
        return _record(session_id, list(flat))

    async def mark_initialized(self, session_id: str) -> bool:
        """Record ``notifications/initialized``; False if the session is gone."""
        k = self.keys(session_id)
        return bool(await self._run("set_fields", [k.session], ["initialized", 1]))

    async def set_roots(self, session_id: str, roots: tuple[str, ...], epoch: int) -> bool:
        """Keep the roots the client listed after roots epoch ``epoch`` was announced."""
        k = self.keys(session_id)
        fields: list[str | int] = ["roots", json.dumps(list(roots)), "roots_read_epoch", epoch]
        return bool(await self._run("set_fields", [k.session], fields))

    async def end(self, session_id: str) -> bool:
        """Delete the session and tell its stream holders (its inbox goes at once when no call
        is pending: nobody listens); False if there was none."""
        k = self.keys(session_id)
        ended = await self._run(
            "end", [k.session, k.inbox, k.calls], [self.inbox_max_entries, ENDED_INBOX_TTL_MS]
        )
        return bool(ended)

    async def begin_call(
        self, session_id: str, call_id: str, now_ms: int, until_ms: int, limit: int
    ) -> bool | None:
        """Count a pending tools/call of the session until ``until_ms`` (node clock; the bound
        of a call whose node died): False when ``limit`` are pending, None if the session is
        gone."""
        k = self.keys(session_id)
        begun = int(
            await self._run(
                "begin_call", [k.session, k.calls], [call_id, now_ms, until_ms, max(1, limit)]
            )
        )
        return None if begun < 0 else bool(begun)

    async def keep_call(self, session_id: str, call_id: str, until_ms: int) -> bool:
        """Keep a pending call counted until ``until_ms`` at least (a call that asks another
        round of questions outlives the bound ``begin_call`` set); False when its entry has
        lapsed or was never there (it is not added again: the cap was checked at the start)."""
        key = self.keys(session_id).calls
        return bool(await self._run("keep_call", [key], [call_id, until_ms]))

    async def end_call(self, session_id: str, call_id: str) -> None:
        """The call is no longer pending."""
        key = self.keys(session_id).calls
        if self.own:
            await self._query("end_call", lambda: self._own(key, "ZREM", key, call_id))
        else:
            await self._query("end_call", lambda: self.client.zrem(key, [call_id]))  # type: ignore[union-attr]

    async def open_request(self, session_id: str, request_id: str, ttl_ms: int) -> bool:
        """Accept answers to ``request_id`` for ``ttl_ms``; False if the session is gone."""
        k = self.keys(session_id)
        opened = await self._run(
            "open_request", [k.session, k.request(request_id)], ["open", max(1, ttl_ms)]
        )
        return bool(opened)

    async def deliver(self, session_id: str, request_id: str, body: str) -> DeliverStatus:
        """Append the client's answer to ``request_id`` (JSON text) to the session's inbox: the
        first answer only (``duplicate`` for later ones, which are dropped: the first is the
        one that counts, and the inbox cannot be flooded with copies)."""
        k = self.keys(session_id)
        status = await self._run(
            "deliver",
            [k.session, k.request(request_id), k.inbox],
            [request_id, body, self.inbox_max_entries, self.idle_ttl_ms],
        )
        st = str(status)
        if st not in get_args(DeliverStatus):  # pragma: no cover - the script's only words
            raise StoreUnavailable(f"session deliver: unexpected status {st!r}")
        return st  # type: ignore[return-value]

    async def announce(
        self, session_id: str, kind: Literal["roots_changed", "cancelled"], body: str = ""
    ) -> int | None:
        """Append an event; a roots change also bumps the roots epoch, which is returned.
        None if the session is gone."""
        k = self.keys(session_id)
        epoch = int(
            await self._run(
                "event",
                [k.session, k.inbox],
                [kind, body, self.inbox_max_entries, self.idle_ttl_ms],
            )
        )
        return None if epoch < 0 else epoch

    async def inbox_position(self, session_id: str) -> str:
        """The id of the newest inbox entry ("0-0" if none): read after it to miss nothing new."""
        k = self.keys(session_id)
        if self.own:
            raw = await self._query(
                "inbox", lambda: self._own(k.inbox, "XREVRANGE", k.inbox, "+", "-", "COUNT", 1)
            )
            return str(raw[0][0]) if raw else "0-0"
        newest = await self._query("inbox", lambda: self.client.xrevrange(k.inbox, count=1))  # type: ignore[union-attr]
        return str(newest[0].identifier) if newest else "0-0"

    async def read_inbox(
        self, session_id: str, after: str, block_ms: int, count: int = 100
    ) -> tuple[str, list[InboxEntry]]:
        """Entries after ``after``, waiting up to ``block_ms`` for one, and the position to read
        after next time (``after`` itself when nothing came). Holds a connection while it
        blocks: nodes read through ``read_inboxes`` instead."""
        k = self.keys(session_id)
        reply = await self._xread({k.inbox: after}, count, max(1, block_ms))
        return _stream_entries(reply.get(k.inbox, []), after)

    async def wake(self, reader: str) -> None:
        """End the blocking read of ``reader`` (``read_inboxes`` with its wake position)."""
        await self._run("wake", [self.wake_key(reader)], [WAKE_TTL_MS])

    async def read_inboxes(
        self,
        after: Mapping[str, str],
        *,
        block_ms: int | None,
        wake: tuple[str, str] | None = None,
        count: int = 100,
    ) -> InboxBatch:
        """Entries of many inboxes (session id -> read after), in one XREAD.

        With ``block_ms`` the read waits that long for an entry in any of them, or in the wake
        stream ``wake = (reader, read after)`` (``wake`` ends it early, from any connection).
        On a Redis Cluster, where one XREAD cannot span slots, each inbox is read without
        blocking (the calls are multiplexed on the pool; ``block_ms`` and ``wake`` are unused):
        the caller polls.
        """
        if self.clustered:
            return await self._read_each(after, count)
        streams = {self.keys(sid).inbox: pos for sid, pos in after.items()}
        by_key = {self.keys(sid).inbox: sid for sid in after}
        wake_key = None
        if wake is not None:
            wake_key = self.wake_key(wake[0])
            streams[wake_key] = wake[1]
        block = None if block_ms is None else max(1, block_ms)
        reply = await self._xread(streams, count, block)
        batch = InboxBatch(wake_position=None if wake is None else wake[1])
        for key, entries in reply.items():
            if key == wake_key:
                if entries:
                    batch = InboxBatch(batch.sessions, entries[-1][0])
            elif key in by_key:
                sid = by_key[key]
                batch.sessions[sid] = _stream_entries(entries, after[sid])
        return batch

    async def _read_each(self, after: Mapping[str, str], count: int) -> InboxBatch:
        batch = InboxBatch()
        failures: list[StoreUnavailable] = []

        async def one(sid: str, pos: str) -> None:
            inbox = self.keys(sid).inbox
            try:
                reply = await self._xread({inbox: pos}, count, None)
            except StoreUnavailable as exc:
                # Kept, not raised: raised in a task it would reach the caller as a group.
                failures.append(exc)
                return
            entries = reply.get(inbox, [])
            if entries:
                batch.sessions[sid] = _stream_entries(entries, pos)

        async with anyio.create_task_group() as tg:
            for sid, pos in after.items():
                tg.start_soon(one, sid, pos)
        if failures:
            raise failures[0]
        return batch
