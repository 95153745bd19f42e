"""One JSON-RPC exchange with one instance of the target, recorded as evidence.

Layer: loadgen (the pack's wire). Every request the pack sends goes through ``Wire.call``,
which keeps the request body, the HTTP status and the decoded reply in an ``Exchange``: a check
quotes the exchanges that prove it. Replies may come as ``application/json`` or as a
``text/event-stream`` (the response is the event whose ``id`` matches the request's).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import trio

from loadgen.transport import ACCEPT, PROTOCOL_VERSION, request_headers

REQUEST_TIMEOUT_S = 15.0
"""A reply not back after this is recorded as lost (outcome unknown): generous, since the pack
times nothing and a slow reply must not pass for a refusal."""

CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}}
"""What the pack declares in every request: form elicitation, nothing else."""

CLIENT_INFO = {"name": "notes-cluster-mrtr-pack", "version": "1"}

Kind = Literal["asked", "done", "tool_error", "rpc_error", "lost"]
"""How a reply reads: ``asked`` (input_required), ``done`` (a complete result), ``tool_error``
(a complete result with ``isError``), ``rpc_error`` (a JSON-RPC error), ``lost`` (no reply:
transport failure, timeout or a body that is not JSON-RPC)."""

_ids = itertools.count(1)


@dataclass
class Exchange:
    """One request to one instance and what came back."""

    step: str
    instance: int
    request: dict[str, Any]
    status: int | None = None
    reply: dict[str, Any] | None = None
    problem: str | None = None
    """Why there is no reply (transport error, timeout, undecodable body)."""
    note: str = ""
    """What the pack did with it on purpose (e.g. "response discarded")."""

    @property
    def kind(self) -> Kind:
        """How the reply reads (see ``Kind``)."""
        body = self.reply or {}
        if isinstance(body.get("error"), dict):
            return "rpc_error"
        res = body.get("result")
        if not isinstance(res, dict):
            return "lost"
        if res.get("resultType") == "input_required":
            return "asked"
        return "tool_error" if res.get("isError") is True else "done"

    @property
    def result(self) -> dict[str, Any]:
        """The JSON-RPC result ({} for an error or no reply)."""
        res = (self.reply or {}).get("result")
        return res if isinstance(res, dict) else {}

    @property
    def outcome(self) -> Any:
        """What a complete result says happened: ``structuredContent`` when there is one, else
        the content blocks (what a replay must repeat)."""
        res = self.result
        return res["structuredContent"] if "structuredContent" in res else res.get("content")

    @property
    def refused(self) -> bool:
        """A JSON-RPC error or an ``isError`` result."""
        return self.kind in ("rpc_error", "tool_error")

    def to_json(self) -> dict[str, Any]:
        """The exchange as a check's evidence."""
        out: dict[str, Any] = {"step": self.step, "instance": self.instance}
        out["request"] = self.request
        if self.note:
            out["note"] = self.note
        out["httpStatus"] = self.status
        out["response"] = self.reply
        if self.problem:
            out["problem"] = self.problem
        return out


@dataclass
class WireCall:
    """A ``tools/call``: name, arguments and (for a retry) the state and the answers."""

    name: str
    arguments: dict[str, Any]
    request_state: str | None = None
    input_responses: dict[str, Any] | None = None

    def message(self) -> dict[str, Any]:
        """The JSON-RPC request, with a new id and the 2026-07-28 ``_meta``."""
        params: dict[str, Any] = {"name": self.name, "arguments": self.arguments}
        if self.request_state is not None:
            params["requestState"] = self.request_state
        if self.input_responses is not None:
            params["inputResponses"] = self.input_responses
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientCapabilities": CLIENT_CAPABILITIES,
            "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        }
        return {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params}


def _http_request(host: str, path: str, message: dict[str, Any], token: str | None) -> bytes:
    """An HTTP/1.1 POST of ``message`` with the headers ``Wire.call`` sends."""
    body = json.dumps(message).encode("utf-8")
    headers = request_headers(message) | {
        "host": host,
        "accept": ACCEPT,
        "content-type": "application/json",
        "content-length": str(len(body)),
        "connection": "close",
    }
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1") + b"\r\n" + body


def _from_event_stream(text: str, request_id: object) -> dict[str, Any] | None:
    """The JSON-RPC response with ``request_id`` among the events of an SSE body."""
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(
            line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:")
        )
        if not data:
            continue
        try:
            msg = json.loads(data)
        except ValueError:
            continue
        if isinstance(msg, dict) and msg.get("id") == request_id and "method" not in msg:
            return msg
    return None


@dataclass
class Wire:
    """The target's instances (endpoint URLs) and the tokens the pack may present."""

    urls: Sequence[str]
    client: httpx.AsyncClient
    log: list[Exchange] = field(default_factory=list)
    """Every exchange of the run, in the order sent."""

    async def call(
        self, step: str, instance: int, call: WireCall, token: str | None, *, note: str = ""
    ) -> Exchange:
        """Send ``call`` to instance ``instance`` (modulo the instance count) with ``token`` as
        bearer (None: no Authorization header) and record what came back."""
        index = instance % len(self.urls)
        message = call.message()
        ex = Exchange(step, index, message, note=note)
        self.log.append(ex)
        headers = request_headers(message) | {
            "accept": ACCEPT,
            "content-type": "application/json",
        }
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        try:
            resp = await self.client.post(
                self.urls[index], json=message, headers=headers, timeout=REQUEST_TIMEOUT_S
            )
        except httpx.HTTPError as exc:
            ex.problem = f"{type(exc).__name__}: {exc}"
            return ex
        ex.status = resp.status_code
        ex.reply = self._decode(resp, message["id"])
        if ex.reply is None:
            ex.problem = f"no JSON-RPC response in the body ({resp.headers.get('content-type')})"
        return ex

    async def send_and_drop(
        self, step: str, instance: int, call: WireCall, token: str | None
    ) -> Exchange:
        """Send ``call`` on a connection of its own and close it without reading a byte of the
        response: the response is lost, the request may or may not have been carried out.
        Where no plain TCP connection can be opened to the instance (https, or a client whose
        transport is not the network) the response is read and ignored instead."""
        index = instance % len(self.urls)
        url = urlsplit(self.urls[index])
        message = call.message()
        try:
            if url.scheme != "http":
                raise OSError("not plain http")
            with trio.fail_after(REQUEST_TIMEOUT_S):
                stream = await trio.open_tcp_stream(url.hostname or "", url.port or 80)
        except (OSError, trio.TooSlowError):
            return await self.call(step, instance, call, token, note="response ignored: lost")
        ex = Exchange(step, index, message, note="connection closed after sending: response lost")
        self.log.append(ex)
        async with stream:
            await stream.send_all(_http_request(url.netloc, url.path or "/", message, token))
        return ex

    @staticmethod
    def _decode(resp: httpx.Response, request_id: object) -> dict[str, Any] | None:
        if "text/event-stream" in resp.headers.get("content-type", ""):
            return _from_event_stream(resp.text, request_id)
        try:
            body = resp.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) and ("result" in body or "error" in body) else None
