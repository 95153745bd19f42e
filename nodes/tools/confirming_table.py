"""The one table of confirming tools: each tool's form key, result key and store operation.

Layer: node, protocol core. Pure module: no I/O. The confirming tools (``nodes.tools.delete``,
``nodes.tools.archive``) read their row here; nothing else in nodes/ or store/ spells these keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

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

CONFIRMING_TOOLS: Mapping[str, ConfirmingKind] = MappingProxyType(
    {kind.tool: kind for kind in (DELETE, ARCHIVE)}
)
"""Every confirming tool, by name."""
