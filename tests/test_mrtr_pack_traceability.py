"""The pack's traceability: every check points at the requirement it tests, the spec's
single-use MUST comes first, and ``notes-cluster conformance --traceability`` prints it.

Layer: tests. Pure: reads the shipped YAML and renders a report table.
"""

from __future__ import annotations

import yaml
from click.testing import CliRunner

from cluster.cli import main
from loadgen.mrtr_pack.checks import Check, markdown
from loadgen.mrtr_pack.scenarios import CONTROL, SCENARIOS
from loadgen.mrtr_pack.traceability import requirement_of, requirements, text

CHECK_IDS = [CONTROL.id, *(s.id for s in SCENARIOS)]
SINGLE_USE = (
    "Servers for which a given requestState must be consumed at most once MUST enforce that "
    "invariant server-side."
)


def test_every_check_tests_exactly_one_requirement_and_every_named_check_exists() -> None:
    assert len(CHECK_IDS) == 16
    named = [cid for entry in requirements() for cid in entry.get("checks", ())]
    assert sorted(named) == sorted(CHECK_IDS), "each check once, and no unknown check"
    for entry in requirements():
        assert entry["text"].strip()
        assert bool(entry.get("checks")) != bool(entry.get("excluded")), entry


def test_the_single_use_must_is_the_first_requirement_with_the_replay_checks() -> None:
    first = requirements()[0]
    assert first["text"] == SINGLE_USE
    assert {"mrtr-replay-other-instance", "mrtr-concurrent-duplicates"} <= set(first["checks"])
    assert requirement_of("mrtr-lost-response-retry") == SINGLE_USE


def test_the_file_is_in_the_suites_sep_format() -> None:
    raw = yaml.safe_load(text())
    assert raw["sep"] == 2322
    assert raw["spec_url"].startswith("https://modelcontextprotocol.io/specification/2026-07-28/")
    assert all("text" in entry for entry in raw["requirements"])


def test_the_report_table_names_each_checks_requirement() -> None:
    table = markdown([Check("mrtr-tampered-state", "Tampered", "d", "SUCCESS")], ["u"])
    assert "| Check | Requirement | Status | Seen |" in table
    assert "MUST protect its integrity" in table


def test_conformance_traceability_prints_the_file_and_needs_no_target() -> None:
    out = CliRunner().invoke(main, ["conformance", "--traceability"])
    assert out.exit_code == 0, out.output
    assert out.output == text()
    assert SINGLE_USE in out.output
    missing = CliRunner().invoke(main, ["conformance"])
    assert missing.exit_code == 2
    assert "--target" in missing.output
