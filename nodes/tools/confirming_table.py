"""The one table of confirming tools: each tool's form key, result key and store operation, one
row (a ``ConfirmingKind``) per tool.

Layer: node, protocol core. Pure module: no I/O. The confirming tools (``nodes.tools.delete``,
``nodes.tools.archive``) read their row here by its name (``DELETE``, ``ARCHIVE``); nothing else
in nodes/ or store/ spells these keys. ``tests/test_lifecycle.py`` holds the rows to the tools
served.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.api import StoreOp


@dataclass(frozen=True, slots=True)
class ConfirmingKind:
    """One confirming tool as the wire and the store see it."""

    tool: str
    """The tool's name in ``tools/list`` and ``tools/call``."""
    form_key: str
    """The key of its one input request; the answer comes back under the same key."""
    result_key: str
    """The result's boolean key, also the past participle in its messages."""
    op: StoreOp
    """The store operation ``confirm.lua`` performs on accept."""


DELETE = ConfirmingKind("notes_delete", "confirm_delete", "deleted", "delete")
ARCHIVE = ConfirmingKind("notes_archive", "confirm_archive", "archived", "move")
