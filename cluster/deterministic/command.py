"""``notes-cluster simulate --deterministic | --check-determinism | --replay RUN_DIR``.

Layer: cluster (the CLI's part for deterministic runs; ``cluster.cli`` hands over its parsed
options). Refusals are usage errors (exit 2, one line). A deterministic run needs a fixed hash
seed for ``str``: the command re-executes itself with ``PYTHONHASHSEED=0`` when it is not set
so, before it claims a run folder.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import click

from cluster.deterministic import HASH_SEED
from loadgen.run.folder import RunFolder

PLANT_SEED = 1
"""The seed of ``simulate --deterministic --plant NAME`` when no ``--seed`` is given."""


def ensure_hash_seed() -> None:
    """Re-execute this command with ``PYTHONHASHSEED=HASH_SEED`` unless it is set so; only when
    this process is the CLI's own (not a test calling the command in its process)."""
    if os.environ.get("PYTHONHASHSEED") == HASH_SEED:
        return
    argv = list(getattr(sys, "orig_argv", []))
    ours = Path(sys.argv[0]).name == "notes-cluster" or any("cluster.cli" in a for a in argv)
    if not ours or len(argv) < 2:
        return
    env = dict(os.environ, PYTHONHASHSEED=HASH_SEED)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)  # noqa: S606 - the same command


def simulate_deterministic_cmd(params: dict[str, Any]) -> None:
    """The ``simulate`` command's deterministic modes (``params``: its parsed options)."""
    from cluster.deterministic.divergence import file_lines, first_divergence
    from cluster.deterministic.run import (
        DeterministicUsageError,
        options_from_json,
        read_settings,
        refuse_nondeterministic,
    )
    from cluster.deterministic.swarm import describe, swarm
    from cluster.exit_codes import EXIT_INVALID
    from cluster.run_commands import (
        claim_run_dir,
        exercise_rule,
        parse_fault_kinds,
        report_run,
    )
    from cluster.targets.simulate import SimulateOptions
    from loadgen.run.folder import mark_complete
    from loadgen.runner import RunSettings
    from loadgen.workload import tenants_for

    replay_dir: Path | None = params["replay_dir"]
    workers: int = params["workers"]
    buggify: bool = params["buggify"] or params["swarm"]
    skew = True
    many = (
        workers > 1
        or params.get("seed_count") is not None
        or params.get("dask_address") is not None
        or params.get("search_for") is not None
    )
    if many and (replay_dir is not None or params["check_determinism"]):
        raise click.UsageError(
            "--workers, --seeds, --dask and --for run several seeds; --replay and "
            "--check-determinism take one run"
        )
    plant_name: str | None = params.get("plant")
    if plant_name is not None and not params["deterministic"]:
        raise click.UsageError("--plant runs in a deterministic run: add --deterministic")
    search_s = None if params.get("search_for") is None else parse_duration(params["search_for"])
    if replay_dir is not None:
        if plant_name is not None:
            raise click.UsageError("--replay runs a folder's settings, its plant included")
        if params["check_determinism"] or params["swarm"]:
            raise click.UsageError(
                "--replay runs a folder's settings: no --check-determinism or --swarm"
            )
        try:
            saved = read_settings(replay_dir)
            options = options_from_json(saved, None)
            buggify, skew = bool(saved.get("buggify", False)), bool(saved.get("skew", True))
        except (ValueError, KeyError, TypeError) as exc:
            raise click.UsageError(f"--replay: {exc}") from None
    else:
        seed = params["seed"]
        planted_faults: frozenset[Any] = frozenset()
        if plant_name is not None:
            from store.simulation.plants import plant

            try:
                planted = plant(plant_name)
            except ValueError as exc:
                raise click.UsageError(f"--plant: {exc}") from None
            needs = ",".join(sorted(planted.faults))
            if not params["legacy_share"]:
                params = {**params, "legacy_share": planted.legacy_share}
            planted_faults = parse_fault_kinds(needs, embedded=True) if needs else frozenset()
            seed = PLANT_SEED if seed is None else seed
        if seed is None:
            raise click.UsageError("--deterministic needs --seed N (the run is the seed's)")
        flows = params["flows"]
        options = SimulateOptions(
            nodes=params["nodes"],
            redis_url=params["redis_url"],
            state_ttl_s=params["state_ttl"],
            settings=RunSettings(
                flows=flows,
                duration_s=params["duration"],
                concurrency=params["concurrency"],
                rate=params["rate"],
                seed=seed,
                legacy_share=params["legacy_share"],
                tenants=tenants_for(flows),
            ),
            faults=parse_fault_kinds(params["fault_kinds"], embedded=True) | planted_faults,
            fault_seed=params["fault_seed"],
            wait_replicas=params["wait_replicas"],
            exercise=exercise_rule(params["min_completed"], params["min_per_kind"]),
            plant=plant_name,
        )
    try:
        refuse_nondeterministic(options)
    except DeterministicUsageError as exc:
        raise click.UsageError(str(exc)) from None
    ensure_hash_seed()
    run_dir = claim_run_dir(params["out_dir"], params["replace"], "%Y%m%d-%H%M%S")
    options = replace(options, run_dir=run_dir)
    if many:
        _seeds(
            options,
            workers,
            buggify=buggify,
            swarmed=params["swarm"],
            count=params.get("seed_count"),
            dask=params.get("dask_address"),
            search_s=search_s,
        )
    if params["swarm"]:
        options = swarm(options)
    s = options.settings
    faults = ", ".join(sorted(options.faults)) or "none"
    _say(
        f"deterministic: seed {s.seed}; {options.nodes} nodes, {_flows(s)}, state TTL "
        f"{options.state_ttl_s:g} s, faults {faults}, fault points {'on' if buggify else 'off'}"
        f"{'' if options.plant is None else f', planted defect {options.plant}'}; "
        f"run folder {run_dir}"
    )
    if params["swarm"]:
        _say(describe(options))
    with _logs_in(run_dir, nodes=bool(options.faults) or buggify):
        sim = _run(options, run_dir, buggify=buggify, skew=skew, check=params["check_determinism"])
    if replay_dir is not None:
        recorded = _recorded_sha(replay_dir)
        if recorded is not None and recorded != sim.history_sha256:
            found = first_divergence(
                file_lines(RunFolder(replay_dir).history_file),
                file_lines(RunFolder(run_dir).history_file),
            )
            said = "" if found is None else f": {found.describe()}"
            _say(f"replay differs from {replay_dir}{said}")
            mark_complete(run_dir)
            sys.exit(EXIT_INVALID)
        _say(f"replay of {replay_dir}: same history bytes")
    report_run(sim, RunFolder(run_dir), params["as_json"])


def _run(options: Any, run_dir: Path, *, buggify: bool, skew: bool, check: bool) -> Any:
    """One deterministic run, or (``check``) the seed twice with the first divergence named."""
    from cluster.deterministic.divergence import check_determinism
    from cluster.deterministic.run import run_deterministic
    from cluster.exit_codes import EXIT_INVALID
    from loadgen.run.folder import mark_complete

    if check:
        outcome = check_determinism(options, buggify=buggify, skew=skew)
        sim = outcome.first
        if outcome.divergence is not None:
            _say(f"NOT deterministic: {outcome.divergence.describe()}")
            mark_complete(run_dir)
            sys.exit(EXIT_INVALID)
        _say(f"deterministic: both runs wrote history sha256 {sim.history_sha256}")
    else:
        sim = run_deterministic(options, buggify=buggify, skew=skew)
        _say(f"history sha256 {sim.history_sha256}")
    return sim


@contextmanager
def _logs_in(run_dir: Path, *, nodes: bool) -> Iterator[None]:
    """The fault points' firings to ``run_dir/buggify.log``; the nodes' log to
    ``run_dir/nodes.log`` when faults make it talk (as ``simulate`` does)."""
    from cluster.run_log import nodes_log_to

    handler = logging.FileHandler(RunFolder(run_dir).buggify_log, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    points = logging.getLogger("notes_cluster.buggify")
    level = points.level
    points.addHandler(handler)
    points.setLevel(logging.INFO)
    try:
        with nodes_log_to(RunFolder(run_dir).nodes_log if nodes else None):
            yield
    finally:
        points.removeHandler(handler)
        points.setLevel(level)
        handler.close()


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h`` -> seconds; a usage error for anything else."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    body, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(body) * units[unit]
    except ValueError:
        raise click.UsageError(f"--for {text!r}: a duration such as 90s, 10m or 2h") from None
    if seconds <= 0:
        raise click.UsageError(f"--for {text!r}: a duration above zero")
    return seconds


def _seeds(
    options: Any,
    workers: int,
    *,
    buggify: bool,
    swarmed: bool,
    count: int | None,
    dask: str | None,
    search_s: float | None,
) -> NoReturn:
    """Several seeds on a process pool of ``workers`` (or the Dask cluster at ``dask``): a
    fixed number, or a search for ``search_s`` seconds; one merged verdict (exit code)."""
    from cluster.deterministic.fleet import dask_executor, local_executor
    from cluster.deterministic.search import SwarmPlan, run_swarm
    from cluster.exit_codes import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
    from loadgen.run.folder import mark_complete

    s = options.settings
    seeds = count if count is not None else max(workers, 1)
    if dask is not None:
        try:
            executor, close = dask_executor(dask)
        except ImportError as exc:
            raise click.UsageError(str(exc)) from None
        except OSError as exc:
            raise click.UsageError(f"--dask {dask}: cannot reach the scheduler ({exc})") from None
        where = f"the Dask cluster at {dask}"
        in_flight = max(2 * _dask_threads(executor), 2)
    else:
        executor = local_executor(workers)
        close = executor.shutdown
        where = f"{workers} processes"
        in_flight = workers + 1
    what = (
        f"a search of {search_s:g} s from seed {s.seed}"
        if search_s is not None
        else f"seeds {s.seed}..{s.seed + seeds - 1}"
    )
    _say(f"deterministic: {what} on {where}, {s.flows} flows each; run folder {options.run_dir}")
    plan = SwarmPlan(
        options,
        buggify,
        swarmed,
        seeds=seeds,
        for_s=search_s,
        in_flight=in_flight,
        shrink_each=3 if search_s is not None else None,
        command=shlex.join(["notes-cluster", *sys.argv[1:]]),
        where=where,
    )
    try:
        report = run_swarm(plan, executor, Path(options.run_dir), _say)
    finally:
        close()
    if search_s is None and len(report.outcomes) <= 64:
        for r in report.outcomes:
            _say(
                f"seed {r.seed}: {r.verdict.upper()}, {r.flows} flows in {r.cpu_s:.1f} CPU s, "
                f"history sha256 {r.history_sha256}"
            )
    for f in report.failures:
        _say(f"failure: {f.invariant}: {f.shape}; seeds {', '.join(map(str, f.seeds))}")
        for replay in f.replays:
            _say(f"  replay: {replay}")
    _say(
        f"merged verdict: {report.verdict.upper()} ({report.flows} flows, "
        f"{len(report.outcomes)} seeds)"
    )
    mark_complete(options.run_dir)
    sys.exit({"valid": EXIT_VALID, "invalid": EXIT_INVALID}.get(report.verdict, EXIT_UNKNOWN))


def _dask_threads(executor: Any) -> int:
    """The threads of every worker of the Dask cluster behind ``executor``."""
    client = getattr(executor, "_client", None)
    try:
        workers = client.scheduler_info()["workers"] if client is not None else {}
        return sum(int(w.get("nthreads", 1)) for w in workers.values()) or 1
    except (KeyError, TypeError, AttributeError, OSError):
        return 1


def _flows(s: Any) -> str:
    """``300 flows``, or ``2 of 300 flows (kept: 17, 41)`` for a shrunk run."""
    if s.only_flows is None:
        return f"{s.flows} flows"
    kept = ", ".join(str(i) for i in s.only_flows[:10]) + (
        ", ..." if len(s.only_flows) > 10 else ""
    )
    return f"{len(s.only_flows)} of {s.flows} flows (kept: {kept})"


def _recorded_sha(run_dir: Path) -> str | None:
    from loadgen.history import DamagedRunFile
    from loadgen.run.results import Results

    try:
        found = Results.read(RunFolder(run_dir))
    except DamagedRunFile:
        return None
    if found is None or found.deterministic is None:
        return None
    sha = found.deterministic.get("history_sha256")
    return None if sha is None else str(sha)


def _say(text: str) -> None:
    """One line on stderr (never wrapped: tests and scripts read it)."""
    click.echo(text, err=True)


def shrink_command(
    run_dir: Path, out: Path, budget_s: float, budget_runs: int, invariant: str | None
) -> NoReturn:
    """``notes-cluster shrink RUN_DIR``: the smallest failing case, run into ``out``; exit 1
    when it breaks the run's invariant again (the failure reproduced), 3 when it does not."""
    from cluster.deterministic.shrink import read_failing, shrink_folder
    from cluster.exit_codes import EXIT_INVALID, EXIT_UNKNOWN
    from loadgen.run.folder import RunFolderError, claim_out_dir, mark_complete
    from loadgen.shrinking import Budget

    try:
        failing = read_failing(run_dir, invariant)
    except ValueError as exc:
        raise click.UsageError(f"shrink: {exc}") from None
    ensure_hash_seed()
    try:
        out = claim_out_dir(out, replace=True)
    except RunFolderError as exc:
        raise click.UsageError(f"shrink: {exc}") from None
    s = failing.options.settings
    _say(
        f"shrink: seed {s.seed}, {failing.invariant} broken; budget {budget_s:g} s or "
        f"{budget_runs} runs; minimal case into {out}"
    )
    count = iter(range(1, budget_runs + 1))

    def tried(case: Any, broke: set[str]) -> None:
        points = ", fault points" if case.setting("buggify") else ""
        skewed = ", skewed clocks" if case.setting("skew") else ""
        fails = "fails" if failing.invariant in broke else "passes"
        _say(f"  run {next(count)}: {case.size()}{points}{skewed}: {fails}")

    with _logs_in(out, nodes=bool(failing.options.faults)):
        done = shrink_folder(failing, out, Budget(budget_s, budget_runs), on_attempt=tried)
    mark_complete(out)
    _say(done.found.summary())
    _say(f"replay: {done.replay}")
    names = sorted(v.name for v in done.sim.result.verdicts if v.status == "invalid")
    click.echo(f"{done.sim.result.status.upper()}: {', '.join(names) or 'nothing broken'}")
    sys.exit(EXIT_INVALID if done.reproduced else EXIT_UNKNOWN)
