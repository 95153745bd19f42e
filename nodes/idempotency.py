"""The idempotency key extension: ``params._meta["dev.notes-cluster/idempotencyKey"]``.

Layer: node, protocol core. Pure module: no I/O. MCP has no idempotency key (SEP-3182 was
closed), so this is an extension. A client sends a key it made up (a UUID, say) with a write
(``notes_create``, ``notes_update``, ``notes_move``) and sends the same key when it retries that
write, on any node. The key names one operation of one principal **in one tenant**: this
module turns it into the store's operation id (a digest of principal and key, so no principal
can reach another's records), and the record lives under the tenant of the workspace written
(every key of a tenant shares one Redis Cluster slot), so the same key sent by the same
principal for a workspace of another tenant names another operation. It also makes a digest of
the tool and its arguments, which the store records atomically with the write for
``window_ms`` (``NodeConfig.idempotency_window_ms``). The write tools
(``nodes.tools.idempotent``) then answer a retry with the recorded result, marked as a replay,
and refuse the key with other arguments or another tool (``errors.idempotency_key_reused``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodes import errors
from nodes.canonical import canonical_json
from store.api import WriteOp
from store.keys import framed_sha256

META_IDEMPOTENCY_KEY = errors.IDEMPOTENCY_KEY_META
"""The request ``_meta`` key that carries an idempotency key."""

KEY_PATTERN = re.compile(r"[A-Za-z0-9._:-]{16,128}")
"""16 to 128 characters from letters, digits and ``. _ : -``: a UUID (36) fits, and the lower
bound keeps keys from colliding by accident among one principal's writes."""


def idempotency_key(meta: object) -> str | None:
    """The idempotency key of a request's ``_meta`` (None: none sent); -32602 if malformed."""
    if type(meta) is not dict and not isinstance(meta, Mapping):  # decoded JSON: a dict
        return None
    if META_IDEMPOTENCY_KEY not in meta:
        return None
    key = meta[META_IDEMPOTENCY_KEY]
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        raise errors.invalid_params(
            f"Invalid _meta[{META_IDEMPOTENCY_KEY!r}]: a string of 16 to 128 characters "
            "from letters, digits and . _ : -",
            {"reason": "invalid_idempotency_key"},
        )
    return key


def operation_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """What one write does: its tool and its arguments, canonically (key order ignored)."""
    return framed_sha256(tool, canonical_json(arguments))[:32]


def write_op(
    principal: str, tool: str, arguments: Mapping[str, Any], key: str | None, window_ms: int
) -> WriteOp:
    """The store operation of one write: keyed (stable over retries, kept ``window_ms``) when
    the client sent ``key``, else a fresh random one (kept only for the node's own re-sends)."""
    if key is None:
        return WriteOp.fresh()
    op_id = "k" + framed_sha256(principal, key)[:40]
    return WriteOp(op_id, operation_digest(tool, arguments), window_ms)
