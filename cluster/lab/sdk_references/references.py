"""Starting the conformance pack's reference servers: several instances of one SDK server
sharing a sealing key and a Redis, each a process that prints its endpoint URL when ready.

Layer: cluster (the lab). ``open_reference`` starts the instances of the Python SDK
reference (``cluster.lab.sdk_references.reference_sdk``) or of the TypeScript SDK reference
(``cluster/lab/sdk_references/reference_ts/server.ts``, run by Node 22), waits for each
URL, yields them, and kills each process by pid on exit.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import trio

from cluster.child_processes import read_url_line
from cluster.lab.sdk_references.reference_sdk import KEY_ENV

Sdk = Literal["python", "typescript"]

START_TIMEOUT_S = 120.0
"""How long an instance may take to print its URL: imports are slow on a loaded machine."""

TS_DIR = Path(__file__).resolve().parent / "reference_ts"
"""The TypeScript reference: ``server.ts``, its ``package.json`` (``npm ci`` installs it)."""

NODE_ENV = "NOTES_CLUSTER_NODE"
"""Path of the Node 22 binary (else ``node`` on PATH)."""


def node_binary() -> str | None:
    """Node 22 to run the TypeScript reference: ``NOTES_CLUSTER_NODE``, else ``node`` on PATH,
    provided its major version is 22 or later and the reference's packages are installed."""
    node, _ = _node_or_why()
    return node


def node_missing() -> str | None:
    """Why the TypeScript reference cannot run here (one clause), or None when it can."""
    return _node_or_why()[1]


def _node_or_why() -> tuple[str | None, str | None]:
    node = os.environ.get(NODE_ENV) or shutil.which("node")
    if not node:
        return None, f"no Node 22 found (set {NODE_ENV}, or put node on PATH)"
    try:
        out = subprocess.run(  # noqa: S603 - the operator's own Node binary
            [node, "--version"], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        return None, f"{node} does not run ({exc.strerror or type(exc).__name__})"
    version = out.stdout.strip()
    major = version.lstrip("v").split(".")[0]
    if not (major.isdigit() and int(major) >= 22):
        return None, f"{node} is Node {version or '(no version)'}, not 22 or later"
    if not (TS_DIR / "node_modules").is_dir():
        return (
            None,
            f"the TypeScript reference's packages are not installed (npm ci --prefix {TS_DIR})",
        )
    return node, None


ADDITIONS: dict[Sdk, tuple[str, ...]] = {
    "python": ("used-state-store",),
    "typescript": ("used-state-store", "bind-call"),
}
"""What each reference can add to what its SDK does (a flag each): the record of used states
(both), and binding the state to the tool and its arguments (the TypeScript codec binds only
what its ``bind`` callback returns)."""


def reference_command(
    sdk: Sdk, redis_url: str, prefix: str, state_ttl_s: float, additions: Sequence[str] = ()
) -> list[str]:
    """The argv of one instance (port 0: it picks a free one and prints its URL) with the named
    ``additions`` (see ``ADDITIONS``)."""
    unknown = set(additions) - set(ADDITIONS[sdk])
    if unknown:
        raise ValueError(f"the {sdk} reference has no addition {sorted(unknown)}")
    flags = ["--redis", redis_url, "--prefix", prefix, "--state-ttl", str(state_ttl_s)]
    flags += ["--port", "0", *(f"--{a}" for a in additions)]
    if sdk == "python":
        return [sys.executable, "-m", "cluster.lab.sdk_references.reference_sdk", *flags]
    node = node_binary()
    if node is None:
        raise RuntimeError(
            f"the TypeScript reference needs Node 22 ({NODE_ENV} or node on PATH) and "
            f"`npm ci --prefix {TS_DIR}`"
        )
    return [node, "--experimental-strip-types", str(TS_DIR / "server.ts"), *flags]


@asynccontextmanager
async def open_reference(
    sdk: Sdk,
    redis_url: str,
    *,
    instances: int = 2,
    prefix: str = "ncref",
    state_ttl_s: float = 300.0,
    additions: Sequence[str] = (),
) -> AsyncIterator[list[str]]:
    """``instances`` processes of one reference (with ``additions``) sharing a fresh sealing key
    and ``redis_url`` (keys under ``prefix``); yields their endpoint URLs."""
    argv = reference_command(sdk, redis_url, prefix, state_ttl_s, additions)
    env = {**os.environ, KEY_ENV: base64.b64encode(os.urandom(32)).decode("ascii")}
    procs: list[trio.Process] = []
    try:
        urls = []
        for _ in range(instances):
            proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, env=env)
            procs.append(proc)
            assert proc.stdout is not None
            with trio.fail_after(START_TIMEOUT_S):
                urls.append(await read_url_line(proc.stdout, "a reference instance"))
        yield urls
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
        with trio.CancelScope(shield=True):
            for proc in procs:
                await proc.wait()
