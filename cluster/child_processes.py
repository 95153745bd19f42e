"""Child processes that print their URL on one line once ready: started with a lifeline, read.

Layer: cluster. Node processes (``cluster.serve``), the bench's servers (``cluster.bench.procs``)
and the lab's SDK references all start a child, which prints the URL it serves on one line when
it is ready, and read that line; a child started here also watches a lifeline pipe
(``nodes.serving.lifeline``), so it stops by itself should this process end without stopping it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import trio

from nodes.serving.lifeline import open_lifeline


async def read_url_line(stream: trio.abc.ReceiveStream, who: str) -> str:
    """The first line ``stream`` carries, stripped; a stream that ends first means the child
    (``who``) exited before it was ready (``RuntimeError``)."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            raise RuntimeError(f"{who} exited before it was ready")
        line += chunk
    return line.decode().strip()


@asynccontextmanager
async def open_with_lifeline(
    command: Callable[[int], list[str]], env: Mapping[str, str] | None = None
) -> AsyncIterator[trio.Process]:
    """Start ``command(lifeline_fd)`` with its standard output piped and the lifeline's read end
    passed to it; the write end stays open here until the block ends (the caller stops the
    process inside it)."""
    lifeline, keep = open_lifeline()
    try:
        proc = await trio.lowlevel.open_process(
            command(lifeline), stdout=subprocess.PIPE, env=env, pass_fds=(lifeline,)
        )
    except BaseException:
        os.close(keep)
        raise
    finally:
        os.close(lifeline)
    try:
        yield proc
    finally:
        os.close(keep)
