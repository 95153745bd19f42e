"""The load fixture: a cluster configured for the load generator's tenants and principals.

Layer: nodes (serving). Beside the demo fixture (``nodes.serving.demo``) and as clearly named: the
tokens are published demo values, for runs on loopback only. ``serve --demo`` configures its nodes
with it, so it imports nothing of the load generator: the names are spelled here as the load spells
them in ``loadgen.tenants`` (tests/test_import_direction.py checks that both agree).

    tenant load<t>   workspaces file:///load/t<t>/inbox and .../archive (the inbox archives to
                     the archive), principals u<t>a and u<t>b, both granted file:///load/t<t>,
                     tokens u<t>a-load-token and u<t>b-load-token
    tenant <q>       for each small-quota tenant q (``SMALL_QUOTAS``: loadq, loadw): the same
                     under file:///load/<q>, principals u<q>a and u<q>b, with the tenant's own
                     small per-principal quotas (``load_quotas``)
"""

from __future__ import annotations

from nodes.config import TenantQuota
from nodes.scope import Scope

LOAD_TENANTS = 4
"""Tenants a load uses unless told otherwise."""

SIDES = ("a", "b")


def tenant(t: int) -> str:
    """The tenant (Redis hash tag) of load tenant ``t``."""
    return f"load{t}"


def root(t: int) -> str:
    """The root both principals of tenant ``t`` are granted."""
    return f"file:///load/t{t}"


def inbox(t: int) -> str:
    """Tenant ``t``'s inbox workspace."""
    return f"{root(t)}/inbox"


def archive(t: int) -> str:
    """Tenant ``t``'s archive workspace."""
    return f"{root(t)}/archive"


def principal(t: int, side: str) -> str:
    """Principal ``side`` (one of SIDES) of tenant ``t``."""
    return f"u{t}{side}"


SMALL_QUOTAS: dict[str, TenantQuota] = {
    "loadq": TenantQuota(notes=3, bytes=256),
    "loadw": TenantQuota(writes=4),
}
"""Tenants whose principals have small quotas, so a load reaches each quota's exact boundary:
``loadq`` the notes and bytes quotas, ``loadw`` the writes quota (writes are counted for a whole
idempotency window: once they run out the tenant refuses every create, so it is a tenant of its
own)."""


def quota_root(name: str) -> str:
    """The root both principals of small-quota tenant ``name`` are granted."""
    return f"file:///load/{name}"


def quota_principal(name: str, side: str) -> str:
    """Principal ``side`` of small-quota tenant ``name``."""
    return f"u{name}{side}"


def load_quotas() -> dict[str, TenantQuota]:
    """``NodeConfig.tenant_quotas`` of a cluster serving the load (``SMALL_QUOTAS``)."""
    return dict(SMALL_QUOTAS)


def load_workspaces(tenants: int = LOAD_TENANTS) -> dict[str, str]:
    """Workspace URI -> tenant for the load tenants and the small-quota tenants (an inbox and
    an archive each)."""
    out: dict[str, str] = {}
    for t in range(tenants):
        out[inbox(t)] = tenant(t)
        out[archive(t)] = tenant(t)
    for name in SMALL_QUOTAS:
        out[f"{quota_root(name)}/inbox"] = name
        out[f"{quota_root(name)}/archive"] = name
    return out


def load_archives(tenants: int = LOAD_TENANTS) -> dict[str, str]:
    """Each load tenant's inbox -> its archive (``notes_archive``)."""
    out = {inbox(t): archive(t) for t in range(tenants)}
    return out | {f"{quota_root(q)}/inbox": f"{quota_root(q)}/archive" for q in SMALL_QUOTAS}


def load_grants(tenants: int = LOAD_TENANTS) -> dict[str, tuple[str, ...]]:
    """Two principals per load tenant and per small-quota tenant, both granted its root."""
    out: dict[str, tuple[str, ...]] = {
        principal(t, side): (root(t),) for t in range(tenants) for side in SIDES
    }
    return out | {
        quota_principal(q, side): (quota_root(q),) for q in SMALL_QUOTAS for side in SIDES
    }


def load_tokens(tenants: int = LOAD_TENANTS) -> dict[str, str]:
    """Demo bearer tokens of the load principals (published: for HTTP runs on loopback only)."""
    return {f"{p}-load-token": p for p in load_grants(tenants)}


def with_load_scope(base: Scope, tenants: int = LOAD_TENANTS) -> Scope:
    """``base`` plus the load tenants' workspaces and principals."""
    return Scope.build(
        {**base.workspaces, **load_workspaces(tenants)},
        {**base.grants, **load_grants(tenants)},
    )
