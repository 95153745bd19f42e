"""Whether the suite runs under CI, where a missing dependency is a failure, not a skip.

Layer: tests. Any non-empty ``CI`` counts (``CI=true``, ``CI=1``, ``CI=yes``): a CI system that
spells it differently must not turn failures into skips. ``.ci/run`` sets ``CI=true`` itself.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    """True when ``CI`` is set to anything but the empty string."""
    return bool(os.environ.get("CI", "").strip())


def fail_in_ci_else_skip(reason: str) -> None:
    """Fail the test under CI, skip it elsewhere (never returns)."""
    if in_ci():
        pytest.fail(f"CI needs {reason}")
    pytest.skip(reason)
