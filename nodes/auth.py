"""Bearer tokens: parse the ``Authorization`` header and map a token to its principal.

Layer: node, transport support. Pure module: no I/O, no HTTP framework, nothing MCP-aware. The
table holds only SHA-256 hashes of the tokens, so a dump of a node's config or memory does not hand
out working credentials; the demo builds one from its published plain tokens.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import re
from collections.abc import Mapping

MAX_TOKEN_LENGTH = 512
"""Longest token we hash. Real tokens are far shorter; the cap bounds the work a stranger can ask
for before being turned away."""

_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""RFC 6750 ``b64token``: the only characters a bearer token may contain."""

_HASH_HEX = re.compile(r"[0-9a-f]{64}")


def hash_token(token: str) -> str:
    """The lowercase SHA-256 hex digest of ``token`` (UTF-8), as stored in a TokenTable."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The token of ``Bearer <token>`` (scheme case-insensitive), or None if malformed.

    Exactly one space separates the scheme from exactly one token; the token must be a
    ``b64token`` of at most MAX_TOKEN_LENGTH characters.
    """
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not 0 < len(token) <= MAX_TOKEN_LENGTH:
        return None
    if _TOKEN68.fullmatch(token) is None:
        return None
    return token


class TokenTable:
    """Token hashes (sha256 hex) to principals; answers which principal a header names."""

    def __init__(self, hashes: Mapping[str, str], *, anonymous: str | None = None) -> None:
        """``anonymous``: the demo principal a request without ``Authorization`` acts as, on
        a loopback connection only (the HTTP app decides where it applies; see
        ``with_anonymous``). None, the default: such a request is 401."""
        entries: list[tuple[bytes, str]] = []
        for digest, principal in hashes.items():
            normalized = digest.lower()
            if _HASH_HEX.fullmatch(normalized) is None:
                raise ValueError("token hashes must be 64 hex digits (sha256)")
            if not principal:
                raise ValueError("every token hash needs a principal")
            entries.append((bytes.fromhex(normalized), principal))
        self._entries = tuple(entries)
        # The same hash listed twice (in other letter cases): the last one counts, as before.
        self._by_digest: dict[bytes, tuple[bytes, str]] = {
            stored: (stored, principal) for stored, principal in entries
        }
        if anonymous is not None and anonymous not in {p for _, p in entries}:
            raise ValueError(f"the anonymous principal {anonymous!r} has no token here")
        self.anonymous = anonymous

    def with_anonymous(self, principal: str) -> TokenTable:
        """A copy in which a request that sends no ``Authorization`` header acts as
        ``principal`` (a principal of this table), where the HTTP app allows it: on loopback
        connections of the MCP endpoint only. A demo option, for tools that send no token (the
        MCP conformance suite); a malformed or unknown token is still refused."""
        if principal not in {p for _, p in self._entries}:
            raise ValueError(f"the anonymous principal {principal!r} has no token here")
        table = copy.copy(self)
        table.anonymous = principal
        return table

    @classmethod
    def from_plain(cls, tokens: Mapping[str, str]) -> TokenTable:
        """A table from plain ``token -> principal`` (demo only; the tokens are not kept)."""
        return cls({hash_token(token): principal for token, principal in tokens.items()})

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        anonymous = "" if self.anonymous is None else f", anonymous={self.anonymous!r}"
        return f"TokenTable(<{len(self._entries)} token hashes>{anonymous})"

    def authenticate(self, authorization_header: str | None) -> str | None:
        """The principal of a well-formed, known bearer token; None otherwise.

        One dict lookup keyed by the token's SHA-256 digest, then one ``hmac.compare_digest``
        of the entry found, so the cost does not grow with the number of tokens. Why the
        lookup's timing reveals nothing useful: the key is a SHA-256 digest, whose bytes the
        caller does not choose (only by brute force, about 256 tries per leading byte), and
        the dict places and probes keys by ``hash(bytes)``, keyed with a random SipHash key
        per process (unless PYTHONHASHSEED pins it). At most a few leading bytes of a stored
        digest could leak, and a digest is not a credential: using one needs a SHA-256
        preimage. The table stores only digests for that reason (module docstring).
        """
        token = bearer_token(authorization_header)
        if token is None:
            return None
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        entry = self._by_digest.get(digest)
        if entry is None:
            return None
        stored, principal = entry
        return principal if hmac.compare_digest(stored, digest) else None
