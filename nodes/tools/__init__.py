"""The node's tools, one module per kind. ``DEFAULT_TOOLS`` is what every node serves."""

from __future__ import annotations

from typing import Any

from nodes.tools.archive import ArchiveTool
from nodes.tools.base import Tool
from nodes.tools.crud import CreateTool, ListTool, MoveTool, UpdateTool
from nodes.tools.delete import DeleteTool
from nodes.tools.search import SearchTool
from nodes.tools.setup import SetupTool

DEFAULT_TOOLS: tuple[Tool[Any], ...] = (
    ArchiveTool(),
    CreateTool(),
    DeleteTool(),
    ListTool(),
    MoveTool(),
    SearchTool(),
    SetupTool(),
    UpdateTool(),
)
