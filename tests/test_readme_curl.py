"""The docs' curl walkthrough (docs/how-to/demo-and-curl.md), run exactly as written against
`notes-cluster serve --demo`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "demo-and-curl.md"
PAGE_PORT = 8700


def _walkthrough() -> str:
    text = PAGE.read_text(encoding="utf-8")
    m = re.search(r"<!-- curl-walkthrough -->\n```sh\n(.*?)```", text, re.S)
    assert m is not None, f"{PAGE} lost its curl walkthrough block"
    return m.group(1)


def _free_base_port(n: int) -> int:
    """A port P such that P..P+n-1 were all free a moment ago."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n > 65535:
            continue
        try:
            socks = []
            for i in range(n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no run of free ports")


@pytest.fixture
def demo_cluster() -> Iterator[int]:
    """`notes-cluster serve --demo --nodes 3` on free ports; yields the base port."""
    base = _free_base_port(3)
    exe = shutil.which("notes-cluster")
    assert exe is not None, "the notes-cluster console script is not installed"
    proc = subprocess.Popen(
        [exe, "serve", "--demo", "--nodes", "3", "--port", str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().strip() for _ in range(3)]
        assert urls == [f"http://127.0.0.1:{base + i}/mcp" for i in range(3)]
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_the_curl_walkthrough_deletes_once_and_replays_the_outcome(
    demo_cluster: int,
) -> None:
    script = _walkthrough()
    for i in range(3):
        script = script.replace(str(PAGE_PORT + i), str(demo_cluster + i))
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert len(replies) == 3
    form = replies[0]["result"]
    assert form["resultType"] == "input_required"
    options = form["inputRequests"]["confirm_delete"]["params"]["requestedSchema"]["properties"][
        "noteId"
    ]["oneOf"]
    assert [o["title"].split("(created ")[1][:4] for o in options] == ["2023", "2024", "2025"]
    first, again = replies[1]["result"], replies[2]["result"]
    assert first["structuredContent"] == {"deleted": True, "noteId": options[0]["const"]}
    assert "dev.notes-cluster/replay" not in first["_meta"]
    assert again["structuredContent"] == first["structuredContent"]
    assert again["_meta"]["dev.notes-cluster/replay"] is True
