"""Serving node processes: uvicorn with httptools and uvloop, header bounds and SIGTERM drain.

Layer: nodes (serving). The ASGI server of every node process (``serve --processes``,
``notes-cluster node``): stock uvicorn, its own protocol and request cycle, with what uvicorn
lacks added by a small subclass of its httptools protocol that overrides only the parser's and
the transport's callbacks (each calling uvicorn's own) and reads only attributes without a
leading underscore:

- a header timeout (``ServerTimeouts.headers_s``): uvicorn bounds only the idle time after a
  response, so a client that opens a connection and sends half a header block would hold it for
  ever; the block must be complete within the bound of the connection's start, then of each
  request's first byte;
- a header size bound (``max_header_bytes``): httptools buffers a header of any length (four
  connections sending an unfinished 50 MB header grew a node from 84 to 281 MB). Past the bound
  the client gets 431 and the connection is closed, whether the block is unfinished (counted as
  it arrives) or complete (measured exactly, ``header_block_size``). Requests parsed before the
  refused one on the same connection are answered first (a pipelining client must not take
  the 431 for a create's answer);
- a body timeout (``ServerTimeouts.body_s``): a body not complete within the bound of its
  headers gets 408 (unless its answer started) and the connection is closed. The same deadline
  in the app (``nodes.http``, a cancel scope around the read, as it runs on any other server)
  cost a fifth more of a node's instructions per flow; the three bounds here share one
  deadline per connection;
- an idle bound after a response that went out before its request's body was in (uvicorn's
  keep-alive timer is cancelled by the body's bytes and not armed again);
- ``port_apps``: a port's connections served by another app (a node process's metrics port);
- one write per response: uvicorn writes a head and its body apart; each request's cycle is
  given the transport through ``_OneWrite``, which holds a head that declares its length until
  the body's first write (streams pass untouched);
- a drain hook: on SIGTERM uvicorn stops accepting, closes idle connections, lets in-flight
  requests finish within ``timeout_graceful_shutdown`` and then runs the lifespan shutdown;
  ``NodeServer`` first asks the app to end its legacy streams (``NodeApp.drain``).

What this relies on of uvicorn is listed in ``NEEDED_HOOKS`` and checked when a config is built
(``hooks_missing``): without one of them the node serves on uvicorn's protocol unchanged and
says so in its log (no header and body bounds from the server then; the app bounds the body).
``pyproject.toml`` bounds uvicorn from above, and CI runs the node server's tests on the lowest
and the highest version allowed (``.ci/run``). A request cycle of our own in place of uvicorn's
was measured and not kept (docs/explanation/design-decisions.md, "The request cycle").
(Nodes inside a trio process, on hypercorn, get the same bounds from the app.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType, MappingProxyType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.supervisors import multiprocess

from nodes.http import (
    DEFAULT_MAX_HEADER_BYTES,
    HEADER_BLOCK_TOO_LARGE,
    ServerTimeouts,
    header_block_size,
)
from nodes.serving.lifeline import die_with_parent

log = logging.getLogger("nodes.serving.http_server")

NEEDED_HOOKS: dict[Any, tuple[str, ...]] = {
    HttpToolsProtocol: (
        "connection_made",
        "connection_lost",
        "data_received",
        "on_message_begin",
        "on_headers_complete",
        "on_body",
        "on_message_complete",
        "on_response_complete",
    ),
    HttpToolsProtocol.__init__: ("config", "app", "cycle", "pipeline", "loop"),
    HttpToolsProtocol.connection_made: ("transport", "server"),
    HttpToolsProtocol.on_message_begin: ("url", "headers"),
    HttpToolsProtocol.on_headers_complete: ("transport", "parser", "cycle"),
    RequestResponseCycle.__init__: ("transport", "response_started", "response_complete"),
    uvicorn.Server: ("startup", "shutdown", "capture_signals", "handle_exit", "run"),
    multiprocess.Process: ("server", "target"),
    multiprocess.Multiprocess: ("handle_hup", "run"),
}
"""What ``BoundedHttpToolsProtocol``, ``NodeServer`` and the worker supervisor use of uvicorn:
for a class, the methods it overrides or calls; for a function, the attributes it must set
(names it stores, read from its code)."""


def hooks_missing(needed: Mapping[Any, tuple[str, ...]] = NEEDED_HOOKS) -> list[str]:
    """Which of ``needed`` the installed uvicorn lacks (``Class.name`` or ``function: name``)."""
    missing = []
    for owner, names in needed.items():
        if isinstance(owner, type):
            missing += [f"{owner.__name__}.{n}" for n in names if not hasattr(owner, n)]
        else:
            stored = getattr(getattr(owner, "__code__", None), "co_names", ())
            missing += [f"{owner.__qualname__}: {n}" for n in names if n not in stored]
    return missing


class NodeServerConfig(uvicorn.Config):
    """uvicorn's config plus the header and body timeouts and the header size bound (read by
    ``BoundedHttpToolsProtocol``); a module level class so that worker processes can unpickle
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


WORKER_HEALTHCHECK_S = 60
"""How long uvicorn's supervisor waits for a worker to answer its health check before it kills
the worker and starts another (uvicorn's own default: 5 s). A worker answers only once its
interpreter has imported the node, which on a busy host took longer than 5 s: every worker was
killed before it could serve, and its replacement too."""

COPY_LIMIT = 65_536
"""Up to this body size a held head is joined to its body (one buffer, one ``write``); a larger
body goes with it through ``writelines`` (uvloop: one ``writev``)."""


class _OneWrite:
    """A request's transport as its uvicorn cycle sees it: a response head that declares its
    length is held and leaves with the body's first write, one system call where uvicorn makes
    two. A chunked head (a stream) and every other write pass at once; closing writes a held
    head first. HEAD requests get the transport itself (no body write would follow)."""

    __slots__ = ("head", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.head: bytes | None = None

    def write(self, data: bytes) -> None:
        head = self.head
        if head is not None:
            self.head = None
            if len(data) <= COPY_LIMIT:
                self.transport.write(head + data)
            else:
                self.transport.writelines((head, data))
        elif (
            data[-4:] == b"\r\n\r\n"
            and data[:9] == b"HTTP/1.1 "
            and data[9:12] != b"100"
            and b"\r\ntransfer-encoding:" not in data
        ):
            self.head = data
        else:
            self.transport.write(data)

    def close(self) -> None:
        head = self.head
        if head is not None:
            self.head = None
            self.transport.write(head)
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


_EARLY_S = 0.001
"""A deadline timer that fires this close to its deadline counts as expired (loop clocks round)."""
_NO_DEADLINE, _HEADERS, _BODY, _IDLE = range(4)
"""The connection's phases that have a deadline (``BoundedHttpToolsProtocol._phase``)."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the header and body timeouts, the header size bound,
    the idle bound after an early answer and ``port_apps`` (see the module docstring). Every
    override calls uvicorn's own method; a refused header block turns the parser's callbacks
    into no-ops (nothing more is read or run) and its 431 waits for the answers of the requests
    parsed before it.

    The three bounds are phases of one deadline per connection with one timer: a phase only
    stores its deadline, and the timer, when it fires early, sleeps again until the current
    one (a timer armed and cancelled per phase costs about 4% of a node's instructions per
    flow)."""

    _timer: asyncio.TimerHandle | None = None
    _timer_at = 0.0
    _deadline = 0.0
    _phase = _NO_DEADLINE
    _heading = True
    """Between a request's start (or the previous request's end) and its complete headers."""
    _header_bytes = 0
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        config: NodeServerConfig = self.config  # type: ignore[assignment]
        port = self.server[1] if self.server is not None else None
        if config.port_apps and port is not None:
            app = config.port_apps.get(port)
            if app is not None:
                self.app = app
        self._arm(_HEADERS, config.headers_timeout_s)

    def data_received(self, data: bytes) -> None:
        """uvicorn's, with the unfinished header block counted against the bound."""
        if self._refused:
            return  # nothing after a refused block is parsed
        if self._phase == _IDLE:
            self._phase = _NO_DEADLINE
        if self._heading:
            self._header_bytes += len(data)
        super().data_received(data)
        bound: int = self.config.max_header_bytes  # type: ignore[attr-defined]
        if self._heading and not self._refused and self._header_bytes > bound:
            self._refuse()

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        if self._phase != _HEADERS:  # the connection's first request keeps its deadline
            self._arm(_HEADERS, self.config.headers_timeout_s)  # type: ignore[attr-defined]

    def on_headers_complete(self) -> None:
        """uvicorn's, unless the block is past the bound (measured exactly)."""
        if self._refused:
            return
        self._phase = _NO_DEADLINE
        self._heading = False
        if header_block_size(self.url, self.headers) > self.config.max_header_bytes:  # type: ignore[attr-defined]
            self._refuse()
            return
        transport = self.transport
        if self.parser.get_method() != b"HEAD":
            self.transport = _OneWrite(transport)  # type: ignore[assignment]  # the new cycle's
        try:
            super().on_headers_complete()
        finally:
            self.transport = transport
        self._arm(_BODY, self.config.body_timeout_s)  # type: ignore[attr-defined]

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._phase = _NO_DEADLINE
        super().on_message_complete()
        self._heading = True
        self._header_bytes = 0
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and not self.pipeline:
            # Answered before its body came (a refusal): from now on the connection is idle.
            self._arm(_IDLE, self.timeout_keep_alive)

    def on_response_complete(self) -> None:
        """uvicorn's; then a refused header block's 431, once every request before it has its
        answer."""
        super().on_response_complete()
        if self._refused and not self._answering():
            self._send_431()

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = _NO_DEADLINE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def _answering(self) -> bool:
        """A request parsed before now still has no complete answer."""
        cycle = self.cycle
        return bool(self.pipeline) or (cycle is not None and not cycle.response_complete)

    def _refuse(self) -> None:
        """The header block is past the bound: read nothing more; 431 once the requests parsed
        before it are answered (now, when none is waiting)."""
        self._refused = True
        self._heading = False
        self._phase = _NO_DEADLINE
        if self.transport.is_closing():
            return
        self.transport.pause_reading()
        if not self._answering():
            self._send_431()

    def _send_431(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(_header_too_large_response(self.config.max_header_bytes))  # type: ignore[attr-defined]
            self.transport.close()

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
        cycle = self.cycle
        answered = cycle is None or cycle.response_started
        if phase == _BODY and not answered and not self.transport.is_closing():
            self.transport.write(_BODY_TIMEOUT_RESPONSE)
        # Past the header, body or idle bound: closed (an app still reading is told the
        # client is gone).
        if not self.transport.is_closing():
            self.transport.close()


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
    """uvicorn settings of a node process: httptools (``BoundedHttpToolsProtocol``, or
    uvicorn's own when a hook it needs is missing: logged), uvloop, no access log, no proxy
    headers (a node trusts no forwarded address), the idle, drain and header timeouts, the
    header size bound. With ``log_level``, uvicorn's own logging setup at that level (else the
    process's logging)."""
    missing = hooks_missing()
    if missing:
        log.warning(
            "uvicorn %s lacks what the node's HTTP protocol needs (%s): serving on uvicorn's "
            "own protocol, without the header and body timeouts and the header size bound",
            uvicorn.__version__,
            ", ".join(missing),
        )
    config = NodeServerConfig(
        app,
        host=host,
        port=port,
        http="httptools" if missing else BoundedHttpToolsProtocol,
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
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
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
    sockets = sockets or [config.bind_socket()]
    if hooks_missing():  # said when the config was built: uvicorn's own workers and server
        multiprocess.Multiprocess(config, sockets=sockets).run()
        return
    # uvicorn's supervisor builds a plain Server in each worker; have it build ours.
    original = multiprocess.Process
    multiprocess.Process = _NodeWorker  # type: ignore[misc]
    try:
        _Supervisor(config, sockets=sockets).run()
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

    _node_server: NodeServer | None = None

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover
        # The supervisor starts workers from its main thread, which lives as long as it does:
        # the kernel's parent-death signal is exact here.
        die_with_parent(signal.SIGTERM)
        super().target(sockets)

    @property
    def server(self) -> uvicorn.Server:
        """The worker's server (uvicorn's supervisor reads it for its health checks)."""
        if self._node_server is None:
            self._node_server = NodeServer(self.config)
        return self._node_server
