"""The history of a run: every client operation as invoke, then ok, fail or info.

Layer: loadgen. Pure data plus a JSONL writer. The format is what the checker reads:

    {"index": 17, "time_ms": 1764464800123, "process": 3, "type": "invoke", "f": "confirm",
     "flow": 12, "kind": "duplicate", "value": {...}}

``type`` is ``invoke`` (the request is about to be sent), then one of ``ok`` (a definite answer
the client can rely on), ``fail`` (a definite refusal: nothing happened), or ``info`` (the outcome
is unknown: a timeout, a dropped connection, a node that died mid-request). Every completion names
the invoke it completes by that invoke's ``index`` (``"completes": 17``): one process may have
several calls in flight (a ``duplicate`` flow sends the same answer to several nodes at once) and
their replies may arrive in any order. Histories written before completions carried it pair first
in, first out per process, flow and ``f`` (``loadgen.check.pairing``). ``f`` names the
operation:

    create   invoke {principal, tenant, workspace, title, node}    ok {noteId, ...}
    move     invoke {principal, tenant, noteId, from, to, node}    ok {...} | fail {code, message}
    update   invoke {principal, tenant, noteId, node}              ok {...} | fail {code, message}
    ask      invoke {principal, tenant, workspace, title, node}    ok {nonce, exp_ms, candidates:
             [[noteId, version], ...], tool}  (round 1 of notes_delete or notes_archive; the
             load generator, a trusted harness holding the key ring, opens the state to learn
             its nonce and expiry)
    confirm  invoke {principal, tenant, nonce, action, noteId, confirm, node, expect,
                     redis_send_ms?, margin_ms?, altered?}
             ok {executed: bool, op?: "delete" | "archive", deleted: bool, archived: bool,
                 noteId?, replay: bool, isError: bool, reask: bool} (a re-ask adds the new
                 state's nonce, exp_ms, candidates and tool)
             fail {code, message, status}   info {reason}

    create   invoke {..., key?, expect?, bytes?, redis_ms?}   (``write_retry``: an idempotency
             key; ``expect`` ``key_conflict`` when the key is reused with other arguments;
             ``bytes`` the title and body in UTF-8, held to a bytes quota) ok {..., quota?}
             (``quota``: the quota an ``isError`` refusal names)
    update   invoke {principal, tenant, noteId, workspace?, key?, expect?}
             ok {noteId, version, uri, replay, ...}
    move     ok {noteId, version, uri, replay, ...}
    list     invoke {principal, tenant, workspace, title, listing, page, cursor: bool,
                     misuse?}   ok {notes: [[noteId, version, workspaceUri], ...], more: bool}
             (``listing`` numbers a flow's page sequences; ``misuse`` names a cursor used where
             it does not belong: principal, workspace, title, tampered, state)
    search   invoke {principal, tenant, workspace, title, listing, page: 0, roots: bool,
                     given?, granted?, picked?}
             ok {notes, more: false} or a re-ask (roots, then which workspace: ``offered``,
             the workspaces its form offers); ``given`` the roots answered, ``granted`` the
             principal's workspaces, ``picked`` the workspace picked from the form
    setup    invoke {principal, tenant, workspace, action, tool, redis_ms, misuse?}
             ok {configured?, reask, state_nonce?, exp_ms?}   fail {code, message, status}
             (``action`` round1, silence, accept, decline, cancel; the setup state's nonce is
             kept apart from the confirmation states')
    setup_page invoke {principal, tenant, workspace, state_nonce, redis_ms}
             ok {status} (the setup page's HTTP status: 200 completed, 409 used, 410 expired)

An ``ask`` invoke also carries ``redis_ms`` (the load generator's Redis-clock estimate when it
was sent: the checker holds the state's expiry to the configured TTL) and its ok an archive
state's sealed ``target``. Every ok of a request also carries ``executed``, ``deleted``,
``archived``, ``isError``, ``reask`` and ``replay`` as ``loadgen.clients.classify`` reads them
off the wire; ``executed`` is true when a confirming tool says it ran (``op`` names which).

``kind`` is the flow's race kind (``loadgen.workload.RACE_KINDS``: ``plain``, ``duplicate``,
``lost_response``, ``timeout_retry``, ``race_delete``, ``race_move``, ``decline``,
``cancel_then_accept``, ``answer_changed``, ``changed_args``, ``tampered``, ``foreign``,
``expired``, ``before_expiry``, ``edit_between``, ``archive``, ``silence``, ``list_pages``,
``search``, ``setup``, ``wrong_tool``, ``write_retry``), or ``cleanup`` for
the ask and confirm with which a flow deletes what its race left behind. ``action`` is
``accept``, ``decline``, ``cancel`` or ``silence`` (the retry carried the state but no answer);
``altered`` says what the workload changed so that the state does not bind the answer
(``token``, ``arguments``, ``principal``). ``expect`` on a confirm says what the workload meant
by it: ``execute`` (a legitimate accept), ``no_mutation`` (decline, cancel,
tampered, foreign, changed arguments, a changed answer, past expiry): the checker holds every
``no_mutation`` confirm to never having mutated anything.

Legacy flows (``legacy_plain``, ``legacy_cross_node``, ``legacy_duplicate``, ``legacy_decline``,
``legacy_cancel``; ``loadgen.legacy_clients``) are 2025-11-25 clients over HTTP and use the same
operations; their ``node`` is an index into the HTTP nodes serving them, and a confirm also names
its ``stream_node`` (the node holding the call's SSE stream). The client never sees the sealed
state: the ``ask`` ok is the stream's ``elicitation/create``, whose ``params._meta``
``dev.notes-cluster/confirmation: {nonce, expMs, tool, candidates}`` (set by the node's legacy
adapter; none of it is secret) gives ``nonce``, ``exp_ms``, ``tool`` and ``candidates``, with
``reask: true``. A ``confirm`` is one POST of the answer: the first completes with the call's
final result read from the stream (``ok`` as above, or ``ok`` with ``reask: true`` and the new
state's facts when the stream asks again), ``fail`` if the POST itself was refused (not 202);
every further POST of an answer to the same request (a duplicate copy, a late accept after a
decline) completes ``info`` on its 202, since the client learns nothing from it: the journal
resolves it. Accepts are ``expect: execute``; decline, cancel and the late accept ``no_mutation``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar, get_args

import orjson

OpType = Literal["invoke", "ok", "fail", "info"]
OP_TYPES = frozenset(get_args(OpType))

T = TypeVar("T")


class DamagedRunFile(ValueError):
    """A run folder's file does not hold what a run writes (torn by a process killed while
    writing, cut short by a full disk or a partial copy, or edited): which file, which line,
    what is wrong. Nothing is checked from such a folder."""


def read_json_file(path: Path, what: str) -> Any:
    """A whole-file JSON document (``meta.json``, ``tally.json``), or ``DamagedRunFile``."""
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise DamagedRunFile(f"{path}: missing ({what})") from None
    except OSError as exc:
        raise DamagedRunFile(f"{path}: cannot be read ({exc.strerror})") from None
    except orjson.JSONDecodeError as exc:
        raise DamagedRunFile(f"{path}: not JSON ({exc}); it should hold {what}") from None


def json_lines(path: Path, what: str) -> Iterator[tuple[int, bytes, Any]]:
    """Each non-blank line of a JSONL file as (line number, the line's bytes, its value);
    ``DamagedRunFile`` names the file and line of the first that is not JSON. Streams: one
    line in memory at a time."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise DamagedRunFile(f"{path}: missing ({what})") from None
    except OSError as exc:
        raise DamagedRunFile(f"{path}: cannot be read ({exc.strerror})") from None
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                torn = "; a torn last line" if not line.endswith(b"\n") else ""
                raise DamagedRunFile(f"{path}, line {number}: not JSON ({exc}{torn})") from None
            yield number, line, value


def entry_type(d: dict[str, Any]) -> OpType:
    """A decoded entry's ``type`` (ValueError if it is none of ``OpType``)."""
    kind = d["type"]
    if kind not in OP_TYPES:
        raise ValueError(f"type {kind!r} is none of {sorted(OP_TYPES)}")
    return kind  # type: ignore[no-any-return]


SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError)
"""What a parser of a decoded line raises when the line has the wrong shape."""


def wrong_shape(path: Path, number: int, what: str, exc: Exception) -> DamagedRunFile:
    """The error for line ``number`` of ``path``, JSON but not one of ``what``."""
    return DamagedRunFile(f"{path}, line {number}: not one of {what} ({type(exc).__name__}: {exc})")


def read_json_lines(path: Path, parse: Callable[[Any], T], what: str) -> Iterator[T]:
    """Each line of a JSONL file, decoded and handed to ``parse`` (which raises one of
    ``SHAPE_ERRORS`` on a wrong shape); ``DamagedRunFile`` at the first that is not one of
    ``what``."""
    for number, _, value in json_lines(path, what):
        try:
            item = parse(value)
        except SHAPE_ERRORS as exc:
            raise wrong_shape(path, number, what, exc) from None
        yield item


@dataclass(frozen=True, slots=True)
class Op:
    """One history entry."""

    index: int
    time_ms: int
    process: int
    type: OpType
    f: str
    flow: int
    kind: str
    value: dict[str, Any]
    completes: int | None = None
    """A completion's invoke (its ``index``); None on an invoke and in older histories."""

    def to_json(self) -> str:
        """One JSONL line."""
        d: dict[str, Any] = {
            "index": self.index,
            "time_ms": self.time_ms,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "flow": self.flow,
            "kind": self.kind,
        }
        if self.completes is not None:
            d["completes"] = self.completes
        d["value"] = self.value
        return json.dumps(
            d,
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, line: str | bytes) -> Op:
        """Parse one JSONL line."""
        return cls.from_dict(orjson.loads(line))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Op:
        """One decoded entry (KeyError, TypeError or ValueError if it is not one)."""
        kind = entry_type(d)
        if not isinstance(d["value"], dict):
            raise TypeError("value is not an object")
        completes = d.get("completes")
        if completes is not None and (kind == "invoke" or type(completes) is not int):
            raise TypeError(f"completes {completes!r} is not an invoke's index")
        return cls(
            int(d["index"]),
            int(d["time_ms"]),
            int(d["process"]),
            kind,
            str(d["f"]),
            int(d["flow"]),
            str(d["kind"]),
            d["value"],
            completes,
        )


@dataclass
class History:
    """An append-only history, optionally streamed to a JSONL file as it grows."""

    ops: list[Op] = field(default_factory=list)
    sink: TextIO | None = None
    _counter: Iterator[int] = field(default_factory=itertools.count)
    keep: bool = True
    """Keep the ops in memory too (``ops``); off for long runs, which stream to the file only."""
    observer: Callable[[Op], None] | None = None
    """Called with every entry as it is recorded (the run's counters)."""
    max_exp_ms: int = 0
    """The latest state expiry any entry mentioned (the checker waits for it to pass)."""

    def record(
        self,
        process: int,
        type_: OpType,
        f: str,
        flow: int,
        kind: str,
        value: dict[str, Any],
        completes: int | None = None,
    ) -> Op:
        """Append one entry (time is the wall clock in ms) and return it; a completion names its
        invoke's index in ``completes``."""
        now = int(time.time() * 1000)
        op = Op(next(self._counter), now, process, type_, f, flow, kind, value, completes)
        if self.keep:
            self.ops.append(op)
        if self.sink is not None:
            self.sink.write(op.to_json() + "\n")
        exp = value.get("exp_ms")
        if isinstance(exp, int) and exp > self.max_exp_ms:
            self.max_exp_ms = exp
        if self.observer is not None and type_ != "invoke":
            self.observer(op)
        return op


def iter_history(path: Path) -> Iterator[Op]:
    """Stream a ``history.jsonl`` file, one entry at a time (``DamagedRunFile`` at the first
    line that is not an entry)."""
    return read_json_lines(path, Op.from_dict, "the history's entries")


@contextmanager
def recording(path: Path | None, *, keep: bool = True, first_index: int = 0) -> Iterator[History]:
    """A history streaming to the file ``path`` (created, with its folder; ``RunFolder``
    names it), or kept in memory only; the file is closed when the block ends. ``keep`` False
    keeps nothing in memory (needs ``path``); ``first_index`` numbers the entries from there
    (processes of one run get disjoint indices)."""
    counter = itertools.count(first_index)
    if path is None:
        yield History(_counter=counter)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as sink:
        yield History(sink=sink, _counter=counter, keep=keep)
