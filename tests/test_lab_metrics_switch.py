"""The lab's metrics on ÷ off: one node process switching between the same node
built without and with metrics (``metrics_switch_node``), and the figures read from its windows
(``metrics_switch``).

Layer: tests. The pure part (which windows count, how they pair, the ratios and their
intervals) on windows with round figures; the process itself on a redis-server of the test's
own: each mode serves, only the metered one counts, and a known cost added to the metered
mode is seen (a measure that could not see one would pass anything).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from cluster.bench.database import BENCH_PREFIX
from cluster.bench.procs import open_http_cluster
from cluster.lab import metrics_switch_node as switch_node
from cluster.lab.metrics_switch import (
    EDGE_S,
    MODULE,
    inside,
    interval,
    main,
    pairs,
    ratios,
    summarize,
)
from cluster.lab.metrics_switch_node import MARK, PATTERN, WINDOWS
from nodes.serving.settings import demo_settings
from tests.own_redis import own_redis

HANG_GUARD_S = 60.0
"""How long the test waits for the node's first windows before it fails as hung."""


def window(mode: str, i: int, node_us: float = 100.0, requests: int = 1000) -> dict[str, Any]:
    """Window ``i`` (200 ms from second 10): ``node_us`` of node CPU and 20 µs of Redis CPU
    per request."""
    start = int(10e9) + i * 200_000_000
    return {
        "mode": mode,
        "start_ns": start,
        "end_ns": start + 180_000_000,
        "seconds": 0.18,
        "cpu_ns": int(node_us * 1000 * requests),
        "requests": requests,
        "redis_ns": 20_000 * requests,
    }


def abba(n: int) -> list[str]:
    return [("off", "on")[PATTERN[i % len(PATTERN)]] for i in range(n)]


def test_windows_pair_with_their_neighbour_of_the_other_mode_each_once() -> None:
    modes = abba(8)
    assert modes == ["off", "on", "on", "off", "off", "on", "on", "off"]
    got = pairs([window(m, i) for i, m in enumerate(modes)])
    assert [(a["start_ns"], b["start_ns"]) for a, b in got] == [
        (window("", 0)["start_ns"], window("", 1)["start_ns"]),
        (window("", 3)["start_ns"], window("", 2)["start_ns"]),  # (off, on) whatever the order
        (window("", 4)["start_ns"], window("", 5)["start_ns"]),
        (window("", 7)["start_ns"], window("", 6)["start_ns"]),
    ]
    # A window lost at the edge shifts the pairing; a window with no partner is left out.
    got = pairs([window(m, i) for i, m in enumerate(modes)][1:])  # on on off off on on off
    assert [(a["start_ns"], b["start_ns"]) for a, b in got] == [
        (window("", 3)["start_ns"], window("", 2)["start_ns"]),
        (window("", 4)["start_ns"], window("", 5)["start_ns"]),
        (window("", 7)["start_ns"], window("", 6)["start_ns"]),
    ]
    assert pairs([window("off", 0), window("off", 1)]) == []


def test_only_windows_wholly_inside_the_run_and_its_edges_count() -> None:
    windows = [window(m, i) for i, m in enumerate(abba(10))]
    edge = int(EDGE_S * 1e9)
    start, end = windows[2]["start_ns"] - edge, windows[7]["end_ns"] + edge
    assert inside(windows, start, end) == windows[2:8]
    assert inside(windows, start + 1, end) == windows[3:8]
    assert inside(windows, start, end - 1) == windows[2:7]


def test_the_ratios_are_of_cpu_per_request_summed_over_the_pairs() -> None:
    # Off: 100 µs node + 20 µs Redis per request; on: 103 + 20. Windows of unequal sizes must
    # be weighed by their requests, not averaged.
    windows = [
        window(m, i, 103.0 if m == "on" else 100.0, 500 + 250 * (i % 3))
        for i, m in enumerate(abba(12))
    ]
    total, node = ratios(pairs(windows))
    assert total == pytest.approx(123 / 120)
    assert node == pytest.approx(1.03)
    out = summarize(windows, requests_per_flow=2.0, seed=7)
    assert out["pairs"] == 6
    assert out["ratio_node_plus_redis"] == round(123 / 120, 3)
    assert out["ratio_node"] == 1.03
    assert out["modes"]["off"]["node_ms_per_flow"] == pytest.approx(0.2)
    assert out["modes"]["on"]["node_ms_per_flow"] == pytest.approx(0.206)
    assert out["modes"]["on"]["redis_ms_per_flow"] == pytest.approx(0.04)
    assert out["modes"]["off"]["windows"] == out["modes"]["on"]["windows"] == 6


def test_the_interval_widens_with_the_spread_of_the_pairs_and_holds_the_ratio() -> None:
    same = [window(m, i, 104.0 if m == "on" else 100.0) for i, m in enumerate(abba(40))]
    assert interval(pairs(same), seed=1)[1] == [1.04, 1.04]
    # Every other pair of the metered mode twice as costly: a wide interval around the ratio.
    spread = [
        window(m, i, (150.0 if (i // 2) % 2 else 60.0) if m == "on" else 100.0)
        for i, m in enumerate(abba(40))
    ]
    node_low, node_high = interval(pairs(spread), seed=1)[1]
    assert node_high - node_low > 0.2
    assert node_low <= ratios(pairs(spread))[1] <= node_high
    assert interval(pairs(spread), seed=1) == interval(pairs(spread), seed=1)  # seeded


def test_no_pair_inside_the_run_is_an_error_not_a_ratio() -> None:
    with pytest.raises(RuntimeError, match="no pair of windows"):
        summarize([window("off", 0)], requests_per_flow=2.0, seed=1)


async def test_each_mode_serves_and_only_the_metered_one_counts_its_requests(
    tmp_path: Path,
) -> None:
    """Requests (unauthenticated: each answered 401) while the mode switches every 40 ms: the
    metered node's request counter equals what it served, so the other one counts nothing."""
    args = ["--window-ms", "40", "--guard-ms", "5"]
    with own_redis(tmp_path) as server:
        async with (
            open_http_cluster(
                demo_settings(), 1, server.url, BENCH_PREFIX, module=MODULE, args=args
            ) as procs,
            httpx.AsyncClient(timeout=10) as http,
        ):
            url = procs.urls[0]
            base = url.removesuffix("/mcp")
            for _ in range(60):
                reply = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "x"})
                assert reply.status_code == 401
                await trio.sleep(0.005)
            answer = (await http.get(base + WINDOWS)).json()
            assert answer["windows"] == []  # nothing recorded before the mark
            assert (await http.post(base + MARK)).json() == {"marked": True}
            recorded: list[dict[str, Any]] = []
            with trio.fail_after(HANG_GUARD_S):  # a starved node records its windows late
                while len(recorded) < 4:
                    await trio.sleep(0.05)
                    recorded = (await http.get(base + WINDOWS)).json()["windows"]
            scrape = await http.get(f"http://127.0.0.1:{answer['metrics_port']}/metrics")
            assert (await http.get(base + "/switch/nothing")).status_code == 404
    served = answer["served"]
    assert served["off"] > 0
    assert served["on"] > 0
    assert served["off"] + served["on"] == 60
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in scrape.text.splitlines()
        if line.startswith("notes_requests_total{")
    )
    assert counted == served["on"]
    modes = [w["mode"] for w in recorded]
    assert any(abba(len(modes) + k)[k:] == modes for k in range(len(PATTERN)))


async def test_a_known_cost_is_added_to_the_metered_mode_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--on-extra-us`` burns its CPU after each request of the metered mode and never after
    the other's. Whether the measure then sees that cost is a calibration of the benchmark
    (``python -m cluster.lab.metrics_switch --on-extra-us 200``), timed on the
    machine: no test asserts it, since a busy machine moves it."""
    burnt: list[tuple[str, float]] = []
    current = ["off"]
    monkeypatch.setattr(switch_node, "_burn", lambda s: burnt.append((current[0], s)))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    switch = switch_node.SwitchApp(
        apps=(app, app),  # type: ignore[arg-type]
        window_s=0.2,
        guard_s=0.02,
        on_extra_s=200e-6,
    )
    for mode, name in ((0, "off"), (1, "on"), (1, "on"), (0, "off")):
        switch.mode, current[0] = mode, name
        await switch({"type": "http", "path": "/mcp"}, None, None)  # type: ignore[arg-type]
    assert burnt == [("on", 200e-6), ("on", 200e-6)]
    assert switch.served == [2, 2]


def test_the_measure_alone_runs_from_its_command_line_and_its_a_a_check_meters_neither(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m cluster.lab.metrics_switch --same``: both nodes without
    metrics (the A/A check), each serving its windows; too short a run is refused."""
    main(["--seconds", "2", "--same"])
    out = json.loads(capsys.readouterr().out)
    assert out["same"] is True
    assert out["seconds"] == 2
    assert out["failed"] == 0
    assert out["pairs"] >= 1
    assert out["served"]["off"] > 0
    assert out["served"]["on"] > 0
    with pytest.raises(SystemExit):
        main(["--seconds", "1"])
