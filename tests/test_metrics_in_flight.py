"""The in-flight gauge counts the requests being answered now, and only while they are.

Layer: tests. ``tests/test_metrics.py`` sees the gauge
back at 0 after a flow; here two requests are held inside the app (on trio events) so the gauge
is read while they are in flight, then after each ends, including one whose app raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest
import trio
import trio.testing

from nodes.metrics import NodeMetrics, with_metrics

Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def scope(path: str) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "headers": []}


async def test_the_gauge_counts_held_requests_and_drops_as_each_ends() -> None:
    metrics = NodeMetrics()
    release = {"/a": trio.Event(), "/b": trio.Event()}
    entered = trio.Semaphore(0)

    async def app(s: Mapping[str, Any], receive: Receive, send: Send) -> None:
        entered.release()
        await release[s["path"]].wait()
        if s["path"] == "/b":
            raise RuntimeError("the app failed")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    metered = with_metrics(app, metrics)

    async def receive() -> Mapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    async def failing() -> None:
        with pytest.raises(RuntimeError):
            await metered(scope("/b"), receive, send)

    def in_flight() -> float | None:
        return metrics.registry.get_sample_value("notes_requests_in_flight")

    async with trio.open_nursery() as nursery:
        assert in_flight() == 0
        nursery.start_soon(metered, scope("/a"), receive, send)
        nursery.start_soon(failing)
        await entered.acquire()
        await entered.acquire()
        assert in_flight() == 2
        release["/a"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert in_flight() == 1
        release["/b"].set()
    assert in_flight() == 0
