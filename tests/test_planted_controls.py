"""Every planted-violation test is paired with its unplanted control.

Layer: tests. A test that plants a violation and asserts the checker calls it INVALID proves
something only if the same story without the plant is VALID: otherwise it would pass when the
story builder, not the plant, broke an invariant. Such a test carries
``@pytest.mark.planted(control="test_name")``, naming a test of the same module that runs the
story unplanted and asserts it valid. A test that asserts the unplanted run valid itself before
planting (a run folder checked, then edited) names itself.

This test reads every test module (``ast``, nothing imported or run) and lists the planted tests
with their controls. It fails when a test asserts an invalid verdict (``== "invalid"`` or
``EXIT_INVALID``, in its body or in a helper of its module it calls) without the marker, or when
a marker names no control, a name that is not a test of its module, a control that is itself
planted, or itself without asserting a valid verdict.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent
INVALID_WORDS = ("invalid", "EXIT_INVALID")
VALID_WORDS = ("valid", "EXIT_VALID")

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Planted:
    """One planted-violation test and the control its marker names (None: no marker)."""

    module: str
    name: str
    control: str | None


def _compares_to(node: ast.AST, words: tuple[str, ...]) -> bool:
    """True when ``node`` holds an ``==`` comparison with one of ``words`` (a string literal or
    a name) on either side."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Compare) or not any(isinstance(o, ast.Eq) for o in sub.ops):
            continue
        for side in (sub.left, *sub.comparators):
            if isinstance(side, ast.Constant) and side.value in words:
                return True
            if isinstance(side, ast.Name) and side.id in words:
                return True
    return False


def _called_names(node: ast.AST) -> set[str]:
    return {
        sub.func.id
        for sub in ast.walk(node)
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
    }


def _planted_control(fn: Function) -> tuple[bool, str | None]:
    """(has a ``planted`` marker, the control it names)."""
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr == "planted":
            if isinstance(deco, ast.Call):
                for kw in deco.keywords:
                    if kw.arg == "control" and isinstance(kw.value, ast.Constant):
                        return True, str(kw.value.value)
            return True, None
    return False, None


def _asserts(fn: Function, helpers: dict[str, Function], words: tuple[str, ...]) -> bool:
    """``fn``, or a module-level helper it calls by name, compares a verdict to ``words``."""
    if _compares_to(fn, words):
        return True
    return any(_compares_to(helpers[name], words) for name in _called_names(fn) if name in helpers)


def module_problems(path: Path) -> tuple[list[Planted], list[str]]:
    """The planted tests of one module, and what is wrong with their pairing."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    functions = {
        n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    tests = {k: v for k, v in functions.items() if k.startswith("test_")}
    helpers = {k: v for k, v in functions.items() if not k.startswith("test_")}
    planted: list[Planted] = []
    problems: list[str] = []
    marked = {name for name, fn in tests.items() if _planted_control(fn)[0]}
    for name, fn in tests.items():
        has_marker, control = _planted_control(fn)
        asserts_invalid = _asserts(fn, helpers, INVALID_WORDS)
        if not has_marker and not asserts_invalid:
            continue
        where = f"{path.name}::{name}"
        planted.append(Planted(path.name, name, control))
        if not has_marker:
            problems.append(f"{where} asserts an invalid verdict but is not marked planted")
        elif control is None:
            problems.append(f"{where} is marked planted without control=")
        elif control == name:
            if not _asserts(fn, helpers, VALID_WORDS):
                problems.append(f"{where} names itself its control but asserts nothing valid")
        elif control not in tests:
            problems.append(f"{where}: its control {control} is not a test of {path.name}")
        elif control in marked:
            problems.append(f"{where}: its control {control} is itself planted")
        elif not _asserts(tests[control], helpers, VALID_WORDS):
            problems.append(f"{where}: its control {control} asserts nothing valid")
    return planted, problems


def test_every_planted_violation_test_names_an_unplanted_control() -> None:
    planted: list[Planted] = []
    problems: list[str] = []
    for path in sorted(TESTS.glob("test_*.py")):
        found, wrong = module_problems(path)
        planted += found
        problems += wrong
    for p in planted:
        print(f"{p.module}::{p.name}  <- control: {p.control}")
    assert len(planted) >= 30  # the scan still finds them (it would pass on finding none)
    assert problems == []


def test_the_scan_flags_an_unmarked_plant_and_a_control_that_is_missing_or_planted(
    tmp_path: Path,
) -> None:
    source = """
import pytest

def invalid(result):
    return {v.name for v in result.verdicts if v.status == "invalid"}

def test_clean():
    assert run().status == "valid"

def test_unmarked():
    assert invalid(run()) == {"x"}

@pytest.mark.planted(control="test_nowhere")
def test_missing_control():
    assert run().status == "invalid"

@pytest.mark.planted(control="test_clean")
def test_paired():
    assert run().status == "invalid"

@pytest.mark.planted(control="test_paired")
def test_control_is_planted():
    assert run().status == "invalid"

@pytest.mark.planted(control="test_itself")
def test_itself():
    assert run().status == "invalid"
"""
    path = tmp_path / "test_sample.py"
    path.write_text(source, encoding="utf-8")
    planted, problems = module_problems(path)
    assert [p.name for p in planted] == [
        "test_unmarked",
        "test_missing_control",
        "test_paired",
        "test_control_is_planted",
        "test_itself",
    ]
    assert problems == [
        "test_sample.py::test_unmarked asserts an invalid verdict but is not marked planted",
        "test_sample.py::test_missing_control: its control test_nowhere is not a test of "
        "test_sample.py",
        "test_sample.py::test_control_is_planted: its control test_paired is itself planted",
        "test_sample.py::test_itself names itself its control but asserts nothing valid",
    ]
