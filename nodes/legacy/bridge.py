"""One legacy ``tools/call``, driven to its end over the POST's SSE stream.

Layer: node, legacy adapter. The tools speak MRTR (``nodes.tools``): a round answers
``input_required`` with input requests and a sealed ``requestState``. Here the node plays the
MRTR client itself: each input request goes to the legacy client as a real JSON-RPC request
(``elicitation/create``, ``roots/list``) on the stream; the answers come back through the
session's inbox in the store, whichever node the client POSTed them to; then the tool runs its
next round with them, exactly as a modern retry would. So a legacy deletion goes through the same
sealed state, nonce and store script as a modern one, and keeps the exactly-once guarantee: the
first answer to a request is used, later copies of it are dropped, and the script records the
outcome under the nonce anyway.

Roots. If the session declared ``roots``, every workspace a call names must lie inside the roots
the client listed (read with ``roots/list`` when the session has none current). Roots only
narrow: the tool still authorizes the principal as always. A ``notifications/roots/list_changed``
(taken by any node) reaches every stream of the session through the inbox; each pending call
re-reads the roots on its own stream and is refused if its workspace left them. The inbox keeps
the client's order, so a change acknowledged before an answer was sent is handled first.

URL mode. A URL-mode elicitation gets an ``elicitationId``. Once the client accepted it (the user
agreed to open the URL), the tool offering a URL again under the same input key means "not
completed yet": the node waits and asks the tool again with the same answer instead of asking the
user, and on completion sends ``notifications/elicitation/complete`` before the result.

Confirmation facts. A legacy client never sees the sealed ``requestState``, so a form-mode
``elicitation/create`` of a confirming tool (``notes_delete``, ``notes_archive``) carries, in its
``params._meta``, ``dev.notes-cluster/confirmation: {nonce, expMs, tool, candidates: [[noteId,
version], ...]}`` read from the state it belongs to. None of it is secret (a random id, an
expiry on the Redis clock, note ids and versions the principal may read anyway) and clients
ignore ``_meta`` keys they do not know; a trusted harness (``loadgen.legacy_clients``) records
them in its history, so the checker can attribute journal executions to legacy flows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio

from nodes import errors
from nodes.config import LegacyCaps
from nodes.legacy import wire
from nodes.legacy.inbox import Drained, InboxReader, InboxWatch
from nodes.legacy.stream import EventStream
from nodes.protocol import Node, PreparedCall
from nodes.sealing import StateRejected
from store import randomness
from store.api import StoreFull, StoreRefused, StoreUnavailable
from store.sessions import SessionRecord, SessionStore, new_request_id

log = logging.getLogger("nodes.legacy")


@dataclass(frozen=True)
class LegacyLimits:
    """Tunables of legacy calls."""

    answer_timeout_s: float | None = None
    """How long a call waits for the client's answers, from its start; None: until the state of
    the round that asked has expired (the state lifetime, counted from the round's end), past
    which a confirmation could not execute anyway."""
    roots_timeout_s: float = 30.0
    """How long a call waits for ``roots/list``: a client that does not list its roots gets its
    call refused (fail closed), not a call that ignores them."""
    keepalive_s: float = 15.0
    """SSE comment interval: below common proxy idle timeouts; a failed write ends the call."""
    inbox_block_ms: int = 2_000
    """Longest blocking read of the node's inbox reader (one Redis): below the Redis client's
    socket timeout. It holds the reader's one connection, never a call's."""
    inbox_poll_s: float = 0.05
    """Pause between the reader's non-blocking reads on a Redis Cluster (one XREAD cannot span
    sessions there): the added latency of an answer, against one read per waiting session."""
    url_poll_s: float = 1.0
    """How often a call asks the tool again while the user completes a URL-mode step."""
    max_rounds: int = 10
    """Most rounds of questions one call may put to the client (as the SDK's MRTR driver)."""
    touch_every_s: float = 60.0
    """How often a waiting call pushes back its session's idle expiry."""
    request_grace_ms: int = 60_000
    """How long after a call stopped waiting answers to its requests are still accepted (and
    dropped): a late or duplicate answer gets 202, not an error."""


class _Stop(Exception):
    """The call ends before the tool completes."""


class _Refused(_Stop):
    """Nothing was changed; the client gets an ``isError`` result saying why. ``reason`` is what
    the log says (the message itself when it echoes nothing the client sent)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = message if reason is None else reason


class _TimedOut(_Refused):
    def __init__(self) -> None:
        super().__init__("No answer from the client in time; nothing was changed")


class _SessionEnded(_Stop):
    """The session was deleted (or expired) while the call waited."""


class _Cancelled(_Stop):
    """The client cancelled this request: no response is sent."""


OUT_OF_ROOTS = "The workspace is outside the roots this client listed; nothing was changed"
ROOTS_LEFT = "The client's roots changed and no longer include the workspace; nothing was changed"
EMPTY_ROOTS = "The client listed no roots; nothing was changed"
"""Log reasons of the roots refusals (the client's message names its workspace and roots:
``wire.roots_refusal``)."""
NO_ROOTS = "The client did not list its roots; nothing was changed"
NO_ANSWER = "The client did not answer the request; nothing was changed"
EXPIRED = "The request expired before it completed; nothing more was changed"
TOO_MANY_ROUNDS = "Too many rounds of questions; nothing more was changed"
DRAINING = "Node shutting down; nothing was changed by this call; retry it on another node"


def id_key(request_id: object) -> str:
    """A request id as inbox text (``1`` and ``"1"`` stay different ids)."""
    return json.dumps(request_id, separators=(",", ":"))


@dataclass
class _UrlStep:
    elicitation_id: str
    answer: dict[str, Any]


class LegacyCall:
    """One ``tools/call`` of one legacy session, prepared by the core (``Node.prepare_call``)."""

    def __init__(
        self,
        *,
        node: Node,
        call: PreparedCall,
        sessions: SessionStore,
        reader: InboxReader,
        session: SessionRecord,
        request_id: object,
        stream: EventStream,
        limits: LegacyLimits,
        keep_counted: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.node = node
        self.call = call
        self.sessions = sessions
        self.reader = reader
        self.session = session
        self.sid = session.session_id
        self.request_id = request_id
        self.stream = stream
        self.limits = limits
        self.keep_counted = keep_counted
        """Pushes back the bound of this call's entry on its session's pending list: each
        round of questions after the first may wait a whole state lifetime again."""
        self.caps: LegacyCaps = node.config.legacy
        self.targets = wire.workspace_targets(call.arguments)
        self.guarded = isinstance(session.capabilities.get("roots"), dict) and bool(self.targets)
        self.roots: tuple[str, ...] = ()
        self.roots_seen = session.roots_epoch
        self.roots_dirty = False
        self.position = "0-0"
        self.watch: InboxWatch | None = None
        self._exits = AsyncExitStack()
        self.outstanding: dict[str, str] = {}
        self.answers: dict[str, dict[str, Any]] = {}
        self.accepted_urls: dict[str, _UrlStep] = {}
        self.deadline = 0.0
        self.next_touch = 0.0

    async def run(self) -> dict[str, Any] | None:
        """The JSON-RPC response to send (None: the client cancelled; send none). The call
        watches its inbox (through the node's reader) from its first request to the client on,
        until it returns or is cancelled."""
        async with self._exits:
            return await self._answer()

    async def _answer(self) -> dict[str, Any] | None:
        try:
            return wire.response(self.request_id, await self._drive())
        except _Cancelled:
            log.info("legacy call cancelled by its client (tool=%s)", self.call.tool)
            return None
        except _SessionEnded:
            log.info("legacy call ended: its session ended (tool=%s)", self.call.tool)
            return wire.error_response(self.request_id, errors.invalid_request("Session ended"))
        except _Refused as refused:
            log.info("legacy call refused: %s (tool=%s)", refused.reason, self.call.tool)
            await self._cancel_outstanding(refused.message)
            return wire.response(self.request_id, wire.tool_refusal(refused.message))
        except Drained:
            # Stopped only where it waits for its client, before the round that would use an
            # answer: nothing was changed by it, and the client's retry starts afresh elsewhere.
            log.info("legacy call stopped: the node is draining (tool=%s)", self.call.tool)
            await self._cancel_outstanding(DRAINING)
            return wire.error_response(self.request_id, draining())
        except errors.InvalidState:
            # The client never saw a requestState: say what happened instead. (Why the state
            # was rejected is logged where it was opened.)
            log.info("legacy call refused: %s (tool=%s)", EXPIRED, self.call.tool)
            return wire.response(self.request_id, wire.tool_refusal(EXPIRED))
        except errors.JsonRpcError as exc:
            log.info("legacy call refused: %s (tool=%s)", refusal_reason(exc), self.call.tool)
            return wire.error_response(self.request_id, exc)
        except StoreFull as exc:
            log.warning("store full, legacy call refused (tool=%s): %s", self.call.tool, exc)
            return wire.error_response(self.request_id, store_unavailable_error(exc))
        except StoreUnavailable as exc:
            log.warning("store unavailable during a legacy call (tool=%s): %s", self.call.tool, exc)
            return wire.error_response(self.request_id, store_unavailable_error(exc))

    async def _drive(self) -> dict[str, Any]:
        now = anyio.current_time()
        timeout = self.limits.answer_timeout_s
        if timeout is None:
            timeout = self.node.config.state_ttl_ms / 1000
        self.deadline = now + timeout
        self.next_touch = now + self.limits.touch_every_s
        # Read the inbox from here on: nothing this call waits for can be older.
        self.position = await self.sessions.inbox_position(self.sid)
        if self.guarded:
            current = self.session.current_roots
            if current is None:
                await self._read_roots()
            else:
                self.roots = current
            self._check_roots(OUT_OF_ROOTS)
        state: str | None = None
        responses: dict[str, Any] | None = None
        rounds = 0
        while True:
            result = await self.node.run_round(self.call, responses, state)
            if result.get("resultType") != "input_required":
                if not result.get("isError"):
                    await self._urls_completed()
                return wire.legacy_result(result)
            raw_state = result.get("requestState")
            state = raw_state if isinstance(raw_state, str) else None
            asks = result.get("inputRequests")
            responses, fresh = self._split(asks if isinstance(asks, dict) else {})
            if fresh or not responses:  # a round of questions, or a state-only round
                rounds += 1
                if rounds > self.limits.max_rounds:
                    raise _Refused(TOO_MANY_ROUNDS)
                if rounds > 1 and self.keep_counted is not None:
                    await self.keep_counted()
            if fresh:
                self._wait_out_the_state()
                responses.update(await self._ask(fresh, self._confirmation(state)))
            elif responses:
                # Only URLs the user already agreed to open: wait for the page, then ask again.
                await self._wait(self.limits.url_poll_s)
            if self.roots_dirty:
                await self._read_roots()
                self._check_roots(ROOTS_LEFT)

    def _wait_out_the_state(self) -> None:
        """With no answer timeout of its own, wait for the answers to a round's questions until
        the state that round minted has expired: a later answer could not be used anyway, an
        earlier one must be. The state's expiry is its mint on the Redis clock plus the state
        lifetime, and the mint came before the round returned, so now plus that lifetime is
        no earlier. (Counted from the call's start instead, the wait ended before the state
        expired by however long the round took: on a loaded node a decline answered in time got
        "No answer from the client in time". A re-ask's state is minted later still.)"""
        if self.limits.answer_timeout_s is None:
            lifetime = self.node.config.state_ttl_ms / 1000
            self.deadline = max(self.deadline, anyio.current_time() + lifetime)

    def _split(
        self, asks: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, tuple[str, dict[str, Any]]]]:
        """Answers we already hold (accepted URLs asked again) and requests for the client."""
        held: dict[str, Any] = {}
        fresh: dict[str, tuple[str, dict[str, Any]]] = {}
        for key, ask in asks.items():
            if not isinstance(ask, dict) or not isinstance(ask.get("method"), str):
                raise errors.JsonRpcError(errors.INTERNAL_ERROR, "Internal error")
            params = dict(ask.get("params") or {})
            step = self.accepted_urls.get(key)
            if step is not None and _url_of(ask["method"], params) is not None:
                held[key] = step.answer
            else:
                fresh[key] = (ask["method"], params)
        return held, fresh

    def _confirmation(self, state: str | None) -> dict[str, Any] | None:
        """The confirmation facts of a round's state (see the module docstring); None when the
        round has no state, or its state names no candidates (not a confirming tool)."""
        if state is None:
            return None
        config = self.node.config
        try:
            payload = config.key_ring.open(state, audience=config.server_name)
        except StateRejected:
            return None
        if not payload.candidates:
            return None
        return {
            "nonce": payload.nonce,
            "expMs": payload.exp_ms,
            "tool": payload.tool,
            "candidates": [[c.note_id, c.version] for c in payload.candidates],
        }

    async def _ask(
        self,
        fresh: dict[str, tuple[str, dict[str, Any]]],
        confirmation: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send each request on the stream and wait for all the answers (results only); a
        form-mode elicitation carries ``confirmation`` in its ``_meta`` when given."""
        keys: dict[str, str] = {}
        urls: dict[str, str] = {}
        for key, (method, params) in fresh.items():
            if _url_of(method, params) is not None:
                params["elicitationId"] = urls[key] = randomness.token_urlsafe(16)
            elif confirmation is not None and method == "elicitation/create":
                meta = params.get("_meta")
                params["_meta"] = {
                    **(meta if isinstance(meta, dict) else {}),
                    wire.CONFIRMATION_META: confirmation,
                }
            keys[await self._send_request(method, params, self.deadline)] = key
        answers = await self._collect(set(keys))
        out: dict[str, Any] = {}
        for rid, body in answers.items():
            result = body.get("result")
            if not isinstance(result, dict):
                raise _Refused(NO_ANSWER)
            key = keys[rid]
            out[key] = result
            if key in urls and result.get("action") == "accept":
                self.accepted_urls[key] = _UrlStep(urls[key], result)
        return out

    async def _send_request(self, method: str, params: dict[str, Any], deadline: float) -> str:
        """Open a request in the store (so any node takes its answer), then send it."""
        if self.reader.draining:
            raise Drained
        if self.watch is None:
            # From the position taken at the start: nothing since then is missed.
            self.watch = await self._exits.enter_async_context(
                self.reader.watch(self.sid, self.position)
            )
        rid = new_request_id()
        ttl_ms = int(max(0.0, deadline - anyio.current_time()) * 1000)
        if not await self.sessions.open_request(
            self.sid, rid, ttl_ms + self.limits.request_grace_ms
        ):
            raise _SessionEnded
        self.outstanding[rid] = method
        await self.stream.event(wire.request(rid, method, params))
        return rid

    async def _collect(self, rids: set[str]) -> dict[str, dict[str, Any]]:
        while True:
            if self.roots_dirty:
                await self._read_roots()
                self._check_roots(ROOTS_LEFT)
            if rids <= self.answers.keys():
                return {rid: self.answers.pop(rid) for rid in rids}
            await self._pump(self.deadline)

    async def _read_roots(self) -> None:
        """Ask the client for its roots on this stream and keep them in the session."""
        self.roots_dirty = False
        record = await self.sessions.load(self.sid)
        if record is None:
            raise _SessionEnded
        epoch = max(record.roots_epoch, self.roots_seen)
        self.roots_seen = epoch
        limit = min(self.deadline, anyio.current_time() + self.limits.roots_timeout_s)
        rid = await self._send_request("roots/list", {}, limit)
        while rid not in self.answers:
            await self._pump(limit)
        roots = wire.parse_roots(self.answers.pop(rid))
        if roots is None:
            raise _Refused(NO_ROOTS)
        # Only so many are kept: dropping roots only narrows what the call may touch.
        self.roots = roots[: self.caps.roots_max]
        await self.sessions.set_roots(self.sid, self.roots, epoch)

    def _check_roots(self, reason: str) -> None:
        if self.guarded and not wire.within_roots(self.targets, self.roots):
            changed = reason == ROOTS_LEFT
            message = wire.roots_refusal(self.targets, self.roots, changed=changed)
            raise _Refused(message, EMPTY_ROOTS if not self.roots else reason)

    async def _pump(self, deadline: float) -> None:
        """Take what the node's reader brought for this call (waiting for it, but no longer
        than the next session touch); _TimedOut at ``deadline``."""
        now = anyio.current_time()
        if now >= deadline:
            raise _TimedOut
        if now >= self.next_touch:
            self.next_touch = now + self.limits.touch_every_s
            if await self.sessions.load(self.sid) is None:
                raise _SessionEnded
        assert self.watch is not None  # opened before the first request was sent
        for entry in await self.watch.next(min(deadline, self.next_touch)):
            if entry.kind == "answer":
                if self.outstanding.pop(entry.request_id, None) is None:
                    continue  # another call's request, or a copy of an answer already taken
                try:
                    body = json.loads(entry.body)
                except ValueError:
                    body = {}
                self.answers[entry.request_id] = body if isinstance(body, dict) else {}
            elif entry.kind == "roots_changed":
                if entry.epoch > self.roots_seen:
                    self.roots_seen = entry.epoch
                    self.roots_dirty = self.guarded
            elif entry.kind == "cancelled":
                if entry.body == id_key(self.request_id):
                    raise _Cancelled
            elif entry.kind == "ended":
                raise _SessionEnded

    async def _wait(self, seconds: float) -> None:
        """Let ``seconds`` pass while still reading the inbox (cancels, ends, roots changes)."""
        until = anyio.current_time() + seconds
        if until >= self.deadline:
            raise _TimedOut
        try:
            while True:
                await self._pump(until)
        except _TimedOut:
            return

    async def _urls_completed(self) -> None:
        for step in self.accepted_urls.values():
            params = {"elicitationId": step.elicitation_id}
            await self.stream.event(wire.notification("notifications/elicitation/complete", params))

    async def _cancel_outstanding(self, reason: str) -> None:
        """Withdraw the requests the client still holds (their answers would be dropped)."""
        pending, self.outstanding = self.outstanding, {}
        if not self.stream.streaming:
            return
        for rid in pending:
            params = {"requestId": rid, "reason": reason}
            await self.stream.event(wire.notification("notifications/cancelled", params))


def refusal_reason(exc: errors.JsonRpcError) -> str:
    """What the log says of an error answer: its message, without the client's own text that
    two messages echo (a method's or a tool's name: neither ours to log, nor bounded in form)."""
    for fixed in ("Method not found", "Unknown tool"):
        if exc.message.startswith(fixed + ":"):
            return fixed
    return exc.message


def store_unavailable_error(exc: StoreUnavailable) -> errors.JsonRpcError:
    """-32603 for a store failure, as the modern path answers it: full (the note store's or the
    session store's ``StoreFull``: nothing was written) or unavailable (outcome unknown)."""
    if isinstance(exc, StoreFull):
        return errors.store_full()
    if isinstance(exc, StoreRefused):
        return errors.store_refused(exc.reason, maybe_ran=exc.maybe_ran)
    return errors.outcome_unknown_error()


def draining() -> errors.JsonRpcError:
    """-32603 for a call the draining node stopped (or refused): nothing was changed by it."""
    return errors.JsonRpcError(
        errors.INTERNAL_ERROR, DRAINING, {"retryable": True, "reason": "draining"}
    )


def _url_of(method: str, params: dict[str, Any]) -> str | None:
    if method != "elicitation/create" or params.get("mode") != "url":
        return None
    url = params.get("url")
    return url if isinstance(url, str) else None
