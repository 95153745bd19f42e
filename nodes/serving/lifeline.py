"""Children that never outlive their parent: the lifeline pipe and the kernel's parent-death
signal.

Layer: nodes (serving). The parent of node processes (``serve --processes``) holds the only
write end of a pipe, the *lifeline*, whose read end each child watches: it turns readable (EOF)
exactly when the parent is gone, however the parent ended (SIGKILL included), and the child then
drains as on SIGTERM. The kernel's PR_SET_PDEATHSIG is used for uvicorn's worker processes and,
through ``stop_with_parent``, for every ``redis-server`` the project starts: it fires when the
*thread* that started the child ends, so such children are started from the main thread (never
through trio, which starts processes from a worker thread that ends after ten idle seconds).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent (thread) ends."""

log = logging.getLogger("nodes.serving.lifeline")


def open_lifeline() -> tuple[int, int]:
    """A pipe ``(read_fd, write_fd)``: pass ``read_fd`` to a child (``pass_fds``) and close it
    here; keep ``write_fd`` open, never write to it, and close it once the child has ended."""
    return os.pipe()


def watch_lifeline(fd: int, on_parent_gone: Callable[[], None]) -> threading.Thread:
    """In a child: call ``on_parent_gone`` (from a daemon thread) when the lifeline's write end
    is closed everywhere, i.e. the parent is gone."""

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass  # nobody writes; data would be a misuse, EOF is the signal
        except OSError:
            pass
        on_parent_gone()

    thread = threading.Thread(target=watch, name="lifeline", daemon=True)
    thread.start()
    return thread


def terminate_self() -> None:
    """Send SIGTERM to this process (a node then drains as when its supervisor stops it)."""
    log.warning("parent process gone: draining and exiting")
    os.kill(os.getpid(), signal.SIGTERM)


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Linux: have the kernel send ``signum`` when the thread that started this process ends
    (PR_SET_PDEATHSIG); a parent already gone sends it now. Elsewhere: nothing."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: nothing to arm
        return
    if parent == 1 or os.getppid() != parent:  # the parent died before the call
        os.kill(os.getpid(), signum)


def _arm_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def stop_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` (Linux; None elsewhere) that has the kernel send
    the child SIGTERM when its parent ends, however it ends (SIGKILL included): for children
    that cannot watch a lifeline, such as ``redis-server``.

    PR_SET_PDEATHSIG fires when the *thread* that started the child ends: call ``Popen`` from
    the main thread, never through ``trio.lowlevel.open_process``. Off the main thread nothing
    is armed (the child would be stopped when that thread ends) and a warning says so."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        log.warning("child started off the main thread: it will not stop with its parent")
        return None
    return _arm_pdeathsig
