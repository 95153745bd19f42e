"""``--check-determinism``'s report (``cluster.deterministic.divergence``): the first divergent
history line, named by flow, client, node and virtual time, on histories built by hand."""

from __future__ import annotations

import json
from typing import Any

from cluster.deterministic.divergence import first_divergence
from cluster.deterministic.world import EPOCH_S


def _line(index: int, t_ms: int, type_: str, f: str, **extra: Any) -> str:
    row: dict[str, Any] = {
        "index": index,
        "time_ms": EPOCH_S * 1000 + t_ms,
        "process": 4,
        "type": type_,
        "f": f,
        "flow": 2,
        "kind": "duplicate",
        "value": extra.pop("value", {}),
    }
    row.update(extra)
    return json.dumps(row, separators=(",", ":"))


# One client sends the same answer to node 2, then to node 0, before either answers.
SENDS = [
    _line(0, 10, "invoke", "confirm", value={"node": 2}),
    _line(1, 11, "invoke", "confirm", value={"node": 0}),
]


def test_identical_histories_have_no_divergence() -> None:
    assert first_divergence(SENDS, list(SENDS)) is None


def test_an_answer_is_named_on_the_node_of_the_send_it_completes() -> None:
    first = [*SENDS, _line(2, 15, "ok", "confirm", completes=0)]
    second = [*SENDS, _line(2, 16, "ok", "confirm", completes=0)]
    found = first_divergence(first, second)
    assert found is not None
    assert found.first is not None
    assert found.second is not None
    assert found.line == 3
    # the client's last send went to node 0, but this answer completes the send to node 2
    assert (found.first.node, found.second.node) == (2, 2)
    assert (found.first.virtual_s, found.second.virtual_s) == (0.015, 0.016)
    assert "flow 2, client 4, node 2, virtual time 0.015 s, ok confirm" in found.describe()


def test_an_answer_of_an_older_history_is_put_on_its_clients_last_node() -> None:
    first = [*SENDS, _line(2, 15, "ok", "confirm")]
    second = [*SENDS, _line(2, 16, "ok", "confirm")]
    found = first_divergence(first, second)
    assert found is not None
    assert found.first is not None
    assert found.first.node == 0


def test_a_history_that_ends_early_is_named_as_ended() -> None:
    found = first_divergence(SENDS, SENDS[:1])
    assert found is not None
    assert found.line == 2
    assert found.second is None
    assert "run 2 (ended)" in found.describe()
