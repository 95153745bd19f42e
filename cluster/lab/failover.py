"""The failover experiment: does a promoted replica forget confirmations the nodes acknowledged,
and what does making every write wait for its replica (``WAIT``) cost and buy?

Layer: cluster. Starts local Redis Clusters of 3 masters with one replica each
(``cluster.redis_cluster``), runs the race workload on them (``cluster.targets.simulate``) with
a failover injected during the load (``cluster.faults.CustomFault``), and tabulates the checker's
verdicts. Each scenario runs twice, without and with ``wait_replicas``, with the same seed:

- ``baseline``: no fault: what ``WAIT`` costs in flows/s and flow latency.
- ``manual``: ``CLUSTER FAILOVER`` on the replica of a loaded master (the coordinated kind: the
  master stops writes until its replica caught up, then they swap).
- ``kill``: the master is SIGKILLed and its replica wins the election. On loopback a replica
  lags by microseconds, so first the replica falls behind as it would behind a slow link: it is
  frozen (SIGSTOP) and its link to the master cut (``CLIENT KILL TYPE replica``) for ``lag_ms``
  while the master keeps acknowledging writes; then the master dies and the replica resumes.

Every server is started and stopped by pid (``local_redis_cluster``); a frozen replica is always
resumed, on error too.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import redis
import trio
from redis.crc import key_slot

from cluster.faults import CustomFault
from cluster.redis_cluster import HOST, RedisClusterInfo, local_redis_cluster
from cluster.stopping import run_stoppable
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.pictures import percentile, write_pictures
from loadgen.run.folder import RunFolder
from loadgen.run.pipeline import Run
from loadgen.runner import RunSettings
from loadgen.tenants import tenants as tenant_names

SCENARIOS: tuple[str, ...] = ("baseline", "manual", "kill")

NODE_TIMEOUT_MS = 1_000
"""``cluster-node-timeout`` during the experiment: a dead master is noticed within about a
second, so the election happens well inside a run of a few seconds."""

FAILOVER_AT_S = 2.0
"""When the failover starts, in seconds after the load started (past the warm-up)."""

LAG_MS = 400
"""How long the replica is frozen and cut off before its master is killed (``kill``). Shorter
than ``NODE_TIMEOUT_MS``, so the cluster does not mark the frozen replica as failed."""

PROMOTION_TIMEOUT_S = 20.0
"""How long a replica may take to be promoted and the cluster to report ``ok`` again."""


@dataclass(frozen=True)
class FailoverOptions:
    """What the experiment runs: scenarios, the ``WAIT`` setting compared, the load."""

    scenarios: tuple[str, ...] = SCENARIOS
    wait_replicas: int = 1
    duration_s: float = 8.0
    concurrency: int = 16
    seed: int = 1
    lag_ms: int = LAG_MS
    state_ttl_s: float = 2.0
    out_dir: Path | None = None


@dataclass(frozen=True)
class FailoverRun:
    """One run of the experiment: its setting and what was measured."""

    scenario: str
    wait_replicas: int
    verdict: str
    invalid: tuple[str, ...]
    """Names of the invariants the checker found violated."""
    flows_per_s: float
    p50_ms: float
    p99_ms: float
    """Flow latency percentiles over every flow (some flows wait out an expiry on purpose)."""
    plain_p50_ms: float
    plain_p99_ms: float
    """Latency of the ``plain`` flows (create, ask, confirm: three requests, no waiting)."""
    confirms_forgotten: int
    """Confirmations answered deleted:true or archived:true that the store no longer knows, or
    executed twice."""
    archive_confirms_forgotten: int
    """Of those, archive confirmations."""
    creates_forgotten: int
    unknown_outcomes: int
    """Answers "outcome unknown" (-32603) the clients got: the price of WAIT in availability."""
    faults: list[dict[str, Any]] = field(default_factory=list)
    run_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A row of ``failover.json``."""
        return dict(self.__dict__) | {"invalid": list(self.invalid)}


# --- the cluster --------------------------------------------------------------------------------


def _client(port: int) -> redis.Redis:
    return redis.Redis(
        host=HOST, port=port, socket_timeout=5, socket_connect_timeout=5, decode_responses=True
    )


def tune(rc: RedisClusterInfo) -> None:
    """Short node timeout, and any replica may be promoted however long its link was down."""
    for port in rc.ports:
        with _client(port) as c:
            c.config_set("cluster-node-timeout", NODE_TIMEOUT_MS)
            c.config_set("cluster-replica-validity-factor", 0)


def _owner(bootstrap: int, slot: int) -> int:
    """The port of the master serving ``slot`` as the node on ``bootstrap`` sees it."""
    with _client(bootstrap) as c:
        for lo, hi, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
            if int(lo) <= slot <= int(hi):
                return int(master[1])
    raise RuntimeError(f"slot {slot} is not served")


def loaded_master(rc: RedisClusterInfo, tenants: int) -> tuple[int, list[str]]:
    """The master (other than the bootstrap node of ``rc.url``) serving most load tenants, and
    those tenants."""
    bootstrap = rc.masters[0]
    owners: dict[int, list[str]] = {}
    for tenant in tenant_names(tenants):
        port = _owner(bootstrap, key_slot(f"{{t:{tenant}}}".encode()))
        owners.setdefault(port, []).append(tenant)
    candidates = {p: t for p, t in owners.items() if p != bootstrap}
    if not candidates:
        raise RuntimeError("no loaded master besides the bootstrap node")
    port = max(candidates, key=lambda p: (len(candidates[p]), p))
    return port, candidates[port]


def replica_of(master: int) -> int:
    """The port of the (first) replica attached to ``master``."""
    with _client(master) as c:
        info = c.info("replication")
    for key, value in info.items():
        if key.startswith("slave") and isinstance(value, dict):
            return int(value["port"])
    raise RuntimeError(f"master :{master} has no replica")


def _promoted(bootstrap: int, replica: int, slot: int) -> bool:
    try:
        with _client(replica) as c:
            if c.info("replication").get("role") != "master":
                return False
        with _client(bootstrap) as c:
            state = str(c.execute_command("CLUSTER", "INFO"))
        return "cluster_state:ok" in state and _owner(bootstrap, slot) == replica
    except redis.RedisError:
        return False


def _wait_promoted(bootstrap: int, replica: int, slot: int) -> float:
    started = time.monotonic()
    while not _promoted(bootstrap, replica, slot):
        if time.monotonic() - started > PROMOTION_TIMEOUT_S:
            raise RuntimeError(f"replica :{replica} not promoted in {PROMOTION_TIMEOUT_S:g} s")
        time.sleep(0.05)
    return time.monotonic() - started


def manual_failover(rc: RedisClusterInfo, master: int, slot: int) -> str:
    """``CLUSTER FAILOVER`` on ``master``'s replica; wait until it serves ``slot``."""
    replica = replica_of(master)
    with _client(replica) as c:
        c.execute_command("CLUSTER", "FAILOVER")
    took = _wait_promoted(rc.masters[0], replica, slot)
    return f"CLUSTER FAILOVER on replica :{replica} of master :{master}; promoted in {took:.2f} s"


@contextmanager
def _frozen(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def kill_master(rc: RedisClusterInfo, master: int, slot: int, lag_ms: int) -> str:
    """Let ``master``'s replica fall ``lag_ms`` behind (frozen, link cut), SIGKILL the master,
    resume the replica, wait until it was elected and serves ``slot``."""
    replica = replica_of(master)
    if lag_ms > 0:
        with _frozen(rc.pids[replica]):
            with _client(master) as c:
                c.execute_command("CLIENT", "KILL", "TYPE", "replica", "SKIPME", "yes")
            time.sleep(lag_ms / 1000)
            os.kill(rc.pids[master], signal.SIGKILL)
    else:
        os.kill(rc.pids[master], signal.SIGKILL)
    took = _wait_promoted(rc.masters[0], replica, slot)
    lag = f" (its replica :{replica} frozen and cut off {lag_ms} ms before)" if lag_ms else ""
    return f"master :{master} SIGKILLed{lag}; replica :{replica} elected in {took:.2f} s"


# --- the runs -----------------------------------------------------------------------------------


def fail_over(scenario: str, rc: RedisClusterInfo, lag_ms: int, tenants: int) -> str:
    """Fail the most loaded master over (``manual`` or ``kill``); its detail line."""
    master, names = loaded_master(rc, tenants)
    slot = key_slot(f"{{t:{names[0]}}}".encode())
    if scenario == "manual":
        detail = manual_failover(rc, master, slot)
    else:
        detail = kill_master(rc, master, slot, lag_ms)
    return f"{detail}; tenants there: {', '.join(names)}"


def _fault(scenario: str, rc: RedisClusterInfo, options: FailoverOptions) -> CustomFault:
    tenants = RunSettings().tenants

    async def run() -> str:
        return await trio.to_thread.run_sync(fail_over, scenario, rc, options.lag_ms, tenants)

    action = "cluster_failover" if scenario == "manual" else "kill_master"
    return CustomFault(FAILOVER_AT_S, "failover", action, run)


def _measure(scenario: str, wait: int, sim: Run) -> FailoverRun:
    results = sim.results
    counts = results.counts
    measured = results.measured
    assert measured is not None, "a run measures its load"
    unknown = sum(
        1 for op in sim.history.ops if op.type == "info" and op.value.get("code") == -32603
    )
    plain = sorted(s.latency_ms for s in sim.stats.samples if s.kind == "plain" and s.completed)
    return FailoverRun(
        scenario=scenario,
        wait_replicas=wait,
        verdict=results.verdict,
        invalid=tuple(v["name"] for v in results.invariants if v["status"] == "invalid"),
        flows_per_s=round(measured.throughput_flows_per_s, 1),
        p50_ms=measured.latency_ms["p50"],
        p99_ms=measured.latency_ms["p99"],
        plain_p50_ms=round(percentile(plain, 50), 2) if plain else 0.0,
        plain_p99_ms=round(percentile(plain, 99), 2) if plain else 0.0,
        confirms_forgotten=int(counts.get("confirms_forgotten", 0)),
        archive_confirms_forgotten=int(counts.get("archive_confirms_forgotten", 0)),
        creates_forgotten=int(counts.get("creates_forgotten", 0)),
        unknown_outcomes=unknown,
        faults=list(results.faults),
        run_dir=None if sim.run_dir is None else str(sim.run_dir),
    )


def _run(scenario: str, wait: int, rc: RedisClusterInfo, options: FailoverOptions) -> FailoverRun:
    run_dir = None if options.out_dir is None else options.out_dir / f"{scenario}-wait{wait}"
    sim_options = SimulateOptions(
        nodes=3,
        redis_url=rc.url,
        state_ttl_s=options.state_ttl_s,
        run_dir=run_dir,
        wait_replicas=wait,
        keep_history=True,  # _measure counts its unknown outcomes
        settings=RunSettings(
            flows=10_000_000,
            duration_s=options.duration_s,
            concurrency=options.concurrency,
            seed=options.seed,
            keep_samples=True,
        ),
        custom_faults=() if scenario == "baseline" else (_fault(scenario, rc, options),),
    )
    sim = run_stoppable(partial(simulate, sim_options))
    if run_dir is not None:
        windows = [(f["start_s"], f["end_s"], f["action"]) for f in sim.faults_json()]
        write_pictures(RunFolder(run_dir), sim.results, sim.stats, faults=windows)
    return _measure(scenario, wait, sim)


def run_experiment(
    options: FailoverOptions, echo: Callable[[str], None] = print
) -> list[FailoverRun]:
    """Every scenario without and with ``wait_replicas``. ``baseline`` and ``manual`` share one
    cluster (a manual failover leaves it whole); each ``kill`` run gets a fresh one."""
    unknown = sorted(set(options.scenarios) - set(SCENARIOS))
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; choose from {SCENARIOS}")
    waits = (0, options.wait_replicas)
    runs: list[FailoverRun] = []

    def done(run: FailoverRun) -> None:
        runs.append(run)
        echo(row(run))

    shared = [s for s in ("baseline", "manual") if s in options.scenarios]
    if shared:
        with local_redis_cluster(3, 1) as rc:
            tune(rc)
            for scenario in shared:
                for wait in waits:
                    done(_run(scenario, wait, rc, options))
    if "kill" in options.scenarios:
        for wait in waits:
            with local_redis_cluster(3, 1) as rc:
                tune(rc)
                done(_run("kill", wait, rc, options))
    if options.out_dir is not None:
        write_results(options, runs)
    return runs


# --- reporting ----------------------------------------------------------------------------------

HEADER = (
    "| scenario | WAIT | verdict | flows/s | p50 / p99 ms (all flows) "
    "| p50 / p99 ms (plain flows) | confirms forgotten (of them archive) | creates forgotten "
    "| outcome unknown |"
)


def row(run: FailoverRun) -> str:
    """One Markdown table row."""
    verdict = run.verdict + (f" ({', '.join(run.invalid)})" if run.invalid else "")
    return (
        f"| {run.scenario} | {run.wait_replicas or 'off'} | {verdict} | {run.flows_per_s:.1f} "
        f"| {run.p50_ms:.1f} / {run.p99_ms:.1f} | {run.plain_p50_ms:.1f} / {run.plain_p99_ms:.1f} "
        f"| {run.confirms_forgotten} ({run.archive_confirms_forgotten} archive) "
        f"| {run.creates_forgotten} | {run.unknown_outcomes} |"
    )


def table(runs: Sequence[FailoverRun]) -> str:
    """The Markdown table of every run, and each run's failover line."""
    lines = [HEADER, "|" + "---|" * 9, *(row(r) for r in runs), ""]
    for r in runs:
        for f in r.faults:
            lines.append(f"- {r.scenario}, WAIT {r.wait_replicas or 'off'}: {f['detail']}")
    return "\n".join(lines) + "\n"


def write_results(options: FailoverOptions, runs: Sequence[FailoverRun]) -> None:
    """``failover.json`` and ``failover.md`` in the output folder."""
    assert options.out_dir is not None
    options.out_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "scenarios": list(options.scenarios),
        "wait_replicas": options.wait_replicas,
        "duration_s": options.duration_s,
        "concurrency": options.concurrency,
        "seed": options.seed,
        "lag_ms": options.lag_ms,
        "node_timeout_ms": NODE_TIMEOUT_MS,
        "failover_at_s": FAILOVER_AT_S,
    }
    doc = {"settings": settings, "runs": [r.to_json() for r in runs]}
    RunFolder(options.out_dir).failover_file.write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    RunFolder(options.out_dir).failover_table_file.write_text(table(runs), "utf-8")
