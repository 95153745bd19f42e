"""One node process serving the same node twice, metrics off and on, switching between them.

Layer: cluster (the lab). ``python -m cluster.lab.metrics_switch_node`` takes
``nodes.serving.process``'s command line (``cluster.serve.ProcessNode`` writes it) and a few
options of its own after it. It builds two ``NodeApp``s exactly as a node process builds one,
one without metrics and one with them (``OperatorOptions.metrics_port``: a metered store, the HTTP
app's meter, the metrics port served by the same server), and serves both through ``SwitchApp``
on one uvicorn server (the metrics port's connections go to the metered node's endpoint, as
a node process has them: ``nodes.serving.http_server``'s ``port_apps``). Every request goes to the
app of the current *mode*; a clock in the process switches the mode every window (off, on,
on, off, ...: a drift cancels) and reads, at the start and end of each window after a short
guard (requests in flight at the switch finish in it), this process's CPU clock, the requests
completed and Redis' CPU (``--redis-pid``).

Why one process: two node processes started once differ by more than metrics cost (hash seed,
memory layout, the core's neighbours: two runs of one bench read 0.93 and 1.19 of the same
code), so comparing them is a draw. One process switching every few hundred milliseconds puts
each mode beside the other under the same load, in the same process, many times over.

Control (on the MCP port, answered by ``SwitchApp`` itself, never by a node):

- ``POST /switch/mark``: forget the windows recorded so far; record from the next one;
- ``GET /switch/windows``: the windows recorded since the mark, as JSON.

``--on-extra-us N`` makes the metered app burn N µs of CPU per request: a known cost, to check
that the measure sees one (``tests/test_lab_metrics_switch.py``); ``--same`` builds both
without metrics: the measure's A/A check, which should read 1 within its interval.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from nodes.http import ASGIScope, Receive, Send
from nodes.serving.app import NodeApp, NodeOptions
from nodes.serving.http_server import bind_socket
from nodes.serving.operator import OperatorOptions, bind_metrics
from nodes.serving.process import base_url, parser, serve_sockets, settings_from_args

CONTROL = "/switch/"
MARK, WINDOWS = "/switch/mark", "/switch/windows"
PATTERN = (0, 1, 1, 0)
"""The modes in turn (0: metrics off, 1: on), repeated: ABBA, so a linear drift cancels."""
MODES = ("off", "on")


def _own_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="metrics_switch_node", add_help=False)
    p.add_argument("--window-ms", type=float, default=200.0)
    p.add_argument("--guard-ms", type=float, default=20.0)
    p.add_argument("--redis-pid", type=int, default=None)
    p.add_argument("--on-extra-us", type=float, default=0.0)
    p.add_argument("--same", action="store_true", help="both nodes without metrics (A/A)")
    return p


def redis_cpu_ns(pid: int | None) -> int:
    """Nanoseconds of CPU of process ``pid``, all its threads (``/proc/PID/task/*/schedstat``:
    the scheduler's own sum, finer than ``stat``'s clock ticks); 0 without a pid or once gone."""
    if pid is None:
        return 0
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text(encoding="ascii").split()[0])
    return total


@dataclass(frozen=True)
class Reading:
    """The clocks at one instant."""

    wall_ns: int
    cpu_ns: int
    requests: int
    redis_ns: int


@dataclass
class SwitchApp:
    """Requests to ``apps[mode]``; the lifespan of both; the switching clock; the control."""

    apps: tuple[NodeApp, NodeApp]
    window_s: float
    guard_s: float
    redis_pid: int | None = None
    on_extra_s: float = 0.0
    mode: int = 0
    done: int = 0
    """Requests completed (both apps; a window's count is its difference)."""
    served: list[int] = field(default_factory=lambda: [0, 0])
    """Requests each app served (counted when each ended), since start."""
    windows: list[dict[str, Any]] = field(default_factory=list)
    recording: bool = False

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"].startswith(CONTROL):
            await self._control(scope, send)
            return
        mode = self.mode
        try:
            await self.apps[mode](scope, receive, send)
        finally:
            if mode and self.on_extra_s:
                _burn(self.on_extra_s)
            self.done += 1
            self.served[mode] += 1

    async def drain(self) -> None:
        """The server stops: both nodes drain."""
        for app in self.apps:
            await app.drain()

    def reading(self) -> Reading:
        """The clocks now."""
        return Reading(
            time.monotonic_ns(), time.process_time_ns(), self.done, redis_cpu_ns(self.redis_pid)
        )

    async def switch(self) -> None:
        """Alternate the modes forever, recording each window once marked."""
        turn = 0
        while True:
            mode = PATTERN[turn % len(PATTERN)]
            turn += 1
            self.mode = mode
            await anyio.sleep(self.guard_s)
            start = self.reading()
            await anyio.sleep(self.window_s - self.guard_s)
            end = self.reading()
            if self.recording:
                self.windows.append(_window(MODES[mode], start, end))

    async def _lifespan(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        """Start both apps (each through its own lifespan), then the clock; stop them alike."""
        async with anyio.create_task_group() as tasks:
            inboxes, outboxes = [], []
            for app in self.apps:
                to_app, app_in = anyio.create_memory_object_stream[Mapping[str, Any]](1)
                app_out, from_app = anyio.create_memory_object_stream[Mapping[str, Any]](1)
                tasks.start_soon(app, scope, app_in.receive, app_out.send)
                inboxes.append(to_app)
                outboxes.append(from_app)

            async def each(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
                replies = []
                for inbox, outbox in zip(inboxes, outboxes, strict=True):
                    await inbox.send(message)
                    replies.append(await outbox.receive())
                return replies

            startup = await receive()
            replies = await each(startup)
            failed = [r for r in replies if r["type"] == "lifespan.startup.failed"]
            if failed:
                await send(dict(failed[0]))
                tasks.cancel_scope.cancel()
                return
            tasks.start_soon(self.switch)
            await send({"type": "lifespan.startup.complete"})
            shutdown = await receive()
            await each(shutdown)
            tasks.cancel_scope.cancel()
            await send({"type": "lifespan.shutdown.complete"})

    async def _control(self, scope: ASGIScope, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if path == MARK and method == "POST":
            self.windows = []
            self.recording = True
            body: dict[str, Any] = {"marked": True}
        elif path == WINDOWS and method == "GET":
            body = {
                "windows": self.windows,
                "served": dict(zip(MODES, self.served, strict=True)),
                "metrics_port": self.apps[1].options.ops.metrics_port,
            }
        else:
            await _answer(send, 404, {"error": "unknown control path"})
            return
        await _answer(send, 200, body)


def _window(mode: str, start: Reading, end: Reading) -> dict[str, Any]:
    return {
        "mode": mode,
        "start_ns": start.wall_ns,
        "end_ns": end.wall_ns,
        "seconds": (end.wall_ns - start.wall_ns) / 1e9,
        "cpu_ns": end.cpu_ns - start.cpu_ns,
        "requests": end.requests - start.requests,
        "redis_ns": end.redis_ns - start.redis_ns,
    }


def _burn(seconds: float) -> None:
    """Spend ``seconds`` of this process's CPU (the calibration's known cost)."""
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


def main(argv: list[str] | None = None) -> None:
    """Parse a node process's command line and this module's options; serve both apps."""
    a, rest = parser().parse_known_args(argv)
    own = _own_parser().parse_args(rest)
    settings = settings_from_args(a)
    sock = bind_socket(a.host, a.port)
    base = base_url(sock)
    metrics_socket, ops = bind_metrics(OperatorOptions(metrics_host=a.metrics_host, metrics_port=0))
    assert metrics_socket is not None
    assert ops.metrics_port is not None

    def node(mode: str, node_ops: OperatorOptions) -> NodeApp:
        options = NodeOptions(
            redis_url=a.redis,
            node_id=f"{a.node_id}-{mode}",
            prefix=a.prefix,
            public_url=base,
            ops=node_ops,
            server_times_bodies=True,
            server_routes_metrics_port=True,
        )
        return NodeApp(settings, options)

    app = SwitchApp(
        (node("off", OperatorOptions()), node("on", OperatorOptions() if own.same else ops)),
        window_s=own.window_ms / 1000,
        guard_s=own.guard_ms / 1000,
        redis_pid=own.redis_pid,
        on_extra_s=own.on_extra_us / 1e6,
    )
    serve_sockets(
        app, settings, [sock, metrics_socket], {ops.metrics_port: app.apps[1].serve_metrics}
    )


if __name__ == "__main__":
    main()
