"""A run's folder: the only code that names or reads a run's files (``RunFolder``).

A run folder holds, per load process, ``history.jsonl``, ``tally.json``, ``latency.hdr``,
``faults.json`` and ``worker.json`` (a ``--workers`` run: one ``worker-<k>/`` subfolder each, and
``workers.json`` with the pids); the run's ``results.json`` (``loadgen.run.results``), its
pictures, ``nodes.log`` under faults, ``INCOMPLETE`` until the run wrote everything, and the store
facts below, so that the folder checks offline.

Layer: loadgen. Reads the store once after a run (``store.journal``) and writes, per tenant,
``store/<tenant>.journal.jsonl``, ``store/<tenant>.notes.jsonl`` and ``store/<tenant>.replay.jsonl``
plus ``store/meta.json`` (grace, and per tenant the Redis clock read right after its replay
entries were listed). With ``history.jsonl`` (one per load process: the folder's own, or those of
its ``worker-*`` subfolders) that is all ``notes-cluster check RUN_DIR`` needs.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from loadgen.check.legacy import LegacyFacts
from loadgen.check.records import StoreRecords
from loadgen.history import SHAPE_ERRORS, DamagedRunFile, read_json_file, read_json_lines
from loadgen.tally import Tally, merge
from loadgen.tenants import principals_of
from store.api import OP_RECORD_TTL_MS
from store.client_factory import sync_client
from store.journal import (
    JournalEntry,
    list_replay_entries,
    read_final_notes,
    read_journal,
    read_store_records,
    redis_time_ms,
)
from store.session_facts import read_session_facts

STORE_DIR = "store"
META_FILE = "meta.json"
HISTORY_FILE = "history.jsonl"
TALLY_FILE = "tally.json"
LATENCY_FILE = "latency.hdr"
RESULTS_FILE = "results.json"
PIDS_FILE = "workers.json"
"""The parent's and the workers' pids and the run's key prefix (to watch or stop it)."""
WORKER_FILE = "worker.json"
"""What a worker recorded for its parent: its last state expiry and its start (Redis clock)."""
WORKER_PREFIX = "worker-"
FINAL_STATE_FILE = "final_state.json"
"""A ``loadgen --foreign`` run's final state, listed through the target (no journal)."""
FAILOVER_FILE = "failover.json"
FAILOVER_TABLE_FILE = "failover.md"
NODES_LOG = "nodes.log"
PICTURE_FILE = "report.png"
PAGE_FILE = "report.html"
DETERMINISTIC_FILE = "deterministic.json"
"""A deterministic run's seed and settings: what ``simulate --replay`` runs again."""
DETERMINISM_FILE = "determinism.json"
"""``--check-determinism``'s outcome: same bytes, or the first divergent step."""
SEEDS_FILE = "seeds.json"
"""A deterministic ``--workers`` run's seeds and their verdicts (one ``seed-<N>/`` each)."""
BUGGIFY_LOG = "buggify.log"
"""The fault points that fired (``--buggify``)."""
SHRUNK_DIR = "shrunk"
"""Where ``notes-cluster shrink`` writes the smallest failing case, by default."""
REPLAY_FILE = "replay.sh"
"""In a shrunk case's folder: the command that replays it."""
ANOMALY_FILE = "anomaly.txt"
"""In a shrunk case's folder: the violation in words (Let / Then)."""
LANES_FILE = "lanes.png"
"""In a shrunk case's folder: its flows as lanes, fault windows shaded."""


@dataclasses.dataclass(frozen=True)
class TenantFacts:
    """What the store held for one tenant after the run."""

    tenant: str
    journal: list[JournalEntry]
    final_notes: dict[tuple[str, str], str]
    replay_left: dict[tuple[str, str], int]
    redis_end_ms: int
    records: StoreRecords | None = None
    """Operation records and usage counters (None: a folder whose facts do not hold them)."""
    legacy: LegacyFacts | None = None
    """The legacy session keyspace, the whole run's (None: a folder whose facts do not hold
    it)."""


LEGACY_FILE = "legacy.json"
"""The legacy session keyspace in a run folder's store facts (one file for every tenant: a
session belongs to a principal, not to a tenant)."""


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
    tenants = list(tenants)
    client = sync_client(url, decode_responses=True)
    ends: dict[str, int] = {}
    try:
        for tenant in tenants:
            journal = read_journal(client, prefix, [tenant], since_ms)
            notes = read_final_notes(client, prefix, [tenant])
            replay = list_replay_entries(client, prefix, [tenant])
            records = read_store_records(client, prefix, tenant)
            ends[tenant] = redis_time_ms(client)  # after the PTTLs: see check_replay_entries
            _write_lines(out / f"{tenant}.journal.jsonl", (dataclasses.asdict(e) for e in journal))
            _write_lines(out / f"{tenant}.notes.jsonl", ([n, ws] for (_, n), ws in notes.items()))
            _write_lines(out / f"{tenant}.replay.jsonl", ([n, t] for (_, n), t in replay.items()))
            (out / f"{tenant}.records.json").write_text(json.dumps(records), encoding="utf-8")
        principals = [p for t in tenants for p in principals_of(t)]
        legacy = read_session_facts(client, prefix, principals)
        (out / LEGACY_FILE).write_text(json.dumps(legacy), encoding="utf-8")
    finally:
        client.close()
    meta: dict[str, Any] = {
        "grace_ms": grace_ms,
        "prefix": prefix,
        "redis_end_ms": ends,
        "op_ttl_ms": OP_RECORD_TTL_MS,
    }
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
    meta = store_meta(run_dir)
    end = meta["redis_end_ms"][tenant]
    return TenantFacts(
        tenant,
        journal,
        {(tenant, n): ws for n, ws in notes},
        {(tenant, n): ttl for n, ttl in replay},
        end,
        _records(base / f"{tenant}.records.json", int(meta.get("op_ttl_ms", 0))),
        read_legacy_facts(run_dir),
    )


def read_legacy_facts(run_dir: Path) -> LegacyFacts | None:
    """The legacy session keyspace of a run folder; None in a folder written without it."""
    path = run_dir / STORE_DIR / LEGACY_FILE
    if not path.exists():
        return None
    found = read_json_file(path, "the legacy session keyspace")
    try:
        return LegacyFacts.from_json(found)
    except SHAPE_ERRORS as exc:
        raise DamagedRunFile(f"{path}: not the legacy session keyspace ({exc!r})") from None


def _records(path: Path, op_ttl_ms: int) -> StoreRecords | None:
    """A tenant's operation records and usage counters; None in a folder written without them."""
    if not path.exists():
        return None
    found = read_json_file(path, "a tenant's operation records and usage counters")
    try:
        return StoreRecords.from_json(found, op_ttl_ms)
    except SHAPE_ERRORS as exc:
        raise DamagedRunFile(f"{path}: not operation records and usage ({exc!r})") from None


FAULTS_FILE = "faults.json"
"""The faults a load process injected (``RunFolder.write_faults``), by wall clock."""


def read_fault_rows(run_dir: Path) -> list[dict[str, Any]] | None:
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
    """The folder's ``history.jsonl`` and those of its workers' subfolders (one per load
    process); another subfolder (``shrunk/``, a run of its own) is no part of this run."""
    own = [run_dir / HISTORY_FILE] if (run_dir / HISTORY_FILE).exists() else []
    return own + sorted(p for p in run_dir.glob(f"{WORKER_PREFIX}*/{HISTORY_FILE}"))


# --- naming and claiming run folders ------------------------------------------------------------

INCOMPLETE_FILE = "INCOMPLETE"
"""In a run folder while its run has not finished (and for good when it never did): what ran,
when, and, once known, why it stopped. ``check`` refuses a folder that holds one."""

RUN_MARKERS = (HISTORY_FILE, RESULTS_FILE, INCOMPLETE_FILE, PIDS_FILE, FAILOVER_FILE)
"""Files only a run writes: a folder holding one of them is a run's, which ``--replace`` may
delete; any other non-empty folder is never deleted."""


def is_run_folder(path: Path) -> bool:
    """True when ``path`` holds a file only a run writes (``RUN_MARKERS``)."""
    return any((path / name).exists() for name in RUN_MARKERS)


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


def read_tally(run_dir: Path) -> Tally:
    """Read ``run_dir/tally.json`` (``DamagedRunFile`` if it is missing or something else)."""
    path = run_dir / TALLY_FILE
    d = read_json_file(path, "the run's counters per race kind")
    try:
        return Tally.from_json(d)
    except SHAPE_ERRORS as exc:
        raise DamagedRunFile(f"{path}: not the run's counters ({exc!r})") from None


def read_tallies(run_dir: Path) -> Tally:
    """A folder's ``tally.json``, or the sum of its subfolders' (one per load process)."""
    if (run_dir / TALLY_FILE).exists():
        return read_tally(run_dir)
    return merge(read_tally(p.parent) for p in sorted(run_dir.glob(f"*/{TALLY_FILE}")))


@dataclasses.dataclass(frozen=True)
class WorkerRecord:
    """``worker.json``: what a load process that does not check leaves its checker."""

    max_exp_ms: int
    """The last expiry of a state it recorded (Redis clock; 0: none)."""
    started_wall_ms: int


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """One run's folder (or one load process's subfolder of it), its files by what they hold."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)

    @property
    def history_file(self) -> Path:
        return self.path / HISTORY_FILE

    @property
    def results_file(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def nodes_log(self) -> Path:
        return self.path / NODES_LOG

    @property
    def picture_file(self) -> Path:
        return self.path / PICTURE_FILE

    @property
    def page_file(self) -> Path:
        return self.path / PAGE_FILE

    @property
    def final_state_file(self) -> Path:
        return self.path / FINAL_STATE_FILE

    @property
    def failover_file(self) -> Path:
        return self.path / FAILOVER_FILE

    @property
    def failover_table_file(self) -> Path:
        return self.path / FAILOVER_TABLE_FILE

    @property
    def deterministic_file(self) -> Path:
        return self.path / DETERMINISTIC_FILE

    @property
    def determinism_file(self) -> Path:
        return self.path / DETERMINISM_FILE

    @property
    def seeds_file(self) -> Path:
        return self.path / SEEDS_FILE

    @property
    def buggify_log(self) -> Path:
        return self.path / BUGGIFY_LOG

    @property
    def shrunk_dir(self) -> Path:
        return self.path / SHRUNK_DIR

    @property
    def replay_file(self) -> Path:
        return self.path / REPLAY_FILE

    @property
    def anomaly_file(self) -> Path:
        return self.path / ANOMALY_FILE

    @property
    def lanes_file(self) -> Path:
        return self.path / LANES_FILE

    def make(self) -> RunFolder:
        """Create the folder (and its parents) if missing; return it."""
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    # --- load processes --------------------------------------------------------------------

    def worker(self, k: int) -> RunFolder:
        """Worker ``k``'s subfolder."""
        return RunFolder(self.path / f"{WORKER_PREFIX}{k}")

    def workers(self) -> list[RunFolder]:
        """The subfolders of the run's workers, in order."""
        found = self.path.glob(f"{WORKER_PREFIX}*")
        return [RunFolder(p) for p in sorted(found, key=lambda p: _worker_number(p.name))]

    def histories(self) -> list[Path]:
        """The folder's ``history.jsonl`` and those of its subfolders (one per load process)."""
        return history_files(self.path)

    def write_tally(self, tally: Tally) -> None:
        self.make()
        (self.path / TALLY_FILE).write_text(json.dumps(tally.to_json()) + "\n", encoding="utf-8")

    def tally(self) -> Tally:
        """The run's tally: its own, or its load processes' summed."""
        return read_tallies(self.path)

    def write_latency(self, histogram: HdrHistogram) -> None:
        self.make()
        (self.path / LATENCY_FILE).write_bytes(histogram.encode())

    def latency(self) -> HdrHistogram:
        """The latency histogram one load process wrote."""
        path = self.path / LATENCY_FILE
        try:
            return HdrHistogram.decode(path.read_bytes())
        except OSError as exc:
            raise DamagedRunFile(f"{path}: cannot read the latency histogram ({exc})") from None

    def write_faults(self, rows: Sequence[dict[str, Any]]) -> None:
        """``faults.json``: the fault windows a load process injected, by wall clock."""
        self.make()
        (self.path / FAULTS_FILE).write_text(json.dumps(list(rows)) + "\n", encoding="utf-8")

    def fault_rows(self) -> list[dict[str, Any]] | None:
        """Every fault window the folder's load processes recorded (None: no file at all)."""
        return read_fault_rows(self.path)

    def own_fault_rows(self) -> list[dict[str, Any]]:
        """The fault windows this one load process recorded ([] without a file)."""
        path = self.path / FAULTS_FILE
        if not path.exists():
            return []
        found = read_json_file(path, "the faults a load process injected")
        if not isinstance(found, list):
            raise DamagedRunFile(f"{path}: not a list of faults")
        return found

    def write_worker_record(self, record: WorkerRecord) -> None:
        self.make()
        text = json.dumps(dataclasses.asdict(record)) + "\n"
        (self.path / WORKER_FILE).write_text(text, encoding="utf-8")

    def worker_record(self) -> WorkerRecord:
        path = self.path / WORKER_FILE
        d = read_json_file(path, "what a load process recorded for its parent")
        try:
            return WorkerRecord(int(d["max_exp_ms"]), int(d["started_wall_ms"]))
        except SHAPE_ERRORS as exc:
            raise DamagedRunFile(f"{path}: not a worker's record ({exc!r})") from None

    def write_pids(self, parent: int, workers: Sequence[int | None], prefix: str) -> None:
        """``workers.json``: who runs this run (to watch or stop it from outside), its prefix."""
        self.make()
        pids = {"parent": parent, "workers": list(workers), "prefix": prefix}
        (self.path / PIDS_FILE).write_text(json.dumps(pids) + "\n", encoding="utf-8")

    # --- store facts -----------------------------------------------------------------------

    def has_store_facts(self) -> bool:
        return (self.path / STORE_DIR / META_FILE).exists()

    def dump_store_facts(
        self,
        url: str,
        prefix: str,
        tenants: Iterable[str],
        grace_ms: int,
        limits: dict[str, int] | None = None,
        since_ms: int = 0,
    ) -> None:
        dump_store_facts(self.path, url, prefix, tenants, grace_ms, limits, since_ms)

    # --- the run's state -------------------------------------------------------------------

    def is_foreign(self) -> bool:
        """A ``loadgen --foreign`` folder: its final state listed, no journal."""
        return self.final_state_file.exists()

    def mark_incomplete(self, text: str) -> None:
        mark_incomplete(self.path, text)

    def mark_complete(self) -> None:
        mark_complete(self.path)

    def incomplete_reason(self) -> str | None:
        return incomplete_reason(self.path)


def _worker_number(name: str) -> tuple[int, str]:
    tail = name.removeprefix(WORKER_PREFIX)
    return (int(tail), "") if tail.isdigit() else (1 << 30, tail)
