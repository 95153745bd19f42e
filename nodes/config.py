"""Configuration one node needs: identity, scope, key ring and tunables.

Layer: node. Pure data: loading from files lives in ``nodes.serving.settings``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from nodes.scope import Scope
from nodes.sealing import KeyRing
from store.api import Quota

SERVER_VERSION = "0.1.0"

DEFAULT_STATE_TTL_MS = 300_000
"""How long a sealed confirmation stays valid (five minutes): long enough for a person to read a
form, short enough that a leaked state is soon useless."""

NODE_CLOCK_MARGIN_MS = 3_600_000
"""A node rejects a state by its own clock only when it is this far past expiry. The Redis clock
decides expiry; the node's early reject is only an optimisation and must never refuse a state the
Redis clock would still honour, even on a node whose clock is wrong by many minutes."""


DEFAULT_MAX_NOTE_BODY_BYTES = 65_536
"""Largest note body, in UTF-8 bytes (64 KiB): a note is a page of text, and every read that shows
a body stays cheap. Counted in bytes, not characters, so four-byte characters cannot make it
256 KiB."""

DEFAULT_MAX_NOTES_PER_WORKSPACE = 10_000
"""Most notes one workspace holds; a create or move into a full workspace is refused. Bounds what
one principal can store and what one listing can walk."""

DEFAULT_MAX_NOTES_PER_PRINCIPAL = 10_000
"""Most notes one principal may own (have created and not deleted) in one tenant: what one
client can make the store hold in records, whatever the workspaces it is granted."""

DEFAULT_MAX_BYTES_PER_PRINCIPAL = 64 * 1024 * 1024
"""Most UTF-8 bytes (titles plus bodies) one principal's notes may hold in one tenant (64 MiB):
so one principal cannot fill Redis' memory for the others. Size Redis for the principals it
serves (a tenant's principals times this, plus about 300 bytes of keys per note)."""

DEFAULT_MAX_SHARE_OF_SHARED_WORKSPACE = 0.5
"""In a workspace more than one principal is granted, the share of ``max_notes_per_workspace``
one principal's notes may fill: one principal alone cannot fill a shared workspace for the
others."""

DEFAULT_MAX_WRITES_PER_PRINCIPAL = 100_000
"""Most writes (create, update, move, decline, archive; updates count, deletes do not) one
principal may make in one tenant per idempotency window. Every write leaves a record (an
operation record, about 360 bytes of Redis memory and no body, or a replay entry) that lives
one window at most, so this bounds what a principal makes Redis hold in records, whatever it
writes: at most twice this many (this window's and the last one's), about 123 MB at the default
(615 bytes of ``used_memory`` per keyed update, measured). Notes and their bytes are bounded by
the quotas above; the journal by its length (``store.notes.JOURNAL_MAXLEN`` per tenant)."""

DEFAULT_LIST_PAGE_SIZE = 100
"""Notes per ``notes_list`` page; the rest follow through ``nextCursor``."""

DEFAULT_MAX_OFFERED = 50
"""Most notes one pick list offers; more notes of one title are refused with a clear error."""

DEFAULT_IDEMPOTENCY_WINDOW_MS = 3_600_000
"""How long a write made with an idempotency key is remembered (one hour): far past any client's
retries of one request; past it the key is forgotten and a retry with it writes again. A record
costs a few hundred bytes of Redis memory (no note body), so a principal writing once a second
keeps about 1 MB of them."""

MAX_LIST_PAGE_SIZE = 1_000
"""Largest page size a configuration may set: a page is read in one Redis script."""


def wall_clock_ms() -> int:
    """This node's wall clock (not trio's, not Redis'): used only for the early reject."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class LegacyCaps:
    """Bounds on what one 2025-11-25 client may make a node and the store hold (``nodes.legacy``;
    TOML table ``[legacy]``, same names). Every default is safe for a shared node."""

    sessions_per_principal: int = 16
    """Live sessions per principal; a new ``initialize`` past it ends that principal's oldest
    session (evict, not refuse: a client that lost its session id is not locked out for the
    hour the lost sessions would otherwise live, and only its own sessions are touched)."""
    client_text_max_chars: int = 128
    """``clientInfo.name`` and ``.version`` are kept (for the log) cut to this; nothing else of
    ``clientInfo`` is stored, and of the capabilities only what the node reads."""
    request_id_max_chars: int = 128
    """Longest string id a ``notifications/cancelled`` may name (an integer id must fit 64
    bits); a longer one is refused with -32602 and stored nowhere."""
    inbox_max_entries: int = 256
    """Approximate cap (Redis trims whole stream nodes) of one session's inbox."""
    answer_max_bytes: int = 65_536
    """Largest answer to a server request the inbox takes; a larger one is refused and the call
    it belongs to ends with an ``isError`` result."""
    roots_max: int = 64
    """Most roots kept from one ``roots/list`` answer (roots only narrow: dropping more is safe)."""
    pending_calls_per_session: int = 8
    """``tools/call`` requests of one session open at once, over all nodes."""
    pending_calls_per_node: int = 512
    """Legacy ``tools/call`` requests one node serves at once (each holds an open HTTP response,
    no Redis connection)."""


@dataclass(frozen=True)
class TenantQuota:
    """One tenant's own per-principal quotas, in place of the configuration's
    ``max_notes_per_principal``, ``max_bytes_per_principal`` and ``max_writes_per_principal``
    for every principal writing in that tenant (0: the configuration's own)."""

    notes: int = 0
    bytes: int = 0
    writes: int = 0


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs besides its store. All nodes of a cluster share ``server_name``
    (the audience of sealed states), ``scope`` and ``key_ring``."""

    server_name: str
    scope: Scope
    key_ring: KeyRing
    node_id: str = "node-0"
    server_version: str = SERVER_VERSION
    state_ttl_ms: int = DEFAULT_STATE_TTL_MS
    node_clock_ms: Callable[[], int] = field(default=wall_clock_ms)
    instructions: str = (
        "Notes live in workspaces named by file URIs; pass workspaceUri on every call. "
        "notes_delete asks you to pick and confirm the note."
    )
    archives: Mapping[str, str] = field(default_factory=dict)
    """Workspace URI -> its archive workspace URI (``notes_archive``); both must be configured
    workspaces of one tenant, and the caller must be authorized for both at call time."""
    public_url: str | None = None
    """Base URL (``http://host:port``) at which this node serves its setup pages, for the links
    of ``notes_setup``; set from the bound address when the node serves HTTP."""
    max_note_body_bytes: int = DEFAULT_MAX_NOTE_BODY_BYTES
    """Largest note body in UTF-8 bytes (``notes_create``, ``notes_update``)."""
    max_notes_per_workspace: int = DEFAULT_MAX_NOTES_PER_WORKSPACE
    """Most notes per workspace, checked atomically by the create and move scripts."""
    list_page_size: int = DEFAULT_LIST_PAGE_SIZE
    """Notes per ``notes_list`` page (1..``MAX_LIST_PAGE_SIZE``)."""
    max_offered: int = DEFAULT_MAX_OFFERED
    """Most notes one pick list offers (``notes_delete``, ``notes_archive``); more notes of
    the title are refused with a clear error. Simulations set it small, so that a flow reaches
    it with a few notes."""
    idempotency_window_ms: int = DEFAULT_IDEMPOTENCY_WINDOW_MS
    """How long a write with an idempotency key is remembered (``nodes.idempotency``)."""
    max_notes_per_principal: int = DEFAULT_MAX_NOTES_PER_PRINCIPAL
    """Most notes one principal may own per tenant (create), checked atomically by the script."""
    max_bytes_per_principal: int = DEFAULT_MAX_BYTES_PER_PRINCIPAL
    """Most bytes (titles plus bodies) one principal's notes may hold per tenant (create,
    update)."""
    max_share_of_shared_workspace: float = DEFAULT_MAX_SHARE_OF_SHARED_WORKSPACE
    """Share (0..1] of ``max_notes_per_workspace`` one principal may own in a shared workspace
    (create, move, archive)."""
    max_writes_per_principal: int = DEFAULT_MAX_WRITES_PER_PRINCIPAL
    """Most writes (create, update, move) one principal may make per tenant per
    ``idempotency_window_ms``: bounds the operation records it makes Redis hold."""
    tenant_quotas: Mapping[str, TenantQuota] = field(default_factory=dict)
    """Tenant -> its own per-principal quotas (``TenantQuota``); a tenant not named has the
    ``max_*_per_principal`` above. Simulations give one tenant small quotas, so a run reaches
    each quota's exact boundary."""
    legacy: LegacyCaps = field(default_factory=LegacyCaps)
    """Bounds of the legacy adapter (sessions, stored client data, inbox, pending calls)."""
    conformance_fixtures: bool = False
    """Serve the official conformance suite's fixture tools, resources and prompts beside the
    notes (``nodes.fixtures``). Only the demo sets it (``serve --demo --conformance-fixtures``);
    no configuration file can, so a production node never serves them."""

    def share_of(self, workspace_uri: str) -> int:
        """Most notes one principal may own in ``workspace_uri``: its share when the workspace
        is shared (at least one note), else 0 (only the workspace's own cap)."""
        if workspace_uri not in self.scope.shared:
            return 0
        return max(1, int(self.max_notes_per_workspace * self.max_share_of_shared_workspace))

    def principal_quota(self, workspace_uri: str) -> TenantQuota:
        """The per-principal quotas (notes, bytes, writes) of the tenant ``workspace_uri`` is
        in: its own (``tenant_quotas``) where set, else the configuration's."""
        own = self.tenant_quotas.get(self.scope.workspaces.get(workspace_uri, ""), TenantQuota())
        return TenantQuota(
            own.notes or self.max_notes_per_principal,
            own.bytes or self.max_bytes_per_principal,
            own.writes or self.max_writes_per_principal,
        )

    def quota(self, workspace_uri: str) -> Quota:
        """The per-principal quota of a write into ``workspace_uri``."""
        own = self.principal_quota(workspace_uri)
        return Quota(
            notes=own.notes,
            bytes=own.bytes,
            workspace_notes=self.share_of(workspace_uri),
            writes=own.writes,
            window_ms=self.idempotency_window_ms,
            reachable_by=self.scope.principals_of(workspace_uri),
        )
