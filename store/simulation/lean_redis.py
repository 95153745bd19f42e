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

MAX_ID = (1 << 64) - 1

RawReply = Any
"""A reply in raw form: ``bytes`` (bulk), ``int``, ``None`` (nil), ``list``, ``SimpleString``,
``Error``."""


class SimpleString(bytes):
    """A simple-string reply (``+OK``): RESP's status reply."""


class Error(Exception):
    """An error reply (``-ERR ...``): its text, code first."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."
NOT_INTEGER = "ERR value is not an integer or out of range"
HASH_NOT_INTEGER = "ERR hash value is not an integer"
SYNTAX = "ERR syntax error"


class Stream:
    """A stream: entries in id order, each ``((ms, seq), [field, value, ...])``."""

    __slots__ = ("entries", "last")

    def __init__(self) -> None:
        self.entries: list[tuple[tuple[int, int], list[bytes]]] = []
        self.last = (0, 0)


def _int(arg: bytes, message: str = NOT_INTEGER) -> int:
    """A Redis integer argument (no spaces, no '+', no float)."""
    if not re.fullmatch(rb"-?\d+", arg):
        raise Error(message)
    value = int(arg)
    if not -(1 << 63) <= value < (1 << 63):
        raise Error(message)
    return value


def _lua_arg(value: Any) -> bytes:
    """A ``redis.call`` argument as Redis reads it: strings as they are, numbers as ``%.17g``."""
    if type(value) is bytes:
        return value
    if type(value) in (int, float):
        return f"{value:.17g}".encode()
    raise Error("ERR Lua redis lib command arguments must be strings or integers")


def _stream_id(text: bytes, default_seq: int) -> tuple[int, int]:
    if text == b"-":
        return (0, 0)
    if text == b"+":
        return (MAX_ID, MAX_ID)
    ms, _, seq = text.partition(b"-")
    try:
        return (int(ms), int(seq) if seq else default_seq)
    except ValueError:
        raise Error("ERR Invalid stream ID specified as stream command argument") from None


def _id_text(entry_id: tuple[int, int]) -> bytes:
    return b"%d-%d" % entry_id


class LeanRedis:
    """One in-process Redis: keys, expiries, a script cache and its Lua VM."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.data: dict[bytes, Any] = {}
        self.expires: dict[bytes, int] = {}
        """Deadlines, ms since the epoch."""
        self.scripts: dict[bytes, bytes] = {}
        self.now_ms = 0
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
                if n <= 1000 then return true, unpack(r, 1, n) end
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
            b"PEXPIREAT": self._pexpireat,
            b"PTTL": self._pttl,
            b"SADD": self._sadd,
            b"SCARD": self._scard,
            b"SMEMBERS": self._smembers,
            b"SREM": self._srem,
            b"TIME": self._time,
            b"XADD": self._xadd,
            b"XRANGE": self._xrange,
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

    def _live(self, key: bytes) -> Any:
        """The value at ``key``, None when absent or expired (an expired key is dropped)."""
        value = self.data.get(key)
        if value is not None:
            deadline = self.expires.get(key)
            if deadline is not None and self.now_ms > deadline:
                del self.data[key]
                del self.expires[key]
                return None
        return value

    def _typed(self, key: bytes, kind: type) -> Any:
        value = self._live(key)
        if value is not None and type(value) is not kind:
            raise Error(WRONGTYPE)
        return value

    def _drop(self, key: bytes) -> None:
        del self.data[key]
        self.expires.pop(key, None)

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
        try:
            array, *result = self._run(self._compiled[sha], nkeys, *rest)
        except Error:
            raise
        except lua51.LuaError as exc:
            raise Error(f"ERR user_script: {exc} script: {sha.decode()}") from None
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
        if reply is None:
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
        key = args[1]
        when = _int(args[2])
        if self._live(key) is None:
            return 0
        self.expires[key] = when
        return 1

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
        if len(args) != 3:
            raise Error("ERR lean store: SET takes no options here")
        self.data[args[1]] = bytes(args[2])
        self.expires.pop(args[1], None)
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

    # -- streams ---------------------------------------------------------------------------------

    def _xadd(self, args: list[bytes]) -> bytes:
        """XADD key [MAXLEN ~ n] * field value ...: the journal's one form."""
        key, rest = args[1], args[2:]
        maxlen: int | None = None
        if rest and rest[0].upper() == b"MAXLEN":
            if len(rest) < 3 or rest[1] != b"~":
                raise Error("ERR lean store: XADD trims with MAXLEN ~ only")
            maxlen = _int(rest[2])
            rest = rest[3:]
        if not rest or rest[0] != b"*":
            raise Error("ERR lean store: XADD takes '*' ids only")
        fields = rest[1:]
        if not fields or len(fields) % 2:
            raise Error("ERR wrong number of arguments for 'xadd' command")
        stream: Stream | None = self._typed(key, Stream)
        if stream is None:
            stream = self.data[key] = Stream()
        now = self.clock_us() // 1000
        last = stream.last
        entry_id = (now, 0) if now > last[0] else (last[0], last[1] + 1)
        stream.entries.append((entry_id, list(fields)))
        stream.last = entry_id
        if maxlen is not None and len(stream.entries) > maxlen:
            # Approximate trimming drops whole nodes only; the journal's bound (a million
            # entries) is far beyond any simulation, so reaching it is refused, not guessed.
            raise Error("ERR lean store: a stream reached its MAXLEN ~ bound (not modelled)")
        return _id_text(entry_id)

    def _xrange(self, args: list[bytes]) -> list[list[Any]]:
        stream: Stream | None = self._typed(args[1], Stream)
        low, high = _stream_id(args[2], 0), _stream_id(args[3], MAX_ID)
        count: int | None = None
        if len(args) == 6 and args[4].upper() == b"COUNT":
            count = _int(args[5])
        elif len(args) != 4:
            raise Error(SYNTAX)
        out: list[list[Any]] = []
        for entry_id, fields in [] if stream is None else stream.entries:
            if low <= entry_id <= high:
                if count is not None and len(out) >= count:
                    break
                out.append([_id_text(entry_id), list(fields)])
        return out


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
    return reply
