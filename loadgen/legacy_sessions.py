"""Legacy flows that carry a session id the principal may not use: another principal's, one
already ended, or one ended by the per-principal session cap.

Layer: loadgen. Each flow is an ordinary legacy deletion (``loadgen.legacy_clients``: its own
session, a create, an accepted confirmation) plus one request that must be refused:

    legacy_foreign_session  before its deletion, the flow's principal sends ``tools/call
                            notes_create`` with the session id of its tenant's other principal
                            (a live session that principal opened for the purpose)
    legacy_stale_session    after its deletion and its session's ``DELETE``, the flow sends
                            ``tools/call notes_create`` on the deleted session
    legacy_roots            the note is created on a plain session; a second session declares
                            roots (the tenant's root, listed when a call asks) and deletes it,
                            its roots changing mid-call (``roots/list_changed``) to add a root
                            over workspaces nobody is granted; then that session sends
                            ``tools/call notes_create`` in one of those (``UNGRANTED``)
    legacy_evicted          the flow opens a session, then ``SESSIONS_PER_PRINCIPAL`` more of
                            the same principal (the cap: the first one is evicted, ended by the
                            node), then sends ``tools/call notes_create`` on the first; it
                            deletes nothing, and ends the sessions it opened

Eviction flows run as the tenant's second principal (side ``b``) and every other legacy flow as
its first (``loadgen.runner``): the cap evicts a principal's oldest sessions, so an eviction
flow ends only sessions of its own principal that are not waiting for anything (another eviction
flow's, or a ``legacy_foreign_session`` flow's victim session, whose misuse is then refused all
the same), never a deletion flow's.

The misuse is recorded as an operation ``session``: invoke ``{principal, tenant, workspace,
title, node, session, misuse: "foreign" | "stale" | "evicted" | "ungranted_root", owner}``
(``owner``: whose session it is), completed ``fail {status: 404}`` when refused as the adapter
must (an unknown session and another principal's look the same; an ungranted workspace is
refused on the call's own answer), ``ok``/``fail`` as ``loadgen.clients.classify``
reads any other answer, ``info`` when the node could not be reached. Its title is the flow's
own plus a suffix, so the journal shows whether it created anything (``loadgen.check.legacy``).
"""

from __future__ import annotations

from typing import Any

from loadgen.clients import classify
from loadgen.flow_steps import flow_title
from loadgen.legacy_clients import (
    LEGACY_CAPABILITIES,
    LEGACY_VERSION,
    SESSION_HEADER,
    SESSION_KINDS,
    WIDE_ROOT,
    LegacyEnv,
    Messages,
    StreamEnded,
    _create,
    _delete,
    _initialize,
    _outcome,
    answer_roots,
    legacy_request,
    run_legacy_flow,
)
from loadgen.transport import NodeDown, Reply

SESSIONS_PER_PRINCIPAL = 16
"""The nodes' per-principal session cap (``nodes.config.LegacyCaps``' default, which a
simulation's nodes run with; tests/test_legacy_plants.py holds the two equal)."""

UNGRANTED = f"{WIDE_ROOT}/ungranted/inbox"
"""A workspace under the wide root that no principal is granted."""

MISUSE_SUFFIX = " misused"
"""Appended to the flow's title for the request that carries a session it may not use."""


async def run_any_legacy_flow(env: LegacyEnv) -> bool:
    """Run one legacy flow of any kind (``loadgen.legacy_clients.LEGACY_KINDS``); False when its
    setup did not complete."""
    if env.kind not in SESSION_KINDS:
        return await run_legacy_flow(env)
    env.first_node = env.rng.randrange(env.http.node_count)
    if env.kind == "legacy_foreign_session":
        return await _foreign(env)
    if env.kind == "legacy_evicted":
        return await _evicted(env)
    if env.kind == "legacy_roots":
        return await _roots(env)
    return await _stale(env)


async def _deletion(env: LegacyEnv) -> bool:
    """The flow's ordinary part on its own session: create a note, delete it with an accept."""
    title = flow_title(env.tag, env.flow)
    note = await _create(env, title)
    if note is None:
        return False
    return await _delete(env, title, note)


async def _foreign(env: LegacyEnv) -> bool:
    victim = await _open_session(env, env.foreigner)
    if victim is None:
        return False
    try:
        if not await _initialize(env):
            return False
        try:
            await _misuse(env, victim, "foreign", env.foreigner)
            return await _deletion(env)
        finally:
            await env.http.delete(env.node(2), env.principal, env.session)
    finally:
        await env.http.delete(env.node(3), env.foreigner, victim)


async def _stale(env: LegacyEnv) -> bool:
    if not await _initialize(env):
        return False
    try:
        done = await _deletion(env)
    finally:
        await env.http.delete(env.node(2), env.principal, env.session)
    if not done:
        return False
    await _misuse(env, env.session, "stale", env.principal)
    return True


async def _roots(env: LegacyEnv) -> bool:
    title = flow_title(env.tag, env.flow)
    if not await _initialize(env):
        return False
    try:
        note = await _create(env, title)
    finally:
        await env.http.delete(env.node(2), env.principal, env.session)
    if note is None:
        return False
    env.roots = [env.inbox.rsplit("/", 1)[0]]
    if not await _initialize(env):
        return False
    try:
        if not await _delete(env, title, note):
            return False
        await _ungranted(env)
        return True
    finally:
        await env.http.delete(env.node(2), env.principal, env.session)


async def _ungranted(env: LegacyEnv) -> None:
    """``tools/call notes_create`` in ``UNGRANTED``, inside the session's roots; recorded as
    ``session`` (misuse ``ungranted_root``)."""
    node = env.node(2)
    title = flow_title(env.tag, env.flow) + MISUSE_SUFFIX
    invoke: dict[str, Any] = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": UNGRANTED,
        "title": title,
        "node": node,
        "session": env.session,
        "misuse": "ungranted_root",
        "owner": env.principal,
        "roots": list(env.roots or ()),
    }
    args = {"workspaceUri": UNGRANTED, "title": title, "body": f"legacy flow {env.flow}"}
    message = legacy_request("tools/call", {"name": "notes_create", "arguments": args})
    env.record(env.process, "invoke", "session", invoke)
    try:
        async with env.http.call(node, env.principal, env.session, message) as stream:
            reply = await _final(env, stream)
    except (NodeDown, StreamEnded) as exc:
        env.record(env.process, "info", "session", {"reason": f"unreachable: {exc}"})
        return
    out = _outcome(reply)
    env.record(env.process, out.type, "session", {**out.value, "status": reply["_status"]})


async def _final(env: LegacyEnv, stream: Messages) -> dict[str, Any]:
    """The call's response, past the roots requests it made (answered)."""
    while True:
        message = await stream.next()
        if "method" in message and "id" not in message:
            continue
        if not await answer_roots(env, message):
            return message


async def _evicted(env: LegacyEnv) -> bool:
    first = await _open_session(env, env.principal)
    if first is None:
        return False
    later: list[str] = []
    try:
        for _ in range(SESSIONS_PER_PRINCIPAL):
            opened = await _open_session(env, env.principal)
            if opened is None:
                return False
            later.append(opened)
        await _misuse(env, first, "evicted", env.principal)
        return True
    finally:
        for k, session in enumerate([first, *later]):
            await env.http.delete(env.node(k), env.principal, session)


async def _open_session(env: LegacyEnv, principal: str) -> str | None:
    """A fresh session of ``principal`` (None when it could not be opened)."""
    params = {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": LEGACY_CAPABILITIES,
        "clientInfo": {"name": "notes-cluster-loadgen-legacy", "version": "0.1"},
    }
    try:
        response = await env.http.post(
            env.node(3), principal, None, legacy_request("initialize", params)
        )
    except NodeDown:
        return None
    session = response.headers.get(SESSION_HEADER)
    return session if response.status_code == 200 and session else None


async def _misuse(env: LegacyEnv, session: str, misuse: str, owner: str) -> None:
    """``tools/call notes_create`` on ``session`` (``owner``'s), recorded as ``session``."""
    node = env.node(2)
    title = flow_title(env.tag, env.flow) + MISUSE_SUFFIX
    invoke: dict[str, Any] = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": env.inbox,
        "title": title,
        "node": node,
        "session": session,
        "misuse": misuse,
        "owner": owner,
    }
    args = {"workspaceUri": env.inbox, "title": title, "body": f"legacy flow {env.flow}"}
    message = legacy_request("tools/call", {"name": "notes_create", "arguments": args})
    env.record(env.process, "invoke", "session", invoke)
    try:
        response = await env.http.post(node, env.principal, session, message)
    except NodeDown as exc:
        env.record(env.process, "info", "session", {"reason": f"unreachable: {exc}"})
        return
    if response.status_code == 404:
        env.record(env.process, "fail", "session", {"status": 404})
        return
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    out = classify(Reply(response.status_code, body))
    env.record(env.process, out.type, "session", {**out.value, "status": response.status_code})
