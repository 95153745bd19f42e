"""Pictures of a run: ``report.png`` (throughput and latency over time) and ``report.html``.

Layer: loadgen. Reads what a finished run measured (its ``Results`` and its flow samples) and
writes files into the run's folder; no network, no cluster, no store. The console summary lives
in ``loadgen.report``.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # Files only: never pick an interactive backend, even with a display.

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from loadgen.fault_windows import LISTED_MAX, share, summarize
from loadgen.run.folder import RunFolder
from loadgen.run.results import RecordedSettings, Results
from loadgen.runner import FlowSample, RunStats
from loadgen.tally import Tally, tenths_row

Fault = tuple[float, float, str]
"""A fault window: start and end in seconds from the run's start, and a label."""

FIGURE_SIZE_IN = (12.0, 7.0)
FIGURE_DPI = 100
"""12 x 7 inches at 100 dpi: about 1200 x 700 pixels, readable in a browser without zooming."""

LATENCY_FLOOR_MS = 0.01
"""Lowest latency plotted: a log axis cannot show zero, and nothing real is faster than this."""

MAX_OPS_SHOWN = 20
"""Offending operation indices listed per invariant in the HTML; the rest are counted."""

STATUS_COLOR = {"valid": "#1a7f37", "invalid": "#cf222e", "unknown": "#bf8700"}
FAULT_COLOR = "#d1242f"


@dataclass(frozen=True)
class Bucket:
    """One slice of the run: flows completed in it, and the latency of flows that ended in it.

    ``t_s`` is the slice's start in seconds from the run's start. Latencies are ``None`` when no
    flow ended in the slice; they count every flow that ended, completed or not, like the run's
    histogram does.
    """

    t_s: float
    flows: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted, non-empty values."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def timeline(
    samples: Iterable[FlowSample], started_s: float, bucket_s: float = 1.0
) -> list[Bucket]:
    """Cut the run into ``bucket_s`` slices by each flow's end time.

    The slices start at ``started_s`` and run to the last flow's end; a run with no flows has none.
    """
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    slots: dict[int, list[FlowSample]] = {}
    for s in samples:
        slots.setdefault(max(0, int((s.end_s - started_s) // bucket_s)), []).append(s)
    count = max(slots, default=-1) + 1
    buckets = []
    for i in range(count):
        here = slots.get(i, [])
        lat = sorted(s.latency_ms for s in here)
        buckets.append(
            Bucket(
                t_s=i * bucket_s,
                flows=sum(1 for s in here if s.completed),
                p50_ms=percentile(lat, 50) if lat else None,
                p99_ms=percentile(lat, 99) if lat else None,
                max_ms=lat[-1] if lat else None,
            )
        )
    return buckets


def tally_timeline(tally: Tally, bucket_s: float = 1.0) -> list[Bucket]:
    """Completed flows per slice from a run's tally, for runs that kept no per-flow samples
    (very long ones, or the merge of several processes): no latency per slice."""
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    slots: dict[int, int] = {}
    for second, n in tally.completed_per_s.items():
        slot = int(second // bucket_s)
        slots[slot] = slots.get(slot, 0) + n
    count = max(slots, default=-1) + 1
    return [Bucket(i * bucket_s, slots.get(i, 0), None, None, None) for i in range(count)]


def write_pictures(
    folder: RunFolder,
    results: Results,
    stats: RunStats,
    faults: Sequence[Fault] = (),
    bucket_s: float = 1.0,
) -> tuple[Path, Path]:
    """Write ``report.png`` and ``report.html`` into the run's folder; return their paths."""
    folder.make()
    duration_s = max(stats.ended_s - stats.started_s, 0.0)
    png = folder.picture_file
    render_png(
        png,
        timeline(stats.samples, stats.started_s, bucket_s)
        if stats.samples
        else tally_timeline(stats.tally, bucket_s),
        results,
        faults,
        bucket_s=bucket_s,
        duration_s=duration_s,
    )
    page = folder.page_file
    page.write_text(render_html(results, png.read_bytes(), faults), encoding="utf-8")
    return png, page


# --- the PNG ------------------------------------------------------------------------------------


def title_line(results: Results) -> str:
    """Verdict and settings in one line, for the figure's title."""
    s = results.settings or RecordedSettings()

    def known(v: object) -> object:
        return "?" if v is None else v

    load = f"open loop {s.rate:g}/s" if s.rate else f"closed loop x{known(s.concurrency)}"
    return (
        f"Verdict: {results.verdict.upper()}   |   "
        f"{known(s.nodes)} nodes, {known(s.store)} store, {load}, "
        f"{known(s.flows)} flows max, {known(s.duration_s)} s max, "
        f"state TTL {known(s.state_ttl_s)} s, seed {known(s.seed)}"
    )


def render_png(
    path: Path,
    buckets: Sequence[Bucket],
    results: Results,
    faults: Sequence[Fault] = (),
    *,
    bucket_s: float = 1.0,
    duration_s: float = 0.0,
) -> None:
    """Draw throughput (top) and latency (bottom, log scale) over time, and save to ``path``."""
    fig, (top, bottom) = plt.subplots(
        2, 1, sharex=True, figsize=FIGURE_SIZE_IN, dpi=FIGURE_DPI, height_ratios=(1, 1.3)
    )
    try:
        color = STATUS_COLOR.get(results.verdict, "black")
        fig.suptitle(title_line(results), color=color, fontsize=12)
        _throughput(top, buckets, bucket_s)
        latency = {} if results.measured is None else results.measured.latency_ms
        _latency(bottom, buckets, bucket_s, latency)
        end = max(duration_s, len(buckets) * bucket_s, *(f[1] for f in faults), bucket_s)
        bottom.set_xlim(0, end)
        bottom.set_xlabel("seconds since run start")
        for ax in (top, bottom):
            _shade(ax, faults, label=ax is top and len(faults) <= LISTED_MAX)
            ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def _throughput(ax: Axes, buckets: Sequence[Bucket], bucket_s: float) -> None:
    ax.bar(
        [b.t_s for b in buckets],
        [b.flows / bucket_s for b in buckets],
        width=bucket_s,
        align="edge",
        color="#0969da",
        edgecolor="white",
        linewidth=0.5,
    )
    ax.set_ylabel("completed flows / s")
    # Headroom above the tallest bar keeps fault labels clear of the bars.
    ax.set_ylim(0, max((b.flows / bucket_s for b in buckets), default=0) * 1.2 or 1)
    if not buckets:
        ax.text(0.5, 0.5, "no flows", transform=ax.transAxes, ha="center", va="center")


WHOLE_RUN_NOTE = (
    "latency per second not kept (merged from several load processes): whole-run percentiles"
)


def _latency(
    ax: Axes, buckets: Sequence[Bucket], bucket_s: float, whole_run: dict[str, float]
) -> None:
    mids = [b.t_s + bucket_s / 2 for b in buckets]
    # With few flows per bucket p99 often equals max: max goes last, thin and dashed, over a
    # thick p99 so both stay visible.
    series = (
        ("p50", "#0969da", "-", 1.4, [b.p50_ms for b in buckets]),
        ("p99", "#bf8700", "-", 3.0, [b.p99_ms for b in buckets]),
        ("max", "#cf222e", "--", 1.2, [b.max_ms for b in buckets]),
    )
    drawn = False
    for name, color, style, width, values in series:
        ys = [math.nan if v is None else max(v, LATENCY_FLOOR_MS) for v in values]
        if any(not math.isnan(y) for y in ys):
            ax.plot(mids, ys, style, marker=".", color=color, label=name, linewidth=width)
            drawn = True
    ax.set_ylabel(f"flow latency per {bucket_s:g} s (ms)")
    if not drawn and any(b.flows for b in buckets) and whole_run:
        # Flows ran but no per-flow samples were kept (--workers): the merged histogram's
        # percentiles, as lines across the run, rather than a misleading "no flows".
        for name, color, style, width, _ in series:
            value = whole_run.get(name)
            if isinstance(value, int | float):
                ax.axhline(
                    max(float(value), LATENCY_FLOOR_MS),
                    color=color,
                    linestyle=style,
                    linewidth=width,
                    label=f"{name} (whole run)",
                )
                drawn = True
        ax.set_ylabel("flow latency, whole run (ms)")
        ax.text(
            0.5,
            0.02,
            WHOLE_RUN_NOTE,
            transform=ax.transAxes,
            ha="center",
            va="bottom",
            fontsize=9,
            color="#57606a",
        )
    if drawn:
        ax.set_yscale("log")
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles[::-1], labels[::-1], loc="upper left", fontsize=9)
    else:
        ax.text(0.5, 0.5, "no flows", transform=ax.transAxes, ha="center", va="center")


LABEL_ROWS = 4
"""Fault labels step down through this many rows, so windows close together stay readable."""


def _shade(ax: Axes, faults: Sequence[Fault], *, label: bool) -> None:
    for i, (start, end, name) in enumerate(sorted(faults)):
        ax.axvspan(start, end, color=FAULT_COLOR, alpha=0.12, linewidth=0, zorder=0)
        if label:
            ax.text(
                start,
                0.98 - 0.07 * (i % LABEL_ROWS),
                f" {name}",
                transform=ax.get_xaxis_transform(),
                va="top",
                ha="left",
                fontsize=9,
                color=FAULT_COLOR,
            )


# --- the HTML -----------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1240px;padding:0 1em;color:#1f2328}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.15em;margin:1.4em 0 .4em}
.verdict{display:inline-block;padding:.15em .6em;border-radius:.3em;color:#fff;font-weight:700}
table{border-collapse:collapse;margin:.3em 0}
th,td{border:1px solid #d0d7de;padding:.3em .7em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
.status{font-weight:700}code{font-size:.92em}img{max-width:100%;height:auto}
.grid{display:flex;flex-wrap:wrap;gap:2.5em}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _number(value: object, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, int | float) else _e(value)


def _status(status: object) -> str:
    color = STATUS_COLOR.get(str(status), "#57606a")
    return f'<span class="status" style="color:{color}">{_e(status)}</span>'


def _ops(ops: Sequence[object]) -> str:
    shown = ", ".join(_e(o) for o in ops[:MAX_OPS_SHOWN])
    more = f" … ({len(ops)} in all)" if len(ops) > MAX_OPS_SHOWN else ""
    return f"<code>{shown}</code>{more}" if ops else ""


def _pairs(title: str, rows: Iterable[tuple[object, str]]) -> str:
    body = "".join(f'<tr><th>{_e(k)}</th><td class="n">{v}</td></tr>' for k, v in rows)
    return f"<div><h2>{_e(title)}</h2><table>{body}</table></div>"


def _invariants(invariants: Sequence[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{_e(inv.get('name', ''))}</td><td>{_status(inv.get('status', ''))}</td>"
        f"<td>{_e(inv.get('summary', ''))}</td><td>{_ops(inv.get('ops', []))}</td></tr>"
        for inv in invariants
    )
    return (
        "<h2>Invariants</h2><table><tr><th>invariant</th><th>status</th><th>summary</th>"
        f"<th>offending ops</th></tr>{rows}</table>"
    )


def render_html(results: Results, png: bytes, faults: Sequence[Fault] = ()) -> str:
    """A self-contained page: verdict, invariants, races, load, settings and the embedded PNG."""
    verdict = results.verdict
    color = STATUS_COLOR.get(verdict, "#57606a")
    flows = results.flows
    m = results.measured
    load: list[tuple[object, str]] = [
        ("flows completed", f"{_e(flows.completed)} of {_e(flows.total)}"),
        ("throughput", f"{_number('?' if m is None else m.throughput_flows_per_s, '.1f')} flows/s"),
        ("elapsed", f"{_number('?' if m is None else m.elapsed_s, '.1f')} s"),
    ]
    load += [
        (f"flow latency {k}", f"{_number(v, '.1f')} ms")
        for k, v in ({} if m is None else m.latency_ms).items()
    ]
    tenths = results.flows_per_s_by_tenth
    if tenths:
        label, value = tenths_row(tenths)
        load.append((label, _e(value)))
    settings = {} if results.settings is None else results.settings.to_json()
    sections = [
        _pairs("Races exercised: started, completed, other outcomes", _kinds(results)),
        _pairs("Load", load),
        _pairs("Checker counts", _counted(results.counts)),
        _pairs("Settings", [(k, _e(v)) for k, v in settings.items()]),
    ]
    windows = list(results.faults)
    if len(windows) > LISTED_MAX:  # a long run: one row per kind and action
        sections.append(
            _pairs(f"Faults ({len(windows)} windows; each in results.json)", _summary(windows))
        )
    else:
        if faults:
            faults_at = [(name, f"{a:.1f} – {b:.1f} s") for a, b, name in faults]
            sections.append(_pairs("Faults", faults_at))
        if windows:
            rows = _availability(windows)
            sections.append(_pairs("Answered (known outcome) per fault window", rows))
    image = base64.b64encode(png).decode("ascii")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>notes-cluster run: {_e(verdict)}</title><style>{CSS}</style></head><body>"
        f'<h1>Verdict: <span class="verdict" style="background:{color}">'
        f"{_e(verdict.upper())}</span></h1>"
        f"{_invariants(list(results.invariants))}"
        f'<div class="grid">{"".join(sections)}</div>'
        f"{_model(results.model)}"
        f'<h2>Over time</h2><img alt="throughput and latency over time" '
        f'src="data:image/png;base64,{image}">'
        "</body></html>\n"
    )


def _model(model: dict[str, list[dict[str, Any]]]) -> str:
    """The answers against the model (``loadgen.check.model``): per race kind and answer, the
    replies the model allowed and those seen, as the terminal summary prints them."""
    if not model:
        return ""
    rows = "".join(
        f"<tr><td>{_e(kind)}</td><td>{_e(row.get('answer', ''))}</td>"
        f"<td>{_e(' | '.join(row.get('legal', [])))}</td>"
        f"<td>{_e(', '.join(f'{reply} {n}' for reply, n in row.get('seen', {}).items()))}</td>"
        "</tr>"
        for kind, kind_rows in model.items()
        for row in kind_rows
    )
    return (
        "<h2>Answers against the model</h2><table><tr><th>kind</th><th>answer</th>"
        f"<th>legal replies</th><th>replies seen</th></tr>{rows}</table>"
    )


def _kinds(results: Results) -> list[tuple[object, str]]:
    """Per race kind: started, completed and the other outcomes (races only, for old runs)."""
    kinds = results.kinds
    if not kinds:
        return _counted(results.races or {})
    rows: list[tuple[object, str]] = []
    for kind, k in kinds.items():
        other = ", ".join(f"{o} {n}" for o, n in k["outcomes"].items() if o != "completed")
        rows.append(
            (kind, _e(f"{k['started']} / {k['completed']}" + (f" ({other})" if other else "")))
        )
    return rows


def _summary(windows: Sequence[dict[str, Any]]) -> list[tuple[object, str]]:
    return [
        (
            f"{r['kind']} {r['action']}",
            _e(
                f"{r['count']} windows, {r['seconds']:.0f} s; answered "
                f"{share(r['answered_median'])} median, {share(r['answered_min'])} worst"
            ),
        )
        for r in summarize(windows)
    ]


def _availability(windows: Sequence[dict[str, Any]]) -> list[tuple[object, str]]:
    rows: list[tuple[object, str]] = []
    for f in windows:
        avail = f.get("availability")
        label = f"{f['kind']} {f['action']} {f['start_s']:.1f}–{f['end_s']:.1f} s"
        rows.append((label, "-" if avail is None else _e(f"{avail:.0%}")))
    return rows


def _counted(counts: dict[str, Any]) -> list[tuple[object, str]]:
    return [(k, _e(v)) for k, v in sorted(counts.items())]
