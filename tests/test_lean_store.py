"""The lean store (``store.simulation.lean_redis``) against fakeredis and a real Redis.

Layer: tests. Two holds: a deterministic run writes the same history bytes on the lean store as
on fakeredis (seeds 7, 11, 20 and a swarm seed, fault points on, faults in some); and the
command streams such runs send (several seeds, every race kind, faults included), replayed
through a fresh lean store, fakeredis and a real ``redis-server`` on the recorded clock
(``tests.own_clock``), get the same reply bytes from all three; one of them a run with a share
of legacy flows (the session store's scripts, sorted sets, inbox and wake streams, blocking
reads, recorded as the read that answered them). A difference planted in the
lean store is caught by the same comparison (its control: the unplanted store, above).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.deterministic.run import run_deterministic
from cluster.deterministic.swarm import swarm
from cluster.deterministic.world import EPOCH_S, HALF_US
from cluster.faults import FaultKind
from cluster.targets.simulate import SimulateOptions
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for
from store.simulation.lean_redis import Error as LeanError
from store.simulation.lean_redis import LeanRedis, ZSet
from store.simulation.lean_server import LeanServer, RecordedRequest
from tests.own_clock import clocked_redis
from tests.store_replay import (
    end_state_probe,
    fakeredis_replier,
    first_difference,
    lean_replier,
    redis_replier,
)

FLOWS = 120
"""Every race kind runs several times (the kind plan cycles them), in about a second a run."""

ALL_FAULTS: frozenset[FaultKind] = frozenset({"nodes", "client", "lost-reply", "stall"})


LEGACY_SHARE = 0.3
"""The legacy stream's share of legacy flows: sessions, inboxes, blocking reads, sorted sets."""


def _options(
    seed: int,
    faults: frozenset[FaultKind] = frozenset(),
    *,
    swarmed: bool = False,
    legacy_share: float = 0.0,
) -> SimulateOptions:
    settings = RunSettings(
        flows=FLOWS, seed=seed, tenants=tenants_for(FLOWS), legacy_share=legacy_share
    )
    options = SimulateOptions(settings=settings, faults=faults)
    return swarm(options) if swarmed else options


CASES = [
    pytest.param(7, frozenset(), False, id="seed-7"),
    pytest.param(11, ALL_FAULTS, False, id="seed-11-faults"),
    pytest.param(20, frozenset({"lost-reply", "stall"}), False, id="seed-20-faults"),
    pytest.param(33, frozenset(), True, id="swarm-seed-33"),
]


@pytest.mark.parametrize(("seed", "faults", "swarmed"), CASES)
def test_a_seed_writes_the_same_history_bytes_on_the_lean_store_as_on_fakeredis(
    seed: int, faults: frozenset[FaultKind], swarmed: bool
) -> None:
    options = _options(seed, faults, swarmed=swarmed)
    lean = run_deterministic(options, buggify=True, store="lean")
    reference = run_deterministic(options, buggify=True, store="fakeredis")
    print(f"seed {seed}: {lean.history_sha256} / {reference.history_sha256}")
    assert lean.history.ops, "the run kept its history in memory"
    assert [op.to_json() for op in lean.history.ops] == [
        op.to_json() for op in reference.history.ops
    ]
    assert lean.history_sha256 == reference.history_sha256
    assert lean.result.status == reference.result.status
    assert reference.result.status in ("valid", "unknown")  # the unplanted runs violate nothing


def _recorded(
    seed: int, faults: frozenset[FaultKind], swarmed: bool, legacy_share: float = 0.0
) -> list[RecordedRequest]:
    """The run's requests, then a probe of the state they left (``end_state_probe``)."""
    server = LeanServer()
    server.recording = []
    options = _options(seed, faults, swarmed=swarmed, legacy_share=legacy_share)
    run_deterministic(options, buggify=True, store=server)
    return server.recording + end_state_probe(server.recording, server.redis)


@pytest.fixture(scope="module")
def streams() -> list[tuple[str, list[RecordedRequest]]]:
    """Command streams of four runs (every race kind, faults of every kind, a swarm shape, a
    legacy share with faults), each followed by its end-state probe."""
    return [
        ("seed-11-faults", _recorded(11, ALL_FAULTS, False)),
        ("seed-7", _recorded(7, frozenset(), False)),
        ("swarm-seed-33", _recorded(33, frozenset(), True)),
        ("seed-5-legacy", _recorded(5, ALL_FAULTS, False, LEGACY_SHARE)),
    ]


def _legacy(streams: list[tuple[str, list[RecordedRequest]]]) -> list[RecordedRequest]:
    return next(s for name, s in streams if name.endswith("-legacy"))


def _session_commands() -> list[RecordedRequest]:
    """What a run reaches too rarely to test by itself, as the session store sends it: streams
    long enough for ``MAXLEN ~`` to drop whole nodes (by entry count on a wake stream, by bytes
    on an inbox of long answers), reads of them, and sorted sets emptied and refilled. No
    recorded replies: the stores are held to each other."""
    out: list[RecordedRequest] = []

    def request(*args: str | int) -> None:
        # A millisecond apart, read as the deterministic world reads its clock.
        clock = EPOCH_S + (len(out) + 1) / 1000 + HALF_US
        out.append((1, clock, [[str(a).encode() for a in args]], []))

    for _ in range(130):
        request("XADD", "w", "MAXLEN", "~", 16, "*", "kind", "wake")
    body = '{"action":"accept","content":{"noteId":"n0123456789abcdef","confirm":true}}' * 4
    for i in range(40):
        request(
            "XADD", "in", "MAXLEN", "~", 8, "*", "kind", "answer", "rid", f"nc-{i}", "body", body
        )
    request("XRANGE", "w", "-", "+")
    request("XRANGE", "in", "-", "+")
    request("XREVRANGE", "in", "+", "-", "COUNT", 1)
    request("XREAD", "COUNT", 3, "STREAMS", "in", "w", "none", "0-0", "0-0", "0-0")
    for args in (
        ("ZADD", "z", 5, "a", 3, "b", 9, "c"),
        ("ZADD", "z", "XX", "GT", "CH", 4, "a"),
        ("ZADD", "z", "XX", "GT", "CH", 7, "a", 1, "d"),
        ("ZSCORE", "z", "a"),
        ("ZRANGE", "z", 0, -1, "WITHSCORES"),
        ("ZRANGE", "z", -1, -1, "WITHSCORES"),
        ("ZREMRANGEBYSCORE", "z", "-inf", 3),
        ("ZCARD", "z"),
        ("ZREMRANGEBYRANK", "z", 0, 0),
        ("ZREM", "z", "c", "x"),
        ("EXISTS", "z"),
        ("ZADD", "z", 1_800_000_123_456, "call"),
        ("PEXPIREAT", "z", 1_800_000_123_456),
        ("PTTL", "z"),
        ("SET", "m", "open", "PX", 2_000),
        ("SET", "m", "answered", "KEEPTTL"),
        ("PTTL", "m"),
        ("GET", "m"),
        ("PEXPIRE", "m", 0),
        ("EXISTS", "m"),
    ):
        request(*args)
    return out


def _commands(stream: list[RecordedRequest]) -> set[bytes]:
    return {args[0].upper() for _, _, commands, _ in stream for args in commands}


def test_the_recorded_streams_hold_scripts_reads_and_script_loading(
    streams: list[tuple[str, list[RecordedRequest]]],
) -> None:
    seen = set().union(*(_commands(s) for _, s in streams))
    assert {b"EVALSHA", b"SCRIPT", b"HMGET", b"GET"} <= seen, seen
    assert all(len(s) > 300 for _, s in streams)


def test_the_legacy_stream_holds_the_session_stores_commands(
    streams: list[tuple[str, list[RecordedRequest]]],
) -> None:
    legacy = _legacy(streams)
    assert {b"XREAD", b"XREVRANGE", b"ZREM", b"EVALSHA"} <= _commands(legacy)
    scripts = b"".join(a[1] for _, _, cs, _ in legacy for a in cs if a[0].upper() == b"EVAL")
    for inner in (b"ZADD", b"ZREMRANGEBYSCORE", b"ZCARD", b"PEXPIRE", b"'KEEPTTL'", b"'PX'"):
        assert inner in scripts, inner  # the session scripts were loaded, so they ran
    zsets = [r for _, _, cs, _ in legacy for a in cs for r in [a] if a[0] == b"ZRANGE"]
    assert zsets, "the end-state probe read a sorted set"


def test_recorded_streams_get_the_same_reply_bytes_from_lean_fakeredis_and_a_real_redis(
    streams: list[tuple[str, list[RecordedRequest]]], tmp_path: Path
) -> None:
    for name, stream in [*streams, ("session-commands", _session_commands())]:
        start_us = round(stream[0][1] * 1_000_000)
        with (
            clocked_redis(tmp_path / name, start_us) as real,
            fakeredis_replier() as fake,
            redis_replier(real) as redis,
        ):
            stores = {"lean": lean_replier(), "fakeredis": fake, "redis-server": redis}
            found = first_difference(stream, stores)
        assert found is None, f"{name}: {found.describe()}"
        print(f"{name}: {len(stream)} requests, the same bytes from all three stores")


class _OffByOneCounts(LeanRedis):
    """A planted difference: HINCRBY's reply one too high when it decrements."""

    def _hincrby(self, args: list[bytes]) -> int:
        value = super()._hincrby(args)
        return value + 1 if args[3].startswith(b"-") else value


class _NoEmptySetDrop(LeanRedis):
    """A planted difference: a set emptied by SREM stays as a key."""

    def _srem(self, args: list[bytes]) -> int:
        s = self._set_of(args[1])
        if s is None:
            return 0
        before = len(s)
        s.difference_update(args[2:])
        return before - len(s)


class _NoEmptyZsetDrop(LeanRedis):
    """A planted difference: a sorted set emptied by ZREM stays as a key."""

    def _remove(self, key: bytes, z: ZSet, members: list[bytes]) -> int:
        for member in members:
            del z[member]
        return len(members)


class _TrimsExactly(LeanRedis):
    """A planted difference: ``XADD MAXLEN ~ n`` trims to exactly n entries (Redis drops whole
    nodes only: a legacy reader's wake stream keeps more)."""

    def _xadd(self, args: list[bytes]) -> bytes:
        reply = super()._xadd(args)
        if args[2].upper() == b"MAXLEN":
            entries = self.data[args[1]].entries
            del entries[: max(0, len(entries) - int(args[4]))]
        return reply


@pytest.mark.parametrize(
    ("planted", "which"),
    [(_OffByOneCounts, 0), (_NoEmptySetDrop, 0), (_TrimsExactly, -1), (_NoEmptyZsetDrop, -1)],
)
def test_a_difference_planted_in_the_lean_store_is_caught(
    streams: list[tuple[str, list[RecordedRequest]]], planted: type[LeanRedis], which: int
) -> None:
    name, stream = streams[which] if which >= 0 else ("session-commands", _session_commands())
    with fakeredis_replier() as fake:
        found = first_difference(stream, {"lean": lean_replier(planted()), "fakeredis": fake})
    assert found is not None, f"{name}: the planted {planted.__name__} went unnoticed"
    print(found.describe())
    assert found.replies["lean"] != found.replies["fakeredis"]


def test_a_command_outside_the_model_is_an_error_reply_naming_it() -> None:
    reply = LeanRedis().command([b"LPUSH", b"k", b"v"])
    assert isinstance(reply, LeanError)
    assert "'LPUSH' is not modelled" in reply.text
