"""One meaning per name: no two classes or type aliases of one name across the packages.

Layer: tests. Reads the sources of ``cluster``, ``nodes``, ``store`` and ``loadgen`` as text
(``ast``), like the import-direction test, and collects every public module-level class and type
alias (a capitalised name bound to a type expression). A name defined in two modules must be in
``SAME_MEANING``, with what it means in each; anything else is a homonym waiting to confuse a
reader (a checker's ``Verdict`` beside a pack's, a run's ``Target`` beside a bench's), and the
test names it with its modules. The module-level functions the packages once used with two
meanings (``ONE_DEFINITION``) must each be defined once.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cluster", "loadgen", "nodes", "store")

SAME_MEANING: dict[str, str] = {
    "ASGIApp": "an ASGI application's callable type, declared where a module builds one",
    "ASGIScope": "an ASGI connection scope, declared where a module reads one",
    "Receive": "an ASGI receive callable, declared where a module uses one",
    "Send": "an ASGI send callable, declared where a module uses one",
    "Address": "a Redis node's (host, port), in the cluster client and the reshard tool",
    "Log": "a line printer handed to the bench's and the lab's long runs",
    "Reply": "an HTTP reply (status, JSON body): as a node sends it (nodes.protocol) and as the "
    "load generator's transport reads it (loadgen.transport)",
    "Answer": "a client's answer to a confirmation: as the node validates the form "
    "(nodes.confirm_form) and as the checker's model reads it from the history",
    "Asked": "what round 1 asked a client, in each client that reads it (modern flows, legacy "
    "clients, the pack)",
    "Listing": "a notes listing: the node's cursor page and the lab's SDK reference server's own",
    "NoteView": "a note as shown: the checker's model and the lab's SDK reference server's own",
    "Side": "one side of one of the lab's A/B comparisons",
}
"""Names defined in several modules with one meaning, each module its own copy on purpose."""

ONE_DEFINITION = (
    "store_error",
    "outcome_unknown",
    "serve",
    "recorded_settings",
    "observed",
    "read_fault_rows",
)
"""Module-level functions each defined once across the packages."""


def _is_type_expression(node: ast.expr) -> bool:
    """A type alias's value: a subscripted or plain type name, a union or a Literal."""
    return isinstance(node, ast.Subscript | ast.BinOp | ast.Name | ast.Attribute)


def _type_name(target: ast.expr) -> str | None:
    """The capitalised, not all-capitals, public name bound by ``target``, or None."""
    if not isinstance(target, ast.Name):
        return None
    name = target.id
    if name.startswith("_") or not name[0].isupper() or name.isupper():
        return None
    return name


def definitions() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Module-level classes and type aliases, and module-level functions: name -> modules."""
    types: dict[str, list[str]] = defaultdict(list)
    functions: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.parse(path.read_text("utf-8")).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    types[node.name].append(module)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    functions[node.name].append(module)
                elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                    name = _type_name(node.targets[0])
                    # ``X = other.X`` re-exports a name; it defines nothing.
                    rebound = isinstance(node.value, ast.Name | ast.Attribute)
                    if name is not None and _is_type_expression(node.value) and not rebound:
                        types[name].append(module)
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    name = _type_name(node.target)
                    if name is not None and _is_type_expression(node.value):
                        types[name].append(module)
    return types, functions


def homonyms(types: dict[str, list[str]]) -> list[str]:
    """Each name defined in more than one module and not listed in ``SAME_MEANING``."""
    return [
        f"{name}: {', '.join(modules)}"
        for name, modules in sorted(types.items())
        if len(modules) > 1 and name not in SAME_MEANING
    ]


def test_no_two_modules_define_a_class_or_type_alias_of_one_name() -> None:
    types, _ = definitions()
    assert types["Verdict"] == ["loadgen.check.verdict"], "the scan misses a known class"
    assert homonyms(types) == []


def test_each_listed_same_meaning_name_is_still_defined_more_than_once() -> None:
    """A stale entry in ``SAME_MEANING`` would let a future homonym of that name through."""
    types, _ = definitions()
    assert [name for name in SAME_MEANING if len(types.get(name, [])) < 2] == []


def test_the_functions_once_used_with_two_meanings_are_defined_once() -> None:
    _, functions = definitions()
    assert {name: functions[name] for name in ONE_DEFINITION if len(functions[name]) != 1} == {}


def test_a_second_definition_of_a_name_is_reported_with_its_modules() -> None:
    """The control: the check does see a homonym when one is there."""
    types, _ = definitions()
    planted = {**types, "Target": [*types["Target"], "cluster.bench.flows"]}
    assert homonyms(planted) == ["Target: loadgen.run.target, cluster.bench.flows"]
