"""The bench's budget per flow: ours beside the SDK peer, CPU of server, Redis and
load client, metrics on ÷ off, and the Redis client's µs per call, side by side.

Layer: tests. Pure: the budget is built from a peer block and client rows shaped like a run's
(``http_scenarios.peer_summary`` over ``aggregate``d slots; ``redis_clients.compare_clients``),
with round figures, so every derived cell is checked exactly. The tiny real run in
``test_bench.py`` checks the same shape on measured figures.
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster.bench.budget import BUDGET_SIDES, budget
from cluster.bench.http_scenarios import SIDES, aggregate, peer_summary
from cluster.bench.metrics_switch import summarize
from cluster.bench.report import BUDGET_ROWS, budget_lines, render_markdown

CPU = {
    "ours": (0.25, 0.05),
    "ours_coredis": (0.40, 0.05),
    "peer_memory": (0.90, 0.01),
    "peer_redis": (1.20, 0.06),
    "fixed": (0.09, 0.0),
}
"""Per side: server and Redis CPU ms per flow."""
SCRIPTS = {"ours": 2.0, "ours_coredis": 2.0, "peer_redis": 2.0}
CLIENT_ROWS = [
    {"client": "coredis", "backend": "uvloop", "cpu_us_per_call": 70.0},
    {"client": "resp", "backend": "uvloop", "cpu_us_per_call": 10.0},
    {"client": "resp", "backend": "trio", "cpu_us_per_call": 14.0},
]
CLIENT_EXTRA = {"vs_coredis": 1.0, "calls": 300, "concurrency": 16, "rounds": 3}
"""What else a ``compare_clients`` row holds (section 6 prints it)."""


def slot(side: str) -> dict[str, Any]:
    server, redis = CPU[side]
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
        "redis_scripts_per_flow": SCRIPTS.get(side, 0.0),
    }


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


def peer_block(rounds: int = 2) -> dict[str, Any]:
    rows = [{side: slot(side) for side in SIDES} for _ in range(rounds)]
    block: dict[str, Any] = {"rounds": rows, "slot_s": 1.0, "concurrency": 8}
    for side in SIDES:
        block[side] = aggregate([row[side] for row in rows])
    return peer_summary(block, switch_block())


def test_the_budget_has_every_side_as_a_column_with_the_same_cells() -> None:
    out = budget(peer_block(), CLIENT_ROWS)
    assert out is not None
    assert tuple(out["sides"]) == BUDGET_SIDES == SIDES
    cells = {key for _, key, _ in BUDGET_ROWS}
    for column in out["sides"].values():
        assert set(column) == cells
    assert (out["concurrency"], out["slot_s"], out["rounds"]) == (8, 1.0, 2)
    assert out["redis_client_backend"] == "uvloop"
    assert out["redis_client_us_per_call"] == {"coredis": 70.0, "resp": 10.0}


def test_server_plus_redis_and_the_ratio_to_the_peer_in_memory() -> None:
    out = budget(peer_block(), CLIENT_ROWS)
    assert out is not None
    ours, memory, fixed = (out["sides"][s] for s in ("ours", "peer_memory", "fixed"))
    assert ours["server_plus_redis"] == pytest.approx(0.30)
    # The peer in memory and the fixed replies use no Redis: their cost is their process's.
    assert memory["redis"] is None
    assert memory["server_plus_redis"] == pytest.approx(0.90)
    assert fixed["redis_scripts_per_flow"] is None
    assert ours["vs_peer_memory"] == pytest.approx(0.30 / 0.90, abs=1e-3)
    assert memory["vs_peer_memory"] == 1.0
    assert out["metrics_on_over_off"] == pytest.approx(0.31 / 0.30, abs=1e-3)
    assert out["metrics_on_over_off_95"] == [out["metrics_on_over_off"]] * 2  # alike pairs
    assert out["metrics_node_on_over_off"] == pytest.approx(130 / 125, abs=1e-3)


def test_the_redis_client_estimate_is_scripts_times_its_cost_per_call_on_the_nodes_loop() -> None:
    out = budget(peer_block(), CLIENT_ROWS)
    assert out is not None
    ours, coredis, peer = (out["sides"][s] for s in ("ours", "ours_coredis", "peer_redis"))
    assert (ours["redis_client"], ours["redis_client_us_per_call"]) == ("resp", 10.0)
    assert ours["redis_client_ms_per_flow"] == pytest.approx(0.020)  # 2 scripts x 10 µs
    assert ours["redis_client_share_of_server"] == pytest.approx(0.08)
    assert coredis["redis_client_ms_per_flow"] == pytest.approx(0.140)
    # The SDK peer's client is not one we choose: no estimate, said as n/a.
    assert peer["redis_client"] is None
    assert peer["redis_client_ms_per_flow"] is None


def test_without_the_client_scenario_the_estimate_is_left_out_not_invented() -> None:
    out = budget(peer_block(), None)
    assert out is not None
    assert out["redis_client_us_per_call"] == {}
    assert out["sides"]["ours"]["redis_client_ms_per_flow"] is None
    assert "not measured" in "\n".join(budget_lines(out))


def test_without_the_peer_there_is_no_budget_and_the_report_says_so() -> None:
    assert budget(None, CLIENT_ROWS) is None
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
    out = budget(peer_block(), CLIENT_ROWS)
    lines = budget_lines(out)
    assert lines[0] == "## The budget per flow: ours beside the SDK peer"
    table = table_of(lines)
    head, rule, rows = table[0], table[1], table[2:]
    assert head == [
        "per completed delete flow",
        "ours",
        "ours on coredis",
        "SDK peer in memory",
        "SDK peer on Redis",
        "fixed replies",
    ]
    assert len(rule) == len(head)
    assert [r[0] for r in rows] == [label for label, _, _ in BUDGET_ROWS]
    assert all(len(r) == len(head) for r in rows)
    by_label = {r[0]: r[1:] for r in rows}
    assert by_label["**server + Redis CPU ms**"][:3] == ["0.300", "0.450", "0.900"]
    assert by_label["Redis client"][:3] == ["resp", "coredis", "n/a"]
    assert by_label["its CPU µs per EVALSHA, alone"][:2] == ["10.0", "70.0"]
    text = "\n".join(lines)
    metrics = "Metrics on ÷ off (server + Redis, one process switching: section 3): 1.033, 95%"
    assert f"{metrics} 1.033–1.033 (target ≤ 1.03: **missed**)." in text
    assert "CPU µs per EVALSHA on uvloop (section 6): coredis 70.0, resp 10.0." in text


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
            "clients": [r | CLIENT_EXTRA for r in CLIENT_ROWS],
            "budget": budget(peer, CLIENT_ROWS),
            "sizes": None,
            "steady": None,
        },
        "targets": {},
    }
    md = render_markdown(result)
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings[0] == "## The budget per flow: ours beside the SDK peer"
    assert headings[1].startswith("## 1.")
