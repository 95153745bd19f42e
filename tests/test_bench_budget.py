"""The bench's budget per flow: ours beside the SDK peer, CPU of server, Redis and load client,
side by side.

Layer: tests. Pure: the budget is built from a peer block shaped like a run's
(``http_scenarios.peer_summary`` over ``aggregate``d slots), with round figures, so every derived
cell is checked exactly. The tiny real run in ``test_bench.py`` checks the same shape on
measured figures; the lab's budget (the Redis client's share, metrics on ÷ off) is
``test_lab_parts.py``'s.
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster.bench.budget import BUDGET_SIDES, budget
from cluster.bench.http_scenarios import SIDES, aggregate, peer_summary
from cluster.bench.report import BUDGET_ROWS, budget_lines, render_markdown

CPU = {
    "ours": (0.25, 0.05),
    "peer_memory": (0.90, 0.01),
    "peer_redis": (1.20, 0.06),
}
"""Per side: server and Redis CPU ms per flow."""
SCRIPTS = {"ours": 2.0, "peer_redis": 2.0}


def slot(side: str, server: float, redis: float, scripts: float) -> dict[str, Any]:
    """One slot of one side: 1000 flows in a second, round latencies and CPU."""
    return {
        "label": side,
        "flows": 1000,
        "failed": 0,
        "elapsed_s": 1.0,
        "flows_per_s": 1000.0,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "max_ms": 3.0,
        "latency": "per request (a flow is two)",
        "first_error": None,
        "cpu_ms_per_flow": {"bench_process": 0.0, "client": 0.1, "servers": server, "redis": redis},
        "redis_scripts_per_flow": scripts,
    }


def peer_block(rounds: int = 2) -> dict[str, Any]:
    rows = [{side: slot(side, *CPU[side], SCRIPTS.get(side, 0.0)) for side in SIDES}] * rounds
    block: dict[str, Any] = {"rounds": rows, "slot_s": 1.0, "concurrency": 8}
    for side in SIDES:
        block[side] = aggregate([row[side] for row in rows])
    return peer_summary(block)


def test_the_budget_has_every_side_as_a_column_with_the_same_cells() -> None:
    out = budget(peer_block())
    assert out is not None
    assert tuple(out["sides"]) == BUDGET_SIDES == SIDES
    cells = {key for _, key, _ in BUDGET_ROWS}
    for column in out["sides"].values():
        assert set(column) == cells
    assert (out["concurrency"], out["slot_s"], out["rounds"]) == (8, 1.0, 2)


def test_server_plus_redis_and_the_ratio_to_the_peer_in_memory() -> None:
    out = budget(peer_block())
    assert out is not None
    ours, memory, red = (out["sides"][s] for s in SIDES)
    assert ours["server_plus_redis"] == pytest.approx(0.30)
    # The peer in memory uses no Redis: its cost is its process's.
    assert memory["redis"] is None
    assert memory["redis_scripts_per_flow"] is None
    assert memory["server_plus_redis"] == pytest.approx(0.90)
    assert red["server_plus_redis"] == pytest.approx(1.26)
    assert ours["vs_peer_memory"] == pytest.approx(0.30 / 0.90, abs=1e-3)
    assert memory["vs_peer_memory"] == 1.0


def test_without_the_peer_there_is_no_budget_and_the_report_says_so() -> None:
    assert budget(None) is None
    assert budget_lines(None)[2] == "Skipped in this run (no SDK peer scenario)."


def table_of(lines: list[str]) -> list[list[str]]:
    """The first markdown table in ``lines``, as cells."""
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_budget_table_puts_the_sides_side_by_side_one_row_per_figure() -> None:
    lines = budget_lines(budget(peer_block()))
    assert lines[0] == "## The budget per flow: ours beside the SDK peer"
    table = table_of(lines)
    head, rule, rows = table[0], table[1], table[2:]
    assert head == ["per completed delete flow", "ours", "SDK peer in memory", "SDK peer on Redis"]
    assert len(rule) == len(head)
    assert [r[0] for r in rows] == [label for label, _, _ in BUDGET_ROWS]
    assert all(len(r) == len(head) for r in rows)
    by_label = {r[0]: r[1:] for r in rows}
    assert by_label["**server + Redis CPU ms**"] == ["0.300", "0.900", "1.260"]
    assert by_label["Redis CPU ms"] == ["0.050", "n/a", "0.060"]
    assert "`notes-cluster bench-parts`" in "\n".join(lines)


def test_bench_md_opens_with_the_budget() -> None:
    peer = peer_block()
    result: dict[str, Any] = {
        "mode": "quick",
        "command": "notes-cluster bench --quick --out runs/bench",
        "machine": {"cpus": 2, "python": "3.11", "platform": "linux", "redis_version": "7"},
        "settings": {"seconds_per_point": 3.0},
        "scenarios": {
            "flows": {"points": []},
            "ceiling": {"points": [], "fractions": [], "target": 0.35, "redis_benchmark": None},
            "peer": peer,
            "budget": budget(peer),
            "sizes": None,
            "steady": None,
        },
        "targets": {},
    }
    md = render_markdown(result)
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings[0] == "## The budget per flow: ours beside the SDK peer"
    assert headings[1].startswith("## 1.")
