"""The client capabilities a tool may need, and the ``requiredCapabilities`` of each -32021.

Layer: node, protocol core. Pure module: no I/O. A request declares its capabilities in its own
``_meta`` (stateless protocol), so each check reads one request's declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FORM_CAPABILITY: dict[str, Any] = {"elicitation": {"form": {}}}
"""``data.requiredCapabilities`` of the -32021 answer for tools that need a form."""

URL_CAPABILITY: dict[str, Any] = {"elicitation": {"url": {}}}
"""``data.requiredCapabilities`` of the -32021 answer for tools that need a URL elicitation."""

ROOTS_CAPABILITY: dict[str, Any] = {"roots": {}}
"""``data.requiredCapabilities`` of the -32021 answer for a search that needs the roots."""


def form_capable(capabilities: Mapping[str, Any]) -> bool:
    """Whether this request declared form-mode elicitation (a bare ``{}`` means form only)."""
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    return not elicitation or isinstance(elicitation.get("form"), dict)


def url_capable(capabilities: Mapping[str, Any]) -> bool:
    """Whether this request declared URL-mode elicitation."""
    elicitation = capabilities.get("elicitation")
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


def roots_capable(capabilities: Mapping[str, Any]) -> bool:
    """Whether this request declared the roots capability."""
    return isinstance(capabilities.get("roots"), dict)
