"""Key layout of the note store and replay store.

Layer: store. Pure module: no I/O, knows nothing of MCP or of nodes.

Every key of one tenant carries the tenant in a Redis Cluster hash tag (``{t:<tenant>}``), so each
script and pipeline touches exactly one slot and a cluster spreads tenants over its masters.

    <prefix>:{t:<tenant>}:note:<noteId>    hash    id title body workspace version created/updated
    <prefix>:{t:<tenant>}:ws:<sha>         set     note ids in one workspace
    <prefix>:{t:<tenant>}:title:<sha>      set     ids of one (workspace, title): the title index
    <prefix>:{t:<tenant>}:skel:<sha>       hash    titles of one (workspace, UTS #39 skeleton), each
                                                   with its count of notes: the lookalike index
    <prefix>:{t:<tenant>}:replay:<nonce>   hash    answer digest and recorded outcome of one state
    <prefix>:{t:<tenant>}:journal          stream  every mutation, for the checker
    <prefix>:{t:<tenant>}:setup:<nonce>    string  who completed one setup link (expires)
    <prefix>:{t:<tenant>}:op:<opId>        hash    what one write recorded under its operation id
                                                   (expires; see store/scripts/op_record.lua)
    <prefix>:{t:<tenant>}:usage            hash    per principal: n:<p> notes owned, b:<p> bytes
                                                   (title + body, UTF-8) those notes hold
    <prefix>:{t:<tenant>}:wsusage:<sha>    hash    per principal: notes owned in one workspace
    <prefix>:{t:<tenant>}:writes           hash    per principal: writes made in its window

A note's owner (field ``owner`` of its hash) is the principal that created it; the usage hashes
count what each owner holds and are kept in step by the scripts that write notes (create, update,
move, confirm), so a quota is checked and the write made in one atomic step.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache

from store.skeletons import skeleton

TENANT_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""Tenant names are plain tokens: they go inside a hash tag, where ``{`` or ``}`` would break it."""

NOTE_ID_PATTERN = re.compile(r"n[0-9a-f]{16}")


DIGEST_CACHE_SIZE = 4096
"""Workspace digests, and (workspace, title) digests, each remembered up to this many (sha256 each
time cost ~5% of a node's CPU per flow; a flow's workspace and title repeat). Bounded, so hostile
variety costs memory no more."""


def framed_sha256(*parts: str) -> str:
    """The sha256 hex digest of the parts' UTF-8, each prefixed by its length (8 bytes,
    big-endian), in order: no two lists of parts give the same input."""
    framed = bytearray()
    for part in parts:
        data = part.encode("utf-8")
        framed += len(data).to_bytes(8, "big")
        framed += data
    return hashlib.sha256(framed).hexdigest()


@lru_cache(maxsize=DIGEST_CACHE_SIZE)
def _digest(part: str) -> str:
    """``framed_sha256(part)``, 32 hex digits."""
    return framed_sha256(part)[:32]


@lru_cache(maxsize=DIGEST_CACHE_SIZE)
def _digest_pair(first: str, second: str) -> str:
    """``framed_sha256(first, second)``, 32 hex digits."""
    return framed_sha256(first, second)[:32]


@dataclass(frozen=True)
class TenantKeys:
    """The keys of one tenant under one prefix."""

    prefix: str
    tenant: str

    def __post_init__(self) -> None:
        if not TENANT_PATTERN.fullmatch(self.tenant):
            raise ValueError(f"invalid tenant name {self.tenant!r}")
        if not self.prefix or any(c in self.prefix for c in "{}: "):
            raise ValueError(f"invalid key prefix {self.prefix!r}")

    @cached_property
    def base(self) -> str:
        """The common start of every key of this tenant, hash tag included (computed once)."""
        return f"{self.prefix}:{{t:{self.tenant}}}"

    def note(self, note_id: str) -> str:
        """The hash holding one note."""
        return f"{self.base}:note:{note_id}"

    def workspace(self, workspace_uri: str) -> str:
        """The set of note ids in one workspace."""
        return f"{self.base}:ws:{_digest(workspace_uri)}"

    def title(self, workspace_uri: str, title: str) -> str:
        """The title index entry for one (workspace, title) pair."""
        return f"{self.base}:title:{_digest_pair(workspace_uri, title)}"

    def lookalikes(self, workspace_uri: str, title: str) -> str:
        """The titles in one workspace whose UTS #39 skeleton is ``title``'s, each with how
        many notes bear it (``store.skeletons``): the scripts refuse a title beside a different
        one of the same skeleton, looking up this one key."""
        return f"{self.base}:skel:{_digest_pair(workspace_uri, skeleton(title))}"

    def replay(self, nonce: str) -> str:
        """The replay entry of one confirmation (keyed by the sealed state's nonce)."""
        return f"{self.base}:replay:{nonce}"

    def setup(self, nonce: str) -> str:
        """The completion record of one ``notes_setup`` link (keyed by the link's nonce)."""
        return f"{self.base}:setup:{nonce}"

    def op(self, op_id: str) -> str:
        """The record of one write under its operation id (an idempotency key's, or random)."""
        return f"{self.base}:op:{op_id}"

    @property
    def usage(self) -> str:
        """What each principal's notes hold in this tenant (``n:<p>`` notes, ``b:<p>`` bytes)."""
        return f"{self.base}:usage"

    @property
    def writes(self) -> str:
        """The writes each principal made in its current window (``w:<p>``) and when that
        window ends (``we:<p>``): the ``writes`` quota (``scripts/op_record.lua``)."""
        return f"{self.base}:writes"

    def workspace_usage(self, workspace_uri: str) -> str:
        """How many notes of one workspace each principal owns (field: the principal)."""
        return f"{self.base}:wsusage:{_digest(workspace_uri)}"

    @property
    def journal(self) -> str:
        """The mutation journal stream."""
        return f"{self.base}:journal"
