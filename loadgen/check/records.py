"""What the store keeps besides notes and replay entries, held to the run: operation records and
usage counters; and the replay marker of keyed retries.

Layer: loadgen.check. Pure module: no I/O, no node code. Three verdicts for
``loadgen.check.invariants.check``:

- ``op_records_expire``: every operation record left after the run (``<base>:op:<id>``, what
  makes a write safe to run twice and an idempotency key answerable) has a TTL, and none longer
  than the record's window (``StoreRecords.op_ttl_ms``): a record that never goes is memory that
  grows with every write.
- ``usage_matches_notes``: every per-principal usage counter (notes and bytes per tenant, notes
  per workspace) equals what the surviving notes say, read after the run settled, so after
  every fault the run played: a counter a delete or a move forgot to release fills a quota
  with notes that are gone.
- ``keyed_retries_marked``: a write retried with its idempotency key after an earlier request
  under that key was applied (an earlier ok, or a reply the client dropped after the node
  answered) must be answered as a replay (``_meta`` replay marker): a client that is told "done
  now" cannot tell its retry from a second write.

Without ``StoreRecords`` (a synthetic history, a folder written before the facts held them)
the first two say "Not checked" in their summary, as ``bounds_respected`` does without limits:
every run through ``loadgen.run`` records them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loadgen.check.verdict import Finding, Verdict, verdict

if TYPE_CHECKING:
    from loadgen.check.context import Call, Context

NOT_RECORDED = "the store facts hold no"

RESPONSE_LOST = "response lost"
"""The info reason of a reply the client dropped after it arrived (``loadgen.clients``)."""


@dataclass(frozen=True)
class StoreRecords:
    """One tenant's operation records and usage counters after the run
    (``store.journal.read_store_records``), and the operation records' window."""

    ops: Mapping[str, int] = field(default_factory=dict)
    """Operation id -> PTTL in ms (-1: no TTL)."""
    usage: Mapping[str, int] = field(default_factory=dict)
    """Usage counter -> the value stored."""
    recount: Mapping[str, int] = field(default_factory=dict)
    """Usage counter -> what the surviving notes say."""
    op_ttl_ms: int = 0
    """The longest an operation record may live (0: not known)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any], op_ttl_ms: int) -> StoreRecords:
        """From ``read_store_records``' dict (as written into a run folder)."""
        return cls(
            {str(k): int(v) for k, v in d.get("ops", {}).items()},
            {str(k): int(v) for k, v in d.get("usage", {}).items()},
            {str(k): int(v) for k, v in d.get("recount", {}).items()},
            op_ttl_ms,
        )


def check_op_records(records: StoreRecords | None, key_window_ms: int = 0) -> Verdict:
    """``op_records_expire`` (module docstring): a record under an idempotency key (id ``k...``)
    within ``key_window_ms`` (the nodes' idempotency window; 0: not known), any other within
    ``records.op_ttl_ms``."""
    name = "op_records_expire"
    if records is None:
        return Verdict(name, "valid", f"Not checked: {NOT_RECORDED} operation records.")
    bad = []
    for op_id, ttl in sorted(records.ops.items()):
        keyed = op_id.rpartition("/")[2].startswith("k")
        window = key_window_ms if keyed else records.op_ttl_ms
        if ttl < 0:
            bad.append(Finding(f"operation record {op_id} has no TTL: it never expires"))
        elif window and ttl > window:
            bad.append(
                Finding(f"operation record {op_id} expires in {ttl} ms, past its {window} ms")
            )
    return verdict(
        name, f"All {len(records.ops)} operation records left expire within their window.", bad, []
    )


def check_usage(records: StoreRecords | None) -> Verdict:
    """``usage_matches_notes`` (module docstring)."""
    name = "usage_matches_notes"
    if records is None:
        return Verdict(name, "valid", f"Not checked: {NOT_RECORDED} usage counters.")
    bad = []
    for counter in sorted(set(records.usage) | set(records.recount)):
        stored, counted = records.usage.get(counter, 0), records.recount.get(counter, 0)
        if stored != counted:
            bad.append(
                Finding(
                    f"usage counter {_counter_text(counter)} holds {stored}; the notes say "
                    f"{counted}"
                )
            )
    n = len(set(records.usage) | set(records.recount))
    return verdict(name, f"All {n} usage counters equal what the notes say.", bad, [])


def _counter_text(counter: str) -> str:
    tenant = ""
    if "/" in counter.split(":")[0]:
        tenant, _, counter = counter.partition("/")
    kind, _, rest = counter.partition(":")
    rest = f"{rest} ({tenant})" if tenant else rest
    if kind == "n":
        return f"notes of {rest}"
    if kind == "b":
        return f"bytes of {rest}"
    where, _, who = rest.rpartition(":")
    return f"notes of {who} in workspace {where}"


def check_keyed_retries(ctx: Context) -> Verdict:
    """``keyed_retries_marked`` (module docstring)."""
    name = "keyed_retries_marked"
    groups: dict[tuple[str, str, str, str], list[Call]] = defaultdict(list)
    for c in ctx.calls:
        key = c.v.get("key")
        if c.invoke.f in ("create", "update", "move") and isinstance(key, str):
            if c.v.get("expect") == "key_conflict":
                continue
            who = (str(c.v.get("tenant", "")), str(c.v.get("principal", "")))
            groups[(*who, c.invoke.f, key)].append(c)
    bad = []
    checked = 0
    for (_, _, f, key), calls in sorted(groups.items()):
        calls.sort(key=lambda c: c.invoke.index)
        for i, c in enumerate(calls):
            if c.outcome != "ok" or c.result.get("isError"):
                continue
            before = [p for p in calls[:i] if p.done is not None and _applied(p)]
            before = [p for p in before if p.done is not None and p.done.index < c.invoke.index]
            if not before:
                continue
            checked += 1
            if c.result.get("replay") is not True:
                first = before[0]
                bad.append(
                    Finding(
                        f"{f} at {c.invoke.index} retried idempotency key {key!r} after the "
                        f"{f} at {first.invoke.index} was applied, and was answered without "
                        "the replay marker",
                        tuple(sorted({*first.indices, *c.indices})),
                    )
                )
    return verdict(
        name, f"All {checked} keyed retries of an applied write were answered as replays.", bad, []
    )


def _applied(c: Call) -> bool:
    """The node answered this request as a write that happened: an ok reply, or one the client
    dropped on purpose after it arrived (``applied`` recorded by ``loadgen.clients``)."""
    if c.outcome == "ok":
        return not c.result.get("isError")
    r = c.result
    return c.outcome == "info" and r.get("reason") == RESPONSE_LOST and r.get("applied") is True
