"""Serving node processes: uvicorn with httptools and uvloop, header timeout and SIGTERM drain.

Layer: nodes (serving). The ASGI server of every node process (``serve --processes``, the
bench's HTTP points, ``notes-cluster node``), chosen by a side-by-side benchmark
(``notes-cluster bench-servers``; docs/explanation/design-decisions.md): on the same client,
c=8, one worker, it spent less than half of granian's CPU per two-request flow.

What uvicorn lacks is added here, small and local:
- header and body timeouts (``ServerTimeouts``): uvicorn bounds only the idle time between
  requests, so a client that opens a connection and sends half a header block, or headers that
  promise a body it never sends, would hold it for ever; ``_TimedHttpToolsProtocol`` closes it;
- a header size bound (``max_header_bytes``): uvicorn's ``h11_max_incomplete_event_size``
  applies to h11 only, and httptools buffers a header of any length (four connections sending
  an unfinished 50 MB header grew a node from 84 to 281 MB); past the bound the protocol
  answers 431 and closes, whether the block is unfinished or complete;
- a drain hook: on SIGTERM uvicorn stops accepting, closes idle connections, lets in-flight
  requests finish within ``timeout_graceful_shutdown`` and then runs the lifespan shutdown;
  ``NodeServer`` first asks the app to end its legacy streams (``NodeApp.drain``), which would
  otherwise keep their connections open until the bound.
And cuts of uvicorn's cost per request: each request's cycle is a
``nodes.serving.response_cycle.ResponseCycle`` instead of uvicorn's (a response that is not chunked
leaves in one write, where uvicorn writes its head and body apart; no ``asyncio.Event`` per
request), and the header, body and idle bounds share one deadline per connection (uvicorn and
the first version here armed and cancelled three timers per request).
(Nodes inside a trio process, on hypercorn, get the body deadline from the app instead.)
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import signal
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from types import FrameType, MappingProxyType
from typing import Any

import httptools
import uvicorn
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.supervisors import multiprocess

from nodes.http import (
    DEFAULT_MAX_HEADER_BYTES,
    HEADER_BLOCK_TOO_LARGE,
    ServerTimeouts,
    header_block_size,
)
from nodes.serving.lifeline import die_with_parent
from nodes.serving.response_cycle import ResponseCycle

log = logging.getLogger("nodes.serving.http_server")


class NodeServerConfig(uvicorn.Config):
    """uvicorn's config plus the header and body timeouts and the header size bound (read by
    ``_TimedHttpToolsProtocol``); a module level class so that worker processes can unpickle
    it."""

    headers_timeout_s: float = ServerTimeouts().headers_s
    body_timeout_s: float = ServerTimeouts().body_s
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    port_apps: Mapping[int, Any] = MappingProxyType({})
    """Local port -> the ASGI app that serves every connection arriving on it instead of the
    config's app (a node process's metrics port: ``NodeApp.serve_metrics``). Chosen once per
    connection, so requests on the other ports are not checked one by one. One process only:
    the apps are this process's objects."""


_BODY_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)


def _header_too_large_response(max_header_bytes: int) -> bytes:
    body = HEADER_BLOCK_TOO_LARGE % max_header_bytes
    head = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    )
    return head + body


class _HeaderBlockTooLarge(Exception):
    """Raised from a parser callback to stop parsing a request whose header block is too large."""


_EARLY_S = 0.001
"""A deadline timer that fires this close to its deadline counts as expired (loop clocks round)."""
_NO_DEADLINE, _HEADERS, _BODY, _IDLE = range(4)
"""The connection's phases that have a deadline (``_TimedHttpToolsProtocol._phase``)."""


class _TimedHttpToolsProtocol(HttpToolsProtocol):
    """httptools' protocol with two more deadlines: the header block must be complete within
    ``headers_timeout_s`` (from the connection's start, then from each request's first byte),
    and the body within ``body_timeout_s`` of its headers; past the first the connection is
    closed, past the second the client gets 408 (unless a response started) and it is closed.
    uvicorn's idle bound (``timeout_keep_alive``, from a response's end to the next request's
    first byte) is kept, as a third phase of the same deadline; it also starts when a request
    answered before its body came (a refusal) has its body in (uvicorn's timer, armed at the
    response's end, was cancelled by the body's bytes: the connection was left with no bound).

    One deadline per connection, one timer: each phase only stores its deadline (a float), and
    the timer, when it fires early, sleeps again until the current deadline; it is moved only
    when a deadline comes before it. uvicorn armed and cancelled a ``call_later`` per request
    for the idle bound, and this class did for the two others: three timers per request.

    And one size bound: while a header block is being received, the bytes that arrived count
    against ``max_header_bytes`` (checked after each read is parsed, so the parser holds at most
    the bound plus one read); a complete block is measured exactly (``header_block_size``).
    Past the bound the client gets 431 and the connection is closed.

    Each request's cycle is a ``ResponseCycle`` (``nodes.serving.response_cycle``), built and
    started here as uvicorn builds and starts its own; a complete response leaves in one write.

    uvicorn internals used (present from 0.30 to 0.55; ``tests/test_node_server_internals.py``
    checks them): the parser callbacks' state (``self.url``, ``self.headers``, ``self.scope``,
    ``self.expect_100_continue``), ``self.cycle``, ``self.pipeline``, ``self.tasks``,
    ``self.flow``, ``_should_upgrade`` and ``_unset_keepalive_if_required``;
    ``on_response_complete``'s steps, which ``on_response_complete`` here repeats, without the
    keep-alive timer when no pipelined request waits."""

    _timer: asyncio.TimerHandle | None = None
    _timer_at = 0.0
    _deadline = 0.0
    _phase = _NO_DEADLINE
    _heading = True
    """Between a request's start (or the previous request's end) and its complete headers."""
    _header_bytes = 0
    _header_refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        port_apps = self.config.port_apps  # type: ignore[attr-defined]
        if port_apps and self.server is not None:
            app = port_apps.get(self.server[1])
            if app is not None:
                self.app = app
        self._arm(_HEADERS, self.config.headers_timeout_s)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        """uvicorn's, with the header size bound around the parser."""
        if self._heading:
            self._header_bytes += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._header_refused:
                self._refuse_header_block()
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._heading and self._header_bytes > self.config.max_header_bytes:  # type: ignore[attr-defined]
            self._refuse_header_block()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase != _HEADERS:  # the connection's first request keeps its deadline
            self._arm(_HEADERS, self.config.headers_timeout_s)  # type: ignore[attr-defined]

    def on_headers_complete(self) -> None:
        """uvicorn's, with the header size bound, the body deadline and a ``ResponseCycle``
        (``nodes.serving.response_cycle``) in place of uvicorn's cycle."""
        self._disarm()
        self._heading = False
        if header_block_size(self.url, self.headers) > self.config.max_header_bytes:  # type: ignore[attr-defined]
            self._header_refused = True
            raise _HeaderBlockTooLarge  # stops the parser: data_received answers 431
        parser = self.parser
        scope = self.scope
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        url = httptools.parse_url(self.url)
        raw_path = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root = self.root_path
        scope["path"] = root + path
        scope["raw_path"] = root.encode("ascii") + raw_path if root else raw_path
        scope["query_string"] = url.query or b""
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        else:
            app = self.app
        previous = self.cycle
        cycle = ResponseCycle(
            scope,  # type: ignore[arg-type]
            self.transport,
            self.flow,
            self.logger,
            self.access_logger,
            self.access_log,
            self.server_state.default_headers,
            self.expect_100_continue,
            http_version != "1.0" and parser.should_keep_alive(),
            self.on_response_complete,
        )
        self.cycle = cycle  # type: ignore[assignment]
        if previous is None or previous.response_complete:
            self._start_cycle(cycle, app)
        else:  # pipelined: it starts when the one before it has answered
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))  # type: ignore[arg-type]
        self._arm(_BODY, self.config.body_timeout_s)  # type: ignore[attr-defined]

    def _start_cycle(self, cycle: ResponseCycle, app: Any) -> None:
        if getattr(self.config, "reset_contextvars", False):  # uvicorn 0.55's opt-in
            task = self.loop.create_task(cycle.run_asgi(app), context=contextvars.Context())
        else:
            task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        if cycle.add_body(body) > HIGH_WATER_LIMIT:  # type: ignore[attr-defined]
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and not self.pipeline:
            # Answered before its body came (a refusal): from now on the connection is idle.
            self._arm(_IDLE, self.timeout_keep_alive)
        else:
            self._disarm()
        self._heading = True
        self._header_bytes = 0
        # uvicorn's own steps, inline: through super() they cost 0.4% of a flow's instructions.
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.more_body = False
        cycle.message_event.set()

    def on_response_complete(self) -> None:
        """uvicorn's, with the idle bound as this connection's deadline (no timer per request).
        A pipelined request waiting, or a closing transport: uvicorn's own (no idle bound)."""
        if self.pipeline or self.transport.is_closing():
            super().on_response_complete()  # starts a pipelined cycle as it starts its own
            return
        self.server_state.total_requests += 1
        self.flow.resume_reading()
        if self._phase == _NO_DEADLINE:  # else the next request started: its deadline holds
            self._arm(_IDLE, self.timeout_keep_alive)

    def _refuse_header_block(self) -> None:
        self._heading = False
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(_header_too_large_response(self.config.max_header_bytes))  # type: ignore[attr-defined]
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def _arm(self, phase: int, seconds: float) -> None:
        """The connection's deadline: ``phase`` ends ``seconds`` from now."""
        at = self.loop.time() + seconds
        self._phase = phase
        self._deadline = at
        timer = self._timer
        if timer is None or at < self._timer_at:
            if timer is not None:
                timer.cancel()
            self._timer = self.loop.call_at(at, self._deadline_reached)
            self._timer_at = at

    def _disarm(self) -> None:
        self._phase = _NO_DEADLINE

    def _deadline_reached(self) -> None:
        self._timer = None
        phase = self._phase
        if phase == _NO_DEADLINE:
            return
        at = self._deadline
        if at - self.loop.time() > _EARLY_S:  # the deadline moved on since the timer was set
            self._timer = self.loop.call_at(at, self._deadline_reached)
            self._timer_at = at
            return
        self._phase = _NO_DEADLINE
        if phase == _BODY:
            self._body_timed_out()
        else:
            self._close()

    def _close(self) -> None:
        """Past the header or idle deadline: close."""
        if not self.transport.is_closing():
            self.transport.close()

    def _body_timed_out(self) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if not cycle.response_started and not self.transport.is_closing():
                self.transport.write(_BODY_TIMEOUT_RESPONSE)
            # The app's receive() now answers http.disconnect; its sends are dropped.
            cycle.disconnected = True
            cycle.message_event.set()
            cycle.close_connection()  # type: ignore[attr-defined]  # a held head leaves first
        self._close()


async def _drain_app(app: Any) -> None:
    """Call ``drain()`` on the first app of uvicorn's wrapper chain that has one."""
    for _ in range(8):
        drain = getattr(app, "drain", None)
        if drain is not None:
            await drain()
            return
        app = getattr(app, "app", None)
        if app is None:
            return


class NodeServer(uvicorn.Server):
    """uvicorn's server: on shutdown it stops accepting, has the app end its legacy streams
    (bounded by the drain timeout), then drains as uvicorn does. ``on_started`` is called once
    it listens."""

    def __init__(
        self, config: uvicorn.Config, on_started: Callable[[], None] | None = None
    ) -> None:
        super().__init__(config)
        self.on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start as uvicorn does, then report readiness."""
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit and self.on_started is not None:
            self.on_started()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's capture of SIGINT and SIGTERM, plus SIGHUP: a closed terminal drains the
        node as a supervisor's stop does (uvicorn alone would let SIGHUP kill it mid-request)."""
        if threading.current_thread() is not threading.main_thread():
            with super().capture_signals():
                yield
            return
        previous = signal.signal(signal.SIGHUP, self.handle_exit)
        try:
            with super().capture_signals():
                yield
        finally:
            signal.signal(signal.SIGHUP, previous)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop accepting, end legacy streams, then uvicorn's graceful drain."""
        log.info("draining: no new connections; in-flight requests finish")
        for server in self.servers:
            server.close()
        bound = self.config.timeout_graceful_shutdown
        try:
            await asyncio.wait_for(_drain_app(self.config.loaded_app), bound)
        except TimeoutError:
            log.warning("legacy streams did not end within %s s", bound)
        await super().shutdown(sockets=sockets)


def server_config(
    app: Any,
    *,
    host: str,
    port: int,
    timeouts: ServerTimeouts,
    workers: int = 1,
    factory: bool = False,
    log_level: str | None = None,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    port_apps: Mapping[int, Any] | None = None,
) -> NodeServerConfig:
    """uvicorn settings of a node process: httptools, uvloop, no access log, no proxy headers
    (a node trusts no forwarded address), the idle, drain and header timeouts, the header size
    bound. With ``log_level``, uvicorn's own logging setup at that level (else the process's
    logging)."""
    config = NodeServerConfig(
        app,
        host=host,
        port=port,
        http=_TimedHttpToolsProtocol,
        loop="uvloop",
        lifespan="on",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        log_config=LOGGING_CONFIG if log_level else None,
        log_level=log_level,
        timeout_keep_alive=timeouts.idle_s,  # type: ignore[arg-type]  # a float works
        timeout_graceful_shutdown=timeouts.drain_s,  # type: ignore[arg-type]
        workers=workers,
        factory=factory,
        h11_max_incomplete_event_size=max_header_bytes,  # the same bound, should h11 serve
    )
    config.headers_timeout_s = timeouts.headers_s
    config.body_timeout_s = timeouts.body_s
    config.max_header_bytes = max_header_bytes
    if port_apps:
        if workers != 1:
            raise ValueError("port_apps are this process's objects: one worker only")
        config.port_apps = MappingProxyType(dict(port_apps))
    return config


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port), as uvicorn binds one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_server(
    config: NodeServerConfig,
    on_started: Callable[[], None] | None = None,
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, on ``sockets`` when given (else uvicorn binds), with
    ``config.workers`` worker processes (uvicorn's supervisor passes SIGTERM on to each worker,
    which drains as above)."""
    # uvicorn raises a captured SIGTERM again once it has drained, under the handler it found:
    # this one makes a drained node exit 0, as a supervisor expects of a clean stop.
    signal.signal(signal.SIGTERM, _exit_drained)
    signal.signal(signal.SIGHUP, _exit_drained)
    if config.workers == 1:
        NodeServer(config, on_started).run(sockets=sockets)
        return
    # uvicorn's supervisor builds a plain Server in each worker; have it build ours.
    original = multiprocess.Process
    multiprocess.Process = _NodeWorker  # type: ignore[misc]
    try:
        _Supervisor(config, sockets=sockets or [config.bind_socket()]).run()
    finally:
        multiprocess.Process = original  # type: ignore[misc]


def _exit_drained(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


class _Supervisor(multiprocess.Multiprocess):
    """uvicorn's supervisor, except that SIGHUP stops the workers (each drains) as SIGTERM
    does, instead of restarting them: every long-running command stops on SIGHUP."""

    def handle_hup(self) -> None:
        log.info("SIGHUP: stopping the workers")
        self.should_exit.set()


class _NodeWorker(multiprocess.Process):
    """A worker process of uvicorn's supervisor, serving with ``NodeServer``; it drains and
    exits by itself when the supervisor is gone (even after SIGKILL)."""

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover
        # The supervisor starts workers from its main thread, which lives as long as it does:
        # the kernel's parent-death signal is exact here.
        die_with_parent(signal.SIGTERM)
        super().target(sockets)

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = NodeServer(self.config)
        return self._server
