"""``notes-cluster simulate``: race workload on an in-process cluster, then the checker's verdict.

Layer: cluster (a target). A composition of the run pipeline (``loadgen.run``): in-process
nodes as the target (``in_process_target``), the plan from the options, the run folder; with
``--workers`` N, N load processes that each run the pipeline (``workers``) and one check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cluster.faults import CustomFault, FaultKind
from cluster.targets.in_process import NodesSpec, open_in_process_target
from loadgen.check.exercise import ExerciseRule
from loadgen.run.folder import RunFolder
from loadgen.run.pipeline import Plan, Run, run
from loadgen.runner import FlowSample, RunSettings
from loadgen.transport import Transport


@dataclass(frozen=True)
class SimulateOptions:
    """Everything ``simulate`` takes, flat as its command line is: a run's parameters.

    They split into the pipeline's pieces, each named for what it holds:
    ``nodes_spec()`` is the in-process target's ``cluster.targets.in_process.NodesSpec`` (how
    many nodes, over which store, with which faults); ``plan()`` is the pipeline's
    ``loadgen.run.pipeline.Plan``, which holds ``settings``
    (``loadgen.runner.RunSettings``: how much load, of which mix) and the exercise rule; the
    rest (``run_dir``, ``prefix``, ``plant``) says where the run is kept. The finished run
    records all of it, flat again, as ``loadgen.run.results.RecordedSettings``. The fields stay
    flat here (not a ``NodesSpec`` and a ``Plan``): the command line maps onto them one to
    one, and the deterministic runs vary them with ``dataclasses.replace``."""

    nodes: int = 3
    redis_url: str | None = None
    state_ttl_s: float = 2.0
    settings: RunSettings = field(default_factory=RunSettings)
    run_dir: Path | None = None
    keep_keys: bool = False
    faults: frozenset[FaultKind] = frozenset()
    """Fault kinds injected during the run (``cluster.faults``): nodes, redis, client,
    lost-reply, stall, reshard."""
    injected: frozenset[FaultKind] | None = None
    """Only these of ``faults`` are injected, the nodes configured for all of them (a shrunk
    deterministic case); None: all."""
    fault_seed: int | None = None
    """Seed of the fault schedule; None: the run's seed."""
    custom_faults: tuple[CustomFault, ...] = ()
    """Faults beyond the kinds (the failover experiment's), played by the same injector."""
    wait_replicas: int = 0
    """Replicas every write must reach before a node answers (``WAIT``); 0: asynchronous."""
    stream_timeout_s: float | None = None
    """The nodes' Redis reply timeout; None: the default, or the short fault-run one when
    ``redis`` faults are injected."""
    exercise: ExerciseRule = field(default_factory=ExerciseRule)
    """When the run counts as exercised (else its verdict is UNKNOWN)."""
    workers: int = 1
    """Load processes (``cluster.targets.workers``), each with its own in-process nodes,
    against one store."""
    prefix: str | None = None
    """The store's key prefix; None: a fresh one (its keys are then dropped after the run)."""
    plant: str | None = None
    """A planted defect (``store.simulation.plants``) in the nodes' store: a deterministic run
    only (``simulate --deterministic --plant NAME``); None: none."""
    keep_history: bool | None = None
    """Keep the history in memory too (``Run.history.ops``); None: only for runs of at
    most ``KEEP_OPS_MAX`` flows or without a run folder."""

    def nodes_spec(self) -> NodesSpec:
        return NodesSpec(
            nodes=self.nodes,
            redis_url=self.redis_url,
            state_ttl_s=self.state_ttl_s,
            faults=self.faults,
            fault_seed=self.fault_seed,
            custom_faults=self.custom_faults,
            wait_replicas=self.wait_replicas,
            stream_timeout_s=self.stream_timeout_s,
            keep_keys=self.keep_keys,
            workers=self.workers,
            injected=self.injected,
        )

    def plan(self) -> Plan:
        return Plan(
            self.settings, self.exercise, workers=self.workers, keep_history=self.keep_history
        ).fresh()


async def simulate(
    options: SimulateOptions,
    on_flow: Callable[[FlowSample], None] | None = None,
    *,
    transport_hook: Callable[[Transport], Transport] | None = None,
) -> Run:
    """Run the workload on an in-process cluster and check the recorded history (one load
    process: ``workers.simulate_workers`` runs several); ``transport_hook`` wraps the
    transport the load uses (tests plant faults of their own)."""
    if options.workers > 1:
        raise ValueError("several load processes: run workers.simulate_workers")
    plan = options.plan()
    folder = None if options.run_dir is None else RunFolder(options.run_dir)
    async with open_in_process_target(
        options.nodes_spec(), plan.settings, prefix=options.prefix, transport_hook=transport_hook
    ) as target:
        return await run(target, plan, folder, on_flow)
