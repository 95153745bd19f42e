"""Tests for loadgen.pictures: the timeline buckets, the PNG and the self-contained HTML page."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from loadgen.pictures import Bucket, render_html, timeline, write_pictures
from loadgen.run.folder import RunFolder
from loadgen.run.results import Results
from loadgen.runner import FlowSample, RunStats

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T0 = 1000.0


def sample(end: float, latency_ms: float = 10.0, completed: bool = True) -> FlowSample:
    """A flow that ended ``end`` seconds after T0 and took ``latency_ms``."""
    return FlowSample("race", T0 + end - latency_ms / 1000, T0 + end, completed)


def results(verdict: str = "valid", summary: str = "no flow executed twice") -> dict[str, Any]:
    """A ``results.json`` like ``Run.to_json`` writes."""
    return {
        "verdict": verdict,
        "invariants": [
            {
                "name": "exactly-once",
                "status": verdict,
                "summary": summary,
                "ops": [3, 17],
                "journal": [],
            },
            {
                "name": "no-replay-leftovers",
                "status": "valid",
                "summary": "none left",
                "ops": [],
                "journal": [],
            },
        ],
        "counts": {"executions": 12},
        "races": {"double_confirm": 5, "cancel_vs_confirm": 4},
        "flows": {"total": 20, "completed": 18},
        "throughput_flows_per_s": 6.0,
        "elapsed_s": 3.0,
        "latency_ms": {"p50": 10.0, "p90": 20.0, "p99": 40.0, "p99.9": 41.0, "max": 41.0},
        "settings": {
            "nodes": 3,
            "store": "embedded",
            "state_ttl_s": 2.0,
            "flows": 20,
            "duration_s": 3.0,
            "concurrency": 4,
            "rate": None,
            "seed": 1,
        },
    }


@dataclass
class FakeRun:
    """Stands in for a ``Run``: no cluster needed."""

    stats: RunStats
    results: dict[str, Any] = field(default_factory=results)

    def pictures(
        self, folder: Path, faults: list[tuple[float, float, str]] | None = None
    ) -> tuple[Path, Path]:
        """``write_pictures`` of this run into ``folder``."""
        return write_pictures(
            RunFolder(folder), Results.from_json(self.results), self.stats, faults=faults or []
        )


def stats(samples: list[FlowSample], duration_s: float = 3.0) -> RunStats:
    run = RunStats(started_s=T0, ended_s=T0 + duration_s)
    for s in samples:
        run.add(s)
    return run


# --- timeline -----------------------------------------------------------------------------------


def test_timeline_counts_completed_flows_in_the_second_they_ended() -> None:
    samples = [sample(0.1), sample(0.9), sample(1.5), sample(1.6, completed=False), sample(2.99)]
    buckets = timeline(samples, T0)
    assert [b.t_s for b in buckets] == [0.0, 1.0, 2.0]
    assert [b.flows for b in buckets] == [2, 1, 1]


def test_timeline_of_an_empty_run_has_no_buckets() -> None:
    assert timeline([], T0) == []


def test_timeline_leaves_gaps_empty_rather_than_dropping_them() -> None:
    buckets = timeline([sample(0.5), sample(3.5)], T0)
    assert buckets[1] == Bucket(1.0, 0, None, None, None)
    assert [b.flows for b in buckets] == [1, 0, 0, 1]


def test_timeline_latency_percentiles_cover_every_flow_that_ended_in_the_bucket() -> None:
    lat = [float(ms) for ms in range(1, 101)]
    samples = [sample(0.5, ms, completed=ms % 2 == 0) for ms in lat]
    (b,) = timeline(samples, T0)
    assert b.flows == 50
    assert b.p50_ms == pytest.approx(50.0)
    assert b.p99_ms == pytest.approx(99.0)
    assert b.max_ms == pytest.approx(100.0)


def test_timeline_honours_the_bucket_width() -> None:
    buckets = timeline([sample(0.2), sample(0.7), sample(1.2)], T0, bucket_s=0.5)
    assert [(b.t_s, b.flows) for b in buckets] == [(0.0, 1), (0.5, 1), (1.0, 1)]
    with pytest.raises(ValueError, match="positive"):
        timeline([], T0, bucket_s=0)


# --- files --------------------------------------------------------------------------------------


def test_write_pictures_writes_a_png_and_a_page_embedding_it(tmp_path: Path) -> None:
    run = FakeRun(stats([sample(i / 7, 5 + i) for i in range(20)]))
    png, page = run.pictures(tmp_path, faults=[(1.0, 2.0, "kill node 2")])
    assert (png, page) == (tmp_path / "report.png", tmp_path / "report.html")
    data = png.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 1000
    text = page.read_text(encoding="utf-8")
    assert base64.b64encode(data).decode() in text
    assert "kill node 2" in text


def test_the_png_is_about_1200_by_700_pixels(tmp_path: Path) -> None:
    png, _ = FakeRun(stats([sample(0.5)])).pictures(tmp_path)
    width, height = int.from_bytes(png.read_bytes()[16:20]), int.from_bytes(png.read_bytes()[20:24])
    assert (width, height) == (1200, 700)


def test_an_empty_run_still_gets_both_files(tmp_path: Path) -> None:
    png, page = FakeRun(stats([], duration_s=0.0)).pictures(tmp_path)
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert "VALID" in page.read_text(encoding="utf-8")


def test_the_page_shows_the_verdict_and_every_invariant(tmp_path: Path) -> None:
    run = FakeRun(stats([sample(0.5)]), results("invalid"))
    _, page = run.pictures(tmp_path)
    text = page.read_text(encoding="utf-8")
    assert "INVALID" in text
    for inv in run.results["invariants"]:
        assert inv["name"] in text
    assert "double_confirm" in text
    assert "<code>3, 17</code>" in text


def test_the_page_escapes_what_it_shows() -> None:
    evil = '<script>alert("x")</script>'
    text = render_html(Results.from_json(results("unknown", summary=evil)), b"")
    assert "<script" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text


def test_the_page_loads_nothing_from_elsewhere() -> None:
    text = render_html(Results.from_json(results()), PNG_SIGNATURE)
    assert not re.search(r"(src|href)=\"(?!data:)", text)
    assert "http://" not in text
    assert "https://" not in text
