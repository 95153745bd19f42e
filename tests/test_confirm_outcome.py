"""The store reads confirm.lua's reply once, into a typed outcome (status, op, note id)."""

from __future__ import annotations

from typing import Any

import pytest

from store.api import ConfirmOutcome, StoreUnavailable
from store.replies import parse_confirm_reply


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (["executed", "deleted:n1", 7], ConfirmOutcome("executed", "delete", "n1", 7)),
        (["executed", "moved:n2", 8], ConfirmOutcome("executed", "move", "n2", 8)),
        (["replay", "moved:n2", 9], ConfirmOutcome("replay", "move", "n2", 9)),
        (["conflict", "deleted:n1", 9], ConfirmOutcome("conflict", "delete", "n1", 9)),
        (["declined", "declined", 3], ConfirmOutcome("declined", None, None, 3)),
        (["replay", "declined", 3], ConfirmOutcome("replay", None, None, 3)),
        (["cancelled", "", 4], ConfirmOutcome("cancelled", None, None, 4)),
        (["gone", None, "5"], ConfirmOutcome("gone", None, None, 5)),
        (["expired", "", "6"], ConfirmOutcome("expired", None, None, 6)),
    ],
)
def test_each_reply_shape_parses_into_status_op_and_note(
    reply: list[Any], expected: ConfirmOutcome
) -> None:
    assert parse_confirm_reply(reply) == expected


@pytest.mark.parametrize(
    ("status", "recorded", "decision"),
    [
        ("executed", "deleted:n1", "executed"),
        ("replay", "moved:n1", "executed"),
        ("conflict", "declined", "declined"),
        ("replay", "declined", "declined"),
        ("declined", "declined", "declined"),
        ("changed", "", None),
        ("cancelled", "", None),
    ],
)
def test_recorded_names_the_decision_kept_under_the_nonce(
    status: str, recorded: str, decision: str | None
) -> None:
    assert parse_confirm_reply([status, recorded, 1]).recorded == decision


@pytest.mark.parametrize(
    "reply", [["nope", "", 1], ["executed", "erased:n1", 1], ["executed", "deleted:", 1]]
)
def test_a_reply_the_script_never_gives_is_refused(reply: list[Any]) -> None:
    with pytest.raises(StoreUnavailable, match="confirm: unexpected"):
        parse_confirm_reply(reply)
