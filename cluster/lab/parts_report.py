"""``parts.md``: a ``bench-parts`` result as markdown, the budget per flow first.

Layer: cluster (the lab). Pure module: formats a ``parts.run_bench_parts`` result, no I/O; the
cells and tables are the bench's (``cluster.bench.report``).
"""

from __future__ import annotations

from typing import Any

from cluster.bench.report import cell, markdown_table, targets_lines, verdict_cell

PART_COLUMNS = {
    "ours": "ours",
    "ours_coredis": "ours on coredis",
    "fixed": "fixed replies (HTTP server alone)",
}

BUDGET_ROWS = (
    ("flows/s", "flows_per_s", 1),
    ("server process CPU ms", "server", 3),
    ("Redis CPU ms", "redis", 3),
    ("**server + Redis CPU ms**", "server_plus_redis", 3),
    ("server + Redis ÷ ours", "vs_ours", 3),
    ("load client CPU ms (wrk)", "load_client", 3),
    ("Redis scripts run", "redis_scripts_per_flow", 2),
    ("Redis client", "redis_client", 0),
    ("its CPU µs per EVALSHA, alone", "redis_client_us_per_call", 1),
    ("≈ its CPU ms (scripts × µs per call)", "redis_client_ms_per_flow", 3),
    ("≈ its share of the server process", "redis_client_share_of_server", 3),
)
"""The budget table's rows: label, key of a side's column, digits."""

RATIOS = (
    ("CPU/flow, HTTP server alone ÷ our node", "http_server_share_of_node", "≤ 0.2"),
    ("CPU/flow, metrics on ÷ off (one process, node + Redis)", "metrics_on_over_off", "≤ 1.03"),
    ("CPU/flow, ours ÷ ours on coredis (node + Redis)", "own_client_over_coredis", "< 1"),
)
BOUNDS = {"≤ 0.2": 0.2, "≤ 1.03": 1.03, "< 1": 0.999}


def parts_budget_lines(budget: dict[str, Any]) -> list[str]:
    """The budget per flow of each side, then the ratios against their targets."""
    sides = budget["sides"]
    head = ["per completed delete flow", *(PART_COLUMNS[side] for side in sides)]
    rows = [
        [label, *(cell(column[key], digits) for column in sides.values())]
        for label, key, digits in BUDGET_ROWS
    ]
    ratios = [
        [name, cell(budget[key], 3), target, verdict_cell(_below(budget[key], BOUNDS[target]))]
        for name, key, target in RATIOS
    ]
    alone = ", ".join(
        f"{client} {cell(us)}" for client, us in budget["redis_client_us_per_call"].items()
    )
    return [
        "## The budget per flow: what one node's CPU is made of",
        "",
        f"HTTP, one process each, c{budget['concurrency']}: each column sums its "
        f"{budget['rounds']} alternated slots of {budget['slot_s']:g} s in this run (section 1 "
        "has every slot). n/a: the side uses no Redis, or no client of ours.",
        "",
        *markdown_table(head, rows),
        *markdown_table(["ratio (this run)", "value", "target", "verdict"], ratios),
        f"The Redis client alone, CPU µs per EVALSHA on {budget['redis_client_backend']} "
        f"(section 3): {alone or 'not measured'}.",
        "",
    ]


def _below(value: float | None, bound: float) -> bool | None:
    return None if value is None else value <= bound


def parts_lines(block: dict[str, Any]) -> list[str]:
    """Scenario 1: every slot, then each side's slots as one."""
    rows = [_row(p["label"], p) for r in block["rounds"] for p in r.values()]
    rows += [_row(f"**{PART_COLUMNS[side]}, all rounds**", block[side]) for side in PART_COLUMNS]
    head = ["server", "flows/s", "p50 ms/req", "p99 ms/req", "server CPU ms/flow"]
    head += ["redis CPU ms/flow", "client CPU ms/flow"]
    return [
        "## 1. Ours, ours on coredis and the HTTP server alone",
        "",
        f"They alternate in {len(block['rounds'])} rounds of {block['slot_s']:g} s slots at "
        f"c{block['concurrency']} (in turn first, then in reverse order, ...), under the "
        "bench's wrk client.",
        "",
        *markdown_table(head, rows),
    ]


def _row(label: str, p: dict[str, Any]) -> list[str]:
    cpu = p["cpu_ms_per_flow"]
    return [
        label,
        cell(p["flows_per_s"]),
        cell(p["p50_ms"], 2),
        cell(p["p99_ms"], 2),
        cell(cpu["servers"], 3),
        cell(cpu["redis"], 3),
        cell(cpu["client"], 3),
    ]


def switch_lines(switch: dict[str, Any]) -> list[str]:
    """Metrics on ÷ off, one node process switching between the two (``metrics_switch``)."""
    modes = switch["modes"]
    rows = [
        [
            f"metrics {mode}",
            str(m["windows"]),
            cell(m["flows_per_s"]),
            cell(m["node_ms_per_flow"], 4),
            cell(m["redis_ms_per_flow"], 4),
        ]
        for mode, m in modes.items()
    ]
    total, node = switch["ratio_node_plus_redis_95"], switch["ratio_node_95"]
    return [
        "## 2. Metrics on ÷ off, in one node process",
        "",
        f"One node process serves the same node built twice, metrics off and on, and switches "
        f"between them every {switch['window_ms']} ms (off, on, on, off, ...; the first "
        f"{switch['guard_ms']} ms after a switch are not counted) for {switch['seconds']:g} s at "
        f"c{switch['concurrency']}; each window reads the process's CPU clock and Redis' "
        f"({switch['windows_kept']} windows inside the run, {switch['pairs']} pairs of "
        f"neighbours; {switch['flows']} flows, {switch['failed']} failed).",
        "",
        *markdown_table(
            ["mode", "windows", "flows/s", "node CPU ms/flow", "redis CPU ms/flow"], rows
        ),
        f"Metrics on ÷ off, node + Redis: **{cell(switch['ratio_node_plus_redis'], 3)}** (95% "
        f"{cell(total[0], 3)}–{cell(total[1], 3)}); node alone {cell(switch['ratio_node'], 3)} "
        f"(95% {cell(node[0], 3)}–{cell(node[1], 3)}). The intervals resample the pairs.",
        "",
    ]


def clients_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The Redis client alone (``redis_clients.compare_clients``)."""
    if not rows:
        return ["## 3. The Redis client alone", "", "Not measured in this run.", ""]
    first = rows[0]
    table = [
        [r["client"], r["backend"], cell(r["cpu_us_per_call"]), cell(r["vs_coredis"], 3)]
        for r in rows
    ]
    return [
        "## 3. The Redis client alone: CPU µs per EVALSHA",
        "",
        f"{first['calls']} calls of one script (5 keys, 15 arguments) from {first['concurrency']} "
        f"tasks, median of {first['rounds']} alternated rounds; CPU of the calling process, every "
        "thread (cluster/lab/redis_clients.py).",
        "",
        *markdown_table(["client", "event loop", "CPU µs/call", "÷ coredis"], table),
    ]


def render_parts_markdown(result: dict[str, Any]) -> str:
    """The whole ``parts.md``."""
    m, sc = result["machine"], result["scenarios"]
    lines = [
        f"# notes-cluster bench-parts ({result['mode']})",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {m['cpus']} CPUs, Python {m['python']}, Redis {m['redis_version']}, "
        f"{m['platform']}, load average {m['load_average']}; run took "
        f"{result.get('elapsed_s', 'n/a')} s. Only ratios within this one run are meaningful: "
        "the machine is shared and noisy.",
        "",
        *parts_budget_lines(result["budget"]),
        *parts_lines(sc["parts"]),
        *switch_lines(sc["metrics_switch"]),
        *clients_lines(sc["clients"]),
        *targets_lines(result["targets"]),
    ]
    return "\n".join(lines)
