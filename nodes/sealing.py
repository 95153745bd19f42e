"""The `requestState` key ring: seal and open the opaque state a client carries between rounds.

Layer: node core, pure module. No I/O except reading key material in `KeyRing.from_sources`. It must
not know MCP envelopes, HTTP, trio or Redis; it does not read any clock either: `exp_ms` is on the
Redis server clock and the caller compares it there.

Token format (version ``ns1``)::

    ns1.<kid>.<body>
    body = base64url, no padding, canonical ( nonce[12] || AES-256-GCM ciphertext || tag[16] )
    associated data = b"ns1" NUL kid NUL audience (UTF-8)
    plaintext = compact JSON of `StatePayload` (UTF-8), fields in declaration order

The associated data binds the format version, the key id and the audience, so a state sealed for
one audience does not open for another even under the same key, and a body cannot be moved under a
different kid. The kid alphabet has no NUL and the audience comes last, so the encoding is
unambiguous. Nonces are random: rotate keys well before 2**32 seals per key.

`KeyRing.open` is strict and raises `StateRejected` for every failure; `reason` is a fixed string
for the log (never attacker input, never key bytes). Callers answer one generic error.

The payload is a msgspec ``Struct``: encoding and one strict, typed parse are each a
single C call. Its plaintext is byte for byte what the earlier pydantic model wrote
(``tests/test_sealing.py`` checks both the encoding and a state sealed by the earlier release), so
states open across a rolling deploy in either direction.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from nodes.canonical import canonical_json_bytes
from store import randomness

FORMAT_VERSION = "ns1"
"""Format version; first dot-separated part of every token and part of the associated data."""

MAX_TOKEN_CHARS = 8192
"""Longest token `open` will look at: bounds work done on untrusted input before authentication."""

KEY_BYTES = 32
"""AES-256 keys."""

NONCE_BYTES = 12
"""AES-GCM nonce length (the 96-bit size GCM is specified for)."""

TAG_BYTES = 16
"""AES-GCM authentication tag length."""

MIN_BODY_BYTES = NONCE_BYTES + TAG_BYTES + len(b"{}")
"""Shortest decoded body that could hold a sealed JSON object."""

STATE_NONCE_BYTES = 16
"""Entropy of `new_nonce` (128 bits): unguessable and collision-free at any realistic volume."""

_KID_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_+/=", b"+/!!!")
"""base64url to the standard alphabet, with the standard-only bytes made invalid."""
_URLSAFE_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_FROM_URLSAFE_ONLY = bytes(
    _FROM_URLSAFE[byte] if byte in _URLSAFE_ALPHABET else ord("!") for byte in range(256)
)
"""`_FROM_URLSAFE` with every byte outside base64url made ``!``: the result holds nothing but
the standard alphabet and ``!`` (no quote, backslash or control byte a JSON string would
interpret; ``!`` is in no base64 alphabet)."""
_QUOTED_PADDING = (b'"', b"", b'=="', b'="')
"""By the body's length mod 4: its padding and closing quote (a length of 1 mod 4 is refused)."""
_BASE64_DECODER = msgspec.json.Decoder(bytes)
"""Decodes a JSON string of standard padded base64 (refusing any byte outside the alphabet) in
one C call, a third of ``binascii.a2b_base64``'s instructions here."""
_B64_VALUES = {
    c: i for i, c in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
}
_UNUSED_BITS = {0: 0, 2: 0b1111, 3: 0b11}
"""By the body's length mod 4: the low bits of its last character that encode no byte."""
_SOURCE_SCHEMES = ("env:", "file:", "base64:")


class StateRejected(Exception):
    """Any failure to open or verify a state.

    `reason` is for the log only; callers answer one fixed generic error whatever the reason.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Candidate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A note offered for confirmation, with the version that was shown to the user."""

    note_id: str
    version: int


class StatePayload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a sealed `requestState` binds; only `KeyRing` turns it into a token and back.

    Keyword-only and frozen; construction does not check types at run time (mypy does for our
    callers): `KeyRing.seal` refuses a payload that would not open as an equal one. A decoded
    payload is strictly typed (no coercion: a bool, float or string is not an int; arrays for
    tuples), with no unknown field at any depth. Copy with changes by `msgspec.structs.replace`.
    """

    v: Literal[1] = 1
    principal: str
    audience: str
    method: str
    tool: str
    args_digest: str
    workspace: str
    tenant: str
    candidates: tuple[Candidate, ...]
    phase: str
    nonce: str
    issued_ms: int
    exp_ms: int
    """Expiry in milliseconds since the epoch, on the Redis server clock."""
    extra: dict[str, str] = msgspec.field(default_factory=dict)
    """Tool-specific bound values (e.g. an archive target)."""


_ENCODER = msgspec.json.Encoder()
"""Writes a payload's plaintext: compact UTF-8 JSON, fields in declaration order."""

_DECODER = msgspec.json.Decoder(StatePayload)
"""Parses and validates a plaintext in one pass (strict: no type coercion)."""


def new_nonce() -> str:
    """Return a fresh random url-safe nonce with 128 bits of entropy: the text and the draw of
    ``randomness.token_urlsafe(STATE_NONCE_BYTES)``, with no Python-level base64 call between."""
    raw = binascii.b2a_base64(randomness.token_bytes(STATE_NONCE_BYTES), newline=False)
    return raw.rstrip(b"=").translate(_TO_URLSAFE).decode("ascii")


def args_digest(arguments: Mapping[str, object]) -> str:
    """Return the hex sha256 of the canonical JSON of `arguments` (key order does not matter).

    Raises `TypeError` or `ValueError` for arguments that are not plain finite JSON. The digest
    of given arguments never changes (states cross nodes of different releases); a test pins it.
    """
    value = arguments if type(arguments) is dict else dict(arguments)
    return hashlib.sha256(canonical_json_bytes(value, allow_nan=False)).hexdigest()


def verify_bindings(
    payload: StatePayload, *, principal: str, method: str, tool: str, args_digest: str
) -> None:
    """Raise `StateRejected` unless principal, method, tool and args digest all match (checked
    in that order, each in constant time; written out, not as a loop over a table of checks: a
    third fewer instructions)."""
    if not _same(payload.principal, principal):
        raise StateRejected("principal mismatch")
    if not _same(payload.method, method):
        raise StateRejected("method mismatch")
    if not _same(payload.tool, tool):
        raise StateRejected("tool mismatch")
    if not _same(payload.args_digest, args_digest):
        raise StateRejected("args digest mismatch")


@dataclass(frozen=True)
class KeyRing:
    """Key id -> 32-byte AES key; `active` seals, every key opens (rotation without downtime)."""

    keys: Mapping[str, bytes]
    active: str
    _aeads: Mapping[str, AESGCM] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = dict(self.keys)
        for kid, key in keys.items():
            if not isinstance(kid, str) or not _KID_RE.fullmatch(kid):
                raise ValueError(f"key id {kid!r} must match [A-Za-z0-9_-]{{1,32}}")
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise ValueError(f"key {kid!r} must be exactly {KEY_BYTES} bytes")
        if self.active not in keys:
            raise ValueError(f"active key id {self.active!r} is not in the ring")
        object.__setattr__(self, "keys", MappingProxyType(keys))
        aeads = {kid: AESGCM(key) for kid, key in keys.items()}
        object.__setattr__(self, "_aeads", MappingProxyType(aeads))

    def __repr__(self) -> str:
        return f"KeyRing(kids={sorted(self.keys)!r}, active={self.active!r})"

    def seal(self, payload: StatePayload) -> str:
        """Seal `payload` under the active key for `payload.audience`; return the token.

        Raises `ValueError` if the token would exceed `MAX_TOKEN_CHARS`, or if `payload` would
        not open as an equal payload (a value of the wrong type, a list for a tuple): either way it
        could never open.
        """
        plaintext = _encode(payload)
        nonce = randomness.token_bytes(NONCE_BYTES)
        aad = _associated_data(self.active, payload.audience)
        sealed = nonce + self._aeads[self.active].encrypt(nonce, plaintext, aad)
        encoded = binascii.b2a_base64(sealed, newline=False).rstrip(b"=").translate(_TO_URLSAFE)
        body = encoded.decode("ascii")
        token = f"{FORMAT_VERSION}.{self.active}.{body}"
        if len(token) > MAX_TOKEN_CHARS:
            raise ValueError(f"sealed state is {len(token)} chars, over {MAX_TOKEN_CHARS}")
        return token

    def open(self, token: object, *, audience: str) -> StatePayload:
        """Authenticate and decode `token` for `audience`; raise `StateRejected` on any failure.

        Expiry is not checked here: `exp_ms` is on the Redis server clock.
        """
        kid, sealed = self._split(token)
        nonce, ciphertext = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
        try:
            plaintext = self._aeads[kid].decrypt(nonce, ciphertext, _associated_data(kid, audience))
        except InvalidTag:
            raise StateRejected("authentication failed") from None
        payload = _parse_payload(plaintext)
        if not _same(payload.audience, audience):
            raise StateRejected("audience mismatch")
        return payload

    def _split(self, token: object) -> tuple[str, bytes]:
        """Check the token's shape and return its kid and decoded body."""
        if not isinstance(token, str):
            raise StateRejected("token is not a str")
        if len(token) > MAX_TOKEN_CHARS:
            raise StateRejected("token too long")
        parts = token.split(".")
        if len(parts) != 3:
            raise StateRejected("token is not three dot-separated parts")
        prefix, kid, body = parts
        if prefix != FORMAT_VERSION:
            raise StateRejected("wrong token prefix")
        if kid not in self._aeads:  # every kid of the ring is well formed (checked when built)
            if not _KID_RE.fullmatch(kid):
                raise StateRejected("malformed key id")
            raise StateRejected("unknown key id")
        sealed = _decode_body(body)
        if len(sealed) < MIN_BODY_BYTES:
            raise StateRejected("body too short")
        return kid, sealed

    @classmethod
    def generate(cls, kid: str = "k1") -> KeyRing:
        """Return a ring with one fresh random key, for tests and ephemeral demos."""
        return cls(keys={kid: randomness.token_bytes(KEY_BYTES)}, active=kid)

    @classmethod
    def from_sources(cls, sources: Mapping[str, str], active: str) -> KeyRing:
        """Load keys from `kid -> 'env:VARNAME' | 'file:/path' | 'base64:<b64>'`.

        Each value is a standard or url-safe base64 32-byte key; whitespace is ignored. Raises a
        `ValueError` naming the kid (never the key) on any failure.
        """
        keys = {kid: _decode_key(kid, _read_source(kid, source)) for kid, source in sources.items()}
        return cls(keys=keys, active=active)


def _same(a: str, b: str) -> bool:
    """Constant-time string equality (UTF-8, so non-ASCII text is fine)."""
    try:
        return hmac.compare_digest(a, b)  # ASCII text, as nearly every bound value is
    except TypeError:
        return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


@functools.lru_cache(maxsize=64)
def _associated_data(kid: str, audience: str) -> bytes:
    """Built once per kid and audience (a node seals and opens for one or a few audiences)."""
    return b"\x00".join((FORMAT_VERSION.encode("ascii"), kid.encode("ascii"), audience.encode()))


def _decode_body(body: str) -> bytes:
    """Decode canonical unpadded base64url; anything else is refused. (One strict decode: the
    alphabet's ``-_`` become ``+/``, while every other byte outside it, ``+``, ``/`` and ``=``
    included, becomes ``!``, which the decoder refuses; ``tests/test_sealing.py`` compares it
    with the same decision through ``binascii``'s strict mode, the previous release's.)"""
    if not body or len(body) % 4 == 1:
        raise StateRejected("body is not base64url")
    try:
        raw = body.encode("ascii").translate(_FROM_URLSAFE_ONLY)
        sealed = _BASE64_DECODER.decode(b'"' + raw + _QUOTED_PADDING[len(raw) % 4])
    except (UnicodeEncodeError, msgspec.ValidationError):
        raise StateRejected("body is not base64url") from None
    # Reject non-zero trailing bits, so each state has exactly one spelling.
    if _B64_VALUES[raw[-1]] & _UNUSED_BITS[len(raw) % 4]:
        raise StateRejected("body is not canonical base64url")
    return sealed


def _encode(payload: StatePayload) -> bytes:
    """The plaintext sealing ``payload`` writes; `ValueError` unless it opens as ``payload``."""
    try:
        plaintext = _ENCODER.encode(payload)
        # What open refuses, seal refuses: one strict parse, compared with what was asked.
        valid = _DECODER.decode(plaintext) == payload
    except (TypeError, ValueError, msgspec.MsgspecError) as exc:
        raise ValueError(f"payload cannot be sealed: {type(exc).__name__}") from None
    if not valid:
        raise ValueError("payload cannot be sealed: it would not open as an equal payload")
    return plaintext


def _parse_payload(plaintext: bytes) -> StatePayload:
    """Turn authenticated plaintext into a `StatePayload`, refusing anything not strictly valid.

    Fast path: plaintext as our sealer writes it is the payload's own encoding, so one msgspec
    parse and encoding the result again gives the same bytes (`_as_sealed`). Such a document has
    no duplicate key (the parsed payload keeps one value per key, so its encoding would differ)
    and nothing but plain JSON, so it passes every check of the strict path below. Anything
    else, a document msgspec refuses included, takes the strict path, which words the refusal.
    """
    try:
        payload = _DECODER.decode(plaintext)
    except msgspec.MsgspecError:
        return _parse_payload_strictly(plaintext)
    if _as_sealed(payload, plaintext):
        return payload
    return _parse_payload_strictly(plaintext)


def _as_sealed(payload: StatePayload, plaintext: bytes) -> bool:
    """True when ``plaintext`` is exactly what sealing ``payload`` writes."""
    return _ENCODER.encode(payload) == plaintext


def _parse_payload_strictly(plaintext: bytes) -> StatePayload:
    """The strict path: stdlib JSON with a duplicate-key refusal, then msgspec's typed parse."""
    try:
        text = plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise StateRejected("plaintext is not utf-8") from None
    try:
        document = json.loads(
            text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants
        )
    except (ValueError, RecursionError):
        raise StateRejected("plaintext is not json") from None
    if not isinstance(document, dict):
        raise StateRejected("plaintext is not a json object")
    try:
        # Strict: arrays for tuples, but no other conversion (msgspec's default).
        return _DECODER.decode(plaintext)
    except msgspec.MsgspecError:
        raise StateRejected("payload failed validation") from None


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate key")
    return result


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not json")


def _read_source(kid: str, source: str) -> str:
    """Read one key's base64 text; errors name the kid and never echo the source value."""
    if source.startswith("env:"):
        name = source.removeprefix("env:")
        value = os.environ.get(name)
        if value is None:
            raise ValueError(f"key {kid!r}: environment variable {name!r} is not set")
        return value
    if source.startswith("file:"):
        path = source.removeprefix("file:")
        try:
            return Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) else "not utf-8 text"
            raise ValueError(f"key {kid!r}: cannot read key file {path!r}: {detail}") from None
    if source.startswith("base64:"):
        return source.removeprefix("base64:")
    # The value may be a key with a mistyped scheme: do not echo it.
    raise ValueError(f"key {kid!r}: source must start with one of {', '.join(_SOURCE_SCHEMES)}")


def _decode_key(kid: str, text: str) -> bytes:
    """Decode standard or url-safe base64 (padding optional) into exactly `KEY_BYTES` bytes."""
    compact = "".join(text.split()).rstrip("=").replace("-", "+").replace("_", "/")
    try:
        key = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"key {kid!r}: not valid base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(f"key {kid!r}: decoded to {len(key)} bytes, expected {KEY_BYTES}")
    return key
