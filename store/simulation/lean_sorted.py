"""The lean store's sorted sets, as the legacy session scripts use them (``store.sessions``):
ZADD (NX, XX, GT, LT, CH), ZCARD, ZRANGE by rank (WITHSCORES), ZREMRANGEBYRANK,
ZREMRANGEBYSCORE, ZSCORE, ZREM.

Layer: store (nothing of ours). A sorted set is a dict member -> score; its order is Redis's
(score, then member bytes). Scores are doubles; a reply carries a score as Redis writes an
integral double (its digits, no exponent), and a score that is not integral is refused as not
modelled (Redis's shortest round-trip form is not reproduced), never written differently.
"""

from __future__ import annotations

import math

from store.simulation.lean_values import SYNTAX, Error, KeySpace, integer

NOT_FLOAT = "ERR value is not a valid float"
MIN_MAX_NOT_FLOAT = "ERR min or max is not a float"


class ZSet(dict[bytes, float]):
    """A sorted set: member -> score."""

    def ordered(self) -> list[tuple[bytes, float]]:
        """Members in Redis's order."""
        return sorted(self.items(), key=lambda item: (item[1], item[0]))


def _score(arg: bytes, message: str = NOT_FLOAT) -> float:
    text = arg.lower()
    if text in (b"inf", b"+inf"):
        return math.inf
    if text == b"-inf":
        return -math.inf
    try:
        value = float(arg)
    except ValueError:
        raise Error(message) from None
    if math.isnan(value):
        raise Error(message)
    return value


def score_text(score: float) -> bytes:
    """A score as Redis writes it; only integral scores are modelled."""
    if math.isinf(score):
        return b"inf" if score > 0 else b"-inf"
    if not score.is_integer() or abs(score) >= 1 << 53:
        raise Error("ERR lean store: a score that is not a small integer is not modelled")
    return str(int(score)).encode()


def _bound(arg: bytes) -> tuple[float, bool]:
    """A ZRANGEBYSCORE-style bound: its score and whether it is exclusive (``(``)."""
    if arg.startswith(b"("):
        return _score(arg[1:], MIN_MAX_NOT_FLOAT), True
    return _score(arg, MIN_MAX_NOT_FLOAT), False


def _ranks(start: int, stop: int, size: int) -> range:
    """Redis's rank range: negatives from the end, clamped."""
    if start < 0:
        start = max(size + start, 0)
    if stop < 0:
        stop = size + stop
    stop = min(stop, size - 1)
    return range(start, stop + 1) if start <= stop else range(0)


class SortedSetCommands(KeySpace):
    """The sorted-set commands (see the module docstring)."""

    def _zset(self, key: bytes) -> ZSet | None:
        value: ZSet | None = self._typed(key, ZSet)
        return value

    def _zadd(self, args: list[bytes]) -> int:
        key, i = args[1], 2
        flags: set[bytes] = set()
        while i < len(args) and args[i].upper() in (b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"):
            flags.add(args[i].upper())
            i += 1
        if b"INCR" in flags:
            raise Error("ERR lean store: ZADD INCR is not modelled")
        pairs = args[i:]
        if not pairs or len(pairs) % 2:
            raise Error(SYNTAX)
        if b"NX" in flags and b"XX" in flags:
            raise Error("ERR XX and NX options at the same time are not compatible")
        if (b"GT" in flags and b"LT" in flags) or (b"NX" in flags and flags & {b"GT", b"LT"}):
            raise Error("ERR GT, LT, and/or NX options at the same time are not compatible")
        scored = [(_score(pairs[j]), pairs[j + 1]) for j in range(0, len(pairs), 2)]
        z = self._zset(key)
        if z is None:
            if b"XX" in flags:
                return 0
            z = self.data[key] = ZSet()
        added = changed = 0
        for score, member in scored:
            current = z.get(member)
            if current is None:
                if b"XX" not in flags:
                    z[member] = score
                    added += 1
                continue
            if b"NX" in flags or current == score:
                continue
            if (b"GT" in flags and score <= current) or (b"LT" in flags and score >= current):
                continue
            z[member] = score
            changed += 1
        if not z:
            self._drop(key)
        return added + changed if b"CH" in flags else added

    def _zcard(self, args: list[bytes]) -> int:
        z = self._zset(args[1])
        return 0 if z is None else len(z)

    def _zscore(self, args: list[bytes]) -> bytes | None:
        z = self._zset(args[1])
        score = None if z is None else z.get(args[2])
        return None if score is None else score_text(score)

    def _zrange(self, args: list[bytes]) -> list[bytes]:
        """ZRANGE key start stop [WITHSCORES]: by rank only."""
        if len(args) not in (4, 5) or (len(args) == 5 and args[4].upper() != b"WITHSCORES"):
            raise Error("ERR lean store: ZRANGE by rank [WITHSCORES] only")
        start, stop = integer(args[2]), integer(args[3])
        z = self._zset(args[1])
        if z is None:
            return []
        ordered = z.ordered()
        out: list[bytes] = []
        for rank in _ranks(start, stop, len(ordered)):
            member, score = ordered[rank]
            out.append(member)
            if len(args) == 5:
                out.append(score_text(score))
        return out

    def _remove(self, key: bytes, z: ZSet, members: list[bytes]) -> int:
        for member in members:
            del z[member]
        if not z:
            self._drop(key)
        return len(members)

    def _zremrangebyrank(self, args: list[bytes]) -> int:
        start, stop = integer(args[2]), integer(args[3])
        z = self._zset(args[1])
        if z is None:
            return 0
        ordered = z.ordered()
        return self._remove(args[1], z, [ordered[r][0] for r in _ranks(start, stop, len(ordered))])

    def _zremrangebyscore(self, args: list[bytes]) -> int:
        (low, low_open), (high, high_open) = _bound(args[2]), _bound(args[3])
        z = self._zset(args[1])
        if z is None:
            return 0
        gone = [
            member
            for member, score in z.items()
            if (score > low or (not low_open and score == low))
            and (score < high or (not high_open and score == high))
        ]
        return self._remove(args[1], z, gone)

    def _zrem(self, args: list[bytes]) -> int:
        z = self._zset(args[1])
        if z is None:
            return 0
        return self._remove(args[1], z, [m for m in dict.fromkeys(args[2:]) if m in z])
