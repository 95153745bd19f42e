"""A node started as an operator starts one (``notes-cluster node --config FILE``) loads nothing
of the load generator, the simulation seams or the lab, even after serving a request.

Layer: tests. The node runs in a subprocess through the same entry as the ``notes-cluster``
script (``cluster.cli.main``), with one addition made before the entry runs: an ``atexit`` hook
that writes ``sorted(sys.modules)`` to a file when the process ends. The test serves one
``notes_create`` through it, stops it with SIGTERM (its normal end, exit 0) and reads the list:
what the process held after serving, whatever it imported lazily on the way.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.own_redis import own_redis
from tests.test_serving import (
    REQUEST_TIMEOUT_S,
    START_TIMEOUT_S,
    _create_body,
    _headers,
    _note_exists,
    _write_config,
    start_when_ready,
)

FORBIDDEN = ("loadgen", "store.simulation", "cluster.lab")
"""Packages a node process must never load."""

ENTRY = """\
import atexit, json, sys

def _write_modules(path=sys.argv.pop(1)):
    with open(path, "w", encoding="utf-8") as out:
        json.dump(sorted(sys.modules), out)

atexit.register(_write_modules)
from cluster.cli import main
main()
"""
"""``notes-cluster`` (``cluster.cli.main``), which writes its modules to ``argv[1]`` on exit."""


def _forbidden(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]


def test_the_forbidden_filter_catches_each_package_and_nothing_of_the_same_prefix() -> None:
    modules = ["loadgen", "loadgen.workload", "store.simulation.entropy", "cluster.lab.servers"]
    assert _forbidden([*modules, "store.simulation_x", "cluster.labels", "store.notes"]) == modules


@pytest.mark.slow
def test_a_node_process_after_serving_holds_no_module_of_the_harness_seams_or_lab(
    tmp_path: Path,
) -> None:
    modules_file = tmp_path / "modules.json"
    with own_redis(tmp_path) as server:
        args = ["node", "--config", str(_write_config(tmp_path))]
        args += ["--redis", server.url, "--log-level", "WARNING"]
        command = [sys.executable, "-c", ENTRY, str(modules_file), *args]
        proc, port = start_when_ready(command, tmp_path / "node.out")
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            reply = httpx.post(
                url,
                content=_create_body("one request"),
                headers=_headers(),
                timeout=REQUEST_TIMEOUT_S,
            )
            assert reply.status_code == 200, reply.text
            note_id = reply.json()["result"]["structuredContent"]["noteId"]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=START_TIMEOUT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        assert _note_exists(server.url, "nc", note_id)
    modules = json.loads(modules_file.read_text(encoding="utf-8"))
    # The list is the serving process's: it holds the node's app and the server.
    assert "nodes.serving.app" in modules
    assert "nodes.serving.http_server" in modules
    assert _forbidden(modules) == []
