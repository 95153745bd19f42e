"""What a served node adds for its operator: readiness, metrics on their own port, durability.

Layer: nodes (serving). Composes ``nodes.health``, ``nodes.metrics`` and
``nodes.serving.durability`` around one node that ``cluster.serve`` starts; the node itself knows
none of this. Metrics are served by the node's own server on a second listening socket
(``bind_metrics``), so they get the same header bound and timeouts as the MCP port and no thread of
their own.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from nodes.health import Readiness, ReadinessProbe, with_health
from nodes.legacy import LegacyAdapter
from nodes.metrics import ASGIApp, NodeMetrics, metrics_endpoint, with_metrics, with_metrics_port
from nodes.protocol import Node

log = logging.getLogger("nodes.serving.operator")

DEFAULT_METRICS_HOST = "127.0.0.1"
"""Metrics say how busy a node is and which tools are used: loopback unless told otherwise."""


@dataclass(frozen=True)
class OperatorOptions:
    """How served nodes are operated (``serve --metrics-port``, ``--metrics-host``)."""

    metrics_host: str = DEFAULT_METRICS_HOST
    metrics_port: int | None = None
    """Node 0's metrics port, node i on ``metrics_port + i`` (0: free ports); None: no metrics."""

    def for_node(self, index: int) -> OperatorOptions:
        """The options of node ``index`` (its own metrics port)."""
        if not self.metrics_port:
            return self
        return replace(self, metrics_port=self.metrics_port + index)


@dataclass(frozen=True)
class OperatorEndpoints:
    """What ``with_operator_endpoints`` hands the server: the middleware, and the readiness a
    graceful drain turns off (``readiness.draining = True``: ``/readyz`` answers 503 from then
    on)."""

    readiness: Readiness
    metrics: NodeMetrics | None
    metrics_port: int | None = None
    """The local port whose requests get the metrics (the server listens on it too)."""

    def wrap(self, app: ASGIApp, *, route_metrics_port: bool = True) -> ASGIApp:
        """``app`` with ``/healthz``, ``/readyz`` and (with metrics) the request metrics, and
        the metrics endpoint for requests on the metrics port; without ``route_metrics_port``
        the server hands that port's connections to ``metrics_endpoint()`` itself."""
        inner = app if self.metrics is None else with_metrics(app, self.metrics)
        served = with_health(inner, self.readiness)
        if self.metrics is None or self.metrics_port is None or not route_metrics_port:
            return served
        return with_metrics_port(served, self.metrics.registry, self.metrics_port)

    def metrics_endpoint(self) -> ASGIApp | None:
        """What the metrics port serves (None: no metrics)."""
        if self.metrics is None or self.metrics_port is None:
            return None
        return metrics_endpoint(self.metrics.registry)


def bind_metrics(options: OperatorOptions) -> tuple[socket.socket | None, OperatorOptions]:
    """The listening socket of the metrics (None when ``options`` names no port), and the
    options with the port it bound (``metrics_port = 0``: a free one). The node's server serves
    it beside the MCP port (``serve_node(sockets=...)``, ``run_server(sockets=...)``)."""
    if options.metrics_port is None:
        return None, options
    from nodes.serving.http_server import bind_socket

    sock = bind_socket(options.metrics_host, options.metrics_port)
    return sock, replace(options, metrics_port=int(sock.getsockname()[1]))


@contextmanager
def with_operator_endpoints(
    node: Node,
    probe: ReadinessProbe,
    metrics: NodeMetrics | None,
    options: OperatorOptions,
    legacy: LegacyAdapter | None = None,
) -> Iterator[OperatorEndpoints]:
    """Yield the node's operator endpoints (``OperatorEndpoints.wrap`` goes around its HTTP
    app): with ``metrics`` and a port in ``options`` (the port the server listens on for them,
    bound by ``bind_metrics``), requests on that port get the metrics."""
    port = options.metrics_port
    if metrics is not None and port is not None:
        metrics.watch_node(node)
        if legacy is not None:
            metrics.watch_legacy(legacy.statistics)
        log.info(
            "metrics of %s at http://%s:%d/metrics", node.config.node_id,
            options.metrics_host, port,
        )  # fmt: skip
    else:
        metrics = port = None
    yield OperatorEndpoints(Readiness(probe), metrics, port)
