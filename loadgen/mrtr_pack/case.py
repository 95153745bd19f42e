"""One scenario's run: its fresh integer, the tool contract it was told, and its evidence.

Layer: loadgen (the pack). A ``Case`` sends the scenario's requests through the shared
``Wire``, keeps every exchange and every read of the effect in its check's details, and offers
the steps every scenario is made of: make the target (``create``), round 1 (``ask``), answer
(``answer``) and observe (``read``). A setup step that does not go as a confirm-before-act tool
must raises ``SetupFailed``: the check fails with the exchange that shows why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import trio

from loadgen.mrtr_pack.checks import Check
from loadgen.mrtr_pack.forms import Form, form_of
from loadgen.mrtr_pack.wire import Exchange, Wire, WireCall

FRESH = "{fresh}"
"""Replaced, in every argument template, by the scenario's own integer."""

SETTLE_S = 5.0
"""After a request whose response was lost on purpose, how long the pack watches the effect for
that request to finish before it retries (a server may also abandon it: then it retries anyway)."""
SETTLE_POLL_S = 0.1


class SetupFailed(Exception):
    """A setup step (create, round 1) did not go as it must for the scenario to run."""


@dataclass(frozen=True)
class Contract:
    """What the pack is told about the target: its confirm-before-act tool and the optional
    tools that make the target and observe the effect, with argument templates (JSON text in
    which ``{fresh}`` is replaced), the tokens, and the state's lifetime when known."""

    tool: str
    arguments: str
    create_tool: str | None = None
    create_arguments: str | None = None
    read_tool: str | None = None
    read_arguments: str | None = None
    other_tool: str | None = None
    other_arguments: str | None = None
    token: str | None = None
    other_token: str | None = None
    copies: int = 4
    state_ttl_s: float | None = None
    expiry_margin_s: float = 1.0


def fill(template: str, fresh: int) -> dict[str, Any]:
    """A template's arguments for ``fresh`` (a JSON object, or ValueError)."""
    value = json.loads(template.replace(FRESH, str(fresh)))
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object: {template}")
    return value


def changed(template: str, fresh: int) -> dict[str, Any]:
    """The arguments with one string value altered: one that holds ``{fresh}`` if any, else the
    first string (ValueError when there is none)."""
    args = fill(template, fresh)
    other = fill(template, fresh + 1)  # the values that hold {fresh} differ between the two
    strings = [k for k, v in args.items() if isinstance(v, str)]
    if not strings:
        raise ValueError("no string argument to change")
    key = next((k for k in strings if args[k] != other[k]), strings[0])
    return {**args, key: f"{args[key]} (changed)"}


@dataclass
class Asked:
    """What round 1 answered: the state to echo and the form to answer."""

    state: str | None
    form: Form
    exchange: Exchange


@dataclass
class Case:
    """One scenario's run."""

    contract: Contract
    wire: Wire
    fresh: int
    check: Check
    exchanges: list[Exchange] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)

    @property
    def arguments(self) -> dict[str, Any]:
        """The tool's arguments for this scenario."""
        return fill(self.contract.arguments, self.fresh)

    @property
    def observes(self) -> bool:
        """Whether the effect can be read (a read tool was named)."""
        return self.contract.read_tool is not None

    async def send(
        self, step: str, instance: int, call: WireCall, token: str | None = None, note: str = ""
    ) -> Exchange:
        """One request, kept as evidence (``token`` None: the contract's token)."""
        who = self.contract.token if token is None else token
        ex = await self.wire.call(step, instance, call, who, note=note)
        self.exchanges.append(ex)
        return ex

    async def drop(self, step: str, instance: int, asked: Asked, response: dict[str, Any]) -> None:
        """Round 2 sent on a connection closed at once: its response is lost on purpose."""
        call = WireCall(self.contract.tool, self.arguments, asked.state, {asked.form.key: response})
        self.exchanges.append(
            await self.wire.send_and_drop(step, instance, call, self.contract.token)
        )

    async def create(self, count: int = 1) -> None:
        """Make the target ``count`` times (nothing without a create tool)."""
        c = self.contract
        if c.create_tool is None:
            return
        for i in range(count):
            args = fill(c.create_arguments or c.arguments, self.fresh)
            ex = await self.send(f"create {i + 1}", i, WireCall(c.create_tool, args))
            if ex.kind != "done":
                raise SetupFailed(f"{c.create_tool} did not complete ({describe(ex)})")

    async def ask(
        self, instance: int = 0, tool: str | None = None, arguments: dict[str, Any] | None = None
    ) -> Asked:
        """Round 1: the tool must answer ``input_required`` with a form."""
        name = tool or self.contract.tool
        ex = await self.send("round 1", instance, WireCall(name, arguments or self.arguments))
        form = form_of(ex.result) if ex.kind == "asked" else None
        if form is None:
            raise SetupFailed(f"round 1 of {name} did not ask for a form ({describe(ex)})")
        state = ex.result.get("requestState")
        return Asked(state if isinstance(state, str) else None, form, ex)

    async def answer(
        self,
        step: str,
        instance: int,
        asked: Asked,
        response: dict[str, Any] | None,
        *,
        token: str | None = None,
        state: str | None = None,
        arguments: dict[str, Any] | None = None,
        tool: str | None = None,
        key: str | None = None,
        note: str = "",
    ) -> Exchange:
        """Round 2: the original call again with the answer (None: no answer at all, silence)
        under ``asked``'s state (or ``state``), a new JSON-RPC id."""
        call = WireCall(
            tool or self.contract.tool,
            arguments or self.arguments,
            request_state=asked.state if state is None else state,
            input_responses=None if response is None else {key or asked.form.key: response},
        )
        return await self.send(step, instance, call, token, note)

    async def read(self, label: str, *, keep: bool = True) -> Any:
        """The effect as the read tool shows it, with this scenario's integer written as
        ``{fresh}`` (so two scenarios' effects compare); None without a read tool. ``keep``
        False leaves the read out of the evidence (a poll)."""
        c = self.contract
        if c.read_tool is None:
            return None
        args = fill(c.read_arguments or c.arguments, self.fresh)
        ex = await self.wire.call(f"read: {label}", 0, WireCall(c.read_tool, args), c.token)
        if keep:
            self.exchanges.append(ex)
        if ex.kind != "done":
            raise SetupFailed(f"{c.read_tool} did not complete ({describe(ex)})")
        value = json.loads(json.dumps(ex.outcome).replace(str(self.fresh), FRESH))
        if keep:
            self.reads.append({"label": label, "effect": value})
        return value

    async def settle(self, before: Any, label: str) -> Any:
        """Poll the effect until it differs from ``before`` or ``SETTLE_S`` passed (the last
        read is kept as evidence); None without a read tool."""
        if not self.observes:
            return None
        deadline = trio.current_time() + SETTLE_S
        while True:
            value = await self.read(label, keep=False)
            if value != before or trio.current_time() >= deadline:
                return await self.read(label)
            await trio.sleep(SETTLE_POLL_S)

    def details(self, summary: str) -> dict[str, Any]:
        """The check's details: the summary, the reads and every exchange."""
        return {
            "summary": summary,
            "fresh": self.fresh,
            "effects": self.reads,
            "requests": [ex.to_json() for ex in self.exchanges],
        }


def describe(ex: Exchange) -> str:
    """A reply in a few words, for messages."""
    kind = ex.kind
    if kind == "lost":
        return f"no reply: {ex.problem or 'no result'}"
    if kind == "rpc_error":
        err = (ex.reply or {}).get("error") or {}
        return f"JSON-RPC error {err.get('code')} {err.get('message')!r} (HTTP {ex.status})"
    if kind == "asked":
        return "input_required (asked again)"
    text = json.dumps(ex.outcome, separators=(",", ":"))
    text = text if len(text) <= 160 else text[:157] + "..."
    return ("isError result " if kind == "tool_error" else "result ") + text
