"""What reports and ``--help`` say, and how the setup
pages look.

A ``--workers`` run keeps no per-flow samples: its latency panel shows the merged histogram's
whole-run percentiles, not "no flows". A run too short to cut in tenths says so instead of
printing one average as "first / last tenth". ``report.html`` has the "answers against the
model" table the terminal prints. Help texts name each option's purpose once, and the setup
pages carry one style sheet that their CSP allows by hash.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
import trio
from click.testing import CliRunner
from rich.console import Console
from trio.testing import MockClock

from cluster.cli import EXAMPLES, main
from loadgen import pictures
from loadgen.pictures import Bucket, render_html
from loadgen.report import print_summary
from loadgen.run.results import Results
from loadgen.tally import Tally
from nodes import setup_page

MODEL = {
    "duplicate": [
        {"answer": "accept", "legal": ["executed", "replay_executed"], "seen": {"executed": 3}}
    ],
    "expired": [{"answer": "accept", "legal": ["refusal"], "seen": {"refusal": 2}}],
}


def _texts(ax: object) -> list[str]:
    return [t.get_text() for t in ax.texts]  # type: ignore[attr-defined]


def test_a_workers_latency_panel_shows_whole_run_percentiles_not_no_flows() -> None:
    buckets = [Bucket(float(i), 40, None, None, None) for i in range(5)]  # a tally timeline
    fig, ax = plt.subplots()
    try:
        pictures._latency(ax, buckets, 1.0, {"p50": 2.5, "p99": 30.0, "max": 90.0})
        assert "no flows" not in _texts(ax)
        assert pictures.WHOLE_RUN_NOTE in _texts(ax)
        heights = sorted(line.get_ydata()[0] for line in ax.get_lines())
        assert heights == [2.5, 30.0, 90.0]
    finally:
        plt.close(fig)


def test_a_run_without_flows_still_says_no_flows() -> None:
    fig, ax = plt.subplots()
    try:
        pictures._latency(ax, [], 1.0, {"p50": 0.0, "p99": 0.0, "max": 0.0})
        assert _texts(ax) == ["no flows"]
    finally:
        plt.close(fig)


def test_a_short_run_says_its_rate_is_for_the_whole_run() -> None:
    tally = Tally(elapsed_s=1.5, loaded_s=1.5)  # under two seconds: no tenth to cut
    for end in (0.5, 1.0, 1.4):
        tally.add_flow("plain", "completed", end)
    rates = tally.tenth_rates()
    assert rates["whole_run"] is True
    results = _results(rates)
    page = render_html(results, b"")
    assert "flows/s (too short for tenths)" in page
    assert "first / last tenth" not in page
    out = StringIO()
    print_summary(results, Console(file=out, width=200))
    assert "flows/s (too short for tenths)" in out.getvalue()
    assert "first / last tenth" not in out.getvalue()


def test_a_long_run_still_shows_first_and_last_tenth() -> None:
    page = render_html(_results({"first_tenth": 10.0, "last_tenth": 9.0}), b"")
    assert "flows/s first / last tenth" in page
    assert "10.0 / 9.0" in page


def test_the_report_page_has_the_answers_against_the_model_table() -> None:
    page = render_html(_results({"first_tenth": 1.0, "last_tenth": 1.0}), b"")
    assert "<h2>Answers against the model</h2>" in page
    rows = re.findall(
        r"<tr><td>(\w+)</td><td>(\w+)</td><td>([^<]*)</td><td>([^<]*)</td></tr>", page
    )
    assert ("duplicate", "accept", "executed | replay_executed", "executed 3") in rows
    assert ("expired", "accept", "refusal", "refusal 2") in rows


def _results(tenths: dict[str, object]) -> Results:
    return Results.from_json(
        {
            "verdict": "valid",
            "invariants": [],
            "counts": {},
            "races": {},
            "model": MODEL,
            "kinds": {},
            "flows": {"total": 3, "completed": 3},
            "throughput_flows_per_s": 1.0,
            "flows_per_s_by_tenth": tenths,
            "elapsed_s": 3.0,
            "latency_ms": {"p50": 1.0, "max": 2.0},
            "settings": {"nodes": 3, "store": "embedded"},
        }
    )


def _help(*args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_group_help_has_the_examples_and_each_command_only_its_own() -> None:
    group = _help()
    for line in EXAMPLES.strip().splitlines()[2:]:
        assert line.strip() in group
    allowed = {
        "simulate": ("simulate",),
        "serve": ("serve",),
        "loadgen": ("serve", "loadgen"),  # its nodes, then the load against them
        "bench": ("bench", "bench-servers"),
        "conformance": ("serve", "conformance"),  # our demo nodes, then the pack against them
    }
    for command, names in allowed.items():
        shown = re.findall(r"^\s+notes-cluster ([\w-]+)", _help(command), re.M)
        assert shown, f"{command} --help shows no example"
        assert set(shown) <= set(names), (command, shown)
        assert len(shown) <= 4, (command, shown)  # a few relevant lines, not the whole block


def _option_help(output: str, option: str) -> str:
    line = next(line for line in output.splitlines() if line.strip().startswith(option))
    return line.split(option, 1)[1]


def test_the_sizing_options_and_check_tenants_say_what_they_do() -> None:
    for command, option in [
        ("simulate", "--nodes"),
        ("simulate", "--flows"),
        ("simulate", "--concurrency"),
        ("loadgen", "--flows"),
        ("loadgen", "--concurrency"),
        ("serve", "--nodes"),
        ("check", "--tenants"),
    ]:
        text = _option_help(_help(command), option)
        words = re.sub(r"(INTEGER RANGE|INTEGER|\[[^\]]*\])", "", text).split()
        assert len(words) >= 3, (command, option, text)


def test_failover_wait_replicas_shows_no_degenerate_range() -> None:
    text = _option_help(_help("failover-experiment"), "--wait-replicas")
    assert "1<=x<=1]" not in text
    assert text.startswith(" 1 "), text


def test_exit_codes_are_listed_in_the_group_help() -> None:
    text = _help()
    assert "4 the run could not be carried out" in text
    assert "130 Ctrl-C" in text


def test_the_setup_pages_style_is_allowed_by_its_hash_and_nothing_else() -> None:
    page = setup_page._sign_in("wrong token")
    body = page.body.decode("utf-8")
    style = re.search(r"<style>(.*?)</style>", body, re.S)
    assert style is not None
    digest = base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()
    csp = dict(page.headers)[b"content-security-policy"].decode()
    assert f"style-src 'sha256-{digest}'" in csp
    assert "default-src 'none'" in csp  # scripts, images, fonts: still refused
    assert "<html lang='en'>" in body
    assert "<label for='token'>" in body
    assert "id='token'" in body
    assert "role='alert'" in body  # the error is announced


def test_the_phases_after_the_flows_show_on_the_progress_line() -> None:
    """After the bar is full the label says what the run waits for, then what it does."""
    from cluster.commands.base import with_progress
    from loadgen.run.phases import announce

    screen = StringIO()
    terminal = Console(file=screen, force_terminal=True, width=120)

    def work(advance: Callable[[Any], None]) -> str:
        for _ in range(3):
            advance(None)
        announce("waiting 19 s for the last states to expire (then the check)")
        announce("checking the history")
        return "done"

    assert with_progress(3, work, terminal) == "done"
    shown = screen.getvalue()
    waiting = shown.index("waiting 19 s for the last states to expire (then the check)")
    assert shown.index("checking the history", waiting) > waiting
    announce("after the command")  # no listener left behind
    assert "after the command" not in screen.getvalue()


def test_the_wait_for_expiry_announces_itself_with_its_length() -> None:
    from loadgen.run.phases import listening
    from loadgen.run.pipeline import EXPIRY_SETTLE_S, settle
    from loadgen.run.target import StoreAccess

    heard: list[str] = []
    store = StoreAccess(url="redis://127.0.0.1:1/0", prefix="p", tenants=(), replay_grace_ms=2000)
    with listening(heard.append):
        trio.run(settle, store, 0, 15.0, clock=MockClock(autojump_threshold=0))
    assert heard == [
        f"waiting {15.0 + 2.0 + EXPIRY_SETTLE_S:.0f} s for the last states to expire "
        "(then the check)"
    ]


def _fake_node(tmp_path: Path, version: str) -> str:
    node = tmp_path / "node"
    node.write_text(f"#!/bin/sh\necho {version}\n", encoding="utf-8")
    node.chmod(0o755)
    return str(node)


def test_the_conformance_table_says_why_it_leaves_out_the_typescript_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster.lab.sdk_references import table
    from cluster.lab.sdk_references.references import NODE_ENV

    monkeypatch.setenv(NODE_ENV, _fake_node(tmp_path, "v20.11.1"))
    assert [c.folder for c in table.columns()] == ["ours", "python", "python-store"]
    assert table.left_out() == (
        f"The TypeScript SDK columns are left out: {tmp_path / 'node'} is Node v20.11.1, "
        "not 22 or later."
    )
    monkeypatch.delenv(NODE_ENV)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert table.left_out() == (
        f"The TypeScript SDK columns are left out: no Node 22 found (set {NODE_ENV}, "
        "or put node on PATH)."
    )

    async def no_run(redis_url: str, out_dir: Path) -> str:
        return "| the table |\n"

    monkeypatch.setattr(table, "conformance_table", no_run)
    args = ["conformance-table", "--redis", "redis://127.0.0.1:1/0", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == table.left_out()
    assert result.stdout.strip() == "| the table |"


def test_a_command_without_a_progress_bar_shows_its_phase_on_a_status_line() -> None:
    """``check --redis`` and ``simulate --workers``: the wait and the check on a status line
    (a terminal only; nothing at all otherwise)."""
    from cluster.commands.base import showing_phases
    from loadgen.run.phases import announce

    screen = StringIO()
    with showing_phases(Console(file=screen, force_terminal=True, width=120)):
        announce("waiting 9 s for the last states to expire (then the check)")
    assert "waiting 9 s for the last states to expire (then the check)" in screen.getvalue()
    piped = StringIO()
    with showing_phases(Console(file=piped, force_terminal=False)):
        announce("checking the history")
    assert piped.getvalue() == ""
