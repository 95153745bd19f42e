"""The lab's ``bench-parts`` budget: ours, ours on coredis and the HTTP server alone side by
side, with the Redis client's estimated share, metrics on ÷ off and the targets.

Layer: tests. Pure: built from a block of alternated slots (``http_scenarios.aggregate``), a
metrics switch summary (``metrics_switch.summarize`` over windows) and client rows shaped like
``redis_clients.compare_clients``', with round figures, so every derived cell is checked exactly.
The tiny real run in ``test_bench.py`` checks the same shape on measured figures.
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster.bench.http_scenarios import aggregate
from cluster.lab.metrics_switch import summarize
from cluster.lab.parts import PARTS, parts_summary, targets
from cluster.lab.parts_report import BUDGET_ROWS, parts_budget_lines, render_parts_markdown
from tests.test_bench_budget import slot, table_of

CPU = {"ours": (0.25, 0.05), "ours_coredis": (0.40, 0.05), "fixed": (0.09, 0.0)}
"""Per side: server and Redis CPU ms per flow."""
SCRIPTS = {"ours": 2.0, "ours_coredis": 2.0}
CLIENT_ROWS = [
    {"client": "coredis", "backend": "uvloop", "cpu_us_per_call": 70.0},
    {"client": "resp", "backend": "uvloop", "cpu_us_per_call": 10.0},
    {"client": "resp", "backend": "trio", "cpu_us_per_call": 14.0},
]
CLIENT_EXTRA = {"vs_coredis": 1.0, "calls": 300, "concurrency": 16, "rounds": 3}
"""What else a ``compare_clients`` row holds (section 3 prints it)."""


def window(mode: str, node_us: float, start_s: float) -> dict[str, Any]:
    """A window of the metrics switch: 1000 requests, ``node_us`` of node CPU and 25 µs of
    Redis CPU per request (two requests a flow: 0.05 ms of Redis per flow)."""
    start = int(start_s * 1e9)
    return {
        "mode": mode,
        "start_ns": start,
        "end_ns": start + 200_000_000,
        "seconds": 0.2,
        "cpu_ns": int(node_us * 1000 * 1000),
        "requests": 1000,
        "redis_ns": 25_000 * 1000,
    }


def switch_block() -> dict[str, Any]:
    """Metrics off 125 µs and on 130 µs of node CPU per request: node + Redis per flow 0.30
    and 0.31 ms, a ratio of 1.033."""
    modes = ["off", "on", "on", "off"] * 3
    windows = [window(m, 130 if m == "on" else 125, 0.2 * i) for i, m in enumerate(modes)]
    out = summarize(windows, requests_per_flow=2.0, seed=1)
    run = {"seconds": 2, "concurrency": 8, "window_ms": 200, "guard_ms": 20, "flows": 6000}
    run |= {"failed": 0, "windows_recorded": 14, "windows_kept": 12, "on_extra_us": 0.0}
    return out | run | {"served": {"off": 7000, "on": 7000}}


def parts_block(rounds: int = 2) -> dict[str, Any]:
    rows = [{side: slot(side, *CPU[side], SCRIPTS.get(side, 0.0)) for side in PARTS}] * rounds
    block: dict[str, Any] = {"rounds": rows, "slot_s": 1.0, "concurrency": 8}
    for side in PARTS:
        block[side] = aggregate([row[side] for row in rows])
    return block


def test_every_part_is_a_column_with_the_same_cells_and_the_ratios_are_read_from_them() -> None:
    out = parts_summary(parts_block(), switch_block(), CLIENT_ROWS)
    assert tuple(out["sides"]) == PARTS
    cells = {key for _, key, _ in BUDGET_ROWS}
    for column in out["sides"].values():
        assert set(column) == cells
    assert (out["concurrency"], out["slot_s"], out["rounds"]) == (8, 1.0, 2)
    ours, coredis, fixed = (out["sides"][s] for s in PARTS)
    assert ours["server_plus_redis"] == pytest.approx(0.30)
    assert coredis["vs_ours"] == pytest.approx(0.45 / 0.30, abs=1e-3)
    # The fixed replies use no Redis: their cost is their process's.
    assert fixed["redis"] is None
    assert fixed["redis_scripts_per_flow"] is None
    assert out["http_server_share_of_node"] == pytest.approx(0.09 / 0.25, abs=1e-3)
    assert out["own_client_over_coredis"] == pytest.approx(0.30 / 0.45, abs=1e-3)
    assert out["metrics_on_over_off"] == pytest.approx(0.31 / 0.30, abs=1e-3)
    assert out["metrics_on_over_off_95"] == [out["metrics_on_over_off"]] * 2  # alike pairs
    assert out["metrics_node_on_over_off"] == pytest.approx(130 / 125, abs=1e-3)
    assert targets(out) == {
        "http_server_at_most_0.2_of_node": False,  # 0.36
        "metrics_on_at_most_1.03_of_off": False,  # 1.033
        "own_client_below_coredis": True,
    }


def test_the_redis_client_estimate_is_scripts_times_its_cost_per_call_on_the_nodes_loop() -> None:
    out = parts_summary(parts_block(), switch_block(), CLIENT_ROWS)
    assert out["redis_client_backend"] == "uvloop"
    assert out["redis_client_us_per_call"] == {"coredis": 70.0, "resp": 10.0}
    ours, coredis, fixed = (out["sides"][s] for s in PARTS)
    assert (ours["redis_client"], ours["redis_client_us_per_call"]) == ("resp", 10.0)
    assert ours["redis_client_ms_per_flow"] == pytest.approx(0.020)  # 2 scripts x 10 µs
    assert ours["redis_client_share_of_server"] == pytest.approx(0.08)
    assert coredis["redis_client_ms_per_flow"] == pytest.approx(0.140)
    assert fixed["redis_client"] is None
    assert fixed["redis_client_ms_per_flow"] is None


def test_without_client_figures_the_estimate_is_left_out_not_invented() -> None:
    out = parts_summary(parts_block(), switch_block(), [])
    assert out["redis_client_us_per_call"] == {}
    assert out["sides"]["ours"]["redis_client_ms_per_flow"] is None
    assert "not measured" in "\n".join(parts_budget_lines(out))


def test_the_budget_table_puts_the_parts_side_by_side_then_the_ratios_and_their_targets() -> None:
    lines = parts_budget_lines(parts_summary(parts_block(), switch_block(), CLIENT_ROWS))
    assert lines[0] == "## The budget per flow: what one node's CPU is made of"
    table = table_of(lines)
    head, rows = table[0], table[2:]
    assert head == [
        "per completed delete flow",
        "ours",
        "ours on coredis",
        "fixed replies (HTTP server alone)",
    ]
    assert [r[0] for r in rows] == [label for label, _, _ in BUDGET_ROWS]
    by_label = {r[0]: r[1:] for r in rows}
    assert by_label["**server + Redis CPU ms**"] == ["0.300", "0.450", "0.090"]
    assert by_label["Redis client"] == ["resp", "coredis", "n/a"]
    assert by_label["its CPU µs per EVALSHA, alone"] == ["10.0", "70.0", "n/a"]
    text = "\n".join(lines)
    assert "| CPU/flow, HTTP server alone ÷ our node | 0.360 | ≤ 0.2 | **missed** |" in text
    assert "| CPU/flow, ours ÷ ours on coredis (node + Redis) | 0.667 | < 1 | met |" in text
    assert "CPU µs per EVALSHA on uvloop (section 3): coredis 70.0, resp 10.0." in text


def test_parts_md_opens_with_the_budget_then_its_three_scenarios() -> None:
    block, switch = parts_block(), switch_block()
    budget = parts_summary(block, switch, CLIENT_ROWS)
    result: dict[str, Any] = {
        "mode": "quick",
        "command": "notes-cluster bench-parts --quick --out runs/bench",
        "machine": {
            "cpus": 2,
            "python": "3.11",
            "platform": "linux",
            "redis_version": "7",
            "load_average": [0.5, 0.5, 0.5],
        },
        "scenarios": {
            "parts": block,
            "metrics_switch": switch,
            "clients": [r | CLIENT_EXTRA for r in CLIENT_ROWS],
        },
        "budget": budget,
        "targets": targets(budget),
    }
    md = render_parts_markdown(result)
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings == [
        "## The budget per flow: what one node's CPU is made of",
        "## 1. Ours, ours on coredis and the HTTP server alone",
        "## 2. Metrics on ÷ off, in one node process",
        "## 3. The Redis client alone: CPU µs per EVALSHA",
        "## Targets",
    ]
    assert "Metrics on ÷ off, node + Redis: **1.033** (95% 1.033–1.033)" in md
    assert "| own_client_below_coredis | met |" in md
