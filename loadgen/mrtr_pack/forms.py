"""Answering a form from its ``requestedSchema``, as a user who confirms would.

Layer: loadgen (the pack). Pure module: no I/O. The schema is MCP's flat form schema
(mcp-2026-07-28 §6): strings (plain, formatted, single-select by ``enum`` or titled
``oneOf``), numbers, booleans and multi-select arrays. ``accept`` picks option ``pick`` of the
first single-select property (the target of a confirm-before-act tool: which note, which
account) and says yes to every boolean (the confirmation); everything else takes its default or
the smallest valid value. ``choices`` says how many options that first single-select offers, so
a check can send "another answer" under a used state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FORMAT_SAMPLES = {
    "email": "conformance@example.com",
    "uri": "https://example.com/conformance",
    "date": "2026-07-28",
    "date-time": "2026-07-28T00:00:00Z",
}
"""A valid value per string format the spec allows."""


@dataclass(frozen=True)
class Form:
    """One form an ``input_required`` result asked for: its key and its schema."""

    key: str
    schema: dict[str, Any]

    @property
    def properties(self) -> dict[str, Any]:
        """The schema's properties ({} when malformed)."""
        props = self.schema.get("properties")
        return props if isinstance(props, dict) else {}


def form_of(result: dict[str, Any]) -> Form | None:
    """The first form-mode elicitation among an ``input_required`` result's input requests."""
    requests = result.get("inputRequests")
    if not isinstance(requests, dict):
        return None
    for key, req in requests.items():
        if not isinstance(req, dict) or req.get("method") != "elicitation/create":
            continue
        params = req.get("params") or {}
        if params.get("mode", "form") == "form" and isinstance(params.get("requestedSchema"), dict):
            return Form(str(key), params["requestedSchema"])
    return None


def _options(prop: dict[str, Any]) -> list[Any]:
    """The values a single-select property offers ([] if it is not one)."""
    if prop.get("type") != "string":
        return []
    if isinstance(prop.get("enum"), list):
        return list(prop["enum"])
    if isinstance(prop.get("oneOf"), list):
        return [o["const"] for o in prop["oneOf"] if isinstance(o, dict) and "const" in o]
    return []


def _select(form: Form) -> str | None:
    """The first single-select property's name (None when the form has none)."""
    return next((name for name, p in form.properties.items() if _options(p)), None)


def choices(form: Form) -> int:
    """How many options the first single-select property offers (0: none)."""
    name = _select(form)
    return len(_options(form.properties[name])) if name else 0


def _value(prop: dict[str, Any]) -> Any:
    """The default, or the smallest valid value of a non-select property."""
    if "default" in prop:
        return prop["default"]
    kind = prop.get("type")
    if kind == "boolean":
        return True
    if kind in ("number", "integer"):
        return prop.get("minimum", 0)
    if kind == "array":
        items = prop.get("items") or {}
        values = list(items.get("enum") or [o.get("const") for o in items.get("anyOf") or []])
        return values[: max(1, int(prop.get("minItems", 1)))]
    fmt = prop.get("format")
    text = FORMAT_SAMPLES.get(str(fmt), "conformance")
    return text.ljust(int(prop.get("minLength", 0)), "x")


def accept(form: Form, pick: int = 0, *, confirm: bool = True) -> dict[str, Any]:
    """An ``accept`` answering every property: option ``pick`` of the first single-select, every
    boolean ``confirm``, the rest by default or smallest valid value."""
    select = _select(form)
    content: dict[str, Any] = {}
    for name, prop in form.properties.items():
        if not isinstance(prop, dict):
            continue
        if name == select:
            options = _options(prop)
            content[name] = options[pick % len(options)]
        elif prop.get("type") == "boolean":
            content[name] = confirm
        else:
            content[name] = _value(prop)
    return {"action": "accept", "content": content}


def other_answer(form: Form) -> tuple[dict[str, Any], str]:
    """An answer that differs from ``accept(form)``: another option when there is one, else the
    same with every boolean false; and which of the two it is."""
    if choices(form) > 1:
        return accept(form, 1), "another option"
    return accept(form, confirm=False), "the confirmation unticked"


DECLINE: dict[str, Any] = {"action": "decline"}
CANCEL: dict[str, Any] = {"action": "cancel"}
