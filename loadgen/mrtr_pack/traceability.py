"""The pack's traceability: which spec sentence each check tests (``traceability.yaml``).

Layer: loadgen (the pack). Reads the YAML shipped beside this module, in the format of the
official suite's ``src/seps/*.yaml``. ``requirement_of`` names a check's requirement in the
report's ``checks.md``; ``text`` is what ``notes-cluster conformance --traceability`` prints.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml

FILE = "traceability.yaml"


def text() -> str:
    """The traceability file as shipped."""
    return resources.files(__package__).joinpath(FILE).read_text(encoding="utf-8")


@functools.cache
def requirements() -> tuple[dict[str, Any], ...]:
    """The ``requirements`` entries, in file order (the single-use MUST first)."""
    raw = yaml.safe_load(text())
    entries: list[dict[str, Any]] = raw["requirements"]
    return tuple(entries)


def requirement_of(check_id: str) -> str:
    """The spec sentence ``check_id`` tests ("" for a check the file does not name)."""
    for entry in requirements():
        if check_id in entry.get("checks", ()):
            sentence: str = entry["text"]
            return sentence
    return ""
