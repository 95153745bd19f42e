"""The ``notes-cluster`` command line: the group, assembled from one module per command.

Layer: cluster. The commands live in ``cluster.commands`` (``base`` and ``options``: what they
share); each imports what it needs when it runs, so ``serve`` and ``node`` load nothing of the
load generator, and a command whose libraries are an extra that is not installed says which extra
(exit code 2) instead of failing on an import.
"""

from __future__ import annotations

import click

from cluster.commands.base import DEBUG_ENV, EXTRAS, Commands
from cluster.commands.bench import bench
from cluster.commands.check import check_cmd
from cluster.commands.conformance import conformance
from cluster.commands.lab import (
    bench_parts,
    bench_servers,
    conformance_table_cmd,
    failover_experiment,
    serve_reference,
)
from cluster.commands.loadgen import loadgen
from cluster.commands.serving import node, redis_cluster, serve
from cluster.commands.shrink import shrink_cmd
from cluster.commands.simulate import simulate_cmd
from cluster.exit_codes import (
    EXIT_CTRL_C,
    EXIT_INVALID,
    EXIT_NOT_CARRIED_OUT,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    EXIT_VALID,
)

__all__ = [
    "DEBUG_ENV",
    "EXAMPLES",
    "EXIT_CTRL_C",
    "EXIT_INVALID",
    "EXIT_NOT_CARRIED_OUT",
    "EXIT_UNKNOWN",
    "EXIT_USAGE",
    "EXIT_VALID",
    "EXTRAS",
    "main",
]

EXAMPLES = """
\b
Examples:
  notes-cluster simulate                        race workload on 3 in-process nodes, embedded store
  notes-cluster simulate --redis redis://127.0.0.1:6379/0 --flows 2000   keys of its own only
  notes-cluster simulate --faults nodes,client   faults on the embedded store
  redis-server --port 6390 --save '' --daemonize yes   Redis faults: a Redis of the run's own
  notes-cluster simulate --redis redis://127.0.0.1:6390/0 --faults nodes,redis,client
  notes-cluster failover-experiment              WAIT vs no WAIT across Redis Cluster failovers
  notes-cluster serve --demo --nodes 3 --port 8700
  export NOTES_CLUSTER_STATE_KEY=$(head -c 32 /dev/urandom | base64)   # shared by both:
  notes-cluster serve --demo --nodes 2 --port 8700 --redis redis://127.0.0.1:6379/0 \\
      --state-ttl 5 --replay-grace 2 &
  notes-cluster loadgen --demo --redis redis://127.0.0.1:6379/0 --replay-grace 2 \\
      --target http://127.0.0.1:8700/mcp --target http://127.0.0.1:8701/mcp
  notes-cluster loadgen --foreign --state-ttl 300 --target http://127.0.0.1:8800/mcp \\
      --target http://127.0.0.1:8801/mcp        the race workload against an SDK reference
  notes-cluster conformance --target http://127.0.0.1:8700/mcp --target http://127.0.0.1:8701/mcp
  notes-cluster bench --quick
  notes-cluster bench-servers --quick
  notes-cluster bench-parts --quick
"""


EXIT_CODES_HELP = """
\b
Exit codes: 0 valid, 1 a violation, 2 usage or configuration, 3 unknown,
4 the run could not be carried out (store unreachable, interrupted by SIGTERM/SIGHUP,
I/O error), 130 Ctrl-C. Serving commands (serve, node, serve-reference, redis-cluster)
exit 0 when SIGTERM or SIGHUP stopped them cleanly.
"""


@click.group(
    cls=Commands,
    help="Stateless MCP notes nodes, and proof that notes_delete runs exactly once.\n"
    + EXAMPLES
    + EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--debug",
    is_flag=True,
    help=f"On a failure, print the traceback before its one-line error (or set {DEBUG_ENV}=1).",
)
def main(debug: bool) -> None:
    """The CLI entry point."""


for command in (
    simulate_cmd,
    loadgen,
    check_cmd,
    bench,
    bench_servers,
    bench_parts,
    node,
    serve,
    failover_experiment,
    redis_cluster,
    conformance,
    shrink_cmd,
    conformance_table_cmd,
    serve_reference,
):
    main.add_command(command)
