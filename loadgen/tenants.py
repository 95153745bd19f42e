"""The names the load addresses: its tenants, their workspaces and principals.

Layer: loadgen. Pure module. The workload only names these; a cluster that serves the load is
configured for them by ``nodes.serving.load_fixture``, which spells the same names without importing
this module (a node must not load the load generator; a test checks that both agree).

    tenant load<t>   workspaces file:///load/t<t>/inbox and .../archive (the inbox archives to
                     the archive), principals u<t>a and u<t>b, both granted file:///load/t<t>
"""

from __future__ import annotations

LOAD_TENANTS = 4
"""Tenants a load uses unless told otherwise."""

SIDES = ("a", "b")
"""The two principals of each tenant: one runs a flow, the other is its foreigner."""


def tenant(t: int) -> str:
    """The tenant (Redis hash tag) of load tenant ``t``."""
    return f"load{t}"


def root(t: int) -> str:
    """The root both principals of tenant ``t`` are granted."""
    return f"file:///load/t{t}"


def inbox(t: int) -> str:
    """The workspace the flows of tenant ``t`` create, ask and confirm in."""
    return f"{root(t)}/inbox"


def archive(t: int) -> str:
    """Where tenant ``t``'s inbox archives to (and where ``race_move`` moves notes)."""
    return f"{root(t)}/archive"


def principal(t: int, side: str) -> str:
    """Principal ``side`` (one of SIDES) of tenant ``t``."""
    return f"u{t}{side}"


SMALL_QUOTAS: dict[str, tuple[int, int, int]] = {"loadq": (3, 256, 0), "loadw": (0, 0, 4)}
"""Tenants whose principals have small quotas (notes, bytes, writes; 0: the configuration's
own), so a run reaches each quota's exact boundary: ``loadq`` holds the notes and the bytes
quotas, ``loadw`` the writes quota (writes are counted for a whole idempotency window, so a
tenant whose writes run out refuses every create after; the others stay usable). The
``quota_boundary`` flows write there; a cluster serving the load is configured with them
(``nodes.serving.load_fixture.SMALL_QUOTAS``, which must agree)."""


def quota_root(name: str) -> str:
    """The root both principals of small-quota tenant ``name`` are granted."""
    return f"file:///load/{name}"


def quota_principal(name: str, side: str) -> str:
    """Principal ``side`` of small-quota tenant ``name``."""
    return f"u{name}{side}"


def tenants(count: int) -> list[str]:
    """The first ``count`` tenants' names and the small-quota tenants', sorted (what a checker
    reads the journal of)."""
    return sorted([*(tenant(t) for t in range(count)), *SMALL_QUOTAS])


def principals_of(tenant_name: str) -> list[str]:
    """The principals of a tenant named as ``tenant`` or ``SMALL_QUOTAS`` names them ([] for
    another name)."""
    if tenant_name in SMALL_QUOTAS:
        return [quota_principal(tenant_name, side) for side in SIDES]
    digits = tenant_name.removeprefix("load")
    if digits == tenant_name or not digits.isdigit():
        return []
    return [principal(int(digits), side) for side in SIDES]
