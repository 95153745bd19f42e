"""``nodes.canonical.canonical_json`` writes exactly what ``json.dumps`` writes.

The digests built on it (the sealed state's argument digest, an answer's digest, a keyed write's
operation digest) are compared across nodes and versions, so the fast encoder must agree with
the stdlib byte for byte, and refuse what the stdlib refuses.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.canonical import _no_float, canonical_json, canonical_json_bytes
from tests.harness import random_seed

STRINGS = [
    "",
    "TPS report",
    'quote " backslash \\ slash /',
    "".join(chr(c) for c in range(0x20)),
    "\x7f\x80\x9f\xa0\xad",
    "café, Отчёт, 会議, עברית, 👩\u200d💻, 🏴\U000e0067\U000e0062\U000e007f",
    "\u2028\u2029\ufeff\ufffe\uffff",
    "file:///Users/alice/Documents/Notes",
]
VALUES: list[object] = [
    *STRINGS,
    {s: s for s in STRINGS},
    {"workspaceUri": "file:///load/t0/inbox", "title": "bench p1 7"},
    {"b": 1, "a": {"d": [True, False, None], "c": -9223372036854775807}, "": 18446744073709551615},
    {"action": "accept", "content": {"noteId": "n1f2", "confirm": True}},
    [[], {}, [{}], {"z": [], "y": {}}],
    {"big": 2**64 + 1},
    {"float": 1e16, "small": 1e-7, "half": 0.5, "one": 1.0, "neg": -0.0},
    {"surrogate": "a\ud800b"},
]


def _outcome(encode: object, value: object, **kwargs: bool) -> object:
    try:
        return ("text", encode(value, **kwargs))  # type: ignore[operator]
    except (TypeError, ValueError) as exc:
        return ("refused", type(exc).__name__)


def _stdlib(value: object, allow_nan: bool = True) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan
    )


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_canonical_text_is_the_stdlibs(value: object) -> None:
    assert _outcome(canonical_json, value) == _outcome(_stdlib, value)


@pytest.mark.parametrize("value", [float("nan"), {"x": float("inf")}, [1.5, -float("inf")]])
def test_nan_and_infinities_are_refused_when_asked_as_the_stdlib_does(value: object) -> None:
    assert _outcome(canonical_json, value, allow_nan=False) == ("refused", "ValueError")
    assert _outcome(canonical_json, value) == _outcome(_stdlib, value)


def test_random_strings_and_objects_agree_with_the_stdlib() -> None:
    seed = random_seed()
    print(f"seed {seed}")
    rng = random.Random(seed)
    alphabet = [chr(c) for c in range(0x80)] + ["é", "Ж", "会", "\u200d", "😀", "\U000e0067"]
    for _ in range(2_000):
        keys = ["".join(rng.choices(alphabet, k=rng.randint(0, 6))) for _ in range(3)]
        value: dict[str, object] = {
            k: "".join(rng.choices(alphabet, k=rng.randint(0, 12))) for k in keys
        }
        value["n"] = {"i": rng.randint(-(2**63), 2**63), "l": [rng.random() < 0.5, None]}
        assert canonical_json(value) == _stdlib(value), (seed, value)


JSON_LIKE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(derandomize=True, max_examples=500, deadline=None)
@given(value=JSON_LIKE | st.dictionaries(st.text(), JSON_LIKE, max_size=5))
def test_the_canonical_bytes_are_the_stdlibs_text_in_utf8(value: object) -> None:
    """Floats (NaN, infinities, exponents), integers past 64 bits and lone surrogates included:
    the same bytes as the stdlib's text, or the same kind of refusal."""
    for allow_nan in (True, False):
        expected = _outcome(
            lambda v, **kw: _stdlib(v, **kw).encode("utf-8"), value, allow_nan=allow_nan
        )
        assert _outcome(canonical_json_bytes, value, allow_nan=allow_nan) == expected
        assert _outcome(canonical_json, value, allow_nan=allow_nan) == _outcome(
            _stdlib, value, allow_nan=allow_nan
        )


class _Float(float):
    pass


class _Int(int):
    pass


@pytest.mark.parametrize(
    "value",
    [
        {"a": "x", "b": 1.0},
        {"a": "x", "b": _Float(1e16)},
        {"a": _Int(5), "b": [1e16]},
        {"a": {"b": 1e-7}},
        {"a": "x", "b": 2**64, "c": True, "d": None},
    ],
)
def test_a_float_beside_plain_scalars_is_written_as_the_stdlib_writes_it(value: object) -> None:
    assert canonical_json_bytes(value) == _stdlib(value).encode("utf-8")


def _holds_a_float(value: object) -> bool:
    """The plain recursive reference for ``_no_float``."""
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_holds_a_float(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_a_float(v) for v in value)
    return False


TWO_LEVEL = st.dictionaries(
    st.text(max_size=3),
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=3)
    | st.lists(st.none() | st.floats() | st.integers(), max_size=2)
    | st.dictionaries(
        st.text(max_size=3),
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3) | st.just([]),
        max_size=3,
    ),
    max_size=4,
)


@settings(derandomize=True, max_examples=1_000, deadline=None)
@given(value=TWO_LEVEL | JSON_LIKE)
def test_the_one_pass_float_check_answers_as_a_full_walk(value: object) -> None:
    """``_no_float``'s one pass over a dict of scalars and dicts of scalars (a form's answer)
    says what the full walk says, for a float or a list at either level, and anything else."""
    assert _no_float(value) is not _holds_a_float(value)
    assert _outcome(canonical_json_bytes, value) == _outcome(
        lambda v: _stdlib(v).encode("utf-8"), value
    )


@pytest.mark.parametrize(
    "value",
    [
        {"action": "accept", "content": {"noteId": "n1", "confirm": True}},
        {"action": "accept", "content": {"noteId": "n1", "confirm": 1.0}},
        {"action": "accept", "content": {"noteId": "n1", "list": [1.5]}},
        {"action": 0.5, "content": {"noteId": "n1"}},
        {"a": {"b": {"c": 1.0}}},
        {"a": {"b": {"c": 1}}},
        {"a": {}, "b": {}},
        {},
    ],
)
def test_an_answer_shaped_value_is_written_as_the_stdlib_writes_it(value: object) -> None:
    assert _no_float(value) is not _holds_a_float(value)
    assert _outcome(canonical_json, value) == _outcome(_stdlib, value)
