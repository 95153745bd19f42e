"""What a results file says of the machine it was measured on.

Layer: cluster. Absolute figures depend on the machine and on what else ran on it, so every
results file the project writes (the bench's ``bench.json``, a swarm's ``seeds.json``) records
the CPUs and their model, memory, Python, the platform and the load average (1, 5 and 15
minutes): a figure measured on a busy machine says so.
"""

from __future__ import annotations

import os
import platform
from typing import Any


def load_average() -> list[float]:
    """The load average over 1, 5 and 15 minutes, rounded to hundredths."""
    return [round(x, 2) for x in os.getloadavg()]


def machine(redis_version: str | None = None) -> dict[str, Any]:
    """The machine now, with the Redis version when the figures involved a Redis server."""
    found: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": load_average(),
    }
    if redis_version is not None:
        found["redis_version"] = redis_version
    return found


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` ("" where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""
