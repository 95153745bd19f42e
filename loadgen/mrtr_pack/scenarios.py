"""The scenarios: each sends a confirm-before-act flow with one twist and judges what it saw.

Layer: loadgen (the pack). Each scenario is a function of a ``Case`` (and of ``Baseline``, what
one accept did in the control scenario) returning a status and a sentence. Judgement comes from
two sources, both black-box:

- **Replies.** A retry of a completed answer must get the recorded outcome again (the same
  result); a JSON-RPC error means the server refused it (one-shot held, but the client cannot
  learn what happened: WARNING); a different tool result means the tool ran again (FAILURE).
- **Effects**, when a read tool is named: the read after the scenario must equal the read
  before it (nothing may happen) or the read after one accept in the control scenario, with the
  scenario's own integer written as ``{fresh}`` in both (exactly one execution).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from loadgen.mrtr_pack.case import Asked, Case, SetupFailed, changed, describe, fill
from loadgen.mrtr_pack.checks import EXACTLY_ONCE, SPEC_ELICITATION, SPEC_MRTR, CheckStatus
from loadgen.mrtr_pack.forms import CANCEL, DECLINE, accept, other_answer
from loadgen.mrtr_pack.wire import Exchange

ScenarioResult = tuple[CheckStatus, str]
"""A scenario's status and why (the checker's result is ``loadgen.check.verdict.CheckResult``)."""


class Skip(Exception):
    """The scenario cannot run against this target as told (the reason says what is missing)."""


@dataclass
class Baseline:
    """What one accept did: the effect the control scenario read after it (None: not known)."""

    effect: Any = None
    known: bool = False


def _once(case: Case, base: Baseline, after: Any) -> str | None:
    """Why the effect ``after`` is not that of exactly one execution (None: it is, or cannot be
    told)."""
    if not case.observes or not base.known or after == base.effect:
        return None
    return f"the effect is not one execution's: read {after!r}, one accept leaves {base.effect!r}"


def _retry_verdict(first: Exchange, retry: Exchange) -> ScenarioResult:
    """A retry of the same completed answer: the recorded outcome (SUCCESS), a refusal
    (WARNING), anything else (FAILURE: the tool ran again)."""
    if retry.kind == "done" and retry.outcome == first.outcome:
        return "SUCCESS", "the retry got the recorded outcome"
    if retry.kind == "rpc_error":
        return (
            "WARNING",
            "one-shot held, but the retry was refused, so the client cannot learn the outcome "
            f"({describe(retry)})",
        )
    return (
        "FAILURE",
        f"the retry got {describe(retry)} instead of the recorded outcome "
        f"{describe(first)}: the tool ran again for an action that already happened",
    )


def _refusal_verdict(
    case: Case, ex: Exchange, before: Any, after: Any, what: str
) -> ScenarioResult:
    """An answer that must not act: refused or re-asked, and nothing changed."""
    if case.observes and after != before:
        return "FAILURE", f"{what} acted: the effect changed from {before!r} to {after!r}"
    if ex.kind in ("rpc_error", "tool_error", "asked"):
        return "SUCCESS", f"{what} was refused ({describe(ex)}) and nothing changed"
    if ex.kind == "lost":
        return "WARNING", f"{what}: {describe(ex)}"
    if case.observes:
        return "WARNING", f"{what} got a result ({describe(ex)}) though nothing changed"
    return "FAILURE", f"{what} was accepted ({describe(ex)}; no read tool to see the effect)"


async def _executed(case: Case, asked: Asked, instance: int = 0) -> Exchange:
    ex = await case.answer("accept", instance, asked, accept(asked.form))
    if ex.kind != "done":
        raise SetupFailed(f"the first accept did not complete ({describe(ex)})")
    return ex


async def control(case: Case, base: Baseline) -> ScenarioResult:
    """One accept executes, and what it did becomes the baseline of the other scenarios."""
    await case.create()
    asked = await case.ask()
    before = await case.read("before")
    ex = await case.answer("accept", 1, asked, accept(asked.form))
    after = await case.read("after the accept")
    if ex.kind != "done":
        return "FAILURE", f"a plain accept did not complete: {describe(ex)}"
    if case.observes and after == before:
        return "FAILURE", "a plain accept completed but the read shows no effect"
    base.effect, base.known = after, case.observes
    unseen = "" if case.observes else "; no read tool, so no effect is observed in any check"
    return "SUCCESS", f"the accept completed ({describe(ex)}){unseen}"


async def _replay(case: Case, base: Baseline, other: bool) -> ScenarioResult:
    if other and len(case.wire.urls) < 2:
        raise Skip("needs two --target instances")
    await case.create()
    asked = await case.ask()
    first = await _executed(case, asked)
    after1 = await case.read("after the accept")
    retry = await case.answer("the same accept again", 1 if other else 0, asked, accept(asked.form))
    after2 = await case.read("after the retry")
    if case.observes and after2 != after1:
        return "FAILURE", f"the retry acted again: the effect changed from {after1!r} to {after2!r}"
    problem = _once(case, base, after1)
    if problem:
        return "FAILURE", problem
    return _retry_verdict(first, retry)


async def replay_same(case: Case, base: Baseline) -> ScenarioResult:
    """The same final answer again after completion, on the same instance."""
    return await _replay(case, base, other=False)


async def replay_other(case: Case, base: Baseline) -> ScenarioResult:
    """The same final answer again after completion, on another instance."""
    return await _replay(case, base, other=True)


async def concurrent(case: Case, base: Baseline) -> ScenarioResult:
    """N copies of one accept sent at once, spread over the instances."""
    await case.create()
    asked = await case.ask()
    replies: list[Exchange] = []

    async def one(i: int) -> None:
        replies.append(await case.answer(f"copy {i + 1}", i, asked, accept(asked.form)))

    async with trio.open_nursery() as nursery:
        for i in range(case.contract.copies):
            nursery.start_soon(one, i)
    after = await case.read("after the copies")
    problem = _once(case, base, after)
    if problem:
        return "FAILURE", problem
    done = [r for r in replies if r.kind == "done"]
    if not done:
        return "FAILURE", f"no copy completed (first: {describe(replies[0])})"
    if len({repr(r.outcome) for r in done}) > 1:
        return "FAILURE", "copies were told different outcomes: " + "; ".join(
            describe(r) for r in done
        )
    for r in replies:
        if r.kind != "done":
            status, text = _retry_verdict(done[0], r)
            return status, f"copy on instance {r.instance}: {text}"
    return "SUCCESS", f"all {len(replies)} copies got one outcome ({describe(done[0])})"


async def lost_response(case: Case, base: Baseline) -> ScenarioResult:
    """The accept's response is lost on purpose (its connection closed as soon as it was
    sent); once its effect shows (or a few seconds passed), the client retries on another
    instance."""
    await case.create()
    asked = await case.ask()
    before = await case.read("before")
    await case.drop("accept", 0, asked, accept(asked.form))
    await case.settle(before, "after the lost accept")
    retry = await case.answer("retry", 1, asked, accept(asked.form))
    after = await case.read("after the retry")
    problem = _once(case, base, after)
    if problem:
        return "FAILURE", problem
    if retry.kind == "done":
        return "SUCCESS", f"the retry learned the outcome ({describe(retry)})"
    if retry.kind == "rpc_error":
        return "WARNING", f"one-shot held, but the retry was refused ({describe(retry)})"
    return (
        "FAILURE",
        f"the retry got {describe(retry)}: the client cannot learn that the action happened",
    )


async def different_answer(case: Case, base: Baseline) -> ScenarioResult:
    """After an executed accept, a different answer under the same (used) state."""
    await case.create(2)
    asked = await case.ask()
    first = await _executed(case, asked)
    after1 = await case.read("after the accept")
    response, which = other_answer(asked.form)
    second = await case.answer(f"a different answer ({which})", 1, asked, response)
    after2 = await case.read("after the different answer")
    if case.observes and after2 != after1:
        return (
            "FAILURE",
            f"a different answer under a used state acted ({which}): the effect changed "
            f"from {after1!r} to {after2!r}",
        )
    if second.kind == "done" and second.outcome != first.outcome:
        status: CheckStatus = "FAILURE" if which == "another option" else "WARNING"
        return status, f"the used state took a new decision ({which}): {describe(second)}"
    return "SUCCESS", f"the different answer ({which}) did not act ({describe(second)})"


async def decline_then_accept(case: Case, base: Baseline) -> ScenarioResult:
    """A decline, then an accept under the same state: the decline is final."""
    await case.create()
    asked = await case.ask()
    before = await case.read("before")
    declined = await case.answer("decline", 0, asked, DECLINE)
    after1 = await case.read("after the decline")
    if case.observes and after1 != before:
        return "FAILURE", f"the decline acted: {before!r} became {after1!r}"
    ex = await case.answer("accept after the decline", 1, asked, accept(asked.form))
    after2 = await case.read("after the accept")
    same = ex.kind == "done" and declined.kind == "done" and ex.outcome == declined.outcome
    if same and (not case.observes or after2 == before):
        return "SUCCESS", f"the accept got the recorded decline ({describe(ex)})"
    return _refusal_verdict(case, ex, before, after2, "an accept after a decline")


async def cancel_then_accept(case: Case, base: Baseline) -> ScenarioResult:
    """A cancel, then an accept under the same state: cancel decides nothing."""
    await case.create()
    asked = await case.ask()
    before = await case.read("before")
    await case.answer("cancel", 0, asked, CANCEL)
    after1 = await case.read("after the cancel")
    if case.observes and after1 != before:
        return "FAILURE", f"the cancel acted: {before!r} became {after1!r}"
    ex = await case.answer("accept after the cancel", 1, asked, accept(asked.form))
    after2 = await case.read("after the accept")
    problem = _once(case, base, after2)
    if problem:
        return "FAILURE", problem
    if ex.kind == "done":
        return "SUCCESS", f"the cancel changed nothing; the accept executed ({describe(ex)})"
    return "WARNING", f"after a cancel the state was no longer usable ({describe(ex)})"


async def silence(case: Case, base: Baseline) -> ScenarioResult:
    """A retry with the state but no answer: the server should ask again, and act on nothing."""
    await case.create()
    asked = await case.ask()
    before = await case.read("before")
    ex = await case.answer("retry without an answer", 1, asked, None)
    after = await case.read("after the silent retry")
    if case.observes and after != before:
        return "FAILURE", f"a retry without an answer acted: {before!r} became {after!r}"
    if ex.kind == "done":
        return "FAILURE", f"a retry without an answer completed: {describe(ex)}"
    if ex.kind != "asked":
        return "WARNING", f"the spec says SHOULD ask again; got {describe(ex)}"
    return "SUCCESS", "the silent retry was asked again and nothing changed"


def _ttl(case: Case) -> float:
    ttl = case.contract.state_ttl_s
    if ttl is None:
        raise Skip("needs --state-ttl (the target's state lifetime in seconds)")
    if ttl <= 2 * case.contract.expiry_margin_s:
        raise Skip("--state-ttl must exceed twice --expiry-margin")
    return ttl


async def before_expiry(case: Case, base: Baseline) -> ScenarioResult:
    """An accept sent one margin before the state's earliest possible expiry is honoured."""
    ttl = _ttl(case)
    await case.create()
    sent = time.monotonic()  # the state cannot have been issued before this
    asked = await case.ask()
    await trio.sleep(max(0.0, sent + ttl - case.contract.expiry_margin_s - time.monotonic()))
    ex = await case.answer("accept just before expiry", 1, asked, accept(asked.form))
    after = await case.read("after the accept")
    problem = _once(case, base, after)
    if problem:
        return "FAILURE", problem
    if ex.kind != "done":
        return "FAILURE", f"refused before its expiry: {describe(ex)}"
    return "SUCCESS", f"honoured {case.contract.expiry_margin_s:g} s before expiry"


async def after_expiry(case: Case, base: Baseline) -> ScenarioResult:
    """An accept sent one margin after the state's latest possible expiry is refused."""
    ttl = _ttl(case)
    await case.create()
    asked = await case.ask()
    got = time.monotonic()  # the state cannot have been issued after this
    before = await case.read("before")
    await trio.sleep(max(0.0, got + ttl + case.contract.expiry_margin_s - time.monotonic()))
    ex = await case.answer("accept just after expiry", 1, asked, accept(asked.form))
    after = await case.read("after the accept")
    return _refusal_verdict(case, ex, before, after, "an accept after expiry")


async def other_principal(case: Case, base: Baseline) -> ScenarioResult:
    """Another principal answers the state: it is not theirs."""
    other = case.contract.other_token
    if other is None:
        raise Skip("needs --other-token (a second principal's bearer token)")
    await case.create()
    asked = await case.ask()
    before = await case.read("before")
    ex = await case.answer("accept as another principal", 1, asked, accept(asked.form), token=other)
    after = await case.read("after")
    return _refusal_verdict(case, ex, before, after, "another principal's accept")


async def changed_arguments(case: Case, base: Baseline) -> ScenarioResult:
    """The state is answered under changed arguments."""
    try:
        args = changed(case.contract.arguments, case.fresh)
    except ValueError as exc:
        raise Skip(str(exc)) from None
    await case.create()
    asked = await case.ask()
    before = await case.read("before")
    ex = await case.answer(
        "accept with changed arguments", 1, asked, accept(asked.form), arguments=args
    )
    after = await case.read("after")
    return _refusal_verdict(case, ex, before, after, "an accept with changed arguments")


def tampered_token(state: str) -> str:
    """The state with one character in its middle replaced (never a padding bit)."""
    i = len(state) // 2
    return state[:i] + ("B" if state[i] == "A" else "A") + state[i + 1 :]


async def _altered_state(case: Case, alter: Callable[[str], str], what: str) -> ScenarioResult:
    await case.create()
    asked = await case.ask()
    if not asked.state:
        raise Skip("round 1 returned no requestState")
    before = await case.read("before")
    ex = await case.answer(
        f"accept under a {what} state", 1, asked, accept(asked.form), state=alter(asked.state)
    )
    after = await case.read("after")
    return _refusal_verdict(case, ex, before, after, f"an accept under a {what} state")


async def tampered(case: Case, base: Baseline) -> ScenarioResult:
    """One character of the state changed."""
    return await _altered_state(case, tampered_token, "tampered")


async def truncated(case: Case, base: Baseline) -> ScenarioResult:
    """The state cut to half its length."""
    return await _altered_state(case, lambda s: s[: len(s) // 2], "truncated")


async def another_tool(case: Case, base: Baseline) -> ScenarioResult:
    """A state issued for the tool is presented, with a valid answer, to another tool."""
    c = case.contract
    if c.other_tool is None:
        raise Skip("needs --other-tool (a second confirm-before-act tool)")
    await case.create()
    asked = await case.ask()
    other_args = fill(c.other_arguments or c.arguments, case.fresh)
    theirs = await case.ask(0, c.other_tool, other_args)
    before = await case.read("before")
    ex = await case.answer(
        f"{c.other_tool} under {c.tool}'s state",
        1,
        asked,
        accept(theirs.form),
        tool=c.other_tool,
        arguments=other_args,
        key=theirs.form.key,
    )
    after = await case.read("after")
    what = f"{c.tool}'s state presented to {c.other_tool}"
    return _refusal_verdict(case, ex, before, after, what)


@dataclass(frozen=True)
class Scenario:
    """One check: its id, name, description and the function that runs it."""

    id: str
    name: str
    run: Callable[[Case, Baseline], Awaitable[ScenarioResult]]
    refs: tuple[dict[str, str], ...] = (SPEC_MRTR, EXACTLY_ONCE)
    waits: bool = False
    """Mostly waits for the state's expiry: runs beside the others, not in their turn."""

    @property
    def description(self) -> str:
        """The function's docstring."""
        return " ".join((self.run.__doc__ or "").split())


CONTROL = Scenario("mrtr-single-accept", "A single accept executes", control)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "mrtr-replay-same-instance", "Same answer after completion, same instance", replay_same
    ),
    Scenario(
        "mrtr-replay-other-instance", "Same answer after completion, another instance", replay_other
    ),
    Scenario("mrtr-concurrent-duplicates", "N copies of one accept at once", concurrent),
    Scenario("mrtr-lost-response-retry", "Lost response, retry on another instance", lost_response),
    Scenario(
        "mrtr-different-answer-used-state",
        "A different answer under a used state",
        different_answer,
    ),
    Scenario(
        "mrtr-decline-then-accept",
        "Decline, then accept",
        decline_then_accept,
        (SPEC_MRTR, SPEC_ELICITATION, EXACTLY_ONCE),
    ),
    Scenario(
        "mrtr-cancel-then-accept",
        "Cancel, then accept",
        cancel_then_accept,
        (SPEC_MRTR, SPEC_ELICITATION, EXACTLY_ONCE),
    ),
    Scenario(
        "mrtr-silence-reasks", "Retry without an answer is asked again", silence, (SPEC_MRTR,)
    ),
    Scenario("mrtr-before-expiry", "Accept just before expiry", before_expiry, waits=True),
    Scenario("mrtr-after-expiry", "Accept just after expiry", after_expiry, waits=True),
    Scenario("mrtr-other-principal", "Another principal's answer", other_principal, (SPEC_MRTR,)),
    Scenario(
        "mrtr-changed-arguments", "Answer with changed arguments", changed_arguments, (SPEC_MRTR,)
    ),
    Scenario("mrtr-tampered-state", "Tampered requestState", tampered, (SPEC_MRTR,)),
    Scenario("mrtr-truncated-state", "Truncated requestState", truncated, (SPEC_MRTR,)),
    Scenario(
        "mrtr-state-for-another-tool",
        "A state presented to another tool",
        another_tool,
        (SPEC_MRTR,),
    ),
)
"""Every scenario but the control, in report order."""
