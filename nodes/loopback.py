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
