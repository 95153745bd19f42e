"""The shrunk case's explanations: the "Let / Then" text and the lanes picture of a few flows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.image

from loadgen.anomaly_text import MAX_NAMED, completions, let_then
from loadgen.flow_lanes import fault_windows, layout, render_lanes

T0 = 1_796_000_000_000


def _row(
    index: int, t: int, process: int, type_: str, f: str, flow: int, **value: Any
) -> dict[str, Any]:
    return {
        "index": index,
        "time_ms": T0 + t,
        "process": process,
        "type": type_,
        "f": f,
        "flow": flow,
        "kind": "duplicate",
        "value": value,
    }


# Two clients confirm the same note; both answers report an execution (a double delete).
ROWS = [
    _row(0, 0, 2, "invoke", "confirm", 7, action="accept", noteId="n1", node=0),
    _row(1, 3, 4, "invoke", "confirm", 8, action="accept", noteId="n1", node=2),
    _row(2, 10, 2, "ok", "confirm", 7, executed=True, deleted=True, noteId="n1"),
    _row(3, 12, 4, "ok", "confirm", 8, executed=True, deleted=True, noteId="n1"),
    _row(4, 20, 2, "invoke", "list", 7, node=1),
    _row(5, 25, 2, "info", "list", 7, reason="response lost"),
]
INVARIANT = {
    "name": "no_double_delete",
    "status": "invalid",
    "summary": "Note n1 was deleted by 2 answers.",
    "ops": [2, 3],
    "journal": [{"op": "delete", "noteId": "n1", "nonce": "abc"}],
}


def test_completions_pair_each_invocation_with_its_answer() -> None:
    done = completions(ROWS)
    assert {i: r["index"] for i, r in done.items()} == {0: 2, 1: 3, 4: 5}


def test_let_then_names_each_operation_once_and_says_what_breaks() -> None:
    text = let_then(INVARIANT, ROWS)
    lines = text.splitlines()
    assert lines[0] == "Let:"
    assert lines[1].startswith(
        "  A = flow 7 (client 2, duplicate): confirm action=accept noteId=n1"
    )
    assert "on node 0 at +0 ms [history 0] → ok executed deleted noteId=n1" in lines[1]
    assert lines[2].startswith("  B = flow 8 (client 4, duplicate)")
    assert "on node 2 at +3 ms [history 1]" in lines[2]
    assert "journal: op=delete, noteId=n1, nonce=abc" in text
    assert lines[-3:] == [
        "Then:",
        "  Note n1 was deleted by 2 answers.",
        "  so `no_double_delete` does not hold.",
    ]
    # the list flow is not part of the anomaly
    assert "list" not in text


def test_let_then_cuts_a_large_anomaly_and_says_so() -> None:
    rows = [_row(i, i, i, "invoke", "confirm", i) for i in range(MAX_NAMED + 3)]
    text = let_then({"name": "x", "summary": "s", "ops": list(range(MAX_NAMED + 3))}, rows)
    assert "... and 3 more operations" in text
    assert "no answer recorded" in text


def test_let_then_with_no_operations_says_where_to_look() -> None:
    text = let_then({"name": "x", "summary": "s", "ops": []}, ROWS)
    assert "names no operation" in text


def test_lanes_picture_has_one_lane_per_client(tmp_path: Path) -> None:
    one = tmp_path / "one.png"
    two = tmp_path / "two.png"
    faults = fault_windows(
        [
            {
                "start_wall": (T0 + 5) / 1000,
                "end_wall": (T0 + 15) / 1000,
                "kind": "nodes",
                "action": "stop",
            }
        ],
        T0,
    )
    assert faults == [(5.0, 15.0, "nodes stop")]
    render_lanes([r for r in ROWS if r["process"] == 2], faults, one, title="one client")
    render_lanes(ROWS, faults, two, title="two clients")
    a, b = matplotlib.image.imread(one), matplotlib.image.imread(two)
    assert a.shape[1] == b.shape[1] == 1200
    assert b.shape[0] >= a.shape[0]


def test_lanes_place_operations_of_one_millisecond_by_history_step() -> None:
    # Virtual time: a deterministic run does many operations in one millisecond; by time they
    # would be drawn on top of each other, so the lanes count history steps instead.
    same_ms = [{**r, "time_ms": T0 + (0 if r["index"] < 4 else 9)} for r in ROWS]
    at, windows, label = layout(same_ms, [(0.0, 5.0, "nodes stop")])
    assert at == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0, 5: 5.0}
    assert windows == [(0.0, 4.0, "nodes stop")]  # the rows at +0 ms (steps 0-3) are inside it
    assert label.startswith("history step")
    at, windows, label = layout(ROWS, [(5.0, 15.0, "nodes stop")])
    assert at[3] == 12.0
    assert windows == [(5.0, 15.0, "nodes stop")]
    assert label == "ms since the first operation"
