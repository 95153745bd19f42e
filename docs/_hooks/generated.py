"""MkDocs hook: pages whose tables are generated from the code and from results files.

A page asks for a generated block with an HTML comment on a line of its own:

    <!-- generated: config-reference -->              every key of the configuration file,
                                                      from nodes.serving.settings' models
    <!-- generated: bench-results PATH -->            a benchmark results file (bench.json),
                                                      PATH relative to the repository's root
    <!-- generated: swarm-results PATH -->            a swarm's results file (seeds.json, its
                                                      per-seed rows left out), PATH as above

So the reference cannot drift from the code, and the benchmark page shows a results file as
the bench wrote it (with the machine and load it was measured on), never figures typed by hand.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"^<!-- generated: ([\w-]+)(?: (\S+))? -->$", re.M)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each generated-block marker with its block."""

    def block(m: re.Match[str]) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "config-reference":
            return config_reference()
        if kind == "bench-results" and arg:
            return bench_results(ROOT / arg)
        if kind == "swarm-results" and arg:
            return swarm_results(ROOT / arg)
        raise ValueError(f"unknown generated block {m.group(0)!r}")

    return MARKER.sub(block, markdown)


def on_page_content(html: str, **_: Any) -> str:
    """mkdocs-click prints click 8.2's "no default" sentinel as a default: show nothing."""
    return html.replace("<code>Sentinel.UNSET</code>", "")


def _type_name(annotation: Any) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = re.sub(r"typing\.|nodes\.serving\.settings\.|_(Principal|Legacy|Timeouts)", r"\1", text)
    text = re.sub(r"Annotated\[(\w+), FieldInfo\(.*?\)\]\)\]", r"\1", text)
    text = text.replace("Literal['auto']", '"auto"').replace("NoneType", "None")
    text = re.sub(r"Union\[(.*), None\]$", r"\1 | None", text)
    return re.sub(r"^Union\[(.*)\]$", lambda m: m.group(1).replace(", ", " | "), text)


def _bounds(field: Any) -> str:
    parts = []
    for item in field.metadata:
        for name, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value}")
        for name, words in (("min_length", "at least"), ("max_length", "at most")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{words} {value}")
    return ", ".join(parts)


def _default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
        if hasattr(value, "model_dump"):
            return "(table)"
        return f"`{json.dumps(value)}`"
    if field.default is PydanticUndefined:
        return "required"
    if isinstance(field.default, float) and field.default.is_integer():
        return f"`{int(field.default)}`"
    return f"`{json.dumps(field.default)}`"


def _table(model: Any, prefix: str = "") -> list[str]:
    rows = ["| key | type | default | bounds | what it sets |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        description = (field.description or "").replace("|", "\\|")
        rows.append(
            f"| `{prefix}{name}` | `{_type_name(field.annotation)}` | {_default(field)} | "
            f"{_bounds(field)} | {description} |"
        )
    return rows


def config_reference() -> str:
    """Every key of the configuration file, table by table, from the settings' models."""
    from nodes.serving import settings as config

    out = ["## Top level", "", *_table(config._File)]
    for title, model, prefix in (
        ("`[principals.NAME]`", config._Principal, ""),
        ("`[legacy]`", config._Legacy, ""),
        ("`[timeouts]`", config._Timeouts, ""),
    ):
        out += ["", f"## {title}", "", (model.__doc__ or "").strip(), "", *_table(model, prefix)]
    return "\n".join(out)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


SIDES = {
    "ours": "ours (1 node process)",
    "peer_memory": "SDK peer, notes in memory",
    "peer_redis": "SDK peer, notes in Redis",
}
"""The peer comparison's sides, in the order ``bench.md`` shows them."""

TARGETS = {
    "peer_throughput_at_least_2": "ours flows/s ÷ SDK peer in memory ≥ 2",
    "peer_cpu_at_most_one_third": "CPU per flow, ours (node + Redis) ÷ SDK peer in memory ≤ 1/3",
    "ceiling_fraction_at_least_0.35": "in-process node path ÷ the store's ceiling ≥ 0.35",
    "steady_last_tenth_at_least_0.8_of_first": "steady state: last tenth ÷ first tenth ≥ 0.8",
}


def _machine_rows(m: dict[str, Any], loads: list[tuple[str, Any]]) -> list[str]:
    rows = [
        "| machine | |",
        "|---|---|",
        f"| CPUs | {m.get('cpus', '?')} ({m.get('cpu_model') or 'model not recorded'}) |",
        f"| memory | {m.get('memory_gib', 'not recorded')} GiB |",
    ]
    for label, load in loads:
        shown = ", ".join(map(str, load)) if load else "not recorded"
        rows.append(f"| load average (1, 5, 15 min) {label} | {shown} |")
    return rows


def swarm_results(path: Path) -> str:
    """A swarm's results file (``seeds.json`` of ``simulate --deterministic --seeds N``): the
    command, the machine and its load at both ends, the verdict, the totals and the rates."""
    data = json.loads(path.read_text(encoding="utf-8"))
    m = data.get("machine", {})
    loads = [
        ("at the start", data.get("load_average_at_start")),
        ("at the end", m.get("load_average")),
    ]
    wall = data.get("wall_s")
    return "\n".join(
        [
            f"Command: `{data.get('command', '?')}` (on {data.get('where') or '?'}).",
            "",
            *_machine_rows(m, loads),
            f"| Python | {m.get('python', '?')} |",
            f"| platform | {m.get('platform', '?')} |",
            "",
            "| result | |",
            "|---|---|",
            f"| merged verdict | {str(data.get('verdict', '?')).upper()} |",
            f"| seeds, flows | {_fmt(data.get('seeds'), 0)}, {_fmt(data.get('flows'), 0)} |",
            f"| wall time | {_fmt(wall, 0)} s ({_fmt((wall or 0) / 60, 1)} min) |",
            f"| CPU time, every worker | {_fmt(data.get('cpu_s'), 0)} s |",
            f"| flows per wall second | {_fmt(data.get('flows_per_wall_s'), 0)} |",
            f"| flows per CPU second | {_fmt(data.get('flows_per_cpu_s'), 0)} |",
            "",
        ]
    )


def bench_results(path: Path) -> str:
    """A results file of ``notes-cluster bench``: the machine and its load, the command, the
    targets met or missed, then the budget per flow of each side of the peer comparison."""
    data = json.loads(path.read_text(encoding="utf-8"))
    m = data.get("machine", {})
    load = m.get("load_average")
    scenarios = data.get("scenarios") or {}
    out = [
        f"Command: `{data.get('command', '?')}` ({data.get('mode', '?')} mode, "
        f"{_fmt(data.get('elapsed_s'), 0)} s).",
        "",
        *_machine_rows(m, [("at the end", load)]),
        f"| Python, Redis | {m.get('python', '?')}, {m.get('redis_version', '?')} |",
        f"| platform | {m.get('platform', '?')} |",
        "",
    ]
    targets = data.get("targets") or {}
    if targets:
        out += ["| target | in this run |", "|---|---|"]
        for key, met in targets.items():
            out.append(f"| {TARGETS.get(key, key)} | {'met' if met else '**missed**'} |")
        out.append("")
    budget = scenarios.get("budget") or {}
    sides = budget.get("sides") or {}
    if sides:
        out += [
            "| per completed delete flow | " + " | ".join(SIDES.get(k, k) for k in sides) + " |",
            "|---|" + "---:|" * len(sides),
        ]
        for label, key, digits in (
            ("flows/s", "flows_per_s", 0),
            ("server process CPU ms", "server", 3),
            ("Redis CPU ms", "redis", 3),
            ("server + Redis CPU ms", "server_plus_redis", 3),
            ("÷ SDK peer in memory", "vs_peer_memory", 3),
            ("load client (wrk) CPU ms", "load_client", 3),
        ):
            out.append(
                f"| {label} | "
                + " | ".join(_fmt(side.get(key), digits) for side in sides.values())
                + " |"
            )
        out.append("")
    steady = scenarios.get("steady") or {}
    if steady:
        out.append(
            f"Steady state: {_fmt(steady.get('flows'))} flows, {steady.get('verdict', '?')}; "
            f"last tenth ÷ first tenth {_fmt(steady.get('last_over_first'))}."
        )
    return "\n".join(out)
