"""The store's records (``store.api``) and the node's request records: each frozen dataclass's
slot ``__init__`` is the one ``dataclass`` generated, only cheaper.

Layer: tests. ``store.fast_init.slot_init`` replaces the generated ``__init__``
(``object.__setattr__`` per field) by one that sets each slot through its descriptor; the
records must not change: same signature, same values set, same refusals, still frozen.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from nodes import http, protocol
from nodes.tools import base
from store import api
from store.api import NoteHead, WriteOp
from store.fast_init import GENERATED_INITS

SAMPLES: dict[str, Any] = {
    "str": "x",
    "int": 7,
    "bool": True,
    "NoteHead": NoteHead("n0123456789abcdef", "t", "ws", 1, 2, 3),
    "tuple[NoteHead, ...]": (NoteHead("n0123456789abcdef", "t", "ws", 1, 2, 3),),
}


def sample(cls: type, f: dataclasses.Field[Any]) -> Any:
    if cls is WriteOp and f.name == "op_id":
        return "r" + "0" * 20
    return SAMPLES.get(str(f.type), "accept")  # the Literal fields take a string


def built(cls: type, init: Any, *args: Any, **kwargs: Any) -> Any:
    record = object.__new__(cls)
    init(record, *args, **kwargs)
    return record


def values(record: Any) -> list[Any]:
    return [getattr(record, f.name) for f in dataclasses.fields(record)]


def test_every_record_of_the_store_api_has_a_slot_init() -> None:
    records = [c for c in vars(api).values() if isinstance(c, type) and dataclasses.is_dataclass(c)]
    assert set(records) <= set(GENERATED_INITS)
    nodes = {http._Answer, protocol.RequestContext, protocol.Reply, protocol.PreparedCall}
    assert nodes | {base.CallContext} <= set(GENERATED_INITS)
    assert set(GENERATED_INITS) == set(records) | nodes | {base.CallContext}


@pytest.mark.parametrize("cls", list(GENERATED_INITS), ids=lambda c: c.__name__)
def test_a_slot_init_is_the_generated_one(cls: type) -> None:
    generated = GENERATED_INITS[cls]
    assert inspect.signature(cls.__init__) == inspect.signature(generated)
    assert cls.__init__.__qualname__ == generated.__qualname__
    fields = [f for f in dataclasses.fields(cls) if f.init]  # the others: set to their default
    args = [sample(cls, f) for f in fields]
    required = [a for a, f in zip(args, fields, strict=True) if f.default is dataclasses.MISSING]
    named = {f.name: a for a, f in zip(args, fields, strict=True)}
    for call_args, call_kwargs in [(args, {}), ([], named), (required, {})]:
        ours = cls(*call_args, **call_kwargs)
        theirs = built(cls, generated, *call_args, **call_kwargs)
        assert type(ours) is cls
        assert ours == theirs
        assert values(ours) == values(theirs)
        assert repr(ours) == repr(theirs)
        assert hash(ours) == hash(theirs)
    record = cls(*args)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, fields[0].name, args[0])
    bad_calls: list[tuple[list[Any], dict[str, Any]]] = [([*args, 1], {}), (args, {"nope": 1})]
    if required:  # one missing
        bad_calls.append((required[:-1], {}))
    for bad_args, bad_kwargs in bad_calls:
        with pytest.raises(TypeError) as ours_error:
            cls(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError) as theirs_error:
            built(cls, generated, *bad_args, **bad_kwargs)
        assert str(ours_error.value) == str(theirs_error.value)


def test_a_post_init_still_runs() -> None:
    with pytest.raises(ValueError, match="invalid operation id"):
        WriteOp("no")
    with pytest.raises(ValueError, match="positive TTL"):
        WriteOp("r" + "0" * 20, ttl_ms=0)


def test_confirm_sends_its_constant_integers_as_the_same_bytes() -> None:
    """``NoteStore`` passes confirm's constant integers as text made once; on the wire (and so
    to Lua, whose ARGV are strings) they are the bytes the integers would have been."""
    from store.notes import JOURNAL_MAXLEN, REPLAY_GRACE_MS
    from store.resp import pack

    for n in (JOURNAL_MAXLEN, REPLAY_GRACE_MS, 0, 1, 7, 2**62):
        assert pack("EVALSHA", str(n)) == pack("EVALSHA", n)
