"""A run folder that checks offline: the store facts the checker needs, written as files.

Layer: loadgen. Reads the store once after a run (``store.journal``) and writes, per tenant,
``store/<tenant>.journal.jsonl``, ``store/<tenant>.notes.jsonl`` and ``store/<tenant>.replay.jsonl``
plus ``store/meta.json`` (grace, and per tenant the Redis clock read right after its replay
entries were listed). With ``history.jsonl`` (one per load process: the folder's own, or those of
its ``worker-*`` subfolders) that is all ``notes-cluster check RUN_DIR`` needs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loadgen.history import SHAPE_ERRORS, DamagedRunFile, read_json_file, read_json_lines
from store.client import sync_client
from store.journal import (
    JournalEntry,
    list_replay_entries,
    read_final_notes,
    read_journal,
    redis_time_ms,
)

STORE_DIR = "store"
META_FILE = "meta.json"
HISTORY_FILE = "history.jsonl"


@dataclasses.dataclass(frozen=True)
class TenantFacts:
    """What the store held for one tenant after the run."""

    tenant: str
    journal: list[JournalEntry]
    final_notes: dict[tuple[str, str], str]
    replay_left: dict[tuple[str, str], int]
    redis_end_ms: int


def _write_lines(path: Path, rows: Iterable[Any]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")


def dump_store_facts(
    run_dir: Path,
    url: str,
    prefix: str,
    tenants: Iterable[str],
    grace_ms: int,
    limits: dict[str, int] | None = None,
    since_ms: int = 0,
) -> None:
    """Read every tenant's journal (from ``since_ms`` on, Redis clock: 0 for all of it),
    surviving notes and replay entries; write them as files (before the run's keys are
    deleted), with the nodes' configured bounds (``limits``:
    ``loadgen.check.limits.Limits.to_json``) when known."""
    out = run_dir / STORE_DIR
    out.mkdir(parents=True, exist_ok=True)
    client = sync_client(url, decode_responses=True)
    ends: dict[str, int] = {}
    try:
        for tenant in tenants:
            journal = read_journal(client, prefix, [tenant], since_ms)
            notes = read_final_notes(client, prefix, [tenant])
            replay = list_replay_entries(client, prefix, [tenant])
            ends[tenant] = redis_time_ms(client)  # after the PTTLs: see check_replay_entries
            _write_lines(out / f"{tenant}.journal.jsonl", (dataclasses.asdict(e) for e in journal))
            _write_lines(out / f"{tenant}.notes.jsonl", ([n, ws] for (_, n), ws in notes.items()))
            _write_lines(out / f"{tenant}.replay.jsonl", ([n, t] for (_, n), t in replay.items()))
    finally:
        client.close()
    meta: dict[str, Any] = {"grace_ms": grace_ms, "prefix": prefix, "redis_end_ms": ends}
    if limits is not None:
        meta["limits"] = limits
    if since_ms:
        meta["journal_since_ms"] = since_ms
    (out / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def store_meta(run_dir: Path) -> dict[str, Any]:
    """``store/meta.json`` of a run folder: ``grace_ms`` and per tenant ``redis_end_ms``
    (``DamagedRunFile`` if it is missing or holds something else)."""
    path = run_dir / STORE_DIR / META_FILE
    meta = read_json_file(path, "the store facts' grace and Redis clock per tenant")
    try:
        int(meta["grace_ms"])
        ends = {str(t): int(ms) for t, ms in meta["redis_end_ms"].items()}
    except SHAPE_ERRORS as exc:
        raise DamagedRunFile(f"{path}: no grace_ms and redis_end_ms ({exc!r})") from None
    return dict(meta) | {"redis_end_ms": ends}


def tenants_of(run_dir: Path) -> list[str]:
    """The tenants whose facts the folder holds."""
    return sorted(store_meta(run_dir)["redis_end_ms"])


def _note_at(pair: list[Any]) -> tuple[str, str]:
    note, where = pair
    return str(note), str(where)


def _expires_at(pair: list[Any]) -> tuple[str, int]:
    nonce, ttl = pair
    return str(nonce), int(ttl)


def read_tenant_facts(run_dir: Path, tenant: str) -> TenantFacts:
    """One tenant's store facts, as ``dump_store_facts`` wrote them (``DamagedRunFile`` at a
    file that is missing or a line that is not a fact)."""
    base = run_dir / STORE_DIR
    journal = list(
        read_json_lines(
            base / f"{tenant}.journal.jsonl", lambda d: JournalEntry(**d), "journal entries"
        )
    )
    notes = read_json_lines(base / f"{tenant}.notes.jsonl", _note_at, "[note, workspace]")
    replay = read_json_lines(base / f"{tenant}.replay.jsonl", _expires_at, "[nonce, ttl]")
    end = store_meta(run_dir)["redis_end_ms"][tenant]
    return TenantFacts(
        tenant,
        journal,
        {(tenant, n): ws for n, ws in notes},
        {(tenant, n): ttl for n, ttl in replay},
        end,
    )


FAULTS_FILE = "faults.json"
"""The faults a load process injected (``cluster.faults.write_faults``), by wall clock."""


def fault_rows(run_dir: Path) -> list[dict[str, Any]] | None:
    """Every fault window the folder's load processes recorded (its own ``faults.json`` and
    its subfolders'); None when none of them recorded any file (not even an empty one)."""
    paths = [run_dir / FAULTS_FILE] if (run_dir / FAULTS_FILE).exists() else []
    paths += sorted(run_dir.glob(f"*/{FAULTS_FILE}"))
    if not paths:
        return None
    rows: list[dict[str, Any]] = []
    for path in paths:
        found = read_json_file(path, "the faults a load process injected")
        if not isinstance(found, list):
            raise DamagedRunFile(f"{path}: not a list of faults")
        rows.extend(found)
    return rows


def history_files(run_dir: Path) -> list[Path]:
    """The folder's ``history.jsonl`` and those of its subfolders (one per load process)."""
    own = [run_dir / HISTORY_FILE] if (run_dir / HISTORY_FILE).exists() else []
    return own + sorted(p for p in run_dir.glob(f"*/{HISTORY_FILE}"))


# --- naming and claiming run folders ------------------------------------------------------------

INCOMPLETE_FILE = "INCOMPLETE"
"""In a run folder while its run has not finished (and for good when it never did): what ran,
when, and, once known, why it stopped. ``check`` refuses a folder that holds one."""

RUN_MARKERS = (HISTORY_FILE, "results.json", INCOMPLETE_FILE, "workers.json", "failover.json")
"""Files only a run writes: a folder holding one of them is a run's, which ``--replace`` may
delete; any other non-empty folder is never deleted."""


class RunFolderError(RuntimeError):
    """A run folder cannot be used (it holds something and replacing was not asked for)."""


def new_run_dir(parent: Path, stem: str) -> Path:
    """A new, empty folder ``parent/stem`` (or ``stem-2``, ``stem-3``, ...): created here, so two
    runs started in the same second in one folder never share one."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = parent / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise RunFolderError(f"{parent}: no free name for a run folder {stem}-N")


def claim_out_dir(path: Path, *, replace: bool) -> Path:
    """``--out PATH``: an empty or new folder is used as it is; a non-empty one only with
    ``replace`` and only when it holds a run (it is then deleted and made again)."""
    import shutil

    if path.exists() and not path.is_dir():
        raise RunFolderError(f"--out {path}: a file of that name exists")
    if path.is_dir() and any(path.iterdir()):
        if not replace:
            raise RunFolderError(
                f"--out {path} is not empty; give --replace to delete it and write the new run "
                "there, or choose another folder"
            )
        if not any((path / name).exists() for name in RUN_MARKERS):
            raise RunFolderError(
                f"--out {path} holds files but no run ({', '.join(RUN_MARKERS)}): not deleted "
                "even with --replace; choose another folder"
            )
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def mark_incomplete(run_dir: Path, text: str) -> None:
    """Write (or extend) the folder's ``INCOMPLETE`` marker with one line of ``text``."""
    with (run_dir / INCOMPLETE_FILE).open("a", encoding="utf-8") as fh:
        fh.write(text.rstrip("\n") + "\n")


def mark_complete(run_dir: Path) -> None:
    """Remove the ``INCOMPLETE`` marker: every file of the run is written."""
    (run_dir / INCOMPLETE_FILE).unlink(missing_ok=True)


def incomplete_reason(run_dir: Path) -> str | None:
    """What the folder's ``INCOMPLETE`` marker says (None when the run finished)."""
    path = run_dir / INCOMPLETE_FILE
    if not path.exists():
        return None
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return "; ".join(line for line in lines if line) or "no reason recorded"
