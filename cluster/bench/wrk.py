"""The benchmark's HTTP load client: wrk with a Lua script, kept off the servers' core.

Layer: cluster (the bench). A Python client spends more CPU per request than a fast server
(httpx: several times more), so over HTTP the bench measures the server only if the client is
light: wrk (C, one keep-alive HTTP/1.1 connection per thread) drives ``wrk_flow.lua``, which
plays the two-round ``notes_delete`` flow from a file of targets. Where the machine has two
cores or more, wrk is pinned to the last one and the servers to the others
(``os.sched_setaffinity``). wrk's own CPU is read from its resource usage when it exits.

wrk measures latency per request (it has no clock a script can read), so an HTTP point's p50
and p99 are per request, not per flow; a flow is two requests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from cluster.bench.flows import SeededNote

LUA = Path(__file__).with_name("wrk_flow.lua")
WRK_MARGIN_S = 30.0
"""How long past its duration a wrk run may take before it is killed."""


class WrkMissing(RuntimeError):
    """wrk is not installed (Debian: ``apt-get install wrk``)."""


def wrk_path() -> str:
    """The wrk executable, or WrkMissing."""
    found = shutil.which("wrk")
    if found is None:
        raise WrkMissing("the HTTP points need wrk as their load client: apt-get install wrk")
    return found


def cpu_split() -> tuple[set[int], set[int]]:
    """(servers' CPUs, client's CPUs): the last CPU for the client when there are two or more."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return set(cpus), set(cpus)
    return set(cpus[:-1]), {cpus[-1]}


def pin(pids: Sequence[int], cpus: set[int]) -> None:
    """Keep ``pids`` (our own server processes) on ``cpus``; a vanished pid is skipped."""
    for pid in pids:
        try:
            os.sched_setaffinity(pid, cpus)
        except (ProcessLookupError, PermissionError):
            continue


@dataclass(frozen=True)
class WrkResult:
    """What wrk runs of one point produced (summed over the nodes' runs)."""

    flows: int
    failures: int
    requests: int
    elapsed_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    client_cpu_s: float


def _targets_file(targets: Sequence[SeededNote], tokens: dict[str, str], folder: Path) -> Path:
    path = folder / f"targets-{len(list(folder.iterdir()))}.txt"
    lines = (f"{tokens[t.principal]}|{t.workspace}|{t.title}|{t.note_id}\n" for t in targets)
    path.write_text("".join(lines), encoding="utf-8")
    return path


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * _UNITS[m.group(2)] if m else 0.0


def _parse(out: str, cpu_s: float) -> WrkResult:
    flows = re.search(r"FLOWS (\d+) FAILURES (\d+)", out)
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    if flows is None or done is None:
        raise RuntimeError(f"wrk printed no result: {out[-500:]}")
    dist = out.partition("Latency Distribution")[2]
    p50 = re.search(r"50%\s+(\S+)", dist)
    p99 = re.search(r"99%\s+(\S+)", dist)
    top = re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", out)
    return WrkResult(
        flows=int(flows.group(1)),
        failures=int(flows.group(2)),
        requests=int(done.group(1)),
        elapsed_s=_ms(done.group(2) + done.group(3)) / 1000,
        p50_ms=_ms(p50.group(1)) if p50 else 0.0,
        p99_ms=_ms(p99.group(1)) if p99 else 0.0,
        max_ms=_ms(top.group(1)) if top else 0.0,
        client_cpu_s=cpu_s,
    )


def _run_one(command: list[str], cpus: set[int], timeout_s: float) -> tuple[str, float]:
    """Run wrk (pinned), return its output and CPU seconds (from wait4's resource usage)."""
    # The command is ours: wrk found on PATH, our script, our URLs and file.
    proc = subprocess.Popen(  # noqa: S603
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        pin([proc.pid], cpus)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait(timeout_s)
    return out, usage.ru_utime + usage.ru_stime


async def run_wrk(
    urls: Sequence[str],
    targets: Sequence[SeededNote],
    tokens: dict[str, str],
    *,
    connections: int,
    seconds: float,
) -> WrkResult:
    """Flows for ``seconds`` (or until the targets run out) on ``connections`` connections
    spread over ``urls`` (one wrk per URL: each connection keeps to one node; nodes share
    nothing, so this costs what alternating nodes would)."""
    exe = wrk_path()
    _, client_cpus = cpu_split()
    per_url = max(1, connections // len(urls))
    share = len(targets) // len(urls)
    results: list[WrkResult] = []
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as folder:

        async def one(i: int, url: str) -> None:
            path = _targets_file(targets[i * share : (i + 1) * share], tokens, Path(folder))
            command = [exe, f"-t{per_url}", f"-c{per_url}", f"-d{max(1, round(seconds))}s"]
            command += ["--latency", "-s", str(LUA), url, "--", str(path), str(per_url)]
            out, cpu = await trio.to_thread.run_sync(
                _run_one, command, client_cpus, seconds + WRK_MARGIN_S
            )
            results.append(_parse(out, cpu))

        async with trio.open_nursery() as nursery:
            for i, url in enumerate(urls):
                nursery.start_soon(one, i, url)
    return _merge(results)


def _merge(results: list[WrkResult]) -> WrkResult:
    requests = sum(r.requests for r in results) or 1
    return WrkResult(
        flows=sum(r.flows for r in results),
        failures=sum(r.failures for r in results),
        requests=sum(r.requests for r in results),
        elapsed_s=max(r.elapsed_s for r in results),
        # Request-weighted median; the worst p99 and max (the runs are alike: same server code).
        p50_ms=sum(r.p50_ms * r.requests for r in results) / requests,
        p99_ms=max(r.p99_ms for r in results),
        max_ms=max(r.max_ms for r in results),
        client_cpu_s=sum(r.client_cpu_s for r in results),
    )
