"""Legacy (2025-11-25) clients in the race workload: real ``notes_delete`` flows over HTTP.

Layer: loadgen. Speaks the handshake-era wire to HTTP nodes (``initialize``, ``Mcp-Session-Id``,
the ``tools/call`` answered as an SSE stream carrying a server-initiated ``elicitation/create``,
the client's ``{jsonrpc, id, result}`` POSTed back), and records each operation in the history
exactly as the modern flows do (``create``, ``ask``, ``confirm``; ``loadgen.history``), so the
checker attributes journal executions to legacy flows with the same rules.

How the history learns a legacy state. The client never sees the sealed ``requestState``: the
node's adapter puts the state's facts in the elicitation's ``params._meta``
(``dev.notes-cluster/confirmation: {nonce, expMs, tool, candidates}``, ``nodes.legacy.bridge``),
and the ask's ok records them as ``nonce``, ``exp_ms``, ``tool`` and ``candidates``. No key ring
is needed for legacy flows.

Node choice (a balancer without affinity). Each flow draws a node ``r``: ``initialize`` goes to
``r``, ``notifications/initialized`` to ``r+1``, ``notes_create`` and the final ``DELETE`` to
``r+2``, the delete's ``tools/call`` (its stream) to ``s = r+1``, and the answer to a third node
``s+1`` unless the kind says otherwise (modulo the node count). Kinds:

    legacy_plain       accept, answered on the stream's own node (the sticky case)
    legacy_cross_node  accept, answered on a third node (neither the stream's nor initialize's)
    legacy_duplicate   accept, the same answer POSTed at once to two nodes other than the stream's
    legacy_decline     decline (or accept with confirm false), then a late accept POSTed to
                       another node after the call ended (it finds its request answered: 202,
                       dropped)
    legacy_cancel      cancel
    legacy_foreign_session  a plain accept, and before it a ``notes_create`` carrying the
                       session id of the tenant's other principal (``loadgen.legacy_sessions``)
    legacy_stale_session    a plain accept, then a ``notes_create`` on the flow's own session
                       after its DELETE
    legacy_evicted     a session opened, then the per-principal cap's worth more, then a
                       ``notes_create`` on the first (evicted)
    legacy_roots       a session declaring roots (the tenant's root); between the elicitation
                       and the accept the roots change to include a root over ungranted
                       workspaces too; then a ``notes_create`` in an ungranted workspace

Recording. The ``confirm`` of the first answer POST completes with the call's final result from
the stream (``ok``/``fail`` as modern; ``info`` if the stream broke or timed out), or ``fail``
when the POST itself was refused (not 202: the answer never got in). Every other answer POST
(duplicate copies, the late accept) is a ``confirm`` of its own on the flow's second process that
completes ``info`` on 202: the node took it or dropped it as a copy, and the client learns
nothing more from it. A second ``elicitation/create`` on the stream (the note changed: a re-ask)
completes the confirm ``ok`` with ``reask: true`` and the new state's facts, and is answered
again. Accepts are ``expect: execute``; decline, cancel and the late accept ``no_mutation``.

Every invoke names the flow's ``session``; a confirm names the ``request`` it answers, and its
completion carries ``posted_redis_ms`` (the load generator's Redis-clock estimate when the node
took the first POST, 202) and ``no_answer`` when the call ended saying it heard no answer in
time: the checker judges a legacy answer at the moment it was posted (``loadgen.check.legacy``).
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

from loadgen.clients import REQUEST_TIMEOUT_S, Outcome, classify
from loadgen.flow_steps import DELETE_TOOL, flow_title
from loadgen.history import History, Op, OpType
from loadgen.transport import ACCEPT, NodeDown, Reply

LEGACY_KINDS: tuple[str, ...] = (
    "legacy_plain",
    "legacy_cross_node",
    "legacy_duplicate",
    "legacy_decline",
    "legacy_cancel",
    "legacy_foreign_session",
    "legacy_stale_session",
    "legacy_evicted",
    "legacy_roots",
)

SESSION_KINDS = frozenset(
    {"legacy_foreign_session", "legacy_stale_session", "legacy_evicted", "legacy_roots"}
)
"""The legacy kinds that misuse a session id (``loadgen.legacy_sessions``)."""

LEGACY_VERSION = "2025-11-25"
"""The handshake-era protocol version these clients negotiate."""

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
"""Headers a legacy client sends once it has a session (names lowercased, as httpx sends them)."""

CONFIRMATION_META = "dev.notes-cluster/confirmation"
"""``_meta`` key of a confirming tool's ``elicitation/create``: ``{nonce, expMs, tool,
candidates}`` of its sealed state, which this node adds for harnesses that record histories."""

LEGACY_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}}
"""Declared once, at ``initialize``: form elicitation only (no roots, so no ``roots/list``)."""

ROOTS_CAPABILITIES: dict[str, Any] = {**LEGACY_CAPABILITIES, "roots": {"listChanged": True}}
"""Declared by a ``legacy_roots`` flow: its calls ask it for its roots (``LegacyEnv.roots``)."""

HTTP_POOL = 256
"""Connections the legacy clients keep to the nodes (each flow holds a stream and POSTs too)."""

MAX_REASKS = 3
"""How often one flow answers a re-ask (a changed note) before it gives up."""

_ids = itertools.count(1)


class LegacyHttp:
    """The 2025-11-25 wire to HTTP nodes, one bearer token per principal."""

    def __init__(
        self,
        urls: Sequence[str],
        tokens: dict[str, str],
        client: httpx.AsyncClient,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.urls = list(urls)
        self.tokens = tokens
        """principal -> bearer token"""
        self.client = client
        self.timeout_s = timeout_s

    @property
    def node_count(self) -> int:
        """How many node URLs there are."""
        return len(self.urls)

    def headers(self, principal: str, session: str | None) -> dict[str, str]:
        """What a legacy client sends: no version header until the session exists."""
        out = {
            "accept": ACCEPT,
            "authorization": f"Bearer {self.tokens[principal]}",
        }
        if session is not None:
            out[SESSION_HEADER] = session
            out[VERSION_HEADER] = LEGACY_VERSION
        return out

    async def post(
        self, node: int, principal: str, session: str | None, message: dict[str, Any]
    ) -> httpx.Response:
        """POST and read the whole response; NodeDown on a transport failure or a timeout."""
        with trio.move_on_after(self.timeout_s):
            try:
                return await self.client.post(
                    self.urls[node], json=message, headers=self.headers(principal, session)
                )
            except httpx.TransportError as exc:
                raise NodeDown(f"{self.urls[node]}: {type(exc).__name__}") from exc
        raise NodeDown(f"{self.urls[node]}: timeout")

    async def delete(self, node: int, principal: str, session: str) -> None:
        """End the session (best effort)."""
        with trio.move_on_after(self.timeout_s):
            with suppress(httpx.TransportError):
                await self.client.delete(self.urls[node], headers=self.headers(principal, session))

    @asynccontextmanager
    async def call(
        self, node: int, principal: str, session: str, message: dict[str, Any]
    ) -> AsyncIterator[Messages]:
        """POST a request whose response may stream; NodeDown if it cannot be sent."""
        headers = self.headers(principal, session)
        try:
            async with self.client.stream(
                "POST", self.urls[node], json=message, headers=headers
            ) as response:
                yield Messages(response, self.timeout_s)
        except httpx.TransportError as exc:
            raise NodeDown(f"{self.urls[node]}: {type(exc).__name__}") from exc


class StreamEnded(Exception):
    """The response ended (or stalled) before the message the client waits for."""


class Messages:
    """The JSON-RPC messages of one response: a JSON body, or the events of an SSE stream."""

    def __init__(self, response: httpx.Response, timeout_s: float) -> None:
        self.response = response
        self.timeout_s = timeout_s
        self.streaming = response.headers.get("content-type", "").startswith("text/event-stream")
        self._lines = response.aiter_lines()
        self._done = False

    async def next(self) -> dict[str, Any]:
        """The next message; StreamEnded when there is none (end, timeout, broken stream)."""
        if self._done:
            raise StreamEnded("response already read")
        with trio.move_on_after(self.timeout_s):
            try:
                return await self._next()
            except (httpx.TransportError, ValueError) as exc:
                raise StreamEnded(type(exc).__name__) from exc
        raise StreamEnded("timeout")

    async def _next(self) -> dict[str, Any]:
        if not self.streaming:
            self._done = True
            body = await self.response.aread()
            return _as_message(json.loads(body) if body else {}, self.response.status_code)
        data: list[str] = []
        async for line in self._lines:
            if line.startswith("data:"):
                data.append(line.removeprefix("data:").removeprefix(" "))
            elif line == "" and data:
                return _as_message(json.loads("".join(data)), 200)
        raise StreamEnded("stream ended")


def _as_message(body: object, status: int) -> dict[str, Any]:
    out = dict(body) if isinstance(body, dict) else {}
    out["_status"] = status
    return out


def legacy_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A 2025-11-25 request: no ``_meta`` version (the session carries it)."""
    return {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}


def _outcome(message: dict[str, Any]) -> Outcome:
    """A final response as the history classifies modern ones (ok / fail / info)."""
    body = {k: v for k, v in message.items() if k != "_status"}
    return classify(Reply(int(message.get("_status", 200)), body or None))


def _post_outcome(response: httpx.Response) -> Outcome:
    """A non-202 answer to an answer POST: a definite refusal, or unknown for a 5xx."""
    try:
        body = response.json() if response.content else {}
    except ValueError:
        body = {}
    err = body.get("error") if isinstance(body, dict) else None
    err = err if isinstance(err, dict) else {}
    value = {
        "code": int(err.get("code", 0)),
        "message": str(err.get("message", "")),
        "status": response.status_code,
    }
    if response.status_code >= 500:
        return Outcome("info", {"reason": "outcome unknown", **value})
    return Outcome("fail", value)


@dataclass
class Asked:
    """An ``elicitation/create`` of a confirming tool, as the stream delivered it."""

    request_id: str
    nonce: str
    exp_ms: int
    tool: str
    candidates: list[tuple[str, int]]

    def facts(self) -> dict[str, Any]:
        """What the history records of the state."""
        return {
            "nonce": self.nonce,
            "exp_ms": self.exp_ms,
            "tool": self.tool,
            "candidates": [[n, v] for n, v in self.candidates],
        }


def asked_of(message: dict[str, Any]) -> Asked | None:
    """The state facts of an ``elicitation/create`` carrying them, else None."""
    if message.get("method") != "elicitation/create" or not isinstance(message.get("id"), str):
        return None
    params = message.get("params") or {}
    facts = (params.get("_meta") or {}).get(CONFIRMATION_META)
    if not isinstance(facts, dict):
        return None
    try:
        cands = [(str(c[0]), int(c[1])) for c in facts["candidates"]]
        return Asked(
            str(message["id"]), str(facts["nonce"]), int(facts["expMs"]), str(facts["tool"]), cands
        )
    except (KeyError, TypeError, ValueError, IndexError):
        return None


REASK_VALUE = {"deleted": False, "isError": False, "reask": True, "replay": False}
"""The ok value of an ask or confirm answered with a (new) elicitation."""


@dataclass
class LegacyEnv:
    """Everything one legacy flow needs."""

    flow: int
    kind: str
    http: LegacyHttp
    history: History
    rng: random.Random
    principal: str
    tenant: str
    inbox: str
    process: int
    """The flow's first process; answer copies and late answers use ``process + 1``."""
    first_node: int = 0
    foreigner: str = ""
    """The tenant's other principal (whose session a ``legacy_foreign_session`` flow misuses)."""
    redis_offset_ms: int = 0
    """The Redis clock minus the wall clock (``redis_now_ms``)."""
    session: str = ""
    roots: list[str] | None = None
    """The roots this client lists when a node asks (None: it declares no roots capability)."""
    tag: str = "run"
    """The run's tag, in the flow's title (``workload.flow_title``)."""
    sent: dict[tuple[int, str], Op] = field(default_factory=dict)
    """The invoke each (process, operation) has in flight, for its completion to name."""

    def redis_now_ms(self) -> int:
        """The load generator's estimate of the Redis clock."""
        return int(time.time() * 1000) + self.redis_offset_ms

    def node(self, k: int) -> int:
        """The node ``k`` steps after the flow's first one."""
        return (self.first_node + k) % self.http.node_count

    def record(self, process: int, type_: OpType, f: str, value: dict[str, Any]) -> None:
        """One history entry of this flow; a completion names its invoke (each process of a
        legacy flow has one call of an operation in flight at a time)."""
        key = (process, f)
        if type_ == "invoke":
            self.sent[key] = self.history.record(process, type_, f, self.flow, self.kind, value)
            return
        sent = self.sent.pop(key, None)
        completes = None if sent is None else sent.index
        self.history.record(process, type_, f, self.flow, self.kind, value, completes)


async def run_legacy_flow(env: LegacyEnv) -> bool:
    """Run one legacy deletion flow of ``env.kind`` (a kind of ``SESSION_KINDS`` runs through
    ``loadgen.legacy_sessions.run_any_legacy_flow``); False when its setup (initialize, create,
    ask) did not complete."""
    env.first_node = env.rng.randrange(env.http.node_count)
    if not await _initialize(env):
        return False
    try:
        title = flow_title(env.tag, env.flow)
        note = await _create(env, title)
        if note is None:
            return False
        return await _delete(env, title, note)
    finally:
        await env.http.delete(env.node(2), env.principal, env.session)


async def _initialize(env: LegacyEnv) -> bool:
    capabilities = LEGACY_CAPABILITIES if env.roots is None else ROOTS_CAPABILITIES
    params = {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": capabilities,
        "clientInfo": {"name": "notes-cluster-loadgen-legacy", "version": "0.1"},
    }
    try:
        response = await env.http.post(
            env.node(0), env.principal, None, legacy_request("initialize", params)
        )
        session = response.headers.get(SESSION_HEADER)
        if response.status_code != 200 or not session:
            return False
        env.session = session
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await env.http.post(env.node(1), env.principal, session, done)
    except NodeDown:
        return False
    return True


async def _create(env: LegacyEnv, title: str) -> str | None:
    node = env.node(2)
    args = {"workspaceUri": env.inbox, "title": title, "body": f"legacy flow {env.flow}"}
    invoke = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": env.inbox,
        "title": title,
        "node": node,
        "session": env.session,
    }
    env.record(env.process, "invoke", "create", invoke)
    try:
        response = await env.http.post(
            node,
            env.principal,
            env.session,
            legacy_request("tools/call", {"name": "notes_create", "arguments": args}),
        )
        body = response.json() if response.content else None
        out = classify(Reply(response.status_code, body))
    except (NodeDown, ValueError) as exc:
        out = Outcome("info", {"reason": f"unreachable: {type(exc).__name__}"})
    res = out.result or {}
    note = None
    if out.type == "ok" and not res.get("isError"):
        note = str(res["structuredContent"]["noteId"])
    env.record(env.process, out.type, "create", {**out.value, **({"noteId": note} if note else {})})
    return note


async def _delete(env: LegacyEnv, title: str, note: str) -> bool:
    stream_node = env.node(1)
    args = {"workspaceUri": env.inbox, "title": title}
    invoke = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": env.inbox,
        "title": title,
        "node": stream_node,
        "session": env.session,
    }
    message = legacy_request("tools/call", {"name": DELETE_TOOL, "arguments": args})
    env.record(env.process, "invoke", "ask", invoke)
    opened = False
    try:
        async with env.http.call(stream_node, env.principal, env.session, message) as stream:
            opened = True
            asked = await _first_ask(env, stream)
            if asked is None or note not in {c[0] for c in asked.candidates}:
                return False  # leaving closes the stream; the node's call ends by itself
            await _answer_flow(env, stream, stream_node, asked, note)
    except NodeDown as exc:
        if not opened:  # the call could not be sent: whether it got in is unknown
            env.record(env.process, "info", "ask", {"reason": f"unreachable: {exc}"})
        return False
    return True


async def answer_roots(env: LegacyEnv, message: dict[str, Any]) -> bool:
    """Answer a node's ``roots/list`` request with ``env.roots``; False for another message
    (or a client without roots)."""
    if message.get("method") != "roots/list" or env.roots is None or "id" not in message:
        return False
    roots = [{"uri": uri, "name": uri.rsplit("/", 1)[-1]} for uri in env.roots]
    body = {"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots}}
    with suppress(NodeDown):
        await env.http.post(env.node(3), env.principal, env.session, body)
    return True


async def _first_ask(env: LegacyEnv, stream: Messages) -> Asked | None:
    """Complete the ask with the stream's first message (past the roots it was asked for)."""
    while True:
        try:
            message = await stream.next()
        except StreamEnded as exc:
            env.record(env.process, "info", "ask", {"reason": f"stream: {exc}"})
            return None
        if "method" in message and "id" not in message:
            continue  # a notification: not the question
        if not await answer_roots(env, message):
            break
    asked = asked_of(message)
    if asked is not None:
        env.record(env.process, "ok", "ask", {**REASK_VALUE, **asked.facts()})
        return asked
    if "method" in message:
        unexpected = {"reason": "request", "method": str(message["method"])}
        env.record(env.process, "info", "ask", {**unexpected, "message": _brief(message)})
        return None
    out = _outcome(message)
    env.record(env.process, out.type, "ask", out.value)
    return None


WIDE_ROOT = "file:///load"
"""A root above every load tenant's workspaces: it covers workspaces the principal is not
granted (roots only narrow what a principal may touch, never widen it)."""


async def change_roots(env: LegacyEnv, roots: list[str]) -> None:
    """List ``roots`` from now on, and tell the session (``notifications/roots/list_changed``)."""
    env.roots = roots
    changed = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    with suppress(NodeDown):
        await env.http.post(env.node(0), env.principal, env.session, changed)


def _brief(message: dict[str, Any]) -> str:
    """A request the client did not expect, cut short for the history."""
    return json.dumps(message, separators=(",", ":"))[:400]


def _answer_body(action: str, note: str | None, yes: bool) -> dict[str, Any]:
    if action == "accept":
        return {"action": "accept", "content": {"noteId": note, "confirm": yes}}
    return {"action": action}


async def _answer_flow(
    env: LegacyEnv, stream: Messages, stream_node: int, asked: Asked, note: str
) -> None:
    kind = env.kind
    if kind == "legacy_decline":
        as_accept = env.rng.random() < 0.5  # half decline, half accept with confirm false
        action, choice = ("accept", note) if as_accept else ("decline", None)
        await _answer(env, stream, stream_node, asked, [env.node(2)], action, choice, False)
        late = _answer_body("accept", note, True)
        await _copy(env, env.node(3), asked, late, "no_mutation", stream_node)
        return
    if kind == "legacy_cancel":
        await _answer(env, stream, stream_node, asked, [env.node(2)], "cancel", None, True)
        return
    if kind == "legacy_roots" and env.roots is not None:
        await change_roots(env, [*env.roots, WIDE_ROOT])
    if kind == "legacy_plain":
        nodes = [stream_node]
    elif kind == "legacy_duplicate":
        nodes = [env.node(2), env.node(3)]
    else:  # legacy_cross_node
        nodes = [env.node(2)]
    current: Asked | None = asked
    for _ in range(1 + MAX_REASKS):
        if current is None or note not in {c[0] for c in current.candidates}:
            return
        current = await _answer(env, stream, stream_node, current, nodes, "accept", note, True)


async def _answer(
    env: LegacyEnv,
    stream: Messages,
    stream_node: int,
    asked: Asked,
    nodes: list[int],
    action: str,
    note: str | None,
    yes: bool,
) -> Asked | None:
    """POST the answer to ``nodes`` (the first one recorded against the call's result, the
    others as copies), then complete the first one from the stream. A re-ask is returned."""
    answer = _answer_body(action, note, yes)
    expect = "execute" if action == "accept" and yes else "no_mutation"
    invoke = _confirm_invoke(env, asked, answer, expect, nodes[0], stream_node)
    body = {"jsonrpc": "2.0", "id": asked.request_id, "result": answer}
    env.record(env.process, "invoke", "confirm", invoke)
    refused: Outcome | None = None
    posted: dict[str, Any] = {}

    async def first() -> None:
        nonlocal refused
        try:
            response = await env.http.post(nodes[0], env.principal, env.session, body)
        except NodeDown:
            return  # unknown whether it got in: the stream tells
        if response.status_code != 202:
            refused = _post_outcome(response)
        else:
            posted["posted_redis_ms"] = env.redis_now_ms()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        for node in nodes[1:]:
            nursery.start_soon(_copy, env, node, asked, answer, expect, stream_node)
    if refused is not None:
        env.record(env.process, refused.type, "confirm", refused.value)
        return None
    return await _result(env, stream, posted)


NO_ANSWER_TEXT = "No answer from the client in time"
"""How a legacy call's ``isError`` result starts when it ends without having heard an answer."""


def _heard_nothing(message: dict[str, Any]) -> bool:
    result = message.get("result")
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        return False
    return str(content[0].get("text", "")).startswith(NO_ANSWER_TEXT)


async def _result(
    env: LegacyEnv, stream: Messages, posted: dict[str, Any] | None = None
) -> Asked | None:
    """Complete the pending confirm with the call's next message: the final response, or a
    re-ask (returned, to be answered again). ``posted``: what the completion adds of the
    answer's POST (``posted_redis_ms``)."""
    posted = posted or {}
    while True:
        try:
            message = await stream.next()
        except StreamEnded as exc:
            env.record(env.process, "info", "confirm", {"reason": f"stream: {exc}", **posted})
            return None
        if "method" in message and "id" not in message:
            continue  # a notification (cancelled, elicitation/complete): not the result
        if await answer_roots(env, message):
            continue
        asked = asked_of(message)
        if asked is not None:
            env.record(env.process, "ok", "confirm", {**REASK_VALUE, **asked.facts(), **posted})
            return asked
        if "method" in message:
            reason = {"reason": "unexpected server request", **posted}
            env.record(env.process, "info", "confirm", reason)
            return None
        out = _outcome(message)
        heard = {"no_answer": True} if _heard_nothing(message) else {}
        env.record(env.process, out.type, "confirm", {**out.value, **posted, **heard})
        return None


def _confirm_invoke(
    env: LegacyEnv,
    asked: Asked,
    answer: dict[str, Any],
    expect: str,
    node: int,
    stream_node: int,
) -> dict[str, Any]:
    content = answer.get("content") or {}
    return {
        "principal": env.principal,
        "tenant": env.tenant,
        "nonce": asked.nonce,
        "action": answer["action"],
        "noteId": content.get("noteId"),
        "confirm": content.get("confirm", True),
        "expect": expect,
        "node": node,
        "stream_node": stream_node,
        "session": env.session,
        "request": asked.request_id,
    }


async def _copy(
    env: LegacyEnv,
    node: int,
    asked: Asked,
    answer: dict[str, Any],
    expect: str,
    stream_node: int,
) -> None:
    """One more POST of an answer to the call's request, on the flow's second process."""
    process = env.process + 1
    env.record(
        process, "invoke", "confirm", _confirm_invoke(env, asked, answer, expect, node, stream_node)
    )
    body = {"jsonrpc": "2.0", "id": asked.request_id, "result": answer}
    try:
        response = await env.http.post(node, env.principal, env.session, body)
    except NodeDown as exc:
        env.record(process, "info", "confirm", {"reason": f"unreachable: {exc}"})
        return
    if response.status_code == 202:
        reason = "answer taken or dropped as a copy (202): its outcome is the call's"
        env.record(process, "info", "confirm", {"reason": reason, "status": 202})
        return
    out = _post_outcome(response)
    env.record(process, out.type, "confirm", out.value)
