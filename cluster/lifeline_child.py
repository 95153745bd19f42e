"""Run a Python module as a child process that stops by itself when its parent is gone.

Layer: cluster. ``python -m cluster.lifeline_child FD MODULE [ARGS...]`` watches the lifeline
pipe's read end ``FD`` (``nodes.serving.lifeline.open_lifeline``) and runs ``python -m MODULE
ARGS...`` in this process; should the parent end without stopping it (SIGKILL included), the pipe
reaches EOF and the process sends itself SIGTERM, on which the module stops as when its parent stops
it. For Python children started through trio, where PR_SET_PDEATHSIG cannot be used (trio starts
processes from a worker thread that ends when idle).
"""

from __future__ import annotations

import runpy
import sys

from nodes.serving.lifeline import terminate_self, watch_lifeline


def main(argv: list[str] | None = None) -> None:
    """Watch the lifeline ``argv[0]``, then run module ``argv[1]`` with the rest as its argv."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or not args[0].isdigit():
        sys.exit("usage: python -m cluster.lifeline_child FD MODULE [ARGS...]")
    watch_lifeline(int(args[0]), terminate_self)
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
