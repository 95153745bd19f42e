"""The load fixture: a cluster configured for the load generator's tenants and principals.

Layer: nodes (serving). Beside the demo fixture (``nodes.serving.demo``) and as clearly named: the
tokens are published demo values, for runs on loopback only. ``serve --demo`` configures its nodes
with it, so it imports nothing of the load generator: the names are spelled here as the load spells
them in ``loadgen.tenants`` (tests/test_import_direction.py checks that both agree).

    tenant load<t>   workspaces file:///load/t<t>/inbox and .../archive (the inbox archives to
                     the archive), principals u<t>a and u<t>b, both granted file:///load/t<t>,
                     tokens u<t>a-load-token and u<t>b-load-token
"""

from __future__ import annotations

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


def load_workspaces(tenants: int = LOAD_TENANTS) -> dict[str, str]:
    """Workspace URI -> tenant for the load tenants (an inbox and an archive each)."""
    out: dict[str, str] = {}
    for t in range(tenants):
        out[inbox(t)] = tenant(t)
        out[archive(t)] = tenant(t)
    return out


def load_archives(tenants: int = LOAD_TENANTS) -> dict[str, str]:
    """Each load tenant's inbox -> its archive (``notes_archive``)."""
    return {inbox(t): archive(t) for t in range(tenants)}


def load_grants(tenants: int = LOAD_TENANTS) -> dict[str, tuple[str, ...]]:
    """Two principals per load tenant, both granted the tenant's root."""
    return {principal(t, side): (root(t),) for t in range(tenants) for side in SIDES}


def load_tokens(tenants: int = LOAD_TENANTS) -> dict[str, str]:
    """Demo bearer tokens of the load principals (published: for HTTP runs on loopback only)."""
    return {f"{p}-load-token": p for p in load_grants(tenants)}


def with_load_scope(base: Scope, tenants: int = LOAD_TENANTS) -> Scope:
    """``base`` plus the load tenants' workspaces and principals."""
    return Scope.build(
        {**base.workspaces, **load_workspaces(tenants)},
        {**base.grants, **load_grants(tenants)},
    )
