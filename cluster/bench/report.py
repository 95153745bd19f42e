"""``bench.md``: the benchmark's JSON as one markdown table per scenario, ratios included.

Layer: cluster (the bench). Pure module: formats a ``run_bench`` result, no I/O.
"""

from __future__ import annotations

from typing import Any


def cell(value: object, digits: int = 1) -> str:
    """A figure as a table cell: ``digits`` decimals for a float, "n/a" for none."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def verdict_cell(met: bool | None) -> str:
    """A target's verdict as a table cell."""
    return {True: "met", False: "**missed**", None: "not measured"}[met]


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table of ``rows`` under ``header``, and a blank line."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]


def _flows(points: list[dict[str, Any]]) -> list[str]:
    rows = []
    for p in points:
        cpu = p["cpu_ms_per_flow"]
        server = cpu["servers"] + cpu["redis"] if p["transport"] == "http" else None
        rows.append(
            [
                "in-process" if p["transport"] == "inprocess" else "HTTP (node processes)",
                p["store"],
                str(p["nodes"]),
                str(p["concurrency"]),
                cell(p["flows_per_s"]),
                cell(p["p50_ms"], 2),
                cell(p["p99_ms"], 2),
                str(p["failed"]),
                cell(None if server is None else cpu["servers"], 3),
                cell(None if server is None else cpu["redis"], 3),
                cell(cpu["client"], 3),
            ]
        )
    head = ["transport", "store", "nodes", "conc.", "flows/s", "p50 ms", "p99 ms", "failed"]
    head += ["node CPU ms/flow", "redis CPU ms/flow", "client CPU ms/flow"]
    return [
        "## 1. Completed delete flows (round 1 + round 2, a fresh note each)",
        "",
        *markdown_table(head, rows),
        "In-process, the bench process runs the client and the nodes (and the embedded store), "
        "so the client column is theirs together. Over HTTP the client is wrk (a Lua flow "
        "script, pinned off the servers' core where there are two or more) and p50/p99 are per "
        "request: a flow is two.",
        "",
    ]


def _ceiling(section: dict[str, Any]) -> list[str]:
    rows = []
    by_c = {f["concurrency"]: f for f in section["fractions"]}
    for p in section["points"]:
        f = by_c.get(p["concurrency"], {})
        rows.append(
            [
                str(p["concurrency"]),
                cell(p["flows_per_s"]),
                cell(p["p50_ms"], 2),
                cell(f.get("cluster_flows_per_s")),
                cell(f.get("cluster_nodes")),
                cell(f.get("fraction"), 3),
            ]
        )
    head = ["conc.", "raw scripts flows/s", "p50 ms", "cluster in-process (redis) flows/s"]
    head += ["its nodes", f"fraction (target ≥ {section['target']})"]
    out = [
        "## 2. The store's ceiling",
        "",
        "Per flow: the `read_notes` script for the title, then the `confirm` script, through "
        "`NoteStore` (coredis), no MCP layer; the cluster figure is the best in-process real-Redis "
        "point at the same concurrency.",
        "",
        *markdown_table(head, rows),
    ]
    rb = section.get("redis_benchmark")
    if rb:
        out += [
            f"`redis-benchmark` EVALSHA `read_notes` (c{rb['concurrency']}, {rb['requests']} "
            f"requests): {cell(rb['rps'])} scripts/s, p50 {cell(rb['p50_ms'], 3)} ms "
            "(a C client; a flow needs two scripts).",
            "",
        ]
    return out


_SIDES = {
    "ours": "**ours, all rounds**",
    "peer_memory": "**SDK peer in memory, all rounds**",
    "peer_redis": "**SDK peer on Redis, all rounds**",
}


def _name(side: str) -> str:
    return _SIDES[side].strip("*").removesuffix(", all rounds")


def _peer_row(label: str, p: dict[str, Any]) -> list[str]:
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


def _peer(peer: dict[str, Any] | None) -> list[str]:
    if peer is None:
        return ["## 3. The SDK peer", "", "Skipped in this run.", ""]
    rows = [_peer_row(p["label"], p) for r in peer["rounds"] for p in r.values()]
    rows += [_peer_row(label, peer[side]) for side, label in _SIDES.items()]
    head = ["server", "flows/s", "p50 ms/req", "p99 ms/req", "server CPU ms/flow"]
    head += ["redis CPU ms/flow", "client CPU ms/flow"]
    ratios = [
        ("ours flows/s ÷ peer in memory", "throughput_ratio_vs_peer_memory", "≥ 2 (aim 3)", 2.0),
        ("ours flows/s ÷ peer on Redis", "throughput_ratio_vs_peer_redis", "≥ 2", 2.0),
        ("CPU/flow, ours node + redis ÷ peer in memory", "cpu_ratio_vs_peer_memory", "≤ 1/3", 0),
        ("CPU/flow, ours ÷ peer on Redis (both + redis)", "cpu_ratio_vs_peer_redis", "≤ 1/3", 0),
    ]
    bounds = {"≤ 1/3": 1 / 3}
    table = [
        [
            name,
            cell(peer.get(key), 3),
            target,
            verdict_cell(_ge(peer.get(key), low) if low else _le(peer.get(key), bounds[target])),
        ]
        for name, key, target, low in ratios
    ]
    servers = peer["servers"]
    return [
        "## 3. The official MCP Python SDK as peer (same flow, same client, same concurrency)",
        "",
        *[
            f"- {_SIDES[k].strip('*').removesuffix(', all rounds')}: {v}"
            for k, v in servers.items()
        ],
        "",
        f"They alternate in {len(peer['rounds'])} rounds of {peer['slot_s']:g} s slots at "
        f"c{peer['concurrency']} (in turn first, then in reverse order, ...).",
        "",
        *markdown_table(head, rows),
        *markdown_table(["ratio (this run)", "value", "target", "verdict"], table),
        "CPU from /proc utime+stime before and after each slot (wrk's from its own resource "
        "usage). redis-server serves every client on this machine, so its share is only as "
        "clean as the machine is quiet.",
        "",
    ]


BUDGET_ROWS = (
    ("flows/s", "flows_per_s", 1),
    ("server process CPU ms (our node; the SDK's process)", "server", 3),
    ("Redis CPU ms", "redis", 3),
    ("**server + Redis CPU ms**", "server_plus_redis", 3),
    ("server + Redis ÷ SDK peer in memory", "vs_peer_memory", 3),
    ("load client CPU ms (wrk)", "load_client", 3),
    ("Redis scripts run", "redis_scripts_per_flow", 2),
)
"""The budget table's rows: label, key of a side's column, digits."""


def budget_lines(section: dict[str, Any] | None) -> list[str]:
    """The budget per flow, side by side (``budget.budget``)."""
    title = "## The budget per flow: ours beside the SDK peer"
    if section is None:
        return [title, "", "Skipped in this run (no SDK peer scenario).", ""]
    sides = section["sides"]
    head = ["per completed delete flow", *(_name(side) for side in sides)]
    rows = [
        [label, *(cell(column[key], digits) for column in sides.values())]
        for label, key, digits in BUDGET_ROWS
    ]
    return [
        title,
        "",
        f"HTTP, one process each, c{section['concurrency']}: each column sums its "
        f"{section['rounds']} alternated slots of {section['slot_s']:g} s in this run (section 3 "
        "has every slot). n/a: the side uses no Redis.",
        "",
        *markdown_table(head, rows),
        "What our node's CPU is made of (the HTTP server alone, the Redis client alone, metrics "
        "on ÷ off) is the lab's `notes-cluster bench-parts`.",
        "",
    ]


def _ge(value: float | None, bound: float) -> bool | None:
    return None if value is None else value >= bound


def _le(value: float | None, bound: float) -> bool | None:
    return None if value is None else value <= bound


def _sizes(section: dict[str, Any] | None) -> list[str]:
    if section is None:
        return ["## 4. Cost per flow by stored notes", "", "Skipped in this run.", ""]
    rows = [
        [
            f"{p['stored_notes']:,}",
            str(p["keys"]),
            cell(p["redis_used_memory_mb"]),
            cell(p["flows_per_s"]),
            cell(p["p50_ms"], 2),
            cell(p["p99_ms"], 2),
            cell(p["cpu_ms_per_flow"]["redis"], 3),
        ]
        for p in section["points"]
    ]
    head = ["stored notes", "keys", "redis MB", "flows/s", "p50 ms", "p99 ms", "redis CPU ms/flow"]
    first = section["points"][0]
    return [
        "## 4. Cost per flow by stored notes (in-process, real Redis, "
        f"{first['nodes']} nodes, c{first['concurrency']})",
        "",
        *markdown_table(head, rows),
        f"Largest ÷ smallest: flows/s × {cell(section['flows_ratio_largest_to_smallest'], 2)}, "
        f"p50 × {cell(section['p50_ratio_largest_to_smallest'], 2)}.",
        "",
    ]


def _steady(section: dict[str, Any] | None) -> list[str]:
    if section is None:
        return ["## 5. Steady state", "", "Skipped in this run.", ""]
    row = [
        f"{section['flows']:,}",
        f"{section['completed']:,}",
        section["verdict"].upper(),
        cell(section["first_tenth_flows_per_s"]),
        cell(section["last_tenth_flows_per_s"]),
        cell(section["last_over_first"], 3),
    ]
    head = ["flows", "completed", "verdict", "flows/s first tenth", "flows/s last tenth"]
    head += ["last ÷ first (target ≥ 0.8)"]
    return [
        "## 5. Steady state (the race workload, in-process nodes on real Redis, "
        f"c{section['concurrency']}, seed {section['seed']})",
        "",
        *markdown_table(head, [row]),
        "Each flow works on a title of its own and cleans up after itself, so the cost per flow "
        "must stay flat as the run goes on: flows/s in the last tenth of the run against the "
        f"first tenth, both measured within this one run ({cell(section['elapsed_s'])} s).",
        "",
    ]


def _deterministic(side: dict[str, Any] | None) -> list[str]:
    """Deterministic simulation against today's, side by side."""
    if not side:
        return []
    rows = [
        [
            name,
            side[key]["verdict"].upper(),
            str(side[key]["completed"]),
            f"{side[key]['flows_per_cpu_s']:g}",
            f"{side[key]['flows_per_wall_s']:g}",
        ]
        for name, key in (("simulate", "simulate"), ("simulate --deterministic", "deterministic"))
    ]
    return [
        f"## Deterministic simulation ({side['flows']} flows, seed {side['seed']}, embedded)",
        "",
        *markdown_table(["run", "verdict", "flows", "flows/s per core", "flows/s wall"], rows),
        "",
        f"Deterministic over today's: × {side['per_core_ratio']} per core, "
        f"× {side['wall_ratio']} wall.",
        "",
        *_swarm(side.get("swarm")),
    ]


def _swarm(swarm: dict[str, Any] | None) -> list[str]:
    """The swarm's scaling from one worker process to two, and the cores on paper."""
    if not swarm:
        return []
    rows = [
        [str(w), str(swarm[f"workers_{w}"]["flows"]), f"{swarm[f'workers_{w}']['wall_s']:g}",
         f"{swarm[f'workers_{w}']['flows_per_wall_s']:g}"]
        for w in (1, 2)
    ]  # fmt: skip
    paper = [
        [c, f"{v['flows_per_s']:g}", f"{v['million_flows_min']:g}",
         f"{v['flows_per_s_linear']:g}", f"{v['million_flows_min_linear']:g}"]
        for c, v in swarm["paper"].items()
    ]  # fmt: skip
    return [
        f"Swarm of {swarm['seeds']} seeds × {swarm['flows_per_seed']} flows: × "
        f"{swarm['scaling_1_to_2']} from one worker process to two (load average "
        f"{swarm['load_average'][0]}).",
        "",
        *markdown_table(["workers", "flows", "wall s", "flows/s"], rows),
        "",
        f"On paper: per-core rate × cores, at the measured efficiency ({swarm['efficiency']}) "
        "and linear:",
        "",
        *markdown_table(
            ["cores", "flows/s", "a million, min", "linear flows/s", "linear, min"], paper
        ),
        "",
    ]


def render_markdown(result: dict[str, Any]) -> str:
    """The whole ``bench.md``."""
    m, s = result["machine"], result["settings"]
    sc = result["scenarios"]
    lines = [
        f"# notes-cluster bench ({result['mode']})",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {m['cpus']} CPUs, Python {m['python']}, Redis {m['redis_version']}, "
        f"{m['platform']}. {s['seconds_per_point']:g} s per point after a warm-up; "
        f"run took {result.get('elapsed_s', 'n/a')} s. Only ratios within this one run are "
        "meaningful: the machine is shared and noisy.",
        "",
        *budget_lines(sc.get("budget")),
        *_flows(sc["flows"]["points"]),
        *_ceiling(sc["ceiling"]),
        *_peer(sc["peer"]),
        *_sizes(sc["sizes"]),
        *_steady(sc.get("steady")),
        *_deterministic(sc.get("deterministic")),
        *targets_lines(result["targets"]),
    ]
    return "\n".join(lines)


def targets_lines(targets: dict[str, bool | None]) -> list[str]:
    """The "Targets" section of a report: each target and its verdict in this run."""
    rows = [[name, verdict_cell(met)] for name, met in targets.items()]
    return ["## Targets", "", *markdown_table(["target", "verdict"], rows)]
