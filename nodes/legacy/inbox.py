"""One reader per node for the inboxes its waiting legacy calls listen to.

Layer: node, legacy adapter. A pending ``tools/call`` waits for its client's answers, which any
node appends to the session's inbox stream in the store. The calls do not read Redis themselves:
each registers a watch (session, position) with the node's ``InboxReader``, whose one task reads
every watched inbox in one XREAD and hands each watch the entries after its position.

    one Redis     one blocking XREAD over all watched inboxes and the reader's wake stream: a new
                  watch wakes it (``SessionStore.wake``), so it reads the new inbox at once; the
                  read holds the reader's one connection, never one per call
    Redis Cluster one XREAD cannot span slots, so each watched inbox is read without blocking
                  (multiplexed on the pool, nothing held) every ``poll_s``, or at once when a
                  watch is added

A watch ends with its call (the block that opened it exits: completion, refusal, the client's
disconnect, cancellation), and the inbox is read no more. A store failure reaches every watch
(its call answers "outcome unknown"); the reader backs off and reads again. ``drain`` (the node
stops) ends every wait with ``Drained`` once the entries already read are taken, and refuses
new watches.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.abc

from store import randomness
from store.api import StoreUnavailable
from store.sessions import InboxEntry, SessionStore

log = logging.getLogger("nodes.legacy")

BACKOFF_S = 0.5
"""Pause after a failed read, so a store outage is not hammered by the reader."""


class Drained(Exception):
    """The node is draining: a waiting call stops waiting (its client retries elsewhere)."""


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class InboxWatch:
    """What one waiting call sees of its session's inbox: entries after ``position``."""

    def __init__(self, session_id: str, position: str) -> None:
        self.session_id = session_id
        self.position = position
        self._pending: list[InboxEntry] = []
        self._failure: StoreUnavailable | None = None
        self._drained = False
        self._ready = anyio.Event()

    async def next(self, until: float) -> list[InboxEntry]:
        """The entries that came since the last call, waiting for one until ``until`` (on
        anyio's clock); [] at ``until``. StoreUnavailable if the reader failed meanwhile;
        ``Drained`` once the node drains and no entry is left (entries already read come first:
        an answer the client was told we took is acted on)."""
        if not self._pending and self._failure is None and not self._drained:
            with anyio.CancelScope(deadline=until):
                await self._ready.wait()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        if not self._pending and self._drained:
            raise Drained
        out, self._pending = self._pending, []
        if self._ready.is_set():
            self._ready = anyio.Event()
        return out

    def _take(self, position: str, entries: list[InboxEntry]) -> None:
        mine = [e for e in entries if _stream_id(e.entry_id) > _stream_id(self.position)]
        if _stream_id(position) > _stream_id(self.position):
            self.position = position
        if mine:
            self._pending.extend(mine)
            self._ready.set()

    def _fail(self, failure: StoreUnavailable) -> None:
        self._failure = failure
        self._ready.set()

    def _drain(self) -> None:
        self._drained = True
        self._ready.set()


@dataclass(frozen=True)
class ReaderStatistics:
    """A snapshot of one reader: calls waiting now, reads done, failed reads."""

    watching: int
    reads: int
    failures: int


class InboxReader:
    """The node's one reader of waiting calls' inboxes; run it with ``run`` in a task group."""

    def __init__(self, sessions: SessionStore, *, block_ms: int = 2_000, poll_s: float = 0.05):
        self.sessions = sessions
        self.block_ms = block_ms
        """Longest blocking read (one Redis): below the client's socket timeout."""
        self.poll_s = poll_s
        """Pause between non-blocking reads (Redis Cluster)."""
        self.reader_id = randomness.token_urlsafe(12)
        self._watches: dict[str, set[InboxWatch]] = {}
        self._changed = anyio.Event()
        self._blocking = False
        self._wake_position = "0-0"
        self._reads = 0
        self._failures = 0
        self.running = False
        """Set once ``run`` started: a watch without a reader would never see an entry."""
        self.draining = False
        """Set by ``drain``: no new watch, and every wait ends."""

    def statistics(self) -> ReaderStatistics:
        """A frozen snapshot."""
        watching = sum(len(w) for w in self._watches.values())
        return ReaderStatistics(watching, self._reads, self._failures)

    @asynccontextmanager
    async def watch(self, session_id: str, position: str) -> AsyncIterator[InboxWatch]:
        """Watch ``session_id``'s inbox after ``position`` for the duration of the block."""
        if self.draining:
            raise Drained
        if not self.running:
            raise RuntimeError("the legacy inbox reader is not running (open_legacy_adapter)")
        watch = InboxWatch(session_id, position)
        self._watches.setdefault(session_id, set()).add(watch)
        try:
            self._changed.set()
            if self._blocking and not self.sessions.clustered:
                await self.sessions.wake(self.reader_id)
            yield watch
        finally:
            watchers = self._watches.get(session_id)
            if watchers is not None:
                watchers.discard(watch)
                if not watchers:
                    del self._watches[session_id]

    def drain(self) -> None:
        """The node stops: every waiting call stops waiting (``Drained``), no new one starts.
        The reader keeps reading until cancelled, so entries already on their way arrive."""
        self.draining = True
        for watchers in self._watches.values():
            for watch in watchers:
                watch._drain()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Read until cancelled."""
        self.running = True
        task_status.started()
        try:
            await self._loop()
        finally:
            self.running = False

    async def _loop(self) -> None:
        while True:
            if not self._watches:
                await self._changed.wait()
            self._changed = anyio.Event()
            if not self._watches:
                continue
            try:
                await self._read_once()
            except StoreUnavailable as exc:
                log.warning("legacy inbox reader: %s", exc)
                await self._failed(exc)
            except Exception as exc:
                # Never let the reader die: the node would serve no legacy call again.
                log.exception("legacy inbox reader: unexpected error")
                await self._failed(StoreUnavailable(f"inbox reader: {type(exc).__name__}"))

    async def _failed(self, failure: StoreUnavailable) -> None:
        """Tell every waiting call (each answers "outcome unknown"), then back off."""
        self._failures += 1
        for watchers in self._watches.values():
            for watch in watchers:
                watch._fail(failure)
        await anyio.sleep(BACKOFF_S)

    async def _read_once(self) -> None:
        after = {
            sid: min((w.position for w in ws), key=_stream_id) for sid, ws in self._watches.items()
        }
        clustered = self.sessions.clustered
        self._blocking = not clustered
        try:
            batch = await self.sessions.read_inboxes(
                after,
                block_ms=None if clustered else self.block_ms,
                wake=None if clustered else (self.reader_id, self._wake_position),
            )
        finally:
            self._blocking = False
        self._reads += 1
        if batch.wake_position is not None:
            self._wake_position = batch.wake_position
        for sid, (position, entries) in batch.sessions.items():
            for watch in self._watches.get(sid, ()):
                watch._take(position, entries)
        if clustered and not batch.sessions:
            with anyio.move_on_after(self.poll_s):
                await self._changed.wait()
