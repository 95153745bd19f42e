"""The pack's pure parts: answering forms from their schema, reading SSE replies, the records.

Layer: tests. No server: schemas and bodies as the spec allows them (mcp-2026-07-28 §6, §8).
"""

from __future__ import annotations

import json

from loadgen.mrtr_pack.case import changed, fill
from loadgen.mrtr_pack.checks import Check, comparison, failed, markdown
from loadgen.mrtr_pack.forms import Form, accept, choices, form_of, other_answer
from loadgen.mrtr_pack.scenarios import tampered_token
from loadgen.mrtr_pack.wire import _from_event_stream

SCHEMA = {
    "type": "object",
    "properties": {
        "noteId": {"type": "string", "oneOf": [{"const": "a", "title": "A"}, {"const": "b"}]},
        "confirm": {"type": "boolean"},
        "reason": {"type": "string", "minLength": 15},
        "email": {"type": "string", "format": "email"},
        "count": {"type": "integer", "minimum": 3},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
    },
}


def test_an_accept_picks_the_first_option_ticks_booleans_and_fills_the_rest_validly() -> None:
    form = Form("k", SCHEMA)
    content = accept(form)["content"]
    assert content == {
        "noteId": "a",
        "confirm": True,
        "reason": "conformancexxxx",
        "email": "conformance@example.com",
        "count": 3,
        "tags": ["x"],
        "mode": "slow",
    }
    assert len(content["reason"]) >= 15
    assert choices(form) == 2


def test_another_answer_picks_another_option_or_unticks_the_confirmation() -> None:
    answer, which = other_answer(Form("k", SCHEMA))
    assert (answer["content"]["noteId"], which) == ("b", "another option")
    only_bool = Form("k", {"type": "object", "properties": {"ok": {"type": "boolean"}}})
    answer, which = other_answer(only_bool)
    assert (answer["content"], which) == ({"ok": False}, "the confirmation unticked")


def test_form_of_takes_the_first_form_mode_elicitation_only() -> None:
    result = {
        "resultType": "input_required",
        "inputRequests": {
            "site": {"method": "elicitation/create", "params": {"mode": "url", "url": "x"}},
            "pick": {"method": "elicitation/create", "params": {"requestedSchema": SCHEMA}},
        },
    }
    form = form_of(result)
    assert form is not None
    assert form.key == "pick"
    assert form_of({"inputRequests": {"r": {"method": "roots/list"}}}) is None


def test_an_sse_reply_yields_the_response_with_the_request_id_not_a_notification() -> None:
    body = (
        "event: message\ndata: "
        + json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})
        + "\n\nevent: message\ndata: "
        + json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "complete"}})
        + "\n\n"
    )
    assert _from_event_stream(body, 7) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"resultType": "complete"},
    }
    assert _from_event_stream(body, 8) is None


def test_templates_take_the_fresh_integer_and_a_changed_call_alters_the_fresh_argument() -> None:
    template = '{"ws": "w", "title": "t {fresh}", "n": {fresh}}'
    assert fill(template, 12) == {"ws": "w", "title": "t 12", "n": 12}
    assert changed(template, 12) == {"ws": "w", "title": "t 12 (changed)", "n": 12}


def test_a_tampered_token_differs_in_one_middle_character() -> None:
    token = "A" * 41
    out = tampered_token(token)
    assert len(out) == len(token)
    assert [i for i, (a, b) in enumerate(zip(token, out, strict=True)) if a != b] == [20]


def test_only_a_failure_fails_a_run_and_the_tables_show_every_status() -> None:
    checks = [
        Check("a", "A", "d").judge("SUCCESS"),
        Check("b", "B", "d").judge("WARNING", "refused"),
        Check("c", "C", "d").judge("SKIPPED", "needs x"),
    ]
    assert not failed(checks)
    assert failed([*checks, Check("d", "D", "d").judge("FAILURE", "ran twice")])
    assert "1 SUCCESS, 0 FAILURE, 1 WARNING, 1 SKIPPED" in markdown(checks, ["u"])
    side = comparison([("x", [c.to_json() for c in checks]), ("y", [checks[0].to_json()])])
    assert "| `b` B | WARNING | - |" in side
