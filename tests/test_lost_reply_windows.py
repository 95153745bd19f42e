"""A ``lost-reply`` window through the reply-dropping proxy: the load comes in bursts (and a
stall holds it), so a window of wall-clock time can pass with no script reply to lose. One that
lost none in its planned length stays open, dropping, until it loses one; one that lost a reply
in time closes at its planned end. Driven on trio's mock clock, the drop counted where the proxy
counts it (``_count_drop``, as when it drops a reply)."""

from __future__ import annotations

from typing import Any, cast

import trio
import trio.testing

from cluster.faults import FaultInjector, PlannedFault
from cluster.reply_dropping_proxy import ReplyDroppingProxy

PLANNED_S = 0.5


def _injector() -> tuple[FaultInjector, ReplyDroppingProxy]:
    proxy = ReplyDroppingProxy("127.0.0.1", 0, ("127.0.0.1", 0))  # not serving: counts only
    fault = PlannedFault(0.0, "lost-reply", "drop_redis_replies", PLANNED_S, p=0.3)
    injector = FaultInjector(cast(Any, None), [fault], cast(Any, None), seed=7, proxy=proxy)
    return injector, proxy


async def test_a_window_that_lost_no_reply_stays_open_until_it_loses_one(
    mock_clock: trio.testing.MockClock,
) -> None:
    injector, proxy = _injector()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(injector.run)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(PLANNED_S + 9.5)
        await trio.testing.wait_all_tasks_blocked()
        assert injector.records == [], "still open, long past its planned end"
        assert proxy._rules, "and still dropping"
        proxy._count_drop()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    [record] = injector.records
    assert record.detail == (
        "Redis replies lost by the proxy with p=0.30: 1 lost "
        "(held open 9.50 s past its planned 0.50 s)"
    )
    assert not proxy._rules, "replies pass once it closed"


async def test_a_window_that_lost_a_reply_in_time_closes_at_its_planned_end(
    mock_clock: trio.testing.MockClock,
) -> None:
    injector, proxy = _injector()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(injector.run)
        await trio.testing.wait_all_tasks_blocked()
        proxy._count_drop()
        mock_clock.jump(PLANNED_S)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    [record] = injector.records
    assert record.detail == "Redis replies lost by the proxy with p=0.30: 1 lost"
    assert not proxy._rules


async def test_a_window_held_open_and_cut_by_the_end_of_the_run_says_so(
    mock_clock: trio.testing.MockClock,
) -> None:
    injector, proxy = _injector()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(injector.run)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(PLANNED_S + 1)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # the run's flows are done
    [record] = injector.records
    assert record.detail == (
        "Redis replies lost by the proxy with p=0.30: 0 lost "
        "(held open 1.00 s past its planned 0.50 s)"
    )
    assert not proxy._rules
