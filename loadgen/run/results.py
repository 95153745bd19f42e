"""``Results``: what a run decided and measured, the only builder and reader of ``results.json``.

Layer: loadgen. Built once per run by the pipeline (``loadgen.run.pipeline``: a load's
``Results.of_run``, a check of finished folders' ``Results.of_check``), written and read through
the run's ``RunFolder``. Other tools read ``verdict``, ``flows.total`` and ``flows.completed``:
those names and meanings stay.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from loadgen.check.bounds_reached import bounds_seen
from loadgen.check.exercise import MIN_COMPLETED_SHARE, MIN_RUNS_PER_KIND, ExerciseRule
from loadgen.check.verdict import CheckResult, Status
from loadgen.history import SHAPE_ERRORS, DamagedRunFile
from loadgen.run.folder import RunFolder
from loadgen.runner import RunSettings, RunStats
from loadgen.tally import Tally

LATENCY_PERCENTILES = (50, 90, 99, 99.9)


@dataclass(frozen=True)
class Flows:
    """``flows``: started and completed (past round 1) in the run."""

    total: int
    completed: int


@dataclass(frozen=True)
class Measured:
    """What the load measured: elapsed time, throughput and flow latency percentiles (ms)."""

    elapsed_s: float
    throughput_flows_per_s: float
    latency_ms: dict[str, float]

    @staticmethod
    def of(stats: RunStats) -> Measured:
        h = stats.histogram
        latency = {f"p{p:g}": h.get_value_at_percentile(p) / 1000 for p in LATENCY_PERCENTILES}
        latency["max"] = h.get_max_value() / 1000
        return Measured(stats.elapsed_s, stats.tally.completed / stats.elapsed_s, latency)


@dataclass(frozen=True)
class RecordedSettings:
    """``results.json``'s ``settings``: a run's parameters as recorded, flat (the load of its
    ``loadgen.runner.RunSettings``, the workers and exercise rule of its
    ``loadgen.run.pipeline.Plan``, the target's ``Target.describe``), and the instants its check
    needs. Optional fields are written only when set (an older folder may lack any of them)."""

    nodes: int | None = None
    store: str | None = None
    """embedded, redis, redis-cluster or remote."""
    state_ttl_s: float | None = None
    replay_grace_ms: int | None = None
    flows: int | None = None
    duration_s: float | None = None
    concurrency: int | None = None
    rate: float | None = None
    seed: int | None = None
    legacy_share: float = 0.0
    weights: dict[str, float] | None = None
    tenants: int | None = None
    workers: int | None = None
    min_completed_share: float | None = None
    min_runs_per_kind: int | None = None
    faults: tuple[str, ...] = ()
    fault_seed: int | None = None
    wait_replicas: int = 0
    journal_since_ms: int = 0
    """A store outliving the run: the Redis-clock time its journal is read from (0: all)."""
    max_exp_ms: int = 0
    """The last expiry of a state the run recorded (Redis clock; 0: none)."""
    started_wall_ms: int = 0

    @staticmethod
    def of(
        run: RunSettings,
        *,
        nodes: int,
        store: str,
        state_ttl_s: float,
        replay_grace_ms: int,
        workers: int,
        exercise: ExerciseRule,
        faults: Sequence[str] = (),
        fault_seed: int | None = None,
        wait_replicas: int = 0,
        journal_since_ms: int = 0,
        max_exp_ms: int = 0,
        started_wall_ms: int = 0,
    ) -> RecordedSettings:
        return RecordedSettings(
            nodes=nodes,
            store=store,
            state_ttl_s=state_ttl_s,
            replay_grace_ms=replay_grace_ms,
            flows=run.flows,
            duration_s=run.duration_s,
            concurrency=run.concurrency,
            rate=run.rate,
            seed=run.seed,
            legacy_share=run.legacy_share,
            weights=run.weights,
            tenants=run.tenants,
            workers=workers,
            min_completed_share=exercise.min_completed_share,
            min_runs_per_kind=exercise.min_runs_per_kind,
            faults=tuple(faults),
            fault_seed=fault_seed,
            wait_replicas=wait_replicas,
            journal_since_ms=journal_since_ms,
            max_exp_ms=max_exp_ms,
            started_wall_ms=started_wall_ms,
        )

    def exercise(self, min_completed: float | None, min_per_kind: int | None) -> ExerciseRule:
        """The exercise rule: as given, else as the run recorded, else the defaults."""
        share = self.min_completed_share if min_completed is None else min_completed
        runs = self.min_runs_per_kind if min_per_kind is None else min_per_kind
        return ExerciseRule(
            MIN_COMPLETED_SHARE if share is None else float(share),
            MIN_RUNS_PER_KIND if runs is None else int(runs),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "nodes": self.nodes,
            "store": self.store,
            "state_ttl_s": self.state_ttl_s,
            "replay_grace_ms": self.replay_grace_ms,
            "flows": self.flows,
            "duration_s": self.duration_s,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "seed": self.seed,
            "legacy_share": self.legacy_share,
            "weights": self.weights,
            "tenants": self.tenants,
            "workers": self.workers,
            "min_completed_share": self.min_completed_share,
            "min_runs_per_kind": self.min_runs_per_kind,
        }
        if self.faults:
            out["faults"] = list(self.faults)
            out["fault_seed"] = self.fault_seed
        if self.wait_replicas:
            out["wait_replicas"] = self.wait_replicas
        for name in ("journal_since_ms", "max_exp_ms", "started_wall_ms"):
            if getattr(self, name) > 0:
                out[name] = getattr(self, name)
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> RecordedSettings:
        """The settings a ``results.json`` holds (any missing: None, or 0)."""

        def num(name: str, kind: type, default: Any = None) -> Any:
            v = d.get(name)
            return default if v is None else kind(v)

        return RecordedSettings(
            nodes=num("nodes", int),
            store=num("store", str),
            state_ttl_s=num("state_ttl_s", float),
            replay_grace_ms=num("replay_grace_ms", int),
            flows=num("flows", int),
            duration_s=num("duration_s", float),
            concurrency=num("concurrency", int),
            rate=num("rate", float),
            seed=num("seed", int),
            legacy_share=num("legacy_share", float, 0.0),
            weights=None if d.get("weights") is None else dict(d["weights"]),
            tenants=num("tenants", int),
            workers=num("workers", int),
            min_completed_share=num("min_completed_share", float),
            min_runs_per_kind=num("min_runs_per_kind", int),
            faults=tuple(str(k) for k in d.get("faults") or ()),
            fault_seed=num("fault_seed", int),
            wait_replicas=num("wait_replicas", int, 0),
            journal_since_ms=num("journal_since_ms", int, 0),
            max_exp_ms=num("max_exp_ms", int, 0),
            started_wall_ms=num("started_wall_ms", int, 0),
        )


@dataclass(frozen=True)
class Results:
    """A run's ``results.json``: verdicts, counts, the races exercised, what the load measured,
    its settings; a check of finished folders (``notes-cluster check``) has no load measures
    or settings, and names the histories it read."""

    verdict: Status
    invariants: tuple[dict[str, Any], ...]
    counts: dict[str, int]
    model: dict[str, list[dict[str, Any]]]
    kinds: dict[str, dict[str, Any]]
    flows: Flows
    flows_per_s_by_tenth: dict[str, Any]
    races: dict[str, int] | None = None
    """Flows of each race kind that got past round 1 (a run's, not a check's)."""
    measured: Measured | None = None
    settings: RecordedSettings | None = None
    histories: tuple[str, ...] | None = None
    check: dict[str, Any] = field(default_factory=dict)
    """What a check over run folders cost: jobs, seconds, peak resident memory."""
    key_distribution: dict[str, int] | None = None
    """``"host:port" -> keys`` per master after the run (a Redis Cluster only)."""
    faults: tuple[dict[str, Any], ...] = ()
    """Every fault window, by start, in seconds from the run's start, with its availability."""
    deterministic: dict[str, Any] | None = None
    """A deterministic run's seed, ``history_sha256``, virtual and wall time, node clocks and
    fault points (``cluster.deterministic.run``)."""

    @staticmethod
    def of_check(result: CheckResult, tally: Tally, **more: Any) -> Results:
        """The fields a judged check and the load's tally decide (``more``: the rest)."""
        return Results(
            verdict=result.status,
            invariants=tuple(v.to_json() for v in result.verdicts),
            counts=dict(result.counts),
            model=result.model,
            kinds=tally.per_kind(),
            flows=Flows(tally.total, tally.completed),
            flows_per_s_by_tenth=tally.tenth_rates(),
            check=result.cost,
            **more,
        )

    @staticmethod
    def of_run(
        result: CheckResult,
        stats: RunStats,
        settings: RecordedSettings,
        *,
        key_distribution: dict[str, int] | None = None,
        faults: Sequence[dict[str, Any]] = (),
    ) -> Results:
        """A run's results: its judged check, its measures and its settings."""
        races = {k: v["completed"] for k, v in stats.tally.per_kind().items()}
        return Results.of_check(
            result,
            stats.tally,
            races=races,
            measured=Measured.of(stats),
            settings=settings,
            key_distribution=key_distribution,
            faults=tuple(faults) if settings.faults else (),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "invariants": list(self.invariants),
            "counts": dict(self.counts),
        }
        bounds = bounds_seen(self.counts)
        if bounds is not None:
            out["bounds"] = bounds
        if self.races is not None:
            out["races"] = self.races
        out |= {
            "model": self.model,
            "kinds": self.kinds,
            "flows": {"total": self.flows.total, "completed": self.flows.completed},
        }
        m = self.measured
        if m is not None:
            out["throughput_flows_per_s"] = m.throughput_flows_per_s
        out["flows_per_s_by_tenth"] = self.flows_per_s_by_tenth
        if m is not None:
            out["elapsed_s"] = m.elapsed_s
            out["latency_ms"] = m.latency_ms
        if self.settings is not None:
            out["settings"] = self.settings.to_json()
        if self.histories is not None:
            out["histories"] = list(self.histories)
        if self.check:
            out["check"] = self.check
        if self.key_distribution is not None:
            out["key_distribution"] = self.key_distribution
        if self.faults:
            out["faults"] = list(self.faults)
        if self.deterministic is not None:
            out["deterministic"] = self.deterministic
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Results:
        """Results as ``to_json`` wrote them (``KeyError``, ``TypeError``, ``ValueError`` when
        ``d`` is something else)."""
        measured = None
        if "elapsed_s" in d:
            measured = Measured(
                float(d["elapsed_s"]),
                float(d["throughput_flows_per_s"]),
                {str(k): float(v) for k, v in d["latency_ms"].items()},
            )
        verdict = str(d["verdict"])
        if verdict not in ("valid", "invalid", "unknown"):
            raise ValueError(f"verdict {verdict!r}")
        return Results(
            verdict=cast(Status, verdict),
            invariants=tuple(dict(v) for v in d["invariants"]),
            counts={str(k): int(n) for k, n in d["counts"].items()},
            model=dict(d.get("model") or {}),
            kinds=dict(d.get("kinds") or {}),
            flows=Flows(int(d["flows"]["total"]), int(d["flows"]["completed"])),
            flows_per_s_by_tenth=dict(d.get("flows_per_s_by_tenth") or {}),
            races=None if d.get("races") is None else dict(d["races"]),
            measured=measured,
            settings=None if "settings" not in d else RecordedSettings.from_json(d["settings"]),
            histories=None if "histories" not in d else tuple(d["histories"]),
            check=dict(d.get("check") or {}),
            key_distribution=d.get("key_distribution"),
            faults=tuple(d.get("faults") or ()),
            deterministic=None if d.get("deterministic") is None else dict(d["deterministic"]),
        )

    def write(self, folder: RunFolder) -> None:
        """Write ``results.json`` into ``folder``."""
        folder.make()
        text = json.dumps(self.to_json(), indent=2) + "\n"
        folder.results_file.write_text(text, encoding="utf-8")

    @staticmethod
    def read(folder: RunFolder) -> Results | None:
        """The folder's ``results.json`` (None without one; ``DamagedRunFile`` if it holds
        something else)."""
        path = folder.results_file
        if not path.exists():
            return None
        try:
            return Results.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (*SHAPE_ERRORS, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
            raise DamagedRunFile(f"{path}: not a run's results ({exc})") from None
        except OSError as exc:
            raise DamagedRunFile(f"{path}: cannot be read ({exc})") from None

    @staticmethod
    def saved_settings(folder: RunFolder) -> RecordedSettings:
        """The settings the folder's ``results.json`` recorded (all unset without one)."""
        found = Results.read(folder)
        return RecordedSettings() if found is None or found.settings is None else found.settings
