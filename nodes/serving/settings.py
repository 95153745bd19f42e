"""Cluster configuration: the documented TOML file, and the demo fixture as the same settings.

Layer: nodes (serving). Reads files and environment; hands the node a plain ``NodeConfig``.
Secrets are never inline: tokens are listed as sha256 hashes and state keys are read from the
environment or from files. The format is documented by the models below
(``docs/reference/configuration.md`` is generated from them) with an example of every key
(``tests/test_config_example.py`` loads that example, so it stays true).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodes.auth import TokenTable
from nodes.config import (
    DEFAULT_IDEMPOTENCY_WINDOW_MS,
    DEFAULT_LIST_PAGE_SIZE,
    DEFAULT_MAX_BYTES_PER_PRINCIPAL,
    DEFAULT_MAX_NOTE_BODY_BYTES,
    DEFAULT_MAX_NOTES_PER_PRINCIPAL,
    DEFAULT_MAX_NOTES_PER_WORKSPACE,
    DEFAULT_MAX_SHARE_OF_SHARED_WORKSPACE,
    DEFAULT_MAX_WRITES_PER_PRINCIPAL,
    DEFAULT_STATE_TTL_MS,
    MAX_LIST_PAGE_SIZE,
    LegacyCaps,
    NodeConfig,
)
from nodes.http import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_DRAIN_TIMEOUT_S,
    DEFAULT_HEADERS_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_HEADER_BYTES,
    MAX_HEADER_BYTES_RANGE,
    ServerTimeouts,
)
from nodes.loopback import is_loopback_host
from nodes.scope import Scope, ScopeError, normalize_uri
from nodes.sealing import KeyRing
from nodes.serving.demo import (
    DEMO_ARCHIVES,
    DEMO_GRANTS,
    DEMO_SERVER_NAME,
    DEMO_TOKENS,
    DEMO_WORKSPACES,
)
from nodes.serving.durability import AUTO, WaitReplicas
from nodes.serving.load_fixture import load_archives, load_quotas, load_tokens, with_load_scope
from store.notes import REPLAY_GRACE_MS


class ConfigError(ValueError):
    """The configuration file is missing, malformed or inconsistent (message says where)."""


class _Principal(BaseModel):
    """``[principals.NAME]``: one principal's token hashes and grants."""

    model_config = ConfigDict(extra="forbid", strict=True)
    token_sha256: list[str] = Field(
        min_length=1,
        description="sha256 hex digests of the principal's bearer tokens (never the tokens).",
    )
    grants: list[str] = Field(
        min_length=1,
        description="Roots the principal may use: any configured workspace inside one of them.",
    )


class _Timeouts(BaseModel):
    """``[timeouts]``: seconds a connection may take, phase by phase."""

    model_config = ConfigDict(extra="forbid", strict=True)
    headers: float = Field(
        default=DEFAULT_HEADERS_TIMEOUT_S,
        gt=0,
        le=3600,
        description="A request's header block, from the connection's start; then closed.",
    )
    body: float = Field(
        default=DEFAULT_BODY_TIMEOUT_S,
        gt=0,
        le=3600,
        description="A request's whole body once its headers arrived; then 408 and closed.",
    )
    idle: float = Field(
        default=DEFAULT_IDLE_TIMEOUT_S,
        gt=0,
        le=3600,
        description="A keep-alive connection between requests.",
    )
    drain: float = Field(
        default=DEFAULT_DRAIN_TIMEOUT_S,
        gt=0,
        le=3600,
        description="On SIGTERM: how long in-flight requests may take to finish.",
    )


class _Legacy(BaseModel):
    """``[legacy]``: the fields of ``LegacyCaps``, each a positive integer."""

    model_config = ConfigDict(extra="forbid", strict=True)
    sessions_per_principal: int = Field(
        default=LegacyCaps.sessions_per_principal,
        gt=0,
        description="Sessions a principal may hold; past it, its oldest session ends.",
    )
    client_text_max_chars: int = Field(
        default=LegacyCaps.client_text_max_chars,
        gt=0,
        description="clientInfo name and version are cut to this many characters.",
    )
    request_id_max_chars: int = Field(
        default=LegacyCaps.request_id_max_chars,
        gt=0,
        description="Longest string request id a notifications/cancelled may name.",
    )
    inbox_max_entries: int = Field(
        default=LegacyCaps.inbox_max_entries,
        gt=0,
        description="A session's answer inbox is trimmed to about this many entries.",
    )
    answer_max_bytes: int = Field(
        default=LegacyCaps.answer_max_bytes,
        gt=0,
        description="Largest answer a client may POST; past it 400, and the call ends isError.",
    )
    roots_max: int = Field(
        default=LegacyCaps.roots_max,
        gt=0,
        description="Roots of a roots/list answer kept; further ones are dropped.",
    )
    pending_calls_per_session: int = Field(
        default=LegacyCaps.pending_calls_per_session,
        gt=0,
        description="Open calls per session, counted over all nodes; past it -32600.",
    )
    pending_calls_per_node: int = Field(
        default=LegacyCaps.pending_calls_per_node,
        gt=0,
        description="Open legacy calls per node; past it a retryable -32603.",
    )


class _File(BaseModel):
    """The configuration file's top level."""

    model_config = ConfigDict(extra="forbid", strict=True)
    server_name: str = Field(
        min_length=1,
        max_length=200,
        description="The audience every node of the cluster shares (states are bound to it).",
    )
    state_ttl_seconds: float = Field(
        default=DEFAULT_STATE_TTL_MS / 1000,
        gt=0,
        le=86_400,
        description="How long a confirmation's requestState stays valid (on the Redis clock).",
    )
    replay_grace_seconds: float = Field(
        default=REPLAY_GRACE_MS / 1000,
        ge=0,
        le=86_400,
        description="How long a replay entry outlives its state's expiry.",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins allowed to POST to /mcp (others 403; a node's own "
        "loopback origin needs no entry).",
    )
    state_keys: dict[str, str] = Field(
        description="The sealing key ring: `active` names the key that seals; every key "
        "(`env:NAME` or `file:PATH`, base64 of 32 bytes) still opens states.",
    )
    workspaces: dict[str, str] = Field(
        min_length=1,
        description="Workspace URI -> tenant (one Redis hash tag per tenant).",
    )
    principals: dict[str, _Principal] = Field(
        min_length=1, description="One table per principal (see [principals.NAME])."
    )
    archives: dict[str, str] = Field(
        default_factory=dict,
        description="Workspace URI -> its archive workspace (notes_archive).",
    )
    public_url: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="Base URL of notes_setup links (default: the address each node bound).",
    )
    # A body must fit in one request (nodes.http's 1 MiB), with room for the envelope.
    max_note_body_bytes: int = Field(
        default=DEFAULT_MAX_NOTE_BODY_BYTES,
        ge=1,
        le=524_288,
        description="Largest note body, in UTF-8 bytes.",
    )
    max_notes_per_workspace: int = Field(
        default=DEFAULT_MAX_NOTES_PER_WORKSPACE,
        ge=1,
        le=1_000_000,
        description="Creates and moves into a full workspace are refused.",
    )
    list_page_size: int = Field(
        default=DEFAULT_LIST_PAGE_SIZE,
        ge=1,
        le=MAX_LIST_PAGE_SIZE,
        description="Notes per notes_list page, then nextCursor.",
    )
    idempotency_window_seconds: float = Field(
        default=DEFAULT_IDEMPOTENCY_WINDOW_MS / 1000,
        ge=1,
        le=7 * 86_400,
        description="How long a write's idempotency key is remembered.",
    )
    max_notes_per_principal: int = Field(
        default=DEFAULT_MAX_NOTES_PER_PRINCIPAL,
        ge=1,
        le=10_000_000,
        description="Notes one principal may own per tenant.",
    )
    # At least one largest note; at most 64 GiB.
    max_bytes_per_principal: int = Field(
        default=DEFAULT_MAX_BYTES_PER_PRINCIPAL,
        ge=1024,
        le=64 * 1024**3,
        description="Bytes (titles and bodies, UTF-8) one principal's notes may hold per tenant.",
    )
    max_share_of_shared_workspace: float = Field(
        default=DEFAULT_MAX_SHARE_OF_SHARED_WORKSPACE,
        gt=0,
        le=1,
        description="Share of max_notes_per_workspace one principal may fill where several "
        "principals' grants cover a workspace.",
    )
    max_writes_per_principal: int = Field(
        default=DEFAULT_MAX_WRITES_PER_PRINCIPAL, ge=1, le=100_000_000
    )
    max_header_bytes: int = Field(
        default=DEFAULT_MAX_HEADER_BYTES,
        ge=MAX_HEADER_BYTES_RANGE[0],
        le=MAX_HEADER_BYTES_RANGE[1],
        description="Largest request header block; past it 431 and the connection closed.",
    )
    wait_replicas: Literal["auto"] | Annotated[int, Field(ge=0, le=16)] = Field(
        default=AUTO,
        description='Replicas every write waits for: "auto" (one where every master has a '
        "replica, else none) or a number; 0 never waits.",
    )
    legacy: _Legacy = Field(
        default_factory=_Legacy, description="Bounds of 2025-11-25 clients (see [legacy])."
    )
    timeouts: _Timeouts = Field(
        default_factory=_Timeouts, description="Connection timeouts (see [timeouts])."
    )


@dataclass(frozen=True)
class ClusterSettings:
    """What every node of a cluster shares."""

    node: NodeConfig
    tokens: TokenTable
    allowed_origins: frozenset[str] = frozenset()
    replay_grace_ms: int = REPLAY_GRACE_MS
    wait_replicas: WaitReplicas = AUTO
    """Replicas every write must reach (``WAIT``) before a node answers; fewer in time is
    "outcome unknown" (-32603). 0: asynchronous replication (docs/explanation/durability.md);
    ``"auto"``: 1 where every master has a replica, else 0 (``nodes.serving.durability``)."""
    timeouts: ServerTimeouts = field(default_factory=ServerTimeouts)
    """Header, body, idle and drain bounds of the serving path (``[timeouts]``)."""
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    """Largest request header block every server of the node takes (431 past it)."""

    def with_state_ttl(self, seconds: float | None) -> ClusterSettings:
        """A copy with another state expiry (``None``: unchanged)."""
        if seconds is None:
            return self
        return replace(self, node=replace(self.node, state_ttl_ms=int(seconds * 1000)))

    def with_replay_grace(self, seconds: float | None) -> ClusterSettings:
        """A copy whose replay entries outlive their state by ``seconds`` (``None``: unchanged)."""
        if seconds is None:
            return self
        return replace(self, replay_grace_ms=int(seconds * 1000))


def load_settings(path: Path) -> ClusterSettings:
    """Read and check a TOML configuration file."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        parsed = _File.model_validate(raw)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: {where}: {first['msg']}") from None
    keys = dict(parsed.state_keys)
    active = keys.pop("active", None)
    if active is None:
        raise ConfigError(f"{path}: state_keys.active names no key")
    try:
        ring = KeyRing.from_sources(keys, active)
        scope = Scope.build(parsed.workspaces, {p: v.grants for p, v in parsed.principals.items()})
        tokens = TokenTable(
            {h: name for name, p in parsed.principals.items() for h in p.token_sha256}
        )
        _check_archives(scope, parsed.archives)
    except (ValueError, ScopeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    node = NodeConfig(
        server_name=parsed.server_name,
        scope=scope,
        key_ring=ring,
        state_ttl_ms=int(parsed.state_ttl_seconds * 1000),
        archives=dict(parsed.archives),
        public_url=parsed.public_url,
        max_note_body_bytes=parsed.max_note_body_bytes,
        max_notes_per_workspace=parsed.max_notes_per_workspace,
        list_page_size=parsed.list_page_size,
        idempotency_window_ms=int(parsed.idempotency_window_seconds * 1000),
        max_notes_per_principal=parsed.max_notes_per_principal,
        max_bytes_per_principal=parsed.max_bytes_per_principal,
        max_share_of_shared_workspace=parsed.max_share_of_shared_workspace,
        max_writes_per_principal=parsed.max_writes_per_principal,
        legacy=LegacyCaps(**parsed.legacy.model_dump()),
    )
    t = parsed.timeouts
    return ClusterSettings(
        node,
        tokens,
        frozenset(parsed.allowed_origins),
        int(parsed.replay_grace_seconds * 1000),
        parsed.wait_replicas,
        timeouts=ServerTimeouts(t.headers, t.body, t.idle, t.drain),
        max_header_bytes=parsed.max_header_bytes,
    )


def _check_archives(scope: Scope, archives: dict[str, str]) -> None:
    """Every archive maps a configured workspace to another one of the same tenant."""
    for source, archive in archives.items():
        try:
            a, b = normalize_uri(source), normalize_uri(archive)
        except ScopeError as exc:
            raise ScopeError(f"archives: {exc}") from None
        if a not in scope.workspaces or b not in scope.workspaces:
            raise ScopeError(f"archives: {a!r} and {b!r} must both be configured workspaces")
        if a == b or scope.workspaces[a] != scope.workspaces[b]:
            raise ScopeError(f"archives: {b!r} must be another workspace of {a!r}'s tenant")


def demo_settings(
    ring: KeyRing | None = None,
    extra_tokens: dict[str, str] | None = None,
    scope: Scope | None = None,
    archives: dict[str, str] | None = None,
) -> ClusterSettings:
    """The demo fixture as settings: alice and bob, their published tokens, a fresh key ring
    (or ``ring``, so several processes can share one), and the demo archives plus ``archives``."""
    node = NodeConfig(
        server_name=DEMO_SERVER_NAME,
        scope=scope or Scope.build(DEMO_WORKSPACES, DEMO_GRANTS),
        key_ring=ring or KeyRing.generate("demo"),
        archives={**DEMO_ARCHIVES, **(archives or {})},
    )
    return ClusterSettings(node, TokenTable.from_plain({**DEMO_TOKENS, **(extra_tokens or {})}))


STATE_KEY_ENV = "NOTES_CLUSTER_STATE_KEY"
"""Environment variable through which a parent hands a demo key ring to its node processes."""


def with_demo_anonymous(
    settings: ClusterSettings, principal: str | None, host: str
) -> ClusterSettings:
    """``settings`` in which an MCP request without ``Authorization`` acts as ``principal`` (None:
    unchanged): a demo option, refused unless the node binds a loopback address (the app also
    honours it on loopback connections only)."""
    if principal is None:
        return settings
    if not is_loopback_host(host):
        raise ConfigError(f"--demo-anonymous serves loopback addresses only, not {host}")
    try:
        return replace(settings, tokens=settings.tokens.with_anonymous(principal))
    except ValueError:
        raise ConfigError(f"--demo-anonymous {principal}: not a principal of the demo") from None


def with_conformance_fixtures(settings: ClusterSettings, on: bool, demo: bool) -> ClusterSettings:
    """``settings`` whose nodes also serve the official conformance suite's fixtures
    (``nodes.fixtures``) when ``on``: a demo option, refused with a configuration file, so a
    production node never serves them."""
    if not on:
        return settings
    if not demo:
        raise ConfigError("--conformance-fixtures serves the demo only (with --demo)")
    return replace(settings, node=replace(settings.node, conformance_fixtures=True))


def settings_for(
    config: Path | None,
    demo: bool,
    state_ttl: float | None,
    replay_grace: float | None = None,
) -> ClusterSettings:
    """Settings from a config file, or the demo fixture (a key ring from the environment when a
    parent process handed one down); ``state_ttl`` and ``replay_grace`` (seconds) override."""
    if config is not None:
        return load_settings(config).with_state_ttl(state_ttl).with_replay_grace(replay_grace)
    ring = None
    key = os.environ.get(STATE_KEY_ENV)
    if key:
        ring = KeyRing.from_sources({"demo": f"base64:{key}"}, "demo")
    base = demo_settings(ring)
    scope = with_load_scope(base.node.scope)
    settings = demo_settings(ring, load_tokens(), scope, load_archives())
    settings = replace(settings, node=replace(settings.node, tenant_quotas=load_quotas()))
    return settings.with_state_ttl(state_ttl).with_replay_grace(replay_grace)
