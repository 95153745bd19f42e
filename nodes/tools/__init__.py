"""The node's tools, one module per kind. ``DEFAULT_TOOLS`` is what every node serves."""

from __future__ import annotations

from typing import Any

from nodes.tools.base import Tool
from nodes.tools.crud import CreateTool, ListTool, MoveTool, UpdateTool
from nodes.tools.delete import DeleteTool

DEFAULT_TOOLS: tuple[Tool[Any], ...] = (
    CreateTool(),
    DeleteTool(),
    ListTool(),
    MoveTool(),
    UpdateTool(),
)
