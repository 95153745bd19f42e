"""What a node serves besides tools: resource and prompt providers, and their contract.

Layer: node, protocol core. Pure module: no I/O of its own. A provider answers for the URIs or
prompt names it owns and ``None`` for any other, so a node chains several (the notes, and in the
demo's conformance fixture mode the suite's fixtures) and answers "not found" when none owns a
request. Providers get the same ``CallContext`` a tool gets: principal, this request's client
capabilities, ``inputResponses`` and ``requestState``, so ``resources/read`` and ``prompts/get``
run MRTR rounds exactly as ``tools/call`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from nodes.tools.base import CallContext


class ResourceProvider(Protocol):
    """Resources (``resources/list``, ``resources/templates/list``, ``resources/read``)."""

    def templates(self) -> list[dict[str, Any]]:
        """The ResourceTemplate objects this provider serves (identical on every node)."""
        ...

    async def list_resources(self, ctx: CallContext) -> list[dict[str, Any]]:
        """The Resource objects ``ctx.principal`` may read, in a deterministic order."""
        ...

    async def read(self, uri: str, ctx: CallContext) -> dict[str, Any] | None:
        """A ReadResourceResult (complete or ``input_required``), or None: not this
        provider's URI."""
        ...


class PromptProvider(Protocol):
    """Prompts (``prompts/list``, ``prompts/get``) and the completion of their arguments."""

    def prompts(self) -> list[dict[str, Any]]:
        """The Prompt objects this provider serves (identical on every node)."""
        ...

    async def get(self, name: str, ctx: CallContext) -> dict[str, Any] | None:
        """A GetPromptResult (complete or ``input_required``) for ``ctx.arguments``, or None:
        not this provider's prompt."""
        ...

    def complete(
        self,
        ref: Mapping[str, Any],
        argument: str,
        value: str,
        ctx: CallContext,
    ) -> list[str] | None:
        """Values completing ``argument`` (typed so far: ``value``) of the prompt or resource
        template ``ref`` names, or None: not this provider's reference."""
        ...
