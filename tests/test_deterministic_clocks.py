"""Expiry at the exact millisecond on the Redis clock, with node clocks skewed.

Layer: tests. Inside the deterministic universe (virtual time, the in-process store whose
``TIME`` is the virtual clock) an answer can be aimed at an exact millisecond of the Redis
clock: just before the expiry (honoured), at it and just after it (refused), each read back
from ``TIME`` before it is sent. The same answers are played on nodes whose own clocks are
skewed up to the margin the nodes promise (``NODE_CLOCK_MARGIN_MS``: an hour either way):
no outcome changes; one millisecond past the margin ahead, the node's early reject refuses
the answer the Redis clock would honour (the margin is exact, and the test can see it).
A whole simulation with seeded skew and drift writes the same history bytes as one without.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from cluster.deterministic.clocks import NodeClocks, open_skewed_cluster
from cluster.deterministic.run import run_deterministic
from cluster.deterministic.world import deterministic_world, mock_clock, virtual_at
from cluster.local import StoreOptions
from cluster.targets.simulate import SimulateOptions
from loadgen.runner import RunSettings
from nodes.config import NODE_CLOCK_MARGIN_MS
from nodes.protocol import Node
from store.notes import NoteStore
from store.simulation.memory_transport import serve_memory_store
from tests.harness import accept, demo_config
from tests.test_delete_flow import answer, ask, assert_invalid_state, deleted, seed

MARGIN = NODE_CLOCK_MARGIN_MS
TTL_MS = 2_000


async def _at_redis_ms(store: NoteStore, target_ms: int) -> None:
    """Sleep (virtual time) until the Redis clock reads exactly ``target_ms``."""
    await trio.sleep_until(virtual_at(target_ms))
    assert await store.redis_time_ms() == target_ms


async def _boundary(offsets: tuple[int, int]) -> dict[str, Any]:
    """Ask on node 0, answer on node 1 at exp - 1, exp and exp + 1 (Redis clock); what each
    answer got."""
    outcomes: dict[str, Any] = {}
    config = demo_config(state_ttl_ms=TTL_MS)
    with serve_memory_store() as url:
        async with open_skewed_cluster(
            config,
            2,
            url,
            clocks=NodeClocks(0, offsets_ms=offsets),
            prefix="nc",
            replay_grace_ms=1_000,
            store_options=StoreOptions(wait_replicas=0),
        ) as cluster:
            first, second = cluster.nodes
            assert isinstance(first, Node)
            assert isinstance(second, Node)
            store = first.store
            assert isinstance(store, NoteStore)
            seeded = await seed(store)
            assert first.config.node_clock_ms() - await store.redis_time_ms() == offsets[0]
            assert second.config.node_clock_ms() - await store.redis_time_ms() == offsets[1]
            ring, audience = config.key_ring, config.server_name
            for name, delta, note in (
                ("before", -1, seeded.tps[0]),
                ("at", 0, seeded.tps[1]),
                ("after", 1, seeded.tps[2]),
            ):
                state, _ = await ask(first)
                exp = ring.open(state, audience=audience).exp_ms
                await _at_redis_ms(store, exp + delta)
                reply = await answer(second, state, accept(note))
                if reply.body is not None and "error" in reply.body:
                    assert_invalid_state(reply)
                    outcomes[name] = "refused"
                else:
                    content, _ = deleted(reply)
                    outcomes[name] = content
    return outcomes


def _play(offsets: tuple[int, int]) -> dict[str, Any]:
    clock = mock_clock()
    with deterministic_world(19, clock):
        return trio.run(_boundary, offsets, clock=clock)


def test_at_the_exact_expiry_an_answer_is_refused_and_one_millisecond_before_honoured() -> None:
    outcomes = _play((0, 0))
    assert outcomes["before"]["deleted"] is True
    assert outcomes["at"] == "refused"
    assert outcomes["after"] == "refused"


@pytest.mark.parametrize(
    "offsets",
    [(MARGIN, -MARGIN), (-MARGIN, MARGIN), (MARGIN // 2, -7)],
    ids=["answering-node-behind", "answering-node-ahead", "mixed"],
)
def test_node_clocks_skewed_within_the_margin_change_no_outcome(offsets: tuple[int, int]) -> None:
    plain = _play((0, 0))
    skewed = _play(offsets)
    assert {k: v if v == "refused" else v["deleted"] for k, v in skewed.items()} == {
        "before": True,
        "at": "refused",
        "after": "refused",
    }
    assert skewed.keys() == plain.keys()


def test_a_node_clock_one_millisecond_past_the_margin_ahead_refuses_early() -> None:
    """The node's documented early reject (its clock at ``exp + margin`` or later), so the
    skew tests above would see a node that rejected on its own clock within the margin."""
    outcomes = _play((0, MARGIN + 1))
    assert outcomes["before"] == "refused"
    assert _play((0, MARGIN))["before"]["deleted"] is True


def test_a_simulation_with_skewed_drifting_node_clocks_writes_the_same_history() -> None:
    options = SimulateOptions(nodes=3, settings=RunSettings(flows=40, seed=21))
    skewed = run_deterministic(options, skew=True)
    plain = run_deterministic(options, skew=False)
    assert len(skewed.node_clocks) == 3
    assert any(abs(c["offset_ms"]) > 60_000 for c in skewed.node_clocks)
    assert all(abs(c["offset_ms"]) < MARGIN for c in skewed.node_clocks)
    assert skewed.result.status == plain.result.status == "valid"
    assert skewed.history_sha256 == plain.history_sha256


def test_a_simulation_aims_its_expiry_races_at_the_exact_millisecond() -> None:
    sim = run_deterministic(SimulateOptions(nodes=2, settings=RunSettings(flows=60, seed=9)))
    assert sim.result.status == "valid"
    exp_of = {
        o.value["nonce"]: o.value["exp_ms"]
        for o in sim.history.ops
        if o.f == "ask" and o.type == "ok" and "exp_ms" in o.value
    }
    outcome: dict[int, str] = {}
    aimed: dict[str, list[tuple[int, int]]] = {"before_expiry": [], "expired": []}
    for o in sim.history.ops:
        if o.f != "confirm" or o.kind not in aimed:
            continue
        if o.type == "invoke":
            aimed[o.kind].append((o.process, o.value["redis_send_ms"] - exp_of[o.value["nonce"]]))
        else:
            outcome[o.process] = "executed" if o.value.get("executed") else o.type
    assert aimed["before_expiry"]
    assert aimed["expired"]
    assert all(delta == -1 for _, delta in aimed["before_expiry"])  # one ms before: honoured
    assert all(outcome[p] == "executed" for p, _ in aimed["before_expiry"])
    assert all(delta == 0 for _, delta in aimed["expired"])  # at the expiry: refused
    assert all(outcome[p] != "executed" for p, _ in aimed["expired"])
