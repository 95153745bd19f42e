"""Metrics in Prometheus' text format (prometheus-client), served on an address of their own.

Layer: node, operations. Three pieces, none of which the protocol core knows about:

- ``NodeMetrics``: the metric families of one node, in a ``CollectorRegistry`` of its own (never
  the process-global one), so several in-process nodes (tests, ``serve --nodes N``) never mix or
  leak their counts; each node serves its own registry.
- ``with_metrics``: requests counted by method, tool and HTTP status, and the requests in
  flight. The node's own app (``nodes.http.StreamableHTTPApp``) counts them itself, as its
  ``meter`` (a middleware's coroutine frame and ``send`` wrapper per request were most of the
  metrics' cost); any other app gets a middleware that counts the same. Labels come from the
  ``Mcp-Method`` / ``Mcp-Name`` headers (the last of a repeated one counts), which the core
  refuses when they disagree with the body; every label value is drawn from a fixed set (the
  node's own methods and tool names, anything else ``other``), so no client can grow the series.
- ``MeteredStore``: a ``NoteStoreAPI`` proxy timing every store call (histogram by call name) and
  counting confirmation and setup decisions by status.

- ``with_metrics_port``: the metrics endpoint, prometheus-client's ASGI app, in front of the
  node's app for requests that arrived on the metrics port (``scope["server"]``): the node's own
  server listens on that second port too, so a scrape gets the node's header bound and header,
  body and idle timeouts and costs no thread (prometheus-client's threaded HTTP server started a
  thread per connection and never timed one out: 300 half-sent requests made 302 threads). The
  MCP port never exposes metrics, the metrics port nothing else. Off unless configured;
  loopback by default.

**Cost.** A node counts every request and times every store call, so the counting is on the
hot path. prometheus-client's labelled ``Counter`` and ``Histogram`` take a lock per increment
(they may be written from any thread) and cost more than a request's whole routing; here every
write comes from the node's event loop and every read (a scrape, answered on the same loop,
or ``registry.get_sample_value``) runs between two writes, so the counts are plain integers in
dicts (``_Counts``), turned into metric families only when scraped. prometheus-client still
writes the exposition. Labelling and bucketing are deferred too: a request appends its header
pair and status to a list, a timed store call its seconds, and both are counted in one pass
(``collections.Counter``; a sort and a bisect per bucket) before every scrape, or once
``PENDING_BOUND`` are pending. Counting a request each time cost about 3,000 instructions
(hashing fresh header strings into a dict of pairs); appending it costs a few hundred.

Metric names (all prefixed ``notes_``): ``requests_total{method,tool,status}``,
``requests_in_flight``, ``confirmations_total{status}``, ``setup_completions_total{status}``,
``store_call_seconds{call}`` (histogram), ``store_call_errors_total{call}``,
``node_rounds_total``, ``node_executions_total``, ``node_replays_total``,
``node_rejections_total``, ``legacy_waiting_calls``, ``legacy_pending_calls``,
``legacy_sessions_opened_total``, ``legacy_sessions_ended_total``,
``legacy_sessions_evicted_total``, ``legacy_refused_by_cap_total``.
"""

from __future__ import annotations

import inspect
import keyword
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, cast

from prometheus_client import CollectorRegistry, Gauge, make_asgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from nodes.http import HEADERS_SCOPE_KEY, StreamableHTTPApp
from nodes.protocol import Node
from store.api import NoteStoreAPI

ASGIScope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[ASGIScope, Receive, Send], Awaitable[None]]

PREFIX = "notes"
OTHER = "other"
"""The label value of anything outside the node's own lists."""
MODERN_METHODS = frozenset(
    {
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
        "completion/complete",
    }
)
"""The methods a node serves, each its own label value (a fixed, small set)."""
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Store call latency buckets (seconds): a healthy loopback script takes well under a
millisecond; the top buckets catch WAIT timeouts and the 5 s stream timeout."""
STORE_CALLS = frozenset(n for n in vars(NoteStoreAPI) if not n.startswith("_"))
"""The calls ``MeteredStore`` times: exactly the methods of the node's store interface."""
SETUP_PATH_PREFIX = "/setup/"
PENDING_BOUND = 4096
"""Requests (and observations of one store call) appended before they are added to the counts
even without a scrape: what a node holds uncounted is bounded."""
LABEL_CACHE_SIZE = 256
"""``(Mcp-Method, Mcp-Name)`` header pairs whose labels are kept: clients send a handful; one
sending ever new values has them worked out each time, and costs no memory."""


LEGACY_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("waiting_calls", "gauge", "Legacy tools/call streams waiting for their client now."),
    ("pending_calls", "gauge", "Legacy calls open now."),
    ("sessions_opened", "counter", "Legacy sessions opened on this node."),
    ("sessions_ended", "counter", "Legacy sessions ended (DELETE) on this node."),
    ("sessions_evicted", "counter", "Legacy sessions evicted by the per-principal cap."),
    ("refused_by_cap", "counter", "Legacy requests refused by a cap."),
)
"""What the legacy adapter's ``statistics()`` reports, by field name. Sessions live in Redis and
may end on another node, so they are counted where they open and end, not as a gauge."""


class _Callbacks(Collector):
    """Families read at scrape time from the node's and the legacy adapter's own counters."""

    def __init__(self) -> None:
        self.node: Callable[[], Any] | None = None
        self.legacy: Callable[[], Any] | None = None

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        if self.node is not None:
            stats = self.node()
            for name, text in (
                ("rounds", "Confirmation rounds 1 answered (forms and links offered)."),
                ("executions", "Confirmations that executed (deleted or moved a note)."),
                ("replays", "Answers served from the replay store."),
                ("rejections", "Refused request states (each with its reason in the log)."),
            ):
                yield CounterMetricFamily(f"{PREFIX}_node_{name}", text, value=getattr(stats, name))
        if self.legacy is not None:
            yield from _legacy_families(self.legacy())


def _legacy_families(stats: Any) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    for field, kind, text in LEGACY_FAMILIES:
        value = getattr(stats, field, None)
        if value is None:  # an adapter that does not report it
            continue
        family = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
        yield family(f"{PREFIX}_legacy_{field}", text, value=value)


_BUCKET_LABELS: tuple[str, ...] = tuple(
    floatToGoString(bound)  # type: ignore[no-untyped-call]
    for bound in (*STORE_BUCKETS, float("inf"))
)
"""The ``le`` label of each bucket, as prometheus-client writes it (the last is ``+Inf``)."""


class _Histogram:
    """One label child of a histogram: a count per bucket (the last for +Inf) and the sum, and
    the observations not yet added to them (``pending``: a timed call only appends, see the
    module's note on cost; ``fold`` adds them, before every scrape and every
    ``PENDING_BOUND``)."""

    __slots__ = ("buckets", "pending", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(STORE_BUCKETS) + 1)
        self.total = 0.0
        self.pending: list[float] = []

    def observe(self, seconds: float) -> None:
        """One observation (the timed store calls append to ``pending`` themselves)."""
        pending = self.pending
        pending.append(seconds)
        if len(pending) >= PENDING_BOUND:
            self.fold()

    def fold(self) -> None:
        """Add the pending observations to the buckets and the sum."""
        pending = self.pending
        if not pending:
            return
        pending.sort()
        start = 0
        for i, bound in enumerate(STORE_BUCKETS):
            # Prometheus buckets are "less than or equal": bisect_right counts those <= bound.
            end = bisect_right(pending, bound, start)
            self.buckets[i] += end - start
            start = end
        self.buckets[-1] += len(pending) - start
        self.total += sum(pending)
        pending.clear()

    def cumulative(self) -> list[tuple[str, float]]:
        self.fold()
        out: list[tuple[str, float]] = []
        running = 0
        for le, count in zip(_BUCKET_LABELS, self.buckets, strict=True):
            running += count
            out.append((le, running))
        return out


class _Counts(Collector):
    """The counted families as plain integers, written by the node's event loop only (see the
    module's note on cost) and turned into families when scraped."""

    def __init__(self) -> None:
        self.before_collect: Callable[[], None] | None = None
        """Called first when scraped: pending counts are added (``NodeMetrics.fold``)."""
        self.requests: dict[tuple[str, str], dict[int, int]] = {}
        """Per ``(method, tool)`` labels, answered requests by HTTP status (0: none started)."""
        self.confirmations: dict[str, int] = {}
        self.setups: dict[str, int] = {}
        self.store_seconds: dict[str, _Histogram] = {}
        self.store_errors: dict[str, int] = {}

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        if self.before_collect is not None:
            self.before_collect()
        requests = CounterMetricFamily(
            f"{PREFIX}_requests",
            "HTTP requests answered, by MCP method, tool and HTTP status.",
            labels=["method", "tool", "status"],
        )
        for (method, tool), by_status in list(self.requests.items()):
            for code, count in list(by_status.items()):
                requests.add_metric((method, tool, _status_label(code)), count)
        yield requests
        for name, text, counts in (
            ("confirmations", "Confirmation decisions by status.", self.confirmations),
            ("setup_completions", "Setup link completions by status.", self.setups),
        ):
            family = CounterMetricFamily(f"{PREFIX}_{name}", text, labels=["status"])
            for status, count in list(counts.items()):
                family.add_metric([status], count)
            yield family
        seconds = HistogramMetricFamily(
            f"{PREFIX}_store_call_seconds", "Store call latency by call.", labels=["call"]
        )
        for call, histogram in list(self.store_seconds.items()):
            seconds.add_metric([call], histogram.cumulative(), histogram.total)
        yield seconds
        errors = CounterMetricFamily(
            f"{PREFIX}_store_call_errors", "Store calls that raised, by call.", labels=["call"]
        )
        for call, count in list(self.store_errors.items()):
            errors.add_metric([call], count)
        yield errors


class NodeMetrics:
    """The metric families of one node, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.tool_names: frozenset[str] = frozenset()
        """The ``tool`` label values besides ``other``: the watched node's tools."""
        self._labels: dict[tuple[str | None, str | None], tuple[str, str]] = {}
        """The labels of each ``(Mcp-Method, Mcp-Name)`` pair seen, at most ``LABEL_CACHE_SIZE``."""
        self._pending: list[tuple[str | None, str | None, int]] = []
        """Requests counted by ``count`` and not yet added to ``counts`` (``fold``)."""
        r = self.registry
        self.counts = _Counts()
        self.counts.before_collect = self.fold
        r.register(self.counts)
        self.in_flight = Gauge(
            f"{PREFIX}_requests_in_flight", "HTTP requests being answered.", registry=r
        )
        # A plain count read at scrape time: a Gauge's inc and dec each take a lock.
        self.in_flight_now = 0
        self.in_flight.set_function(lambda: self.in_flight_now)
        self._callbacks = _Callbacks()
        r.register(self._callbacks)

    def requests_of(self, scope: ASGIScope) -> dict[int, int]:
        """The answered-request counts by HTTP status of ``scope``'s ``(method, tool)`` labels
        (``labels_for``: a bounded set), for the caller to add its request to."""
        labels = self.labels_for(scope)
        requests = self.counts.requests
        counts = requests.get(labels)
        if counts is None:
            counts = requests[labels] = {}
        return counts

    def count(self, scope: ASGIScope, status: int) -> None:
        """One HTTP request answered with ``status`` (0: no response started); the node's app
        calls it (``nodes.http.RequestMeter``). An MCP request's ``(Mcp-Method, Mcp-Name)``,
        from the header dict the app left in its scope, is only appended to a list here, and
        labelled and counted when ``fold``ed (a scrape, or every ``PENDING_BOUND`` requests);
        a value the dict joined from a repeated header (``, ``), or a request without the
        dict, is labelled from the raw headers now (``requests_of``: the last one counts)."""
        headers = scope.get(HEADERS_SCOPE_KEY)
        if headers is not None:
            method, name = headers.get("mcp-method"), headers.get("mcp-name")
            if (method is None or ", " not in method) and (name is None or ", " not in name):
                pending = self._pending
                pending.append((method, name, status))
                if len(pending) >= PENDING_BOUND:
                    self.fold()
                return
        counts = self.requests_of(scope)
        counts[status] = counts.get(status, 0) + 1

    def fold(self) -> None:
        """Add the pending requests (``count``) to the counts, each pair labelled once."""
        pending = self._pending
        if not pending:
            return
        requests = self.counts.requests
        for (method, name, status), n in Counter(pending).items():
            labels = self._labels_cached(method, name)
            counts = requests.get(labels)
            if counts is None:
                counts = requests[labels] = {}
            counts[status] = counts.get(status, 0) + n
        pending.clear()

    def store_call(self, call: str) -> tuple[_Histogram, Callable[[], None]]:
        """The latency histogram of store call ``call`` and a function counting one error of
        it; both series exist (at zero) from now on, as a bound label child would."""
        histogram = self.counts.store_seconds.setdefault(call, _Histogram())
        errors = self.counts.store_errors
        errors.setdefault(call, 0)

        def error() -> None:
            errors[call] += 1

        return histogram, error

    def watch_node(self, node: Node) -> None:
        """Label requests with ``node``'s tool names; expose its own counters at scrape time."""
        self.tool_names = frozenset(node.tools)
        self.fold()  # counted under the labels of the tools they were counted with
        self._labels.clear()
        self._callbacks.node = node.statistics

    def watch_legacy(self, statistics: Callable[[], Any]) -> None:
        """Expose the legacy adapter's ``statistics()`` (``LEGACY_FAMILIES``) at scrape time."""
        self._callbacks.legacy = statistics

    def labels_for(self, scope: ASGIScope) -> tuple[str, str]:
        """The bounded ``(method, tool)`` labels of one HTTP request."""
        path = scope.get("path", "")
        if type(path) is not str:
            path = str(path)
        if path.startswith(SETUP_PATH_PREFIX):
            return "setup_page", ""
        raw_method = raw_name = None
        # The last of a repeated header counts: read from the end, stop once both are found.
        for name, value in reversed(scope.get("headers", ())):
            if name == b"mcp-name":
                if raw_name is None:
                    raw_name = value
                    if raw_method is not None:
                        break
            elif name == b"mcp-method" and raw_method is None:
                raw_method = value
                if raw_name is not None:
                    break
        return self._labels_cached(
            None if raw_method is None else raw_method.decode("latin-1"),
            None if raw_name is None else raw_name.decode("latin-1"),
        )

    def _labels_cached(self, method: str | None, name: str | None) -> tuple[str, str]:
        key = (method, name)
        labels = self._labels.get(key)
        if labels is None:
            labels = self._labels_of(method, name)
            if len(self._labels) < LABEL_CACHE_SIZE:  # the values are the client's to choose
                self._labels[key] = labels
        return labels

    def _labels_of(self, method: str | None, name: str | None) -> tuple[str, str]:
        if method is None:
            return "none", ""
        if method not in MODERN_METHODS:
            return OTHER, ""
        if method != "tools/call":
            return method, ""
        return method, name if name in self.tool_names else OTHER


def with_metrics(app: ASGIApp, metrics: NodeMetrics) -> ASGIApp:
    """``app`` with its HTTP requests counted into ``metrics``. The node's own app counts them
    itself (``StreamableHTTPApp.meter``, no middleware: see ``nodes.http.RequestMeter``) and is
    returned as it is; any other app gets a middleware that counts the same way."""
    if isinstance(app, StreamableHTTPApp) and app.meter is None:
        app.meter = metrics
        return app

    async def metered_app(scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        status = 0

        def tracked(message: dict[str, Any]) -> Awaitable[None]:
            # Not a coroutine of its own: the app awaits ``send``'s (one frame less per send).
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            return send(message)

        metrics.in_flight_now += 1
        try:
            await app(scope, receive, tracked)
        finally:
            metrics.in_flight_now -= 1
            metrics.count(scope, status)

    return metered_app


_STATUS_LABELS: dict[int, str] = {}


def _status_label(status: int) -> str:
    """The ``status`` label of an HTTP status (0: no response started), its text made once."""
    label = _STATUS_LABELS.get(status)
    if label is None:
        label = str(int(status)) if status else "none"
        if 100 <= status <= 599:  # a bounded set: the cache cannot grow past it
            _STATUS_LABELS[status] = label
    return label


class MeteredStore:
    """A ``NoteStoreAPI`` in front of another one, timing every call of the interface.

    Everything else (``check_ready``, ``statistics``, ``client``...) passes through untouched. The
    proxy wraps by name rather than by hand, so a method added to the interface is timed too.
    """

    def __init__(self, inner: NoteStoreAPI, metrics: NodeMetrics) -> None:
        self.inner = inner
        self._metrics = metrics
        self._clock: Callable[[], float] = time.perf_counter
        """What times the calls (a test sets its own before the first call)."""

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in STORE_CALLS:
            return attr
        wrapped = self._timed(name, attr)
        # Cached on the instance: __getattr__ then runs once per name.
        setattr(self, name, wrapped)
        return wrapped

    def _timed(
        self, name: str, call: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        """``call`` timed into the histogram of ``name``, its errors counted, a decision's status
        counted: one coroutine written for its signature (``_timed_source``), so a call costs
        one frame and no packing of its arguments into a tuple and a dict and out again."""
        m = self._metrics
        histogram, error = m.store_call(name)
        decisions = {"confirm": m.counts.confirmations, "complete_setup": m.counts.setups}
        namespace: dict[str, Any] = {
            "_call": call,
            "_clock": self._clock,
            "_error": error,
            "_histogram": histogram,
            "_pending": histogram.pending,
            "_bound": PENDING_BOUND,
            "_decisions": decisions.get(name),
        }
        source = _timed_source(name, call, namespace)
        exec(compile(source, f"<timed store call {name}>", "exec"), namespace)  # noqa: S102
        timed: Callable[..., Awaitable[Any]] = namespace[name]
        timed.__qualname__ = f"MeteredStore.{name}"
        return timed


class _Named:
    """A default value shown by its name (``repr``), for writing a parameter list."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def _timed_source(name: str, call: Callable[..., Any], namespace: dict[str, Any]) -> str:
    """The source of ``async def NAME(<call's parameters>)`` timing ``call``; each default is
    put in ``namespace`` and named there. A callable without a readable signature, or with a
    parameter that is not a plain identifier or starts with ``_`` (the code's own names do),
    gets ``*args, **kwargs``."""
    try:
        signature: inspect.Signature | None = inspect.signature(call)
    except (TypeError, ValueError):
        signature = None
    if signature is None or not all(
        p.isidentifier() and not keyword.iskeyword(p) and not p.startswith("_")
        for p in (name, *signature.parameters)
    ):
        params, forward = "(*args, **kwargs)", ["*args", "**kwargs"]
    else:
        # inspect writes the parameter list ("/" and "*" where they go), each default shown
        # by the name it has in ``namespace``, no annotations.
        plain = []
        forward = []
        for p in signature.parameters.values():
            default = p.default
            if default is not p.empty:
                namespace[f"_default_{p.name}"] = default
                default = _Named(f"_default_{p.name}")
            plain.append(p.replace(default=default, annotation=p.empty))
            if p.kind is p.VAR_POSITIONAL:
                forward.append(f"*{p.name}")
            elif p.kind is p.VAR_KEYWORD:
                forward.append(f"**{p.name}")
            elif p.kind is p.KEYWORD_ONLY:
                forward.append(f"{p.name}={p.name}")
            else:
                forward.append(p.name)
        params = str(inspect.Signature(plain))
    decide = (
        "    if _decisions is not None:\n"
        "        _status = str(_out.status)\n"
        "        _decisions[_status] = _decisions.get(_status, 0) + 1\n"
    )
    return (
        f"async def {name}{params}:\n"
        "    _start = _clock()\n"
        "    try:\n"
        f"        _out = await _call({', '.join(forward)})\n"
        "    except Exception:\n"
        "        _error()\n"
        "        raise\n"
        "    finally:\n"
        "        _pending.append(_clock() - _start)\n"
        "        if len(_pending) >= _bound:\n"
        "            _histogram.fold()\n"
        f"{decide}"
        "    return _out\n"
    )


def metered(store: NoteStoreAPI, metrics: NodeMetrics) -> NoteStoreAPI:
    """``store`` behind a ``MeteredStore``, typed as the interface the node uses."""
    return cast(NoteStoreAPI, MeteredStore(store, metrics))


def metrics_endpoint(registry: CollectorRegistry) -> ASGIApp:
    """``registry`` in Prometheus' text format, at any path (prometheus-client's ASGI app)."""
    return cast(ASGIApp, make_asgi_app(registry))


def with_metrics_port(app: ASGIApp, registry: CollectorRegistry, port: int) -> ASGIApp:
    """``app``, except that HTTP requests that arrived on local port ``port`` get ``registry``
    in Prometheus' text format (any path, as prometheus-client answers) and nothing else. (A
    server that hands the metrics port's connections to ``metrics_endpoint`` itself needs no
    such check per request: ``nodes.serving.http_server``'s ``port_apps``.)"""
    exposition = metrics_endpoint(registry)

    def routed(scope: ASGIScope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine: the request awaits the chosen app's own (no frame added to its chain).
        server = scope.get("server")
        if scope["type"] == "http" and server is not None and server[1] == port:
            return exposition(scope, receive, send)
        return app(scope, receive, send)

    return routed
