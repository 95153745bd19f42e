"""``serve --demo --redis URL`` seeds the demo fixture once: a second start adds nothing, a demo
note a walkthrough deleted comes back, and the line it prints says how to remove the fixture."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.stores import demo_removal_hint, seed_demo
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_NOTES, DEMO_TENANT
from store.notes import NoteStore
from tests.own_redis import free_port, own_redis


async def _tps_reports(store: NoteStore) -> list[int]:
    found = await store.find(DEMO_TENANT, ALICE_NOTES, "TPS report")
    return [n.created_ms for n in found.notes]


async def test_seeding_twice_leaves_one_fixture_and_restores_a_deleted_demo_note(
    store: NoteStore,
) -> None:
    assert await seed_demo(store, only_missing=True) == len(DEMO_NOTES)
    assert await seed_demo(store, only_missing=True) == 0
    years = await _tps_reports(store)
    assert len(years) == 3  # the walkthrough's "three candidates"

    first = (await store.find(DEMO_TENANT, ALICE_NOTES, "TPS report")).notes[0]
    await store.move(DEMO_TENANT, first.note_id, ALICE_NOTES, ALICE_ARCHIVE, "alice")
    assert len(await _tps_reports(store)) == 2
    assert await seed_demo(store, only_missing=True) == 1
    assert sorted(await _tps_reports(store)) == sorted(years)


def test_the_removal_hint_names_the_demo_keys_only_and_never_a_password() -> None:
    hint = demo_removal_hint("redis://127.0.0.1:6379/0", "nc")
    assert "--scan --pattern 'nc:{t:demo}:*'" in hint
    assert "FLUSH" not in hint.upper()
    hidden = demo_removal_hint("redis://:s3cret@127.0.0.1:6379/0", "nc")
    assert "s3cret" not in hidden


@pytest.mark.slow
def test_serve_demo_on_a_named_redis_seeds_once_and_says_how_to_remove_it(tmp_path: Path) -> None:
    seeded = []
    with own_redis(tmp_path) as server:
        for _ in range(2):
            port = free_port()
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from cluster.cli import main; main()",
                    "serve",
                    "--demo",
                    "--nodes",
                    "1",
                    "--port",
                    str(port),
                    "--redis",
                    server.url,
                ],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == f"http://127.0.0.1:{port}/mcp"
            finally:
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=30)
            line = next(x for x in err.splitlines() if "demo note(s) seeded" in x)
            assert f"--scan --pattern 'nc:{{t:{DEMO_TENANT}}}:*'" in line
            seeded.append(int(line.split()[0]))
    assert seeded == [len(DEMO_NOTES), 0]
