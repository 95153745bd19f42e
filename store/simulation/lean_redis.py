"""A lean in-process Redis for deterministic runs: the production Lua scripts over plain data.

Layer: store (nothing of ours but ``store.resp``). The store's scripts (``store/scripts/*.lua``)
run unchanged in a Lua 5.1 VM (lupa's, the Lua fakeredis and Redis run), each compiled once
when it is loaded; ``redis.call`` lands in ``LeanRedis.command`` over Python dicts and sets.
Only what the scripts, the store's client (``store.resp_client``) and the check's reads use is
modelled, with Redis's replies, key expiry and ``TIME`` semantics as fakeredis implements them
(fakeredis stays the reference, ``tests/test_lean_store.py`` holds the two, and a real
``redis-server``, to the same bytes). Anything else is an error reply naming what is not
modelled, never a silent difference.

Time: every reading is ``time.time()`` at call time, so a deterministic run's virtual clock
(``cluster.deterministic.world``) is the store's clock, taken to the microsecond as Redis takes
``gettimeofday`` (``TIME``), and to the millisecond below it for expiry, ``PTTL`` and stream ids
(Redis's ``mstime``). A key is expired once that millisecond is past its deadline (Redis's
``now > when``; fakeredis compares fractions of a millisecond, so at the deadline's own
millisecond the two differ, and the lean store answers as Redis). Expired keys are dropped when
met (Redis's lazy expiry; no active expiry, so no timer and no thread).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

import lupa.lua51 as lua51

from store.simulation.lean_sorted import SortedSetCommands, ZSet
from store.simulation.lean_streams import Blocked, Stream, StreamCommands
from store.simulation.lean_values import (
    HASH_NOT_INTEGER,
    NOSCRIPT,
    NULL_ARRAY,
    SYNTAX,
    Error,
    RawReply,
    SimpleString,
)
from store.simulation.lean_values import integer as _int

__all__ = [
    "Blocked",
    "Error",
    "LeanRedis",
    "RawReply",
    "SimpleString",
    "Stream",
    "ZSet",
    "decoded",
    "encode",
]


def _lua_arg(value: Any) -> bytes:
    """A ``redis.call`` argument as Redis reads it: strings as they are, numbers as ``%.17g``."""
    if type(value) is bytes:
        return value
    if type(value) in (int, float):
        return f"{value:.17g}".encode()
    raise Error("ERR Lua redis lib command arguments must be strings or integers")


class LeanRedis(StreamCommands, SortedSetCommands):
    """One in-process Redis: keys, expiries, a script cache and its Lua VM."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        super().__init__()
        self.scripts: dict[bytes, bytes] = {}
        self._clock = clock
        self._compiled: dict[bytes, Any] = {}
        self.lua = lua51.LuaRuntime(encoding=None, unpack_returned_tuples=True)
        self._run = self.lua.execute(
            """
            local call, pcall_py = ...
            redis = {}
            redis.call = call
            redis.pcall = pcall_py
            redis.error_reply = function(msg) return {err=msg} end
            redis.status_reply = function(msg) return {ok=msg} end
            KEYS, ARGV = {}, {}
            local unpack = unpack
            return function(fn, nkeys, ...)
              local all = {...}
              local keys, argv = {}, {}
              for i = 1, nkeys do keys[i] = all[i] end
              for i = nkeys + 1, #all do argv[i - nkeys] = all[i] end
              KEYS, ARGV = keys, argv
              local r = fn()
              -- A plain array comes back as its items (one crossing into Python, not one a
              -- lookup); anything else (status, error, a long array) as it is.
              if type(r) == 'table' and r.ok == nil and r.err == nil then
                local n = 0
                while r[n + 1] ~= nil do n = n + 1 end
                if n >= 1 and n <= 1000 then return true, unpack(r, 1, n) end
              end
              return false, r
            end
            """,
            self._lua_call,
            self._lua_pcall,
        )
        self._table = self.lua.table_from
        self._lua_type = lua51.lua_type
        self.calls = 0
        """Commands run, script calls included (``statistics``)."""
        self._commands: dict[bytes, Callable[[list[bytes]], RawReply]] = {
            b"DEL": self._del,
            b"EXISTS": self._exists,
            b"GET": self._get_cmd,
            b"SET": self._set,
            b"HDEL": self._hdel,
            b"HGET": self._hget,
            b"HGETALL": self._hgetall,
            b"HINCRBY": self._hincrby,
            b"HKEYS": self._hkeys,
            b"HMGET": self._hmget,
            b"HSET": self._hset,
            b"HSTRLEN": self._hstrlen,
            b"PEXPIRE": self._pexpire,
            b"PEXPIREAT": self._pexpireat,
            b"PTTL": self._pttl,
            b"SADD": self._sadd,
            b"SCARD": self._scard,
            b"SMEMBERS": self._smembers,
            b"SREM": self._srem,
            b"TIME": self._time,
            b"XADD": self._xadd,
            b"XRANGE": self._xrange,
            b"XREAD": self._xread,
            b"XREVRANGE": self._xrevrange,
            b"ZADD": self._zadd,
            b"ZCARD": self._zcard,
            b"ZRANGE": self._zrange,
            b"ZREM": self._zrem,
            b"ZREMRANGEBYRANK": self._zremrangebyrank,
            b"ZREMRANGEBYSCORE": self._zremrangebyscore,
            b"ZSCORE": self._zscore,
            b"PING": lambda _: SimpleString(b"PONG"),
            b"ROLE": lambda _: [b"master", 0, []],  # one server, never a replica
        }
        self._top: dict[bytes, Callable[[list[bytes]], RawReply]] = {
            b"EVALSHA": self._evalsha,
            b"EVAL": self._eval,
            b"SCRIPT": self._script,
            b"SCAN": self._scan,
        }

    # -- the clock and the key space -------------------------------------------------------------

    def clock(self) -> float:
        """Seconds since the epoch: ``time.time()`` read at call time (a virtual clock's, in a
        deterministic run)."""
        return time.time() if self._clock is None else self._clock()

    def clock_us(self) -> int:
        """The clock in whole microseconds (what ``gettimeofday`` gives Redis)."""
        return round(self.clock() * 1_000_000)

    def live_keys(self) -> list[bytes]:
        """Every live key (expired ones dropped)."""
        return [k for k in list(self.data) if self._live(k) is not None]

    # -- entry points ----------------------------------------------------------------------------

    def command(self, args: list[bytes]) -> RawReply:
        """One client command's reply (an ``Error`` value for an error reply)."""
        self.now_ms = self.clock_us() // 1000
        try:
            if not args:
                raise Error("ERR empty command")
            name = args[0].upper()
            handler = self._top.get(name) or self._commands.get(name)
            if handler is None:
                shown = name.decode(errors="replace")
                raise Error(f"ERR lean store: command {shown!r} is not modelled")
            self.calls += 1
            return handler(args)
        except Error as exc:
            return exc

    # -- scripts ---------------------------------------------------------------------------------

    def _script(self, args: list[bytes]) -> RawReply:
        sub = args[1].upper() if len(args) > 1 else b""
        if sub == b"LOAD" and len(args) == 3:
            return self.load(args[2])
        if sub == b"EXISTS" and len(args) > 2:
            return [int(sha.lower() in self.scripts) for sha in args[2:]]
        raise Error("ERR lean store: only SCRIPT LOAD and SCRIPT EXISTS are modelled")

    def load(self, body: bytes) -> bytes:
        """Cache ``body`` under its SHA1 (compiled once); the SHA1."""
        sha = hashlib.sha1(body, usedforsecurity=False).hexdigest().encode()
        if sha not in self._compiled:
            try:
                self._compiled[sha] = self.lua.eval(b"function()\n" + body + b"\nend")
            except lua51.LuaSyntaxError as exc:
                raise Error(f"ERR Error compiling script (new function): {exc}") from None
            self.scripts[sha] = body
        return sha

    def _eval(self, args: list[bytes]) -> RawReply:
        if len(args) < 3:
            raise Error("ERR wrong number of arguments for 'eval' command")
        return self._call_script(self.load(args[1]), args[2], args[3:])

    def _evalsha(self, args: list[bytes]) -> RawReply:
        if len(args) < 3:
            raise Error("ERR wrong number of arguments for 'evalsha' command")
        sha = args[1].lower()
        if sha not in self._compiled:
            raise Error(NOSCRIPT)
        return self._call_script(sha, args[2], args[3:])

    def _call_script(self, sha: bytes, numkeys: bytes, rest: list[bytes]) -> RawReply:
        nkeys = _int(numkeys, "ERR value is not an integer or out of range")
        if nkeys > len(rest):
            raise Error("ERR Number of keys can't be greater than number of args")
        if nkeys < 0:
            raise Error("ERR Number of keys can't be negative")
        self.in_script = True
        try:
            array, *result = self._run(self._compiled[sha], nkeys, *rest)
        except Error:
            raise
        except lua51.LuaError as exc:
            raise Error(f"ERR user_script: {exc} script: {sha.decode()}") from None
        finally:
            self.in_script = False
        if array:
            return [self._from_lua(item) for item in result]
        return self._from_lua(result[0])

    def _from_lua(self, value: Any) -> RawReply:
        """A script's result as Redis converts it (numbers truncated, a table's array part up
        to its first nil, ``{ok=...}`` / ``{err=...}`` as status and error)."""
        if type(value) is bytes or type(value) is int:
            return value
        if value is None or value is False:
            return None
        if value is True:
            return 1
        if type(value) is float:
            return int(value)
        if self._lua_type(value) == "table":
            ok = value[b"ok"]
            if ok is not None:
                return SimpleString(ok)
            err = value[b"err"]
            if err is not None:
                return Error(err.decode("utf-8", "replace"))
            out: list[RawReply] = []
            i = 1
            while True:
                item = value[i]
                if item is None:
                    return out
                out.append(self._from_lua(item))
                i += 1
        raise Error("ERR lean store: a script returned a value Redis cannot reply with")

    def _lua_call(self, name: Any, *args: Any) -> Any:
        reply = self._inner(name, args)
        if isinstance(reply, Error):
            raise reply
        return self._to_lua(reply)

    def _lua_pcall(self, name: Any, *args: Any) -> Any:
        reply = self._inner(name, args)
        if isinstance(reply, Error):
            return self._table({b"err": reply.text.encode()})
        return self._to_lua(reply)

    def _inner(self, name: Any, args: tuple[Any, ...]) -> RawReply:
        try:
            command = [_lua_arg(name), *map(_lua_arg, args)]
            handler = self._commands.get(command[0]) or self._commands.get(command[0].upper())
            if handler is None:
                raise Error(f"ERR lean store: command {command[0]!r} is not modelled in scripts")
            self.calls += 1
            return handler(command)
        except Error as exc:
            return exc

    def _to_lua(self, reply: RawReply) -> Any:
        if reply is None or reply is NULL_ARRAY:
            return False
        if type(reply) is list:
            return self._table([self._to_lua(r) for r in reply])
        if type(reply) is SimpleString:
            return self._table({b"ok": bytes(reply)})
        return reply

    # -- keys ------------------------------------------------------------------------------------

    def _del(self, args: list[bytes]) -> int:
        n = 0
        for key in args[1:]:
            if self._live(key) is not None:
                self._drop(key)
                n += 1
        return n

    def _exists(self, args: list[bytes]) -> int:
        return sum(1 for key in args[1:] if self._live(key) is not None)

    def _pexpireat(self, args: list[bytes]) -> int:
        if len(args) != 3:
            raise Error("ERR lean store: PEXPIREAT takes no options here")
        return self._expire_at(args[1], _int(args[2]))

    def _pexpire(self, args: list[bytes]) -> int:
        if len(args) != 3:
            raise Error("ERR lean store: PEXPIRE takes no options here")
        return self._expire_at(args[1], self.now_ms + _int(args[2]))

    def _pttl(self, args: list[bytes]) -> int:
        key = args[1]
        if self._live(key) is None:
            return -2
        deadline = self.expires.get(key)
        if deadline is None:
            return -1
        return deadline - self.now_ms

    def _time(self, args: list[bytes]) -> list[bytes]:
        now_us = self.clock_us()
        return [str(now_us // 1_000_000).encode(), str(now_us % 1_000_000).encode()]

    def _scan(self, args: list[bytes]) -> list[Any]:
        """SCAN 0 MATCH pattern [COUNT n]: every match in one page (the check's reads)."""
        if args[1] != b"0":
            raise Error("ERR lean store: SCAN answers in one page, from cursor 0")
        pattern = b"*"
        rest = args[2:]
        while rest:
            word = rest[0].upper()
            if word == b"MATCH" and len(rest) > 1:
                pattern = rest[1]
            elif word != b"COUNT" or len(rest) < 2:
                raise Error(SYNTAX)
            rest = rest[2:]
        return [b"0", self.match(pattern)]

    def match(self, pattern: bytes) -> list[bytes]:
        """Live keys matching the glob ``pattern``, sorted."""
        compiled = re.compile(fnmatch.translate(pattern.decode("latin-1")).encode("latin-1"))
        return sorted(k for k in self.live_keys() if compiled.match(k))

    # -- strings ---------------------------------------------------------------------------------

    def _get_cmd(self, args: list[bytes]) -> bytes | None:
        value: bytes | None = self._typed(args[1], bytes)
        return value

    def _set(self, args: list[bytes]) -> SimpleString:
        """SET key value [KEEPTTL | PX ms]."""
        key, options = args[1], [a.upper() for a in args[3:]]
        deadline: int | None = None
        if len(options) == 2 and options[0] == b"PX":
            ms = _int(args[4])
            if ms <= 0:
                raise Error("ERR invalid expire time in 'set' command")
            deadline = self.now_ms + ms
        elif options not in ([], [b"KEEPTTL"]):
            raise Error("ERR lean store: SET takes KEEPTTL or PX ms only")
        keep = options == [b"KEEPTTL"] and self._live(key) is not None
        self.data[key] = bytes(args[2])
        if deadline is not None:
            self.expires[key] = deadline
        elif not keep:
            self.expires.pop(key, None)
        return SimpleString(b"OK")

    # -- hashes ----------------------------------------------------------------------------------

    def _hash(self, key: bytes) -> dict[bytes, bytes] | None:
        value: dict[bytes, bytes] | None = self._typed(key, dict)
        return value

    def _hset(self, args: list[bytes]) -> int:
        if len(args) < 4 or len(args) % 2:
            raise Error("ERR wrong number of arguments for 'hset' command")
        h = self._hash(args[1])
        if h is None:
            h = self.data[args[1]] = {}
        before = len(h)
        for i in range(2, len(args), 2):
            h[args[i]] = args[i + 1]
        return len(h) - before

    def _hget(self, args: list[bytes]) -> bytes | None:
        h = self._hash(args[1])
        return None if h is None else h.get(args[2])

    def _hmget(self, args: list[bytes]) -> list[bytes | None]:
        h = self._hash(args[1])
        if h is None:
            return [None] * (len(args) - 2)
        return [h.get(f) for f in args[2:]]

    def _hgetall(self, args: list[bytes]) -> list[bytes]:
        h = self._hash(args[1])
        out: list[bytes] = []
        for k, v in (h or {}).items():
            out += (k, v)
        return out

    def _hkeys(self, args: list[bytes]) -> list[bytes]:
        """In insertion order, as a small (listpack) hash answers."""
        if len(args) != 2:
            raise Error("ERR wrong number of arguments for 'hkeys' command")
        return list(self._hash(args[1]) or {})

    def _hdel(self, args: list[bytes]) -> int:
        h = self._hash(args[1])
        if h is None:
            return 0
        n = 0
        for f in args[2:]:
            if f in h:
                del h[f]
                n += 1
        if not h:
            self._drop(args[1])
        return n

    def _hincrby(self, args: list[bytes]) -> int:
        by = _int(args[3])
        h = self._hash(args[1])
        if h is None:
            h = self.data[args[1]] = {}
        current = h.get(args[2], b"0")
        value = _int(current, HASH_NOT_INTEGER) + by
        if not -(1 << 63) <= value < (1 << 63):
            raise Error("ERR increment or decrement would overflow")
        h[args[2]] = str(value).encode()
        return value

    def _hstrlen(self, args: list[bytes]) -> int:
        h = self._hash(args[1])
        return 0 if h is None else len(h.get(args[2], b""))

    # -- sets ------------------------------------------------------------------------------------

    def _set_of(self, key: bytes) -> set[bytes] | None:
        value: set[bytes] | None = self._typed(key, set)
        return value

    def _sadd(self, args: list[bytes]) -> int:
        s = self._set_of(args[1])
        if s is None:
            s = self.data[args[1]] = set()
        before = len(s)
        s.update(args[2:])
        return len(s) - before

    def _srem(self, args: list[bytes]) -> int:
        s = self._set_of(args[1])
        if s is None:
            return 0
        before = len(s)
        s.difference_update(args[2:])
        if not s:
            self._drop(args[1])
        return before - len(s)

    def _scard(self, args: list[bytes]) -> int:
        s = self._set_of(args[1])
        return 0 if s is None else len(s)

    def _smembers(self, args: list[bytes]) -> list[bytes]:
        s = self._set_of(args[1])
        return [] if s is None else list(s)


# -- replies as bytes and as the client reads them ---------------------------------------------


def encode(reply: RawReply) -> bytes:
    """``reply`` as RESP2 bytes (what a server would write)."""
    if type(reply) is SimpleString:
        return b"+" + bytes(reply) + b"\r\n"
    if isinstance(reply, Error):
        return b"-" + reply.text.encode() + b"\r\n"
    if type(reply) is bytes:
        return b"$%d\r\n%s\r\n" % (len(reply), reply)
    if type(reply) is int:
        return b":%d\r\n" % reply
    if reply is None:
        return b"$-1\r\n"
    if reply is NULL_ARRAY:
        return b"*-1\r\n"
    if type(reply) is list:
        return b"*%d\r\n" % len(reply) + b"".join(encode(r) for r in reply)
    raise TypeError(f"no RESP2 form for {type(reply).__name__}")


def decoded(reply: RawReply, error: Callable[[str], Exception]) -> Any:
    """``reply`` as ``store.resp.RespCore`` (hiredis, UTF-8) would hand it to the client."""
    if type(reply) is bytes or type(reply) is SimpleString:
        return reply.decode("utf-8")
    if type(reply) is list:
        return [decoded(r, error) for r in reply]
    if isinstance(reply, Error):
        return error(reply.text)
    if reply is NULL_ARRAY:
        return None
    return reply
