"""The SDK peer's in-memory notes: how a single-node SDK server keeps them, for the benchmark.

Layer: cluster (the bench; nothing in the product imports it). The two calls the peer makes,
``find`` and ``confirm``, with the semantics of ``read_notes.lua`` and ``confirm.lua`` for a
delete: lookup by exact title, a one-shot decision per state nonce (replay: same answer, same
outcome; another answer: conflict), expiry, and a version check. One process, one event loop:
no locks needed. Notes come from a file the bench writes (``load_targets``), one per line:
``tenant|workspace|title|note_id``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from store.api import Confirmation, ConfirmOutcome, NoteHead, Snapshot, StoreOp


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class MemoryNotes:
    """Notes and replay entries in dictionaries."""

    notes: dict[str, NoteHead] = field(default_factory=dict)
    titles: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    """(tenant, workspace, title) -> note ids."""
    tenants: dict[str, str] = field(default_factory=dict)
    """note id -> tenant."""
    replays: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """nonce -> (answer digest, deleted note id or None for a decline)."""

    def add(self, tenant: str, workspace: str, title: str, note_id: str) -> None:
        """Store one note (version 1)."""
        now = _now_ms()
        self.notes[note_id] = NoteHead(note_id, title, workspace, 1, now, now)
        self.titles.setdefault((tenant, workspace, title), []).append(note_id)
        self.tenants[note_id] = tenant

    async def find(self, tenant: str, workspace: str, title: str, limit: int) -> Snapshot:
        """Notes titled ``title`` in ``workspace``, at most ``limit``."""
        ids = self.titles.get((tenant, workspace, title), [])[:limit]
        return Snapshot(_now_ms(), tuple(self.notes[i] for i in ids))

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        """Decide one answer once (delete only)."""
        now = _now_ms()
        seen = self.replays.get(c.nonce)
        if seen is not None:
            digest, deleted = seen
            op: StoreOp | None = "delete" if deleted else None
            if digest == c.answer_digest:
                return ConfirmOutcome("replay", op, deleted, now)
            return ConfirmOutcome("conflict", op, deleted, now)
        if now >= c.exp_ms:
            return ConfirmOutcome("expired", None, None, now)
        if c.action == "cancel":
            return ConfirmOutcome("cancelled", None, None, now)
        if c.action == "decline":
            self.replays[c.nonce] = (c.answer_digest, None)
            return ConfirmOutcome("declined", None, None, now)
        note = self.notes.get(c.note_id)
        if note is None or self.tenants.get(c.note_id) != c.tenant:
            return ConfirmOutcome("gone", None, None, now)
        if note.version != c.expected_version or note.workspace != c.workspace:
            return ConfirmOutcome("changed", None, None, now)
        del self.notes[c.note_id]
        self.titles[(c.tenant, note.workspace, note.title)].remove(c.note_id)
        self.replays[c.nonce] = (c.answer_digest, c.note_id)
        return ConfirmOutcome("executed", "delete", c.note_id, now)


def load_targets(path: Path) -> MemoryNotes:
    """Notes from the bench's file (``tenant|workspace|title|note_id`` per line)."""
    memory = MemoryNotes()
    for line in path.read_text(encoding="utf-8").splitlines():
        tenant, workspace, title, note_id = line.split("|")
        memory.add(tenant, workspace, title, note_id)
    return memory
