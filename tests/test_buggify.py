"""Fault points in node and store code (``store.simulation.buggify``): seeded, per site, logged,
else off.

Layer: tests. A deterministic run with the points on fires some of them (which ones is the
seed's), logs each firing, stays VALID and repeats bit for bit; without ``buggify_on`` (as in
production) a site does nothing, not even a checkpoint.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import trio

from cluster.deterministic.run import run_deterministic
from cluster.targets.simulate import SimulateOptions
from loadgen.runner import RunSettings
from store.fault_points import buggify_delay
from store.simulation.buggify import Buggify, buggify_on


def test_sites_are_activated_per_site_from_the_seed_and_fire_on_a_share_of_passes() -> None:
    a, b = Buggify(7), Buggify(7)
    sites = [f"site.{i}" for i in range(40)]
    draws_a = [[a.delay_s(s) for _ in range(50)] for s in sites]
    draws_b = [[b.delay_s(s) for _ in range(50)] for s in sites]
    assert draws_a == draws_b
    assert 5 < len(a.active()) < 35
    for site, draws in zip(sites, draws_a, strict=True):
        if site not in a.active():
            assert not any(draws)
    assert sum(a.fired.values()) == sum(1 for d in draws_a for x in d if x > 0)
    assert a.fired


async def test_without_buggify_on_a_site_does_nothing() -> None:
    with trio.CancelScope() as scope:
        scope.cancel()  # any checkpoint inside would raise Cancelled here
        for _ in range(1_000):
            await buggify_delay("store.before_script")
    assert not scope.cancelled_caught


def test_a_run_with_fault_points_fires_them_logs_them_and_repeats(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = SimulateOptions(nodes=2, settings=RunSettings(flows=60, seed=3))
    with caplog.at_level(logging.INFO, logger="notes_cluster.buggify"):
        first = run_deterministic(options, buggify=True)
    again = run_deterministic(options, buggify=True)
    plain = run_deterministic(options)
    assert first.buggify is not None
    assert first.buggify["fired"]
    fired = sum(first.buggify["fired"].values())
    assert len([r for r in caplog.records if "BUGGIFY" in r.getMessage()]) == fired
    assert first.result.status == "valid"
    assert first.history_sha256 == again.history_sha256
    assert first.history_sha256 != plain.history_sha256
    assert plain.buggify is None


async def test_a_fired_site_waits_in_trio_time() -> None:
    points = Buggify(1, site_p=1.0, fire_p=1.0)
    before = trio.current_time()
    with buggify_on(points):
        await buggify_delay("x")
    assert points.fired == {"x": 1}
    assert trio.current_time() > before


async def test_a_site_that_does_not_fire_is_no_checkpoint_either() -> None:
    points = Buggify(1, site_p=1.0, fire_p=0.0)
    with buggify_on(points), trio.CancelScope() as scope:
        scope.cancel()
        for _ in range(100):
            assert await buggify_delay("x") is None
    assert not scope.cancelled_caught
    assert points.fired == {}


def test_a_site_is_awaitable_on_asyncio_too() -> None:
    async def passes() -> float:
        loop = asyncio.get_running_loop()
        await buggify_delay("x")  # off: nothing
        before = loop.time()
        with buggify_on(Buggify(1, site_p=1.0, fire_p=1.0)):
            await buggify_delay("x")
        return loop.time() - before

    assert asyncio.run(passes()) > 0
