"""JSON-RPC errors of the node and the one table from error code to HTTP status.

Layer: node, protocol core. Pure module: no I/O.

    JsonRpcError                 a JSON-RPC error response (code, fixed message, optional data)
     ├── code -32700  parse error                       HTTP 400
     ├── code -32600  invalid request                   HTTP 400
     ├── code -32601  method not found                  HTTP 404
     ├── code -32602  invalid params                    HTTP 400
     │    ├── InvalidState  every rejected requestState (one fixed message)
     │    └── an idempotency key reused with other arguments (``idempotency_key_reused``)
     ├── code -32603  internal error / unknown outcome  HTTP 500 (also a full store)
     ├── code -32020  header mismatch                   HTTP 400
     ├── code -32021  missing required capability       HTTP 400
     └── code -32022  unsupported protocol version      HTTP 400

Business failures (note gone, workspace not authorized, ...) are not errors: they are
``isError: true`` tool results (see ``nodes.results``).
"""

from __future__ import annotations

import copy
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022

HTTP_STATUS: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    METHOD_NOT_FOUND: 404,
    INVALID_PARAMS: 400,
    # UNCONFIRMED in the spec (the SDK answers 200). We answer 500 so that proxies and clients
    # see the request did not complete; the body still carries the JSON-RPC error.
    INTERNAL_ERROR: 500,
    HEADER_MISMATCH: 400,
    MISSING_CAPABILITY: 400,
    UNSUPPORTED_VERSION: 400,
}

INVALID_STATE_MESSAGE = "Invalid or expired requestState"
"""The one answer to every rejected requestState, whatever the reason (the reason is logged)."""

INVALID_STATE_DATA = {"reason": "invalid_request_state"}


class JsonRpcError(Exception):
    """A JSON-RPC error to send back. ``message`` is fixed per case and never echoes secrets."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @property
    def http_status(self) -> int:
        """The HTTP status this error implies on Streamable HTTP."""
        return HTTP_STATUS.get(self.code, 400)

    def to_dict(self) -> dict[str, Any]:
        """The ``error`` member of the response."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


class InvalidState(JsonRpcError):
    """-32602 for a rejected requestState, whatever the reason: callers that must tell it apart
    (the legacy adapter, whose clients never see a state) catch this type."""

    def __init__(self) -> None:
        super().__init__(INVALID_PARAMS, INVALID_STATE_MESSAGE, dict(INVALID_STATE_DATA))


def invalid_request(message: str = "Invalid Request") -> JsonRpcError:
    """-32600: not a valid JSON-RPC request."""
    return JsonRpcError(INVALID_REQUEST, message)


def method_not_found(method: str) -> JsonRpcError:
    """-32601: the method does not exist on this server."""
    return JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {method[:100]}")


def invalid_params(message: str, data: Any = None) -> JsonRpcError:
    """-32602 with a specific message."""
    return JsonRpcError(INVALID_PARAMS, message, data)


def invalid_state() -> InvalidState:
    """-32602, the one fixed answer for any rejected requestState."""
    return InvalidState()


IDEMPOTENCY_KEY_META = "dev.notes-cluster/idempotencyKey"
"""The request ``_meta`` key of the idempotency key extension (``nodes.idempotency``)."""


def outcome_unknown_error() -> JsonRpcError:
    """-32603: the store did not answer; the request may or may not have taken effect. A retry
    with the same idempotency key gets the recorded result if it did, and makes it if not."""
    return JsonRpcError(
        INTERNAL_ERROR,
        "Store unavailable: the outcome is unknown; retry the same request with the same "
        f"_meta[{IDEMPOTENCY_KEY_META!r}] (send one with every write) to get its recorded result",
        {"retryable": True, "reason": "store_unavailable"},
    )


def idempotency_key_reused() -> JsonRpcError:
    """-32602: the idempotency key was used before with other arguments or another tool."""
    return JsonRpcError(
        INVALID_PARAMS,
        "Idempotency key already used for another request (other arguments or another tool); "
        "nothing was done: send a new key for a new request",
        {"reason": "idempotency_key_reused"},
    )


REFUSAL_REASONS: dict[str, str] = {
    "resharding": "the note's slot is being moved between Redis Cluster masters",
    "cluster_down": "the Redis Cluster is failing over",
    "read_only": "the node's Redis is a replica now (a failover), so it takes no writes",
    "loading": "the node's Redis is loading its data after a restart",
    "master_down": "the node's Redis lost its master",
    "busy": "the node's Redis is busy with a long script",
    "no_replicas": "the node's Redis has too few replicas to take writes",
}
"""Why a store refused a request until its deadline (``store.refusals``), for people."""


def store_refused(reason: str, *, maybe_ran: bool) -> JsonRpcError:
    """-32603 for a request the store refused until its deadline without running it (a
    resharding, a failover, a demoted or loading Redis): retryable, with the reason. With
    ``maybe_ran`` an earlier try lost its reply, so the outcome is unknown and the message says
    so, as ``outcome_unknown`` does."""
    why = REFUSAL_REASONS.get(reason, reason)
    if maybe_ran:
        message = (
            f"Store unavailable ({why}): the outcome is unknown; retry the same request with "
            f"the same _meta[{IDEMPOTENCY_KEY_META!r}] to get its recorded result"
        )
    else:
        message = f"Store unavailable ({why}): nothing was changed; retry shortly"
    return JsonRpcError(
        INTERNAL_ERROR,
        message,
        {"retryable": True, "reason": f"store_{reason}", "outcomeUnknown": maybe_ran},
    )


def internal_error() -> JsonRpcError:
    """-32603 for a failure the node did not expect: the outcome is unknown to it too."""
    return JsonRpcError(
        INTERNAL_ERROR,
        "Internal error: the outcome is unknown; retry with the same "
        f"_meta[{IDEMPOTENCY_KEY_META!r}] to get the recorded result",
        {"retryable": True, "reason": "internal_error"},
    )


def store_full() -> JsonRpcError:
    """-32603: the store is out of memory and refused the request; nothing was written."""
    return JsonRpcError(
        INTERNAL_ERROR,
        "Store full: the request was refused and nothing was changed; retry later",
        {"retryable": True, "reason": "store_full"},
    )


def header_mismatch(message: str) -> JsonRpcError:
    """-32020: HTTP headers missing, malformed, or disagreeing with the body."""
    return JsonRpcError(HEADER_MISMATCH, message)


def _capability_paths(required: dict[str, Any], prefix: str = "") -> list[str]:
    """``{"elicitation": {"form": {}}}`` -> ``["elicitation.form"]``."""
    paths: list[str] = []
    for name, inner in required.items():
        path = f"{prefix}{name}"
        if isinstance(inner, dict) and inner:
            paths.extend(_capability_paths(inner, f"{path}."))
        else:
            paths.append(path)
    return paths


def missing_capability(required: dict[str, Any]) -> JsonRpcError:
    """-32021 with ``data.requiredCapabilities``; the message names the capability too, since
    many clients show only the message (the MCP Inspector does)."""
    return JsonRpcError(
        MISSING_CAPABILITY,
        "Missing required client capability: " + ", ".join(_capability_paths(required)),
        # A copy: callers pass module-level constants, which a reply must not share.
        {"requiredCapabilities": copy.deepcopy(required)},
    )


def unsupported_version(requested: str, supported: tuple[str, ...]) -> JsonRpcError:
    """-32022 with ``data {supported, requested}``."""
    return JsonRpcError(
        UNSUPPORTED_VERSION,
        "Unsupported protocol version",
        {"supported": list(supported), "requested": requested},
    )
