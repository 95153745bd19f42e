"""A cheaper ``__init__`` for frozen, slotted dataclasses (``slot_init``).

Layer: store. Pure module. The store's records (``store.api``) and the node's request records
(``nodes``) are frozen dataclasses built on every request; the ``__init__`` ``dataclass``
generates for them sets each field with ``object.__setattr__``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

_Frozen = TypeVar("_Frozen")

GENERATED_INITS: dict[type, Any] = {}
"""Per class given a slot ``__init__``: the ``__init__`` that ``dataclass`` generated (kept
for the tests that compare the two)."""


def slot_init(cls: type[_Frozen]) -> type[_Frozen]:
    """A frozen, slotted dataclass whose ``__init__`` sets each field through its slot's own
    descriptor (``member.__set__``) instead of ``object.__setattr__``, as the generated one
    does: the same parameters (names, order, defaults, annotations), the same slots set, the
    same ``__post_init__`` call, at about 0.6 of the cost (``object.__setattr__`` is some 1,000
    instructions a field, and a flow builds records of 30 fields). Frozen as before: the
    class's ``__setattr__`` still refuses every assignment after ``__init__``. Plain fields
    only (no keyword-only or factory fields; an ``init=False`` field with a default is set to
    it, as the generated ``__init__`` does); the tests compare each class's ``__init__`` with
    the one ``dataclass`` generates (tests/test_store_records.py)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    for f in fields:
        if f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: only plain fields take a slot __init__")
    names: dict[str, Any] = {}
    params, body = [], []
    for f in fields:
        member = next(c.__dict__[f.name] for c in cls.__mro__ if f.name in c.__dict__)
        names[f"_set_{f.name}"] = member.__set__
        if f.default is not dataclasses.MISSING:
            names[f"_default_{f.name}"] = f.default
        if not f.init:  # not a parameter: set to its default, as the generated one does
            if f.default is not dataclasses.MISSING:
                body.append(f"    _set_{f.name}(self, _default_{f.name})")
            continue
        params.append(f.name if f.default is dataclasses.MISSING else f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source_body = "\n".join(body) or "    pass"
    source = f"def __init__(self, {', '.join(params)}):\n{source_body}"
    exec(source, names)  # noqa: S102 - our own source, from the class's field names
    init = names["__init__"]
    generated = cls.__init__
    init.__qualname__ = generated.__qualname__
    init.__module__ = generated.__module__
    init.__annotations__ = dict(generated.__annotations__)
    GENERATED_INITS[cls] = generated
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
