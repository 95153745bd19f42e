"""Metrics: scrape a node's own registry after a delete flow and see exactly what moved.

Two nodes over HTTP (embedded and real Redis, via the ``store`` fixture), each with a registry of
its own behind prometheus-client's server on a free loopback port; the flow runs round 1 on node
0 and round 2 on node 1, then a replay on node 1.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import httpx
import pytest
import trio
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cluster.serve import serve_http_node
from nodes import http
from nodes.auth import TokenTable
from nodes.metrics import (
    LABEL_CACHE_SIZE,
    OTHER,
    PENDING_BOUND,
    STORE_BUCKETS,
    MeteredStore,
    NodeMetrics,
    metered,
    with_metrics,
    with_metrics_port,
)
from nodes.protocol import Node
from nodes.serving.demo import ALICE_NOTES, DEMO_TENANT, DEMO_TOKENS
from nodes.serving.operator import OperatorOptions, bind_metrics
from nodes.serving.settings import demo_settings
from store.api import NoteStoreAPI
from store.notes import NoteStore
from tests.harness import accept, make_nodes, meta
from tests.test_http_transport import delete_call, good_headers

TOKENS = TokenTable.from_plain(DEMO_TOKENS)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Metered:
    nodes: list[Node]
    metrics: list[NodeMetrics]
    urls: list[str]
    scrape_urls: list[str]
    client: httpx.AsyncClient


@pytest.fixture
async def metered_nodes(store: NoteStore, nursery: trio.Nursery) -> AsyncIterator[Metered]:
    metrics = [NodeMetrics(), NodeMetrics()]
    nodes = [
        Node(node.config, metered(store, m))
        for node, m in zip(make_nodes(store, 2), metrics, strict=True)
    ]
    urls, scrape = [], []
    for node, m in zip(nodes, metrics, strict=True):
        m.watch_node(node)
        sock, ops = bind_metrics(OperatorOptions(metrics_port=0))
        assert sock is not None
        assert ops.metrics_port is not None
        wrap = partial(metered_app, metrics=m, port=ops.metrics_port)
        serve = partial(http.serve_node, node, TOKENS, wrap=wrap, sockets=[sock])
        urls.append(await nursery.start(serve))
        scrape.append(f"http://127.0.0.1:{ops.metrics_port}/metrics")
    async with httpx.AsyncClient(timeout=10) as client:
        yield Metered(nodes, metrics, urls, scrape, client)


def metered_app(app: http.ASGIApp, metrics: NodeMetrics, port: int) -> http.ASGIApp:
    """``app`` counted into ``metrics``, which requests on ``port`` get."""
    return with_metrics_port(with_metrics(app, metrics), metrics.registry, port)


async def scrape(m: Metered, node: int) -> Samples:
    response = await m.client.get(m.scrape_urls[node])
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def post(m: Metered, node: int, msg: dict[str, Any], **headers: str) -> httpx.Response:
    return await m.client.post(m.urls[node], json=msg, headers={**good_headers(msg), **headers})


async def test_a_delete_flow_moves_exactly_the_expected_counters(
    metered_nodes: Metered, store: NoteStore
) -> None:
    m = metered_nodes
    note = await store.create(DEMO_TENANT, ALICE_NOTES, "TPS report", "body", "alice")
    before = [await scrape(m, 0), await scrape(m, 1)]

    first = (await post(m, 0, delete_call())).json()["result"]
    retry = delete_call(
        request_id=2, requestState=first["requestState"], inputResponses=accept(note.note_id)
    )
    assert (await post(m, 1, retry)).status_code == 200
    assert (await post(m, 1, retry)).status_code == 200  # a replay
    assert (await post(m, 1, delete_call(), authorization="Bearer wrong")).status_code == 401

    a, b = await scrape(m, 0), await scrape(m, 1)
    call = {"method": "tools/call", "tool": "notes_delete"}
    assert value(a, "notes_requests_total", status="200", **call) == 1
    assert value(b, "notes_requests_total", status="200", **call) == 2
    assert value(b, "notes_requests_total", status="401", **call) == 1
    assert value(a, "notes_confirmations_total", status="executed") == 0
    assert value(b, "notes_confirmations_total", status="executed") == 1
    assert value(b, "notes_confirmations_total", status="replay") == 1
    assert value(a, "notes_store_call_seconds_count", call="find") == 1
    assert value(a, "notes_store_call_seconds_count", call="confirm") == 0
    assert value(b, "notes_store_call_seconds_count", call="confirm") == 2
    assert value(a, "notes_node_rounds_total") == 1
    assert value(b, "notes_node_executions_total") == 1
    assert value(b, "notes_node_replays_total") == 1
    assert value(a, "notes_requests_in_flight") == 0
    for node, samples in enumerate((a, b)):
        moved = {k for k, v in samples.items() if v != before[node].get(k, 0.0)}
        assert all(name.startswith("notes_") for name, _ in moved), moved


async def test_labels_stay_bounded_whatever_the_headers_say(metered_nodes: Metered) -> None:
    m = metered_nodes
    msg = delete_call()
    for i in range(5):
        await post(m, 0, msg, **{"mcp-name": f"made-up-{i}"})
        await post(m, 0, msg, **{"mcp-method": f"made/up/{i}"})
    await m.client.get(m.urls[0].removesuffix("/mcp") + "/setup/nothing")
    samples = await scrape(m, 0)
    labels = {dict(k[1]).get("tool") for k in samples if k[0] == "notes_requests_total"}
    methods = {dict(k[1]).get("method") for k in samples if k[0] == "notes_requests_total"}
    assert labels <= {"", "other", *m.nodes[0].tools}
    assert methods <= {"tools/call", "other", "setup_page"}
    assert value(samples, "notes_requests_total", method="tools/call", tool="other", status="400")
    assert value(samples, "notes_requests_total", method="setup_page", tool="", status="404")


def test_the_labels_of_header_values_are_kept_up_to_a_bound() -> None:
    """``labels_for`` keeps the labels of the header pairs it saw: a client sending ever new
    values gets them worked out each time (``other``), and the kept pairs stop at the bound."""
    m = NodeMetrics()
    m.tool_names = frozenset({"notes_delete"})

    def scope(method: bytes, name: bytes) -> dict[str, Any]:
        headers = [(b"mcp-method", b"ignored"), (b"mcp-method", method), (b"mcp-name", name)]
        return {"type": "http", "path": "/mcp", "headers": headers}

    assert m.labels_for(scope(b"tools/call", b"notes_delete")) == ("tools/call", "notes_delete")
    assert m.labels_for(scope(b"tools/call", b"notes_delete")) == ("tools/call", "notes_delete")
    for i in range(LABEL_CACHE_SIZE * 2):
        assert m.labels_for(scope(b"tools/call", b"x%d" % i)) == ("tools/call", OTHER)
    assert len(m._labels) == LABEL_CACHE_SIZE
    assert m.labels_for(scope(b"tools/call", b"notes_delete")) == ("tools/call", "notes_delete")
    assert m.labels_for(scope(b"tools/list", b"")) == ("tools/list", "")
    assert m.labels_for({"type": "http", "path": "/mcp", "headers": []}) == ("none", "")


async def test_each_node_has_its_own_registry_and_the_global_one_stays_empty(
    metered_nodes: Metered, store: NoteStore
) -> None:
    m = metered_nodes
    await post(m, 0, delete_call())
    assert value(await scrape(m, 1), "notes_store_call_seconds_count", call="find") == 0
    assert not [name for name in REGISTRY._names_to_collectors if name.startswith("notes_")]


async def test_legacy_families_come_from_the_adapters_statistics() -> None:
    @dataclass
    class Stats:
        waiting_calls: int = 2
        pending_calls: int = 3
        sessions_opened: int = 5

    metrics = NodeMetrics()
    assert metrics.registry.get_sample_value("notes_legacy_waiting_calls") is None
    metrics.watch_legacy(Stats)
    get = metrics.registry.get_sample_value
    assert get("notes_legacy_waiting_calls") == 2
    assert get("notes_legacy_pending_calls") == 3
    assert get("notes_legacy_sessions_opened_total") == 5
    assert get("notes_legacy_sessions_ended_total") is None, "not reported: not exposed"


async def test_a_served_node_exposes_metrics_on_their_own_port_only(
    embedded_url: str, nursery: trio.Nursery
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = int(s.getsockname()[1])
    ops = OperatorOptions(metrics_port=metrics_port)
    url = await nursery.start(
        partial(serve_http_node, demo_settings(), embedded_url, embedded=True, host="127.0.0.1",
                port=0, node_id="metrics-0", prefix="ncmetrics", ops=ops)
    )  # fmt: skip
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.post(url, json=msg, headers=good_headers(msg))).status_code == 200
        assert (await client.get(url.removesuffix("/mcp") + "/readyz")).status_code == 200
        assert (await client.get(url.removesuffix("/mcp") + "/metrics")).status_code == 404
        scraped = await client.get(f"http://127.0.0.1:{metrics_port}/metrics")
    assert scraped.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
    }
    key = ("notes_requests_total", (("method", "tools/list"), ("status", "200"), ("tool", "")))
    assert samples[key] == 1
    assert samples[("notes_legacy_waiting_calls", ())] == 0, "the served legacy adapter's"
    assert ("notes_requests_total", (("method", "none"), ("status", "200"), ("tool", ""))) not in (
        samples
    ), "health probes are answered in front of the metrics"


def test_the_store_call_histogram_counts_as_prometheus_clients_does() -> None:
    """Our lock-free histogram (``nodes.metrics``) against prometheus-client's own, on the same
    observations: bounds exactly (a bucket is "less than or equal"), between, beyond the top."""
    observations = [0.0, *STORE_BUCKETS, 0.0007, 0.003, 0.3, 7.5, 1e-9, 4.9999]
    reference_registry = CollectorRegistry()
    reference = Histogram(
        "notes_store_call_seconds",
        "Store call latency by call.",
        ["call"],
        buckets=STORE_BUCKETS,
        registry=reference_registry,
    ).labels("find")
    metrics = NodeMetrics()
    ours, _ = metrics.store_call("find")
    for seconds in observations:
        reference.observe(seconds)
        ours.observe(seconds)

    def samples(registry: CollectorRegistry) -> Samples:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
            if family.name == "notes_store_call_seconds" and not s.name.endswith("_created")
        }

    assert samples(metrics.registry) == pytest.approx(samples(reference_registry))
    assert value(samples(metrics.registry), "notes_store_call_seconds_count", call="find") == len(
        observations
    )

    # The timed store calls count inline (code written per call's signature): the same.
    timed = NodeMetrics()
    store = MeteredStore(cast(NoteStoreAPI, _Finds()), timed)
    ticks = iter([t for seconds in observations for t in (0.0, seconds)])  # exact differences
    store._clock = lambda: next(ticks)
    for _ in observations:
        assert await_now(store.find("t", "ws", "title", 3, after="x")) == (
            "t",
            "ws",
            "title",
            3,
            "x",
        )
    assert samples(timed.registry) == pytest.approx(samples(reference_registry))


class _Finds:
    """A store whose ``find`` answers its arguments at once."""

    async def find(
        self, tenant: str, workspace: str, title: str, limit: int = 50, after: str = ""
    ) -> tuple[str, str, str, int, str]:
        return tenant, workspace, title, limit, after


def await_now(awaitable: Any) -> Any:
    """The result of a coroutine that never suspends."""
    try:
        awaitable.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("it suspended")


async def test_the_app_counts_its_requests_as_the_middleware_counts_them(
    store: NoteStore, nursery: trio.Nursery
) -> None:
    """The node's own app counts its requests itself (``StreamableHTTPApp.meter``: no
    middleware frame and no ``send`` wrapper); any other app gets ``with_metrics``' middleware.
    The same requests give the same request counts both ways: calls, a repeated ``Mcp-Method``
    (the last counts), a made-up tool and method, a refused token, a GET, an unknown path and a
    setup page."""
    node = make_nodes(store, 1)[0]
    served = []
    for middleware in (False, True):
        m = NodeMetrics()
        m.watch_node(node)
        sock, ops = bind_metrics(OperatorOptions(metrics_port=0))
        assert sock is not None
        assert ops.metrics_port is not None

        def wrap(
            app: http.ASGIApp,
            m: NodeMetrics = m,
            port: int = ops.metrics_port,
            middleware: bool = middleware,
        ) -> Any:
            if middleware:
                inner = app

                async def app(scope: Any, receive: Any, send: Any) -> None:  # not the node's app
                    await inner(scope, receive, send)

            else:
                assert isinstance(app, http.StreamableHTTPApp)
            counted = with_metrics(app, m)
            assert (counted is app) is not middleware
            return with_metrics_port(counted, m.registry, port)

        url = await nursery.start(partial(http.serve_node, node, TOKENS, wrap=wrap, sockets=[sock]))
        served.append((url, f"http://127.0.0.1:{ops.metrics_port}/metrics"))

    async def requests(url: str, client: httpx.AsyncClient) -> None:
        msg = delete_call()
        base = url.removesuffix("/mcp")
        await client.post(url, json=msg, headers=good_headers(msg))
        await client.post(url, json=msg, headers={**good_headers(msg), "mcp-name": "made-up"})
        await client.post(url, json=msg, headers={**good_headers(msg), "mcp-method": "made/up"})
        await client.post(url, json=msg, headers={**good_headers(msg), "authorization": "Bearer x"})
        repeated = [*good_headers(msg).items(), ("mcp-method", "made/up")]
        repeated.append(("mcp-method", "tools/call"))  # the last of the repeat counts
        await client.post(url, json=msg, headers=repeated)
        last_odd = [*good_headers(msg).items(), ("mcp-method", "made/up")]
        await client.post(url, json=msg, headers=last_odd)
        await client.get(url)
        await client.post(base + "/elsewhere", json=msg, headers=good_headers(msg))
        await client.get(base + "/setup/nothing")

    counts = []
    async with httpx.AsyncClient(timeout=10) as client:
        for url, scrape_url in served:
            for _ in range(2):  # the second time through the app's cached labels
                await requests(url, client)
            response = await client.get(scrape_url)
            assert response.status_code == 200
            counts.append(
                {
                    (s.name, tuple(sorted(s.labels.items()))): s.value
                    for family in text_string_to_metric_families(response.text)
                    for s in family.samples
                    if s.name in ("notes_requests_total", "notes_requests_in_flight")
                }
            )
    assert counts[0] == counts[1]
    labels = {dict(k[1]).get("method") for k in counts[0]}
    assert {"tools/call", "other", "none", "setup_page"} <= labels, counts[0]
    assert sum(v for k, v in counts[0].items() if k[0] == "notes_requests_total") == 18


def test_counting_by_the_apps_header_dict_labels_as_the_raw_headers_do() -> None:
    """``NodeMetrics.count`` takes an MCP request's labels from the header dict the app left in
    its scope (``nodes.http.HEADERS_SCOPE_KEY``) and keeps them per header pair; it must count
    every request under the labels the raw headers give (``labels_for``: the last of a repeated
    header counts, which the dict, joining repeats, does not say), twice over (cached)."""
    m = NodeMetrics()
    m.tool_names = frozenset({"notes_delete", "notes_list"})
    values = [b"tools/call", b"tools/list", b"made/up", b"", b"notes_delete"]
    values.append(b"made/up, tools/call")  # one header that reads as made/up repeated as tools/call
    names = [b"notes_delete", b"notes_list", b"made-up", b"", b"x, notes_delete"]
    header_lists: list[list[tuple[bytes, bytes]]] = [[]]
    for method in values:
        header_lists.append([(b"mcp-method", method)])
        for name in names:
            header_lists.append([(b"mcp-method", method), (b"mcp-name", name)])
            header_lists.append([(b"mcp-name", name), (b"mcp-method", b"tools/call")])
            for later in values[:3]:  # repeated: the last counts
                header_lists.append(
                    [(b"mcp-method", method), (b"mcp-name", name), (b"mcp-method", later)]
                )
                header_lists.append([(b"mcp-name", name), (b"mcp-method", later)] * 2)
    assert len(header_lists) > 200
    for round_no in range(2):
        for raw in header_lists:
            headers = [(b"host", b"h"), *raw, (b"content-length", b"0")]
            scope = {"type": "http", "path": "/mcp", "headers": headers}
            expected = m.labels_for(scope)
            with_dict = {**scope, http.HEADERS_SCOPE_KEY: http._header_dict(headers)}
            before = dict(m.counts.requests.get(expected, {}))
            m.count(with_dict, 200 + round_no)
            m.fold()
            after = m.counts.requests[expected]
            assert after.get(200 + round_no, 0) == before.get(200 + round_no, 0) + 1, raw
    total = sum(sum(by_status.values()) for by_status in m.counts.requests.values())
    assert total == 2 * len(header_lists)


def test_pending_requests_and_store_seconds_are_bounded_and_counted_once_each() -> None:
    """Counting only appends (``NodeMetrics.count``, a timed store call): what waits for the
    next scrape is bounded by ``PENDING_BOUND``, and each request and observation is counted
    exactly once, whether a bound or a scrape folded it."""
    m = NodeMetrics()
    m.tool_names = frozenset({"notes_delete"})
    headers = {"mcp-method": "tools/call", "mcp-name": "notes_delete"}
    scope = {"type": "http", "path": "/mcp", "headers": [], http.HEADERS_SCOPE_KEY: headers}
    histogram, _ = m.store_call("find")
    total = 2 * PENDING_BOUND + 7
    for i in range(total):
        m.count(scope, 200)
        histogram.observe(0.0001 if i % 2 else 0.02)
        assert len(m._pending) < PENDING_BOUND
        assert len(histogram.pending) < PENDING_BOUND
    assert len(m._pending) == len(histogram.pending) == 7  # two folds each, seven waiting
    got = scrape_now(m)
    labels = (("method", "tools/call"), ("status", "200"), ("tool", "notes_delete"))
    assert got[("notes_requests_total", labels)] == total
    assert got[("notes_store_call_seconds_count", (("call", "find"),))] == total
    fast = got[("notes_store_call_seconds_bucket", (("call", "find"), ("le", "0.0005")))]
    assert fast == total // 2
    assert got[("notes_store_call_seconds_sum", (("call", "find"),))] == pytest.approx(
        total // 2 * 0.0001 + (total - total // 2) * 0.02
    )
    assert m._pending == []
    assert histogram.pending == []
    assert scrape_now(m) == got  # a scrape with nothing new counts nothing again


def scrape_now(m: NodeMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``m``'s exposition, by name and labels."""
    text = generate_latest(m.registry).decode()
    families = text_string_to_metric_families(text)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


class _Odd:
    """A store whose ``find`` takes every kind of parameter and answers what it got."""

    async def find(self, a: int, /, b: int = 2, *rest: int, k: int = 3, **extra: int) -> Any:
        return a, b, rest, k, extra


def test_a_timed_call_takes_and_forwards_every_kind_of_parameter_as_the_call_does() -> None:
    """The timed call is written for the call's own signature: positional-only, defaults,
    ``*rest``, keyword-only and ``**extra`` reach the store as given, and each call is timed."""
    m = NodeMetrics()
    store = MeteredStore(cast(NoteStoreAPI, _Odd()), m)
    assert await_now(store.find(1)) == (1, 2, (), 3, {})
    assert await_now(store.find(1, 5, 6, 7, k=8, z=9)) == (1, 5, (6, 7), 8, {"z": 9})
    with pytest.raises(TypeError):
        store.find(a=1)  # positional-only, as in the store's own signature
    assert value(scrape_now(m), "notes_store_call_seconds_count", call="find") == 2
