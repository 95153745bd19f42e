"""A ``redis-server`` of the test's own whose wall clock the test sets, to the microsecond.

Layer: tests. ``tests/data/set_clock.c`` is compiled (``cc``) into a small preload library that
answers ``gettimeofday`` and ``clock_gettime(CLOCK_REALTIME)`` from a file the test maps and
writes; the server is started with it (``LD_PRELOAD``), so its ``TIME``, key expiry and stream
ids follow the time the test sets before each command. Its monotonic clock (the event loop's
timers) is the kernel's. A machine without a C compiler skips (CI fails instead).
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.ci import fail_in_ci_else_skip
from tests.own_redis import OwnRedis, own_redis

SHIM_SOURCE = Path(__file__).parent / "data" / "set_clock.c"


@dataclass
class ClockedRedis:
    """A running server and the clock it reads."""

    server: OwnRedis
    _clock: mmap.mmap

    def set_us(self, us: int) -> None:
        """Set the server's wall clock (microseconds since the epoch)."""
        self._clock[:8] = struct.pack("<q", us)


@contextmanager
def clocked_redis(folder: Path, start_us: int) -> Iterator[ClockedRedis]:
    """Compile the shim into ``folder``, start a server on it at ``start_us``; yield it."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        fail_in_ci_else_skip("a C compiler (cc) for the clock shim")
    assert compiler is not None
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / "set_clock.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(lib), str(SHIM_SOURCE)],
        check=True,
        capture_output=True,
    )
    path = folder / "clock.bin"
    path.write_bytes(struct.pack("<q", start_us))
    env = dict(os.environ, LD_PRELOAD=str(lib), SET_CLOCK_FILE=str(path))
    with (
        path.open("r+b") as f,
        mmap.mmap(f.fileno(), 8) as clock,
        own_redis(folder, env=env) as server,
    ):
        yield ClockedRedis(server, clock)
