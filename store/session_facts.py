"""What the legacy session keyspace holds after a run, read for the checker's store facts.

Layer: store. Reads (never writes) the keys of ``store.sessions`` under one prefix with the
synchronous client the other store facts are read with (``store.journal``):

    sessions    {session id: {"principal": p, "ttl": PTTL}}
    inboxes     {session id: {"ttl": PTTL, "answers": {request id: answer entries}}}
    markers     {session id: {request id: [state, PTTL]}}      state "open" or "answered"
    calls       {session id: {"ttl": PTTL, "n": pending calls}}
    principals  {principal: {"ttl": PTTL, "n": sessions tracked}}   the per-principal cap's set

A PTTL is Redis's: -1 for a key without an expiry. A key that went between the SCAN and its
read is left out. ``principals`` names only the principals asked for (the set's key holds a
digest of the name, ``store.sessions.principal_digest``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from store.client_factory import SyncClient
from store.journal import _text, scan_keys
from store.sessions import principal_digest

SESSION_KEYS = ("sessions", "inboxes", "markers", "calls", "principals")
"""The parts of ``read_session_facts``' answer."""


def _split(key: str, prefix: str) -> tuple[str, str] | None:
    """(session id, the rest) of a key ``<prefix>:{s:<sid>}:<rest>``; None for another key."""
    head = f"{prefix}:{{s:"
    if not key.startswith(head):
        return None
    sid, sep, rest = key[len(head) :].partition("}:")
    return (sid, rest) if sep else None


def read_session_facts(
    client: SyncClient, prefix: str, principals: Iterable[str] = ()
) -> dict[str, Any]:
    """The legacy session keyspace under ``prefix`` (see the module docstring)."""
    out: dict[str, Any] = {name: {} for name in SESSION_KEYS}
    found = [(k, p) for k in scan_keys(client, f"{prefix}:{{s:*") if (p := _split(k, prefix))]
    pipe = client.pipeline(transaction=False)
    for key, _ in found:
        pipe.pttl(key)
    ttls = pipe.execute()
    for (key, (sid, rest)), raw_ttl in zip(found, ttls, strict=True):
        ttl = int(raw_ttl)
        if ttl == -2:
            continue
        if rest == "session":
            principal = client.hget(key, "principal")
            if principal is not None:
                out["sessions"][sid] = {"principal": _text(principal), "ttl": ttl}
        elif rest == "inbox":
            answers: dict[str, int] = {}
            for _, fields in client.xrange(key) or ():
                f = {_text(a): _text(b) for a, b in (fields or {}).items()}
                if f.get("kind") == "answer":
                    answers[f.get("rid", "")] = answers.get(f.get("rid", ""), 0) + 1
            out["inboxes"][sid] = {"ttl": ttl, "answers": answers}
        elif rest.startswith("req:"):
            state = client.get(key)
            if state is not None:
                out["markers"].setdefault(sid, {})[rest[4:]] = [_text(state), ttl]
        elif rest == "calls":
            out["calls"][sid] = {"ttl": ttl, "n": int(client.zcard(key))}
    names = {principal_digest(p): p for p in principals}
    for key in scan_keys(client, f"{prefix}:{{p:*"):
        digest = key[len(prefix) + 4 :].partition("}:")[0]
        principal = names.get(digest)
        if principal is not None and key.endswith("}:sessions"):
            n = int(client.zcard(key))
            if n:
                out["principals"][principal] = {"ttl": int(client.pttl(key)), "n": n}
    return out
