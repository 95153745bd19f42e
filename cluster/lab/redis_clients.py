"""The Redis client's cost: CPU µs per EVALSHA of each candidate client, side by side.

Layer: cluster (the lab; run by ``bench-parts``, ``parts``). Each candidate runs the same script
(shaped like ``confirm.lua``'s call: 5 keys, 15 arguments, a 3-element reply) ``calls`` times
from ``concurrency`` tasks, on asyncio (uvloop, production) and on trio (simulations); CPU is
this process's (every thread: a client with a native core pays there too). Candidates:

- ``coredis``  as the store configures it (``store.client_factory.redis_client``);
- ``resp``     the store's own client (``store.resp_client``);
- ``glide``    valkey-glide (the ``bench`` extra), when importable.

Rounds alternate the candidates so a noisy neighbour hits them all alike; each figure is the
median of its rounds. Only ratios measured in one run mean anything.
"""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

import anyio
import trio
import uvloop

from cluster.bench.database import BENCH_PREFIX
from store.client_factory import redis_client
from store.resp_client import RespRedis

SCRIPT = "return {ARGV[1], KEYS[1], #ARGV}"
"""Reads no key and writes none: on a Redis the bench was given it leaves only its script."""
KEYS = [f"{BENCH_PREFIX}:{{t:bench}}:k{i}" for i in range(5)]
ARGS: list[str | int] = ["accept", "d" * 32, 1_700_000_000_000, 60_000, "n0123456789abcdef"]
ARGS += [3, "file:///ws/a", "alice", "x" * 32, "delete", "", 1_000_000, "notes_delete", 0, 0]

Backend = str
RunFn = Callable[[str, int, int], Coroutine[Any, Any, None]]


async def _drive(call: Callable[[], Awaitable[Any]], calls: int, concurrency: int) -> None:
    """``calls`` calls from ``concurrency`` workers, on whatever backend runs this."""
    left = [calls]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await call()

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)


async def _coredis(url: str, calls: int, concurrency: int) -> None:
    client = redis_client(url)
    async with client:
        script = client.register_script(SCRIPT)

        async def call() -> Any:
            return await script(keys=KEYS, args=ARGS)

        await _drive(call, concurrency * 4, concurrency)  # warm: connections, script cache
        t0 = time.process_time()
        await _drive(call, calls, concurrency)
        _RESULT.append(time.process_time() - t0)


async def _resp(url: str, calls: int, concurrency: int) -> None:
    async with RespRedis.from_url(url) as client:
        script = client.register_script(SCRIPT)

        async def call() -> Any:
            return await script(keys=KEYS, args=ARGS)

        await _drive(call, concurrency * 4, concurrency)
        t0 = time.process_time()
        await _drive(call, calls, concurrency)
        _RESULT.append(time.process_time() - t0)


async def _glide(url: str, calls: int, concurrency: int) -> None:  # pragma: no cover - optional
    import glide  # the bench extra's; imported here so the other candidates run without it

    parts = urlsplit(url)
    config = glide.GlideClientConfiguration(
        [glide.NodeAddress(parts.hostname or "127.0.0.1", parts.port or 6379)],
        database_id=int(parts.path.strip("/") or 0),
    )
    client = await glide.GlideClient.create(config)
    script = glide.Script(SCRIPT)  # type: ignore[no-untyped-call]
    keys: list[str | bytes] = list(KEYS)
    args: list[str | bytes] = [str(a) for a in ARGS]

    async def call() -> Any:
        return await client.invoke_script(script, keys=keys, args=args)

    try:
        await _drive(call, concurrency * 4, concurrency)
        t0 = time.process_time()
        await _drive(call, calls, concurrency)
        _RESULT.append(time.process_time() - t0)
    finally:
        await client.close()


_RESULT: list[float] = []
CANDIDATES: dict[str, RunFn] = {"coredis": _coredis, "resp": _resp, "glide": _glide}


def available() -> list[str]:
    """The candidates that can run here (glide only when installed)."""
    names = ["coredis", "resp"]
    if importlib.util.find_spec("glide") is not None:
        names.append("glide")
    return names


def cpu_per_call_us(name: str, backend: Backend, url: str, calls: int, concurrency: int) -> float:
    """CPU µs per call of one candidate on one backend (a fresh event loop)."""
    _RESULT.clear()
    fn = CANDIDATES[name]
    if backend == "trio":
        trio.run(fn, url, calls, concurrency)
    else:
        uvloop.run(fn(url, calls, concurrency)) if backend == "uvloop" else asyncio.run(
            fn(url, calls, concurrency)
        )
    return _RESULT[0] / calls * 1e6


def compare_clients(
    url: str,
    *,
    calls: int = 5_000,
    concurrency: int = 16,
    rounds: int = 3,
    backends: tuple[Backend, ...] = ("uvloop", "trio"),
    names: list[str] | None = None,
) -> list[dict[str, Any]]:
    """One row per (candidate, backend): median CPU µs per call over ``rounds`` alternated
    rounds, and the ratio to coredis on the same backend."""
    names = names or available()
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for backend in backends:
            for name in names:
                us = cpu_per_call_us(name, backend, url, calls, concurrency)
                samples.setdefault((name, backend), []).append(us)
    rows = []
    for (name, backend), values in samples.items():
        us = statistics.median(values)
        base = statistics.median(samples[("coredis", backend)])
        rows.append(
            {
                "client": name,
                "backend": backend,
                "cpu_us_per_call": round(us, 1),
                "vs_coredis": round(us / base, 3) if base else None,
                "calls": calls,
                "concurrency": concurrency,
                "rounds": rounds,
            }
        )
    return rows


# Ad hoc: python -m cluster.lab.redis_clients redis://127.0.0.1:6379/0
if __name__ == "__main__":  # pragma: no cover
    import sys

    for row in compare_clients(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/0"):
        print(row)
