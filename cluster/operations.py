"""What a served node adds for its operator: readiness, metrics on their own port, durability.

Layer: cluster. Composes ``nodes.health``, ``nodes.metrics`` and ``cluster.durability`` around one
node that ``cluster.serve`` starts; the node itself knows none of this.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

from nodes.health import Readiness, ReadinessProbe, with_health
from nodes.legacy import LegacyAdapter
from nodes.metrics import ASGIApp, NodeMetrics, serve_metrics, with_metrics
from nodes.protocol import Node

log = logging.getLogger("cluster.operations")

DEFAULT_METRICS_HOST = "127.0.0.1"
"""Metrics say how busy a node is and which tools are used: loopback unless told otherwise."""


@dataclass(frozen=True)
class OpsOptions:
    """How served nodes are operated (``serve --metrics-port``, ``--metrics-host``)."""

    metrics_host: str = DEFAULT_METRICS_HOST
    metrics_port: int | None = None
    """Node 0's metrics port, node i on ``metrics_port + i`` (0: free ports); None: no metrics."""

    def for_node(self, index: int) -> OpsOptions:
        """The options of node ``index`` (its own metrics port)."""
        if not self.metrics_port:
            return self
        return replace(self, metrics_port=self.metrics_port + index)


@dataclass(frozen=True)
class NodeOperations:
    """What ``operate_node`` hands the server: the middleware, and the readiness a graceful
    drain turns off (``readiness.draining = True``: ``/readyz`` answers 503 from then on)."""

    readiness: Readiness
    metrics: NodeMetrics | None

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` with ``/healthz``, ``/readyz`` and (with metrics) the request metrics."""
        inner = app if self.metrics is None else with_metrics(app, self.metrics)
        return with_health(inner, self.readiness)


@contextmanager
def operate_node(
    node: Node,
    probe: ReadinessProbe,
    metrics: NodeMetrics | None,
    options: OpsOptions,
    legacy: LegacyAdapter | None = None,
) -> Iterator[NodeOperations]:
    """While the context lasts, serve ``metrics`` (when ``options`` names a port) on their own
    port; yield the node's operations (``NodeOperations.wrap`` goes around its HTTP app)."""
    with ExitStack() as stack:
        if metrics is not None and options.metrics_port is not None:
            metrics.watch_node(node)
            if legacy is not None:
                metrics.watch_legacy(legacy.statistics)
            port = stack.enter_context(
                serve_metrics(metrics.registry, options.metrics_host, options.metrics_port)
            )
            log.info(
                "metrics of %s at http://%s:%d/metrics", node.config.node_id,
                options.metrics_host, port,
            )  # fmt: skip
        else:
            metrics = None
        yield NodeOperations(Readiness(probe), metrics)
