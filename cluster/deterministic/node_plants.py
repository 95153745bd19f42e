"""Planted defects in node code, for the plants of ``store.simulation.plants`` that a store
cannot make (which workspaces ``notes_search`` offers for the roots a client gave).

Layer: cluster (deterministic). Each plant here is a context manager that swaps one function
of a node module for a defective one for the length of a deterministic run (the run's nodes
share this process), and puts the original back after it. A plant names one by
``Plant.node``; ``cluster.deterministic.run`` enters it. Off unless a deterministic run names a
plant: nothing here is imported by a node process or by the command line's other paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from nodes.scope import ScopeError, Workspace, contains, normalize_uri
from nodes.tools import search
from nodes.tools.base import CallContext

_IN_ROOTS = search.workspaces_in_roots
"""The node's own ``workspaces_in_roots``, what the plants swap out and put back."""


def _canonical(roots: tuple[str, ...]) -> list[str]:
    out = []
    for uri in roots:
        try:
            out.append(normalize_uri(uri))
        except ScopeError:
            continue
    return out


def _all_in_roots(ctx: CallContext, roots: tuple[str, ...]) -> tuple[Workspace, ...]:
    # The grant is never read: every configured workspace inside a root is searched.
    scope = ctx.config.scope
    canonical = _canonical(roots)
    everything = {ws.uri: ws for p in scope.grants for ws in scope.workspaces_for(p)}
    return tuple(
        ws for _, ws in sorted(everything.items()) if any(contains(r, ws.uri) for r in canonical)
    )


def _all_granted_once_any(ctx: CallContext, roots: tuple[str, ...]) -> tuple[Workspace, ...]:
    # Roots only decide whether to search at all: once one covers a granted workspace, every
    # granted workspace is offered.
    inside = _IN_ROOTS(ctx, roots)
    return ctx.config.scope.workspaces_for(ctx.principal) if inside else ()


@contextmanager
def _swap_workspaces_in_roots(
    replacement: Callable[[CallContext, tuple[str, ...]], tuple[Workspace, ...]],
) -> Iterator[None]:
    search.workspaces_in_roots = replacement  # type: ignore[assignment]
    try:
        yield
    finally:
        search.workspaces_in_roots = _IN_ROOTS


@contextmanager
def roots_ungranted_honoured() -> Iterator[None]:
    """``notes_search`` honours a root its principal is not granted: every configured workspace
    inside the roots is offered and searched."""
    with _swap_workspaces_in_roots(_all_in_roots):
        yield


@contextmanager
def pick_outside_roots() -> Iterator[None]:
    """``notes_search``'s pick form offers every workspace the principal is granted once the
    roots cover any, not only those inside the roots."""
    with _swap_workspaces_in_roots(_all_granted_once_any):
        yield
