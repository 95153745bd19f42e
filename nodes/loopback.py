"""Loopback rules of the HTTP app: which connections are local, which Origins are the node's own.

Layer: node, transport support. Pure module: no I/O, nothing MCP-aware.

A request that reaches a node over a loopback address and names, as its ``Origin``, a loopback
name of that very address's port (``http://localhost:PORT``, ``http://127.0.0.1:PORT``,
``http://[::1]:PORT``) comes from a page of the node's own origin: a same-origin request, which
no DNS rebinding can forge (a rebound page carries its own host name, ``http://evil.example``,
as its Origin). Such Origins are accepted without configuration; every other Origin must be
listed in ``allowed_origins``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names of an Origin that mean "this machine" (``[::1]`` is read without brackets)."""


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_server(server: Sequence[object] | None) -> int | None:
    """The port of an ASGI ``scope["server"]`` (``(host, port)``) when its host is loopback."""
    if server is None or len(server) != 2:
        return None
    host, port = server
    if not isinstance(host, str) or not isinstance(port, int) or not is_loopback_host(host):
        return None
    return port


def is_own_loopback_origin(origin: str, server: Sequence[object] | None) -> bool:
    """Whether ``origin`` is ``http://<loopback name>:<port>`` for a request that reached a
    loopback address on that port (see the module docstring)."""
    port = loopback_server(server)
    if port is None:
        return False
    try:
        parts = urlsplit(origin)
        origin_port = parts.port
    except ValueError:
        return False
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_NAMES:
        return False
    if parts.username is not None or parts.password is not None:
        return False
    if parts.path or parts.query or parts.fragment:
        return False
    return (80 if origin_port is None else origin_port) == port


REMOTE_MAX_RATE = 5.0
"""Flows (``loadgen``) or scenarios (``conformance``) started per second at most when a target
is beyond loopback: someone else's server, perhaps in production, gets a trickle, not a load."""

REMOTE_MAX_CONCURRENCY = 4
"""Flows in flight at once at most when a target is beyond loopback (``loadgen``)."""

ALLOW_REMOTE_OPTION = "--allow-remote"
"""The option that lets ``conformance`` and ``loadgen`` send to a target beyond loopback."""


class TargetRefused(ValueError):
    """A ``--target`` URL that may not be sent to: not ``http(s)://HOST[:PORT]/...``, or beyond
    loopback without the explicit option. The message is one line naming the URL."""


def target_urls(targets: Sequence[str]) -> list[str]:
    """``--target`` values, repeated or comma-separated, as a list of URLs."""
    return [u.strip() for t in targets for u in t.split(",") if u.strip()]


def remote_hosts(urls: Sequence[str], *, allow_remote: bool) -> list[str]:
    """The hosts beyond loopback that ``urls`` name (none: every URL is loopback), checked before
    anything is sent. Raises ``TargetRefused`` for a URL that is not ``http``/``https`` with a
    host, and for any host beyond loopback unless ``allow_remote``. Pure: no name is resolved
    (a name other than ``localhost`` counts as beyond loopback, whatever it resolves to)."""
    remote: list[str] = []
    for url in urls:
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
            parts.port  # noqa: B018  (raises ValueError on a port out of range)
        except ValueError as exc:
            raise TargetRefused(f"--target {url}: not a URL ({exc}); nothing was sent") from None
        if parts.scheme not in ("http", "https") or not host:
            raise TargetRefused(
                f"--target {url}: give an http:// or https:// URL with a host; nothing was sent"
            )
        if is_loopback_host(host):
            continue
        if not allow_remote:
            raise TargetRefused(
                f"--target {url}: {host} is beyond loopback; to send it traffic, add "
                f"{ALLOW_REMOTE_OPTION} (rate capped at {REMOTE_MAX_RATE:g}/s); nothing was sent"
            )
        if host not in remote:
            remote.append(host)
    return remote


def remote_load_bounds(rate: float | None, concurrency: int) -> tuple[float, int]:
    """A load's rate (flows started per second; ``None``: closed loop, as fast as answers come)
    and concurrency, bounded for a target beyond loopback."""
    return min(rate or REMOTE_MAX_RATE, REMOTE_MAX_RATE), min(concurrency, REMOTE_MAX_CONCURRENCY)


def remote_traffic_line(command: str, urls: Sequence[str], remote: Sequence[str]) -> str:
    """The line a command prints before it sends anything beyond loopback: where, and how much."""
    return (
        f"{command}: sending traffic beyond loopback to {', '.join(remote)} "
        f"({', '.join(urls)}), at most {REMOTE_MAX_RATE:g} per second"
    )
