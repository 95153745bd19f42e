"""Node 22 and the JavaScript MCP clients of ``tests/js`` (installed by ``.ci/install-node``).

Layer: tests. Locates Node 22 (``$NOTES_CLUSTER_NODE_HOME``, default ``/opt/node22``, as the
installer puts it) and the packages pinned in ``tests/js/package.json``; a test that needs them
calls ``require_js()``, which skips where they are missing and fails under CI (``CI=true``),
where ``.ci/run`` installs them first. ``run_node`` runs a script or a package's CLI under trio,
bounded in time, with the environment the packages need (``HOME`` of the test's own, so the
Inspector writes no catalog into the user's home).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

ROOT = Path(__file__).resolve().parent.parent
JS_DIR = ROOT / "tests" / "js"
INSTALLER = ROOT / ".ci" / "install-node"
NODE_MAJOR = 22
RUN_TIMEOUT_S = 120.0
"""Bound on one Node process (a client script, one Inspector call, one conformance scenario run):
far above what each takes (seconds), so only a hang reaches it."""


def node_bin_dir() -> Path:
    """Where the installer puts Node 22's ``node`` (see ``.ci/install-node``)."""
    home = Path(os.environ.get("NOTES_CLUSTER_NODE_HOME", "/opt/node22"))
    arch = "arm64" if platform.machine() in ("aarch64", "arm64") else "x64"
    return home / "node_modules" / f"node-linux-{arch}" / "bin"


@dataclass(frozen=True)
class JsEnv:
    """Node 22 and the installed packages of ``tests/js``."""

    node: Path
    modules: Path

    def package_dir(self, name: str) -> Path:
        """The installed folder of package ``name`` (``@scope/pkg``)."""
        return self.modules / name

    def bin(self, package: str, command: str) -> Path:
        """The script behind a package's ``bin`` entry ``command``."""
        manifest = json.loads((self.package_dir(package) / "package.json").read_text())
        bins = manifest["bin"]
        entry = bins if isinstance(bins, str) else bins[command]
        return self.package_dir(package) / entry


def _problem(folder: Path) -> str | None:
    node = node_bin_dir() / "node"
    if not node.exists():
        return f"no Node {NODE_MAJOR} at {node}"
    try:
        version = subprocess.run(
            [str(node), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{node} does not run: {exc}"
    if not version.startswith(f"v{NODE_MAJOR}."):
        return f"{node} is {version}, not Node {NODE_MAJOR}"
    wanted: dict[str, str] = json.loads((folder / "package.json").read_text())["dependencies"]
    for name, pinned in sorted(wanted.items()):
        manifest = folder / "node_modules" / name / "package.json"
        if not manifest.exists():
            return f"{name} is not installed in {folder / 'node_modules'}"
        installed = json.loads(manifest.read_text())["version"]
        if installed != pinned:
            return f"{name} {installed} is installed, {pinned} is pinned"
    return None


def require_js(folder: Path = JS_DIR) -> JsEnv:
    """Node 22 and the packages pinned (exact versions) in ``folder``'s package.json: skip
    where missing, fail under CI."""
    problem = _problem(folder)
    if problem is not None:
        fix = INSTALLER.relative_to(ROOT)
        message = f"{problem}: run {fix}" + ("" if folder == JS_DIR else f" {folder}")
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs Node {NODE_MAJOR} and the packages of {folder}: {message}")
        pytest.skip(message)
    return JsEnv(node_bin_dir() / "node", folder / "node_modules")


@dataclass(frozen=True)
class NodeRun:
    """One finished Node process."""

    returncode: int
    stdout: str
    stderr: str

    def json_line(self) -> Any:
        """The last line of stdout, as JSON (the client scripts print one)."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        assert lines, f"no output; stderr:\n{self.stderr}"
        return json.loads(lines[-1])


async def run_node(
    js: JsEnv,
    args: Sequence[str | Path],
    *,
    home: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path = JS_DIR,
    timeout_s: float = RUN_TIMEOUT_S,
) -> NodeRun:
    """Run ``node args...`` with Node 22 first on PATH and ``HOME`` set to ``home``."""
    full_env = {
        **os.environ,
        "PATH": f"{js.node.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "NO_COLOR": "1",
        **(env or {}),
    }
    with trio.fail_after(timeout_s):
        done = await trio.run_process(
            [str(js.node), *map(str, args)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=full_env,
            cwd=cwd,
        )
    return NodeRun(done.returncode, done.stdout.decode(), done.stderr.decode())
