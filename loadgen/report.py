"""Showing a run to people: progress while it runs, a summary table at the end.

Layer: loadgen. Console output only (rich); pictures and HTML live in ``loadgen.pictures``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from loadgen.check.bounds_reached import never_reached
from loadgen.check.exercise import LOWERED
from loadgen.fault_windows import LISTED_MAX, share, summarize
from loadgen.run.results import Results
from loadgen.tally import tenths_row

STATUS_STYLE = {"valid": "bold green", "invalid": "bold red", "unknown": "bold yellow"}


def summary_tables(results: Results) -> list[Table]:
    """The end-of-run tables: verdict per invariant, races exercised, throughput and latency."""
    verdicts = verdict_table(results)
    races = kinds_table(results.kinds)

    perf = Table(title="Load", title_justify="left")
    perf.add_column("measure")
    perf.add_column("value", justify="right")
    s = results.settings
    if s is not None:
        perf.add_row("nodes / store", f"{s.nodes} / {s.store}")
    perf.add_row("flows completed", f"{results.flows.completed} of {results.flows.total}")
    m = results.measured
    if m is not None:
        perf.add_row("throughput", f"{m.throughput_flows_per_s:.1f} flows/s")
    if results.flows_per_s_by_tenth:
        perf.add_row(*tenths_row(results.flows_per_s_by_tenth))
    for name, ms in ({} if m is None else m.latency_ms).items():
        perf.add_row(f"flow latency {name}", f"{ms:.1f} ms")
    for name, n in sorted(results.counts.items()):
        perf.add_row(name, str(n))
    for master, n in (results.key_distribution or {}).items():
        perf.add_row(f"keys on master {master}", str(n))
    if results.check:
        perf.add_row("check", check_cost(results.check))
    tables = [verdicts, races, perf]
    if results.model:
        tables.append(model_table(results.model))
    if results.faults:
        tables.append(faults_table(list(results.faults)))
    return tables


def model_table(model: dict[str, list[dict[str, Any]]]) -> Table:
    """Per race kind and answer: the replies the model allowed and those seen
    (loadgen.check.model)."""
    table = Table(title="Answers against the model", title_justify="left")
    table.add_column("kind")
    table.add_column("answer")
    table.add_column("legal", overflow="fold")
    table.add_column("seen", overflow="fold")
    for kind, rows in model.items():
        for row in rows:
            seen = ", ".join(f"{reply} {n}" for reply, n in row["seen"].items())
            table.add_row(kind, row["answer"], " | ".join(row["legal"]), seen)
    return table


def kinds_table(kinds: dict[str, Any]) -> Table:
    """Per race kind: flows started, completed (past round 1, race run), and how the rest
    ended."""
    table = Table(title="Races exercised, per kind", title_justify="left")
    table.add_column("kind")
    table.add_column("started", justify="right")
    table.add_column("completed", justify="right")
    table.add_column("other outcomes", overflow="fold")
    for kind, k in kinds.items():
        other = ", ".join(f"{o} {n}" for o, n in k["outcomes"].items() if o != "completed")
        table.add_row(kind, str(k["started"]), str(k["completed"]), other)
    return table


def verdict_line(results: Results) -> str:
    """``Verdict: VALID``, with what weakens it: an exercise rule lowered for the run's size."""
    line = f"Verdict: {results.verdict.upper()}"
    for inv in results.invariants:
        summary = str(inv.get("summary", ""))
        if inv.get("name") == "exercised" and LOWERED in summary:
            line += f" ({summary[summary.index(LOWERED) :].rstrip('.')})"
    return line


def bounds_line(results: Results) -> str:
    """The configured bounds the run never reached ("" when it reached them all): printed under
    the verdict, so a bound never reached is never a silent pass."""
    unreached = never_reached(results.counts)
    return f"bounds never reached: {', '.join(unreached)}" if unreached else ""


def verdict_table(results: Results) -> Table:
    """Verdict per invariant, with its evidence."""
    verdicts = Table(title=verdict_line(results), title_justify="left")
    verdicts.add_column("invariant")
    verdicts.add_column("status")
    verdicts.add_column("evidence", overflow="fold")
    for inv in results.invariants:
        style = STATUS_STYLE.get(inv["status"], "")
        ops = inv["ops"][:8]
        evidence = inv["summary"] + (f" (ops {ops})" if ops and inv["status"] != "valid" else "")
        verdicts.add_row(inv["name"], f"[{style}]{inv['status']}[/]", evidence)
    return verdicts


def print_check(results: Results, console: Console) -> None:
    """``notes-cluster check``: the verdict, the kinds exercised, the answers against the model
    and the flows."""
    console.print(verdict_table(results))
    if bounds_line(results):
        console.print(bounds_line(results))
    console.print(kinds_table(results.kinds))
    if results.model:
        console.print(model_table(results.model))
    console.print(f"flows completed {results.flows.completed} of {results.flows.total}")
    if results.check:
        console.print(f"checked in {check_cost(results.check)}")


def check_cost(cost: dict[str, Any]) -> str:
    """What a check cost, in one line: seconds, processes, peak resident memory."""
    text = f"{cost['seconds']:.1f} s, {cost['jobs']} process(es), peak {cost['peak_rss_mb']:.0f} MB"
    if cost.get("child_peak_rss_mb"):  # 0 when no pool ran (one process, or one task)
        text += f" + {cost['child_peak_rss_mb']:.0f} MB per pool process"
    return text


def faults_table(faults: list[dict[str, Any]]) -> Table:
    """Every fault injected, with its window in seconds from the run's start; for a long run
    (more than ``LISTED_MAX`` windows), one row per kind and action instead."""
    if len(faults) > LISTED_MAX:
        return _faults_summary_table(faults)
    table = Table(title=f"Faults injected ({len(faults)})", title_justify="left")
    table.add_column("from s", justify="right")
    table.add_column("to s", justify="right")
    table.add_column("kind")
    table.add_column("action")
    table.add_column("detail", overflow="fold")
    table.add_column("answered", justify="right")
    for f in faults:
        table.add_row(
            f"{f['start_s']:.2f}",
            f"{f['end_s']:.2f}",
            f["kind"],
            f["action"],
            f["detail"],
            share(f.get("availability")),
        )
    return table


def _faults_summary_table(faults: list[dict[str, Any]]) -> Table:
    title = f"Faults injected ({len(faults)} windows, by kind; each one is in results.json)"
    table = Table(title=title, title_justify="left")
    table.add_column("kind")
    table.add_column("action")
    table.add_column("windows", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("answered median / worst", justify="right")
    for row in summarize(faults):
        table.add_row(
            row["kind"],
            row["action"],
            str(row["count"]),
            f"{row['seconds']:.0f}",
            f"{share(row['answered_median'])} / {share(row['answered_min'])}",
        )
    return table


def print_summary(results: Results, console: Console) -> None:
    """Print the summary tables, and the bounds the run never reached."""
    for table in summary_tables(results):
        console.print(table)
    if bounds_line(results):
        console.print(bounds_line(results))
