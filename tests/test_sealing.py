"""Tests for `nodes.sealing`: the requestState key ring refuses everything it did not seal."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import random
import secrets
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import msgspec
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from nodes import sealing
from nodes.sealing import (
    MAX_TOKEN_CHARS,
    Candidate,
    KeyRing,
    StatePayload,
    StateRejected,
    args_digest,
    new_nonce,
    verify_bindings,
)
from store import randomness
from store.simulation.entropy import entropy_source
from tests.harness import random_seed

AUDIENCE = "https://notes.example/mcp"
ARGS = {"workspaceUri": "notes://acme/team", "title": "Q3 plan"}


def make_payload(**overrides: Any) -> StatePayload:
    fields: dict[str, Any] = {
        "principal": "alice",
        "audience": AUDIENCE,
        "method": "tools/call",
        "tool": "notes_delete",
        "args_digest": args_digest(ARGS),
        "workspace": "notes://acme/team",
        "tenant": "acme",
        "candidates": (Candidate(note_id="n1", version=3), Candidate(note_id="n2", version=1)),
        "phase": "confirm",
        "nonce": new_nonce(),
        "issued_ms": 1_700_000_000_000,
        "exp_ms": 1_700_000_300_000,
        "extra": {"target": "archive"},
    }
    fields.update(overrides)
    return StatePayload(**fields)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def forge(key: bytes, kid: str, audience: str, plaintext: bytes) -> str:
    """Seal raw bytes exactly as the documented format says, bypassing the model."""
    nonce = secrets.token_bytes(12)
    aad = b"ns1\x00" + kid.encode() + b"\x00" + audience.encode()
    return f"ns1.{kid}.{b64url(nonce + AESGCM(key).encrypt(nonce, plaintext, aad))}"


def reason_of(ring: KeyRing, token: object, audience: str = AUDIENCE) -> str:
    with pytest.raises(StateRejected) as info:
        ring.open(token, audience=audience)
    return info.value.reason


@pytest.fixture
def ring() -> KeyRing:
    return KeyRing.generate("k1")


# --- round trips and rotation ---------------------------------------------------------------


def test_a_sealed_state_opens_to_an_equal_payload(ring: KeyRing) -> None:
    payload = make_payload()
    token = ring.seal(payload)
    assert token.startswith("ns1.k1.")
    assert ring.open(token, audience=AUDIENCE) == payload


def test_unicode_values_and_empty_candidates_survive_a_round_trip(ring: KeyRing) -> None:
    payload = make_payload(principal="zoë", candidates=(), extra={"ключ": "值"})
    assert ring.open(ring.seal(payload), audience=AUDIENCE) == payload


def test_two_seals_of_one_payload_differ(ring: KeyRing) -> None:
    payload = make_payload()
    assert ring.seal(payload) != ring.seal(payload)


def test_a_state_sealed_before_rotation_opens_while_the_old_key_remains() -> None:
    old = KeyRing.generate("k1")
    token = old.seal(make_payload())
    rotated = KeyRing(keys={**old.keys, "k2": secrets.token_bytes(32)}, active="k2")
    assert rotated.open(token, audience=AUDIENCE) == old.open(token, audience=AUDIENCE)
    assert rotated.seal(make_payload()).startswith("ns1.k2.")


def test_a_state_sealed_by_a_retired_key_is_refused() -> None:
    old = KeyRing.generate("k1")
    token = old.seal(make_payload())
    retired = KeyRing(keys={"k2": secrets.token_bytes(32)}, active="k2")
    assert reason_of(retired, token) == "unknown key id"


def test_a_different_ring_with_the_same_kid_cannot_open_a_state(ring: KeyRing) -> None:
    token = ring.seal(make_payload())
    assert reason_of(KeyRing.generate("k1"), token) == "authentication failed"


def test_a_state_sealed_for_one_audience_does_not_open_for_another(ring: KeyRing) -> None:
    token = ring.seal(make_payload())
    assert reason_of(ring, token, audience="https://other.example/mcp") == "authentication failed"


def test_a_body_moved_under_another_kid_of_the_same_ring_is_refused() -> None:
    key = secrets.token_bytes(32)
    ring = KeyRing(keys={"k1": key, "k2": key}, active="k1")
    body = ring.seal(make_payload()).split(".")[2]
    assert reason_of(ring, f"ns1.k2.{body}") == "authentication failed"


# --- tampering and malformed tokens ---------------------------------------------------------


def test_flipping_any_bit_of_the_sealed_body_is_refused(ring: KeyRing) -> None:
    prefix, kid, body = ring.seal(make_payload()).split(".")
    sealed = unb64url(body)
    for index in range(len(sealed)):
        for bit in (0x01, 0x80):
            tampered = bytearray(sealed)
            tampered[index] ^= bit
            reason = reason_of(ring, f"{prefix}.{kid}.{b64url(bytes(tampered))}")
            assert reason == "authentication failed"


def test_truncated_tokens_are_refused(ring: KeyRing) -> None:
    token = ring.seal(make_payload())
    for cut in (1, 2, 3, 4, 5, 16, 40, len(token) - 30, len(token) - 8):
        with pytest.raises(StateRejected):
            ring.open(token[: len(token) - cut], audience=AUDIENCE)


def test_a_body_too_short_to_hold_a_state_is_refused(ring: KeyRing) -> None:
    assert reason_of(ring, "ns1.k1." + b64url(bytes(29))) == "body too short"
    assert reason_of(ring, "ns1.k1.") == "body is not base64url"


def test_extended_tokens_are_refused(ring: KeyRing) -> None:
    token = ring.seal(make_payload())
    for suffix in ("A", "AA", "AAAA", "AAAAAAAA", ".", ".x", "=", "==", " ", "\n"):
        with pytest.raises(StateRejected):
            ring.open(token + suffix, audience=AUDIENCE)


def test_extra_bytes_appended_to_the_sealed_body_fail_authentication(ring: KeyRing) -> None:
    prefix, kid, body = ring.seal(make_payload()).split(".")
    longer = b64url(unb64url(body) + b"\x00\x00\x00")
    assert reason_of(ring, f"{prefix}.{kid}.{longer}") == "authentication failed"


@pytest.mark.parametrize("prefix", ["ns0", "ns2", "NS1", "", "ns1 ", "xns1"])
def test_a_wrong_prefix_is_refused(ring: KeyRing, prefix: str) -> None:
    _, kid, body = ring.seal(make_payload()).split(".")
    assert reason_of(ring, f"{prefix}.{kid}.{body}") == "wrong token prefix"


def test_an_unknown_or_malformed_kid_is_refused(ring: KeyRing) -> None:
    _, _, body = ring.seal(make_payload()).split(".")
    assert reason_of(ring, f"ns1.k9.{body}") == "unknown key id"
    for kid in ("", "k 1", "k/1", "x" * 33, "ké"):
        assert reason_of(ring, f"ns1.{kid}.{body}") == "malformed key id"


@pytest.mark.parametrize("parts", [1, 2, 4, 5])
def test_a_token_without_exactly_three_parts_is_refused(ring: KeyRing, parts: int) -> None:
    token = ".".join(["ns1", "k1", "AAAA", "BBBB", "CCCC"][:parts])
    assert reason_of(ring, token) == "token is not three dot-separated parts"


def test_bodies_that_are_not_canonical_unpadded_base64url_are_refused(ring: KeyRing) -> None:
    body = ring.seal(make_payload()).split(".")[2]
    variants = [
        body + "=" * (-len(body) % 4 or 4),  # padding
        body.replace("-", "+").replace("_", "/") if ("-" in body or "_" in body) else body + "+",
        body[:10] + "!" + body[11:],
        body[:10] + " " + body[10:],
        body[:10] + "é" + body[11:],
        body[:8] + "=" + body[9:],  # padding inside
        body[:-2] + "==",  # padding in place of the last two characters
        body + "\n",
        body[:10] + "\t" + body[11:],
        "A" * 61,  # length 1 mod 4 can never be valid
        "!!!!",
    ]
    for variant in variants:
        assert reason_of(ring, f"ns1.k1.{variant}").startswith("body is not")


def test_a_body_with_nonzero_trailing_bits_is_refused_as_non_canonical(ring: KeyRing) -> None:
    body = ring.seal(make_payload()).split(".")[2]
    sealed = unb64url(body)
    if len(sealed) % 3 == 0:  # no trailing bits; add one byte so there are some
        body = b64url(sealed + b"\x00")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(body[-1])
    noisy = body[:-1] + alphabet[last | 1]
    assert noisy != body
    assert reason_of(ring, f"ns1.k1.{noisy}") == "body is not canonical base64url"


@pytest.mark.parametrize(
    "token", [None, 42, b"ns1.k1.AAAA", ["ns1.k1.AAAA"], {"t": 1}, 1.5, bytearray(b"x")]
)
def test_non_str_tokens_are_refused(ring: KeyRing, token: object) -> None:
    assert reason_of(ring, token) == "token is not a str"


def test_tokens_over_the_length_limit_are_refused_before_parsing(ring: KeyRing) -> None:
    assert reason_of(ring, "ns1.k1." + "A" * MAX_TOKEN_CHARS) == "token too long"


def test_garbage_strings_are_refused(ring: KeyRing) -> None:
    for garbage in ("", ".", "..", "ns1..", "ns1.k1", "hello", "\x00" * 50, "ns1.k1.====="):
        with pytest.raises(StateRejected):
            ring.open(garbage, audience=AUDIENCE)


def test_sealing_a_payload_too_large_to_open_is_a_local_error(ring: KeyRing) -> None:
    with pytest.raises(ValueError, match="over"):
        ring.seal(make_payload(extra={"big": "x" * MAX_TOKEN_CHARS}))


# --- authenticated but invalid plaintext ----------------------------------------------------


def valid_document() -> dict[str, Any]:
    return json.loads(msgspec.json.encode(make_payload()))  # type: ignore[no-any-return]


def forged_reason(document: object) -> str:
    key = secrets.token_bytes(32)
    ring = KeyRing(keys={"k1": key}, active="k1")
    raw = json.dumps(document).encode() if not isinstance(document, bytes) else document
    return reason_of(ring, forge(key, "k1", AUDIENCE, raw))


def test_the_forging_helper_matches_the_documented_format() -> None:
    key = secrets.token_bytes(32)
    ring = KeyRing(keys={"k1": key}, active="k1")
    token = forge(key, "k1", AUDIENCE, json.dumps(valid_document()).encode())
    assert ring.open(token, audience=AUDIENCE).tool == "notes_delete"


def test_an_authenticated_payload_with_an_extra_key_is_refused() -> None:
    assert forged_reason({**valid_document(), "admin": True}) == "payload failed validation"


def test_an_authenticated_candidate_with_an_extra_key_is_refused() -> None:
    document = valid_document()
    document["candidates"][0]["deleted"] = False
    assert forged_reason(document) == "payload failed validation"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("v", 2),
        ("v", "1"),
        ("exp_ms", "1700000300000"),
        ("exp_ms", 1.7e12),
        ("exp_ms", True),
        ("principal", 7),
        ("principal", None),
        ("candidates", [{"note_id": "n1", "version": "3"}]),
        ("candidates", {"note_id": "n1", "version": 3}),
        ("extra", {"target": 1}),
        ("extra", ["target"]),
    ],
)
def test_an_authenticated_payload_with_a_wrong_type_is_refused(name: str, value: object) -> None:
    assert forged_reason({**valid_document(), name: value}) == "payload failed validation"


def test_an_authenticated_payload_missing_a_field_is_refused() -> None:
    document = valid_document()
    del document["nonce"]
    assert forged_reason(document) == "payload failed validation"


@pytest.mark.parametrize("document", [[1, 2], "state", 33, None, True])
def test_authenticated_json_that_is_not_an_object_is_refused(document: object) -> None:
    assert forged_reason(document) == "plaintext is not a json object"


@pytest.mark.parametrize(
    "raw",
    [b'{"a', b"not json", b'{"a":NaN}', b'{"a":1,"a":2}', b"{}{}", b"\xef\xbb\xbf{}"],
)
def test_authenticated_plaintext_that_is_not_strict_json_is_refused(raw: bytes) -> None:
    assert forged_reason(raw) == "plaintext is not json"


def test_authenticated_plaintext_that_is_not_utf8_is_refused() -> None:
    assert forged_reason(b'{"a":"\xff"}') == "plaintext is not utf-8"


def test_an_authenticated_payload_naming_another_audience_is_refused() -> None:
    document = {**valid_document(), "audience": "https://other.example/mcp"}
    assert forged_reason(document) == "audience mismatch"


def test_every_rejection_reason_is_distinct_fixed_text() -> None:
    reasons = {
        "token is not a str",
        "token too long",
        "token is not three dot-separated parts",
        "wrong token prefix",
        "malformed key id",
        "unknown key id",
        "body is not base64url",
        "body is not canonical base64url",
        "body too short",
        "authentication failed",
        "plaintext is not utf-8",
        "plaintext is not json",
        "plaintext is not a json object",
        "payload failed validation",
        "audience mismatch",
    }
    source = Path(sealing.__file__).read_text(encoding="utf-8")
    for reason in reasons:
        assert source.count(f'StateRejected("{reason}")') >= 1, reason


# --- bindings and digests -------------------------------------------------------------------


BINDINGS = {
    "principal": "alice",
    "method": "tools/call",
    "tool": "notes_delete",
    "args_digest": args_digest(ARGS),
}


def test_matching_bindings_verify() -> None:
    verify_bindings(make_payload(), **BINDINGS)


@pytest.mark.parametrize(
    ("name", "wrong", "reason"),
    [
        ("principal", "mallory", "principal mismatch"),
        ("principal", "alice ", "principal mismatch"),
        ("method", "tools/list", "method mismatch"),
        ("tool", "notes_archive", "tool mismatch"),
        ("args_digest", args_digest({**ARGS, "title": "Q4 plan"}), "args digest mismatch"),
    ],
)
def test_each_mismatched_binding_is_refused(name: str, wrong: str, reason: str) -> None:
    with pytest.raises(StateRejected) as info:
        verify_bindings(make_payload(), **{**BINDINGS, name: wrong})
    assert info.value.reason == reason


def test_bindings_compare_non_ascii_text() -> None:
    payload = make_payload(principal="zoë")
    verify_bindings(payload, **{**BINDINGS, "principal": "zoë"})
    with pytest.raises(StateRejected):
        verify_bindings(payload, **{**BINDINGS, "principal": "zoe"})


def test_args_digest_ignores_key_order_at_every_depth() -> None:
    a = {"x": 1, "y": {"p": [1, 2], "q": "é"}}
    b = {"y": {"q": "é", "p": [1, 2]}, "x": 1}
    assert args_digest(a) == args_digest(b)
    assert len(args_digest(a)) == 64
    assert all(c in "0123456789abcdef" for c in args_digest(a))


@pytest.mark.parametrize(
    "changed",
    [
        {"x": 2, "y": {"p": [1, 2]}},
        {"x": "1", "y": {"p": [1, 2]}},
        {"x": 1, "y": {"p": [2, 1]}},
        {"x": 1, "y": {"p": [1, 2], "r": None}},
        {"x": 1},
        {"x": True, "y": {"p": [1, 2]}},
    ],
)
def test_args_digest_distinguishes_changed_values(changed: dict[str, object]) -> None:
    assert args_digest({"x": 1, "y": {"p": [1, 2]}}) != args_digest(changed)


def test_args_digest_refuses_non_finite_numbers() -> None:
    with pytest.raises(ValueError, match="JSON"):
        args_digest({"x": float("nan")})


def test_args_digest_is_sha256_of_the_canonical_json() -> None:
    expected = hashlib.sha256('{"a":"é","b":[1,2]}'.encode()).hexdigest()
    assert args_digest({"b": [1, 2], "a": "é"}) == expected


# --- key ring construction and loading ------------------------------------------------------


def test_from_sources_reads_env_file_and_inline_base64(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_key, file_key, inline_key = (secrets.token_bytes(32) for _ in range(3))
    monkeypatch.setenv("NOTES_STATE_KEY", base64.b64encode(env_key).decode())
    key_file = tmp_path / "k2.key"
    key_file.write_text("  " + base64.urlsafe_b64encode(file_key).decode() + "\n")
    ring = KeyRing.from_sources(
        {
            "k1": "env:NOTES_STATE_KEY",
            "k2": f"file:{key_file}",
            "k3": "base64:" + base64.urlsafe_b64encode(inline_key).decode().rstrip("="),
        },
        active="k2",
    )
    assert dict(ring.keys) == {"k1": env_key, "k2": file_key, "k3": inline_key}
    assert ring.active == "k2"


def test_from_sources_reports_a_wrong_length_key_by_kid_without_the_key() -> None:
    short = base64.b64encode(b"s3cr3t-sixteen-b").decode()
    with pytest.raises(ValueError, match=r"'k7'.*16 bytes, expected 32") as info:
        KeyRing.from_sources({"k7": f"base64:{short}"}, active="k7")
    assert short not in str(info.value)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("env:NOTES_MISSING_KEY_VAR", "not set"),
        ("file:/nonexistent/notes/key", "cannot read key file"),
        ("base64:not*base64!", "not valid base64"),
        ("base46:QUJD", "source must start with"),
    ],
)
def test_from_sources_failures_name_the_kid(
    monkeypatch: pytest.MonkeyPatch, source: str, message: str
) -> None:
    monkeypatch.delenv("NOTES_MISSING_KEY_VAR", raising=False)
    with pytest.raises(ValueError, match=message) as info:
        KeyRing.from_sources({"kA": source}, active="kA")
    assert "'kA'" in str(info.value)
    assert "QUJD" not in str(info.value)


def test_from_sources_refuses_an_active_kid_it_did_not_load() -> None:
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    with pytest.raises(ValueError, match="active"):
        KeyRing.from_sources({"k1": f"base64:{key}"}, active="k2")


@pytest.mark.parametrize(
    ("keys", "active", "message"),
    [
        ({"k1": bytes(31)}, "k1", "32 bytes"),
        ({"k1": bytes(33)}, "k1", "32 bytes"),
        ({"k1": "x" * 32}, "k1", "32 bytes"),
        ({"k 1": bytes(32)}, "k 1", "must match"),
        ({"": bytes(32)}, "", "must match"),
        ({"k" * 33: bytes(32)}, "k" * 33, "must match"),
        ({"k1\n": bytes(32)}, "k1\n", "must match"),
        ({"k1": bytes(32)}, "k2", "active"),
        ({}, "k1", "active"),
    ],
)
def test_a_ring_refuses_invalid_keys_kids_or_active(
    keys: dict[str, Any], active: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        KeyRing(keys=keys, active=active)


def test_a_ring_is_not_changed_by_mutating_the_mapping_it_was_built_from() -> None:
    keys = {"k1": secrets.token_bytes(32)}
    ring = KeyRing(keys=keys, active="k1")
    token = ring.seal(make_payload())
    keys["k1"] = secrets.token_bytes(32)
    assert ring.open(token, audience=AUDIENCE).tool == "notes_delete"


def test_repr_shows_kids_and_active_but_no_key_bytes() -> None:
    key = secrets.token_bytes(32)
    ring = KeyRing(keys={"k1": key, "k2": secrets.token_bytes(32)}, active="k2")
    for text in (repr(ring), str(ring), f"{ring}", repr([ring])):
        assert "k1" in text
        assert "k2" in text
        for form in (repr(key), key.hex(), base64.b64encode(key).decode(), b64url(key)):
            assert form not in text


# --- nonces and purity ----------------------------------------------------------------------


def test_nonces_are_unique_url_safe_and_at_least_128_bits() -> None:
    nonces = [new_nonce() for _ in range(1000)]
    assert len(set(nonces)) == 1000
    for nonce in nonces:
        assert len(unb64url(nonce)) >= 16
        assert set(nonce) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_the_sealing_module_imports_no_trio_http_or_redis() -> None:
    code = (
        "import sys, nodes.sealing; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'trio', 'httpx', 'httpcore', 'hypercorn', 'redis', 'coredis', 'fakeredis', 'anyio'}); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(sealing.__file__).parents[1]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the one-parse fast path agrees with the strict path --------------------------------------


def compact(document: object) -> bytes:
    """JSON as the sealer writes it (no spaces, UTF-8): what takes the fast path."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_sealed_plaintext_is_canonical_so_it_takes_the_one_parse_path(ring: KeyRing) -> None:
    payload = make_payload(extra={"target": 'é\u2028\n"\\/'})
    plaintext = msgspec.json.encode(payload)
    assert sealing._as_sealed(msgspec.json.decode(plaintext, type=StatePayload), plaintext)
    assert ring.open(ring.seal(payload), audience=AUDIENCE) == payload


def test_a_duplicate_key_in_compact_plaintext_is_refused_as_not_json() -> None:
    raw = compact(valid_document()).replace(b'"tenant":', b'"tenant":"evil","tenant":', 1)
    assert not sealing._as_sealed(msgspec.json.decode(raw, type=StatePayload), raw)
    assert forged_reason(raw) == "plaintext is not json"
    nested = compact(valid_document()).replace(b'"version":', b'"version":9,"version":', 1)
    assert forged_reason(nested) == "plaintext is not json"


@pytest.mark.parametrize(
    ("name", "value"),
    [("v", 2), ("exp_ms", True), ("exp_ms", 1.5), ("principal", None), ("extra", {"t": 1})],
)
def test_compact_plaintext_with_a_wrong_type_is_refused_on_the_fast_path(
    name: str, value: object
) -> None:
    raw = compact({**valid_document(), name: value})
    assert forged_reason(raw) == "payload failed validation"


@pytest.mark.parametrize("document", [[1, 2], "state", 33, None, True])
def test_compact_json_that_is_not_an_object_keeps_its_reason(document: object) -> None:
    assert forged_reason(compact(document)) == "plaintext is not a json object"


def test_the_fast_and_strict_paths_agree_on_mutated_documents() -> None:
    seed = int(os.environ.get("NOTES_CLUSTER_TEST_SEED", secrets.randbelow(2**32)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    values: list[object] = [0, -1, 2**70, 1.0, True, None, "", "x", [], {}, {"a": "b"}, [1]]
    for _ in range(300):
        document = valid_document()
        for _ in range(rng.randint(1, 3)):
            name = rng.choice([*document, "extra_key"])
            document[name] = rng.choice(values)
        raw = compact(document)
        try:
            fast: object = sealing._parse_payload(raw)
        except StateRejected as exc:
            fast = exc.reason
        try:
            strict: object = sealing._parse_payload_strictly(raw)
        except StateRejected as exc:
            strict = exc.reason
        assert fast == strict, (seed, raw)


# --- compatibility with states and digests of the earlier release -------------------

# Written by the release whose payload was a pydantic model (commit 7b34825): key bytes 0..31,
# the AES-GCM nonce all zero bytes, the payload `PREVIOUS_PAYLOAD` builds.
PREVIOUS_TOKEN = (
    "ns1.k1.AAAAAAAAAAAAAAAAdZ7D_I8dr5942sBbe0Xh-L5hbHFJ7QlM5byfoaSKOT8rMYXZCMiaZ1CuFNivoR0r2iVtxBQU"
    "Ms0_0h0caBQhi4UcEWnwvTzA_6unqHlIaqN_e1ntRdsaJVHKcTebff2StiMpdHM7hc58ChIWuQbYZBTbZg7dTyip43ZBz"
    "lwWWuNMjKG9ihg5THpT4ct3k7VcRWsuSeaS-4WxP0lrWQNbgwYHoEctyO7p4LKA5wo-yPoSmj2zhruqtAb5K3qGem0IB8b"
    "bbKVr-FtCwnKVGG01xXJHML4h7QmxOgCE4ARl049OWh3mkeT73SdYcXoGH7kJGRxis-m2809QUGRmDz1LpSfS9Dk8TBfOf"
    "GpZ453JzVUqha2D1sEl5im4dDE9iPxDt2e-PhaWqsXWv1kCOUt9RzntnEpuO1ZJZm-SFqnucLVTj2Gxo6TxcfRTxLtKiWw"
    "WZzMvJps39KZ9eJDTQdh9PaImAAOAG1_YH9QK7dYvPvc48bREZ5SGfs0ofqp3p3AJ8HY79P4ndNJe8FTQyJD5Qij5XOaI5"
    "gadJHHpHULYJzJ9XJRyXp-kvM7PMERIm4SwOw6MFf2skPy_4asGQAiWhsZOU2VDJ_mZZnedyHWSRWuXtqjCSFg"
)
DELETE_ARGS = {"workspaceUri": "notes://tenant-3/inbox", "title": "Quarterly plan 17"}


def previous_payload() -> StatePayload:
    return StatePayload(
        principal="alice",
        audience="acme-notes",
        method="tools/call",
        tool="notes_delete",
        args_digest=args_digest(DELETE_ARGS),
        workspace="notes://tenant-3/inbox",
        tenant="tenant-3",
        candidates=(Candidate(note_id="n1", version=3), Candidate(note_id="n2é", version=1)),
        phase="confirm",
        nonce="A" * 22,
        issued_ms=1_700_000_000_000,
        exp_ms=1_700_000_120_000,
        extra={"target": "notes://tenant-3/archive"},
    )


def test_a_state_sealed_by_the_previous_release_opens_and_seals_to_the_same_token() -> None:
    ring = KeyRing(keys={"k1": bytes(range(32))}, active="k1")
    assert ring.open(PREVIOUS_TOKEN, audience="acme-notes") == previous_payload()
    with entropy_source(bytes):
        assert ring.seal(previous_payload()) == PREVIOUS_TOKEN


@pytest.mark.parametrize(
    ("arguments", "digest"),
    [
        (DELETE_ARGS, "b98f4e53953df482aa2271a165f590743fd3c6888c65097e5a9edb445fe21064"),
        (
            {
                "workspaceUri": "file:///Users/alice/Documents/Notes",
                "title": "Café Отчёт 会議 👩\u200d💻",
                "archiveUri": "notes://acme/archive",
            },
            "27e43436339aebf0780f2f7c683533de9b08c0f3fd45450cf76d75bf78e814f2",
        ),
        (
            {
                "z": [1, 2, {"b": None, "a": True}],
                "y": -9223372036854775808,
                "x": 18446744073709551616,
                "w": '\x00\x1f"\\\u2028',
            },
            "47d2405683bf9ac1b165cbab88e02960d1b4c6c94a24c1843f1e3f1d10d6a885",
        ),
        (
            {"f": 1e16, "g": 1e-7, "h": 0.5, "i": -0.0, "j": [1.0, 2.5e300]},
            "b9fe736269a198326359382882f67b2424d1c4db9258b095cdd90001c2ed4973",
        ),
        ({}, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"),
    ],
    ids=["delete", "unicode", "nested-ints", "floats", "empty"],
)
def test_args_digest_is_the_previous_releases(arguments: dict[str, object], digest: str) -> None:
    """Values computed by the previous release: a state sealed by one node opens on
    another of a different release only while the digest of the same arguments is the same."""
    assert args_digest(arguments) == digest
    assert args_digest(MappingProxyType(arguments)) == digest


class PreviousCandidate(BaseModel):
    """The payload model of the previous release (pydantic), to compare encodings with."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    note_id: str
    version: int


class PreviousPayload(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    v: Literal[1] = 1
    principal: str
    audience: str
    method: str
    tool: str
    args_digest: str
    workspace: str
    tenant: str
    candidates: tuple[PreviousCandidate, ...]
    phase: str
    nonce: str
    issued_ms: int
    exp_ms: int
    extra: dict[str, str] = Field(default_factory=dict)


INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)))


@settings(derandomize=True, max_examples=500, deadline=None)
@given(
    texts=st.lists(TEXT, min_size=9, max_size=9),
    candidates=st.lists(st.tuples(TEXT, INTS), max_size=4),
    times=st.tuples(INTS, INTS),
    extra=st.dictionaries(TEXT, TEXT, max_size=3),
)
def test_the_plaintext_is_byte_for_byte_the_previous_releases(
    texts: list[str],
    candidates: list[tuple[str, int]],
    times: tuple[int, int],
    extra: dict[str, str],
) -> None:
    """Either release takes the other's states on its one-parse path (a rolling deploy)."""
    names = ("principal", "audience", "method", "tool", "args_digest", "workspace", "tenant")
    common: dict[str, Any] = {
        **dict(zip(names, texts, strict=False)),
        "phase": texts[7],
        "nonce": texts[8],
        "issued_ms": times[0],
        "exp_ms": times[1],
        "extra": extra,
    }
    previous = PreviousPayload(
        **common,
        candidates=tuple(PreviousCandidate(note_id=n, version=v) for n, v in candidates),
    ).model_dump_json()
    payload = StatePayload(
        **common, candidates=tuple(Candidate(note_id=n, version=v) for n, v in candidates)
    )
    plaintext = msgspec.json.encode(payload)
    assert plaintext == previous.encode("utf-8")
    assert sealing._parse_payload(plaintext) == payload


@pytest.mark.parametrize(
    "overrides",
    [
        {"principal": 7},
        {"exp_ms": True},
        {"exp_ms": 1.5},
        {"v": 2},
        {"candidates": [Candidate(note_id="n1", version=3)]},
        {"candidates": ({"note_id": "n1", "version": 3},)},
        {"candidates": (Candidate(note_id="n1", version="3"),)},  # type: ignore[arg-type]
        {"extra": {"target": 1}},
        {"extra": None},
        {"nonce": object()},
        {"tenant": "lone \ud800 surrogate"},
    ],
)
def test_sealing_a_payload_that_would_not_open_as_itself_is_a_local_error(
    ring: KeyRing, overrides: dict[str, Any]
) -> None:
    """The payload's types are not checked when it is built; sealing checks them, so no token
    is ever written that the opener would refuse or open as another payload."""
    with pytest.raises(ValueError, match="cannot be sealed"):
        ring.seal(make_payload(**overrides))


@pytest.mark.parametrize(
    "document",
    [
        {**valid_document(), "principal": "\ud800"},
        {**valid_document(), "extra": {"\udc00": "x"}},
        {**valid_document(), "candidates": [{"note_id": "a\udfffb", "version": 1}]},
    ],
)
def test_an_authenticated_lone_surrogate_escape_is_refused_as_invalid(document: object) -> None:
    """Such text cannot be written as UTF-8 again: the opener refuses it as a StateRejected
    (never another exception), whether the JSON is compact or not."""
    assert forged_reason(json.dumps(document, separators=(",", ":")).encode()) == (
        "payload failed validation"
    )
    assert forged_reason(document) == "payload failed validation"


def _decoded(decode: Any, body: str) -> object:
    try:
        return ("bytes", decode(body))
    except StateRejected as exc:
        return ("refused", exc.reason)


def test_the_body_decoder_decides_as_binasciis_strict_decode(ring: KeyRing) -> None:
    """`_decode_body` (msgspec's base64) refuses and decodes exactly as the previous release's
    ``binascii`` strict decode did, reason included: every byte value and a sample of non-ASCII
    put at the start, middle and end of a sealed body, padding of every length, and random
    strings over the alphabet and every byte a JSON string or base64 treats specially."""
    body = ring.seal(make_payload()).split(".")[2]
    specials = [chr(c) for c in range(0x80)] + ["é", "Ж", "😀", "\ud800", "\x80", "\uff21"]
    variants = [body, "", "A", "AA", "AAA", "AAAA", "AB", "AE", "ABC", "ABD", "____", "----"]
    for ch in specials:
        for at in (0, 1, len(body) // 2, len(body) - 1, len(body)):
            variants.append(body[:at] + ch + body[at + 1 :])
            variants.append(body[:at] + ch + body[at:])
    for pad in range(1, 4):
        variants += [body + "=" * pad, body[:-pad] + "=" * pad, "QQ" + "=" * pad]
    seed = random_seed()
    rng = random.Random(seed)
    alphabet = list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    alphabet += ["+", "/", "=", '"', "\\", "!", " ", "\n", "\x00", "é", "u"]
    for _ in range(5_000):
        variants.append("".join(rng.choices(alphabet, k=rng.randint(0, 14))))
        clean = "".join(rng.choices(alphabet[:64], k=rng.randint(1, 14)))
        variants.append(clean)
    for variant in variants:
        assert _decoded(sealing._decode_body, variant) == _decoded(
            decode_body_by_binascii, variant
        ), (seed, variant)
    assert _decoded(sealing._decode_body, body) == ("bytes", unb64url(body))


def test_a_nonce_is_the_text_and_the_draw_of_entropys_token_urlsafe() -> None:
    """`new_nonce` spells its draw with ``binascii`` directly: the same text, and the same one
    draw of the same size, as ``randomness.token_urlsafe`` (a replayed simulation sees no
    change)."""
    for seed in range(200):
        draws: list[list[int]] = [[], []]
        texts = []
        for side, spell in enumerate((new_nonce, lambda: randomness.token_urlsafe(16))):
            rng = random.Random(seed)

            def source(n: int, log: list[int] = draws[side], rng: random.Random = rng) -> bytes:
                log.append(n)
                return rng.randbytes(n)

            with entropy_source(source):
                texts.append(spell())
        assert texts[0] == texts[1]
        assert draws[0] == draws[1] == [sealing.STATE_NONCE_BYTES]


def decode_body_by_binascii(body: str) -> bytes:
    """``sealing._decode_body`` as the previous release wrote it (``binascii``'s strict decode):
    the reference it is compared with, on every kind of malformed body."""
    if not body or len(body) % 4 == 1:
        raise sealing.StateRejected("body is not base64url")
    try:
        raw = body.encode("ascii").translate(sealing._FROM_URLSAFE)
        sealed = binascii.a2b_base64(raw + b"=" * (-len(raw) % 4), strict_mode=True)
    except (UnicodeEncodeError, binascii.Error):
        raise sealing.StateRejected("body is not base64url") from None
    if sealing._B64_VALUES[raw[-1]] & sealing._UNUSED_BITS[len(raw) % 4]:
        raise sealing.StateRejected("body is not canonical base64url")
    return sealed
