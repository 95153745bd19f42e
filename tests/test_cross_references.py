"""Every ````module.name```` cross-reference in the source resolves to something that exists.

Layer: tests. A double-backtick span in a module of ours (docstring or comment) that names one of
our packages (``cluster``, ``loadgen``, ``nodes``, ``store``) followed by dotted names is a cross
reference: the longest prefix that imports is the module, and each remaining name must be an
attribute of what precedes it. Like the import-direction test, this reads the files as text; it
imports only the modules the references name.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cluster", "loadgen", "nodes", "store")

REFERENCE = re.compile(r"``((?:cluster|loadgen|nodes|store)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)``")
"""A double-backtick span holding only a dotted name that starts with one of our packages."""


@dataclass(frozen=True)
class Reference:
    """One cross-reference and where it stands."""

    path: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: ``{self.name}`` does not resolve"


FILE_SUFFIXES = frozenset({"json", "jsonl", "log", "lua", "md", "png", "py", "sh", "toml", "txt"})
"""A span ending in one of these names a file (``nodes.log``), not a Python name."""


def references(source: str, path: str) -> list[Reference]:
    """Every cross-reference in ``source`` (the text of file ``path``)."""
    out = []
    for number, line in enumerate(source.splitlines(), start=1):
        for m in REFERENCE.finditer(line):
            if m.group(1).rsplit(".", 1)[1] not in FILE_SUFFIXES:
                out.append(Reference(path, number, m.group(1)))
    return out


def resolves(name: str) -> bool:
    """True when the longest importable prefix of ``name`` is a module of ours and each part
    after it is an attribute of the part before."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def unresolved() -> list[Reference]:
    """The cross-references in cluster/, loadgen/, nodes/ and store/ that do not resolve."""
    found: list[Reference] = []
    for package in PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            source = file.read_text(encoding="utf-8")
            found += references(source, str(file.relative_to(ROOT)))
    return [r for r in found if not resolves(r.name)]


def test_every_cross_reference_in_the_source_resolves() -> None:
    broken = unresolved()
    assert not broken, "\n".join(map(str, broken))


def test_the_resolver_finds_modules_attributes_and_what_is_missing() -> None:
    planted = (
        "``store.keys.TenantKeys.note``, ``nodes.gone`` (``cluster``, ``x.y``, ``nodes.log``)\n"
    )
    found = references(planted, "planted.py")
    assert [r.name for r in found] == ["store.keys.TenantKeys.note", "nodes.gone"]
    assert resolves("store.keys.TenantKeys.note")
    assert resolves("nodes.serving")
    assert not resolves("nodes.gone")
    assert not resolves("store.keys.TenantKeys.gone")
    assert str(found[1]) == "planted.py:1: ``nodes.gone`` does not resolve"
