"""The flows that drive the rest of the tool surface beside the confirmations: ``notes_list``
page by page with misused cursors, ``notes_search`` with and without roots, ``notes_setup`` up to
its URL-mode elicitation, a state used for another tool, and every write retried with its
idempotency key.

Layer: loadgen. Built of ``loadgen.flow_steps``; listed by ``loadgen.workload``.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import trio

from loadgen.check.roots import within
from loadgen.clients import (
    ROOTS_CAPABILITIES,
    URL_CAPABILITIES,
    Client,
    Outcome,
    request,
)
from loadgen.flow_steps import (
    ARCHIVE_TOOL,
    CLEANUP_ROUNDS,
    DELETE_TOOL,
    LIST_MISUSES,
    SETUP_ATTEMPTS,
    SETUP_KEY,
    SETUP_TOOL,
    Asked,
    FlowEnv,
    backoff_s,
    confirm,
    create,
    reasked,
    state_facts,
)
from loadgen.race_flows import tamper
from loadgen.transport import NodeDown

log = logging.getLogger("loadgen.workload")


async def list_page(
    env: FlowEnv,
    listing: int,
    page: int,
    *,
    cursor: str | None = None,
    principal: str | None = None,
    workspace: str | None = None,
    title: str | None = None,
    misuse: str | None = None,
) -> Outcome:
    """One ``notes_list`` page of ``title`` (default: the flow's) in ``workspace`` (default:
    the inbox); ``listing`` numbers the flow's page sequences, ``page`` the page in it."""
    ws = workspace or env.inbox
    args: dict[str, Any] = {"workspaceUri": ws, "title": title or env.title}
    if cursor is not None:
        args["cursor"] = cursor
    who = principal or env.principal
    invoke: dict[str, Any] = {
        "principal": who,
        "tenant": env.tenant,
        "workspace": ws,
        "title": args["title"],
        "listing": listing,
        "page": page,
        "cursor": cursor is not None,
    }
    if misuse is not None:
        invoke["misuse"] = misuse
    msg = request("tools/call", {"name": "notes_list", "arguments": args})
    c = env.client
    return await c.op("list", env.flow, env.kind, invoke, c.pick_node(), who, msg)


async def _page(env: FlowEnv, listing: int, page: int, cursor: str | None) -> Outcome:
    """A page, asked again (another node, backoff) while its outcome is unknown: a read."""
    out = await list_page(env, listing, page, cursor=cursor)
    for attempt in range(1, SETUP_ATTEMPTS):
        if out.type != "info":
            break
        await trio.sleep(backoff_s(attempt, env.rng))
        out = await list_page(env, listing, page, cursor=cursor)
    return out


def _cursor(out: Outcome) -> str | None:
    sc = (out.result or {}).get("structuredContent") or {}
    cursor = sc.get("nextCursor")
    return cursor if out.type == "ok" and isinstance(cursor, str) else None


async def flow_list_pages(env: FlowEnv, asked: Asked, note: str) -> None:
    # Page through the flow's notes (four, two per page in simulations); one more is created
    # after the first page (it may or may not show). Then a cursor is used where it does not
    # belong, and the delete state is passed as a cursor and a cursor as a delete state.
    first = await _page(env, 0, 0, None)
    cursor, page, misused = _cursor(first), 1, _cursor(first)
    env.leave(env.inbox)
    await create(env, env.title)
    while cursor is not None and page < CLEANUP_ROUNDS * 4:
        out = await _page(env, 0, page, cursor)
        cursor, page = _cursor(out), page + 1
    if misused is not None:
        misuse = env.rng.choice(LIST_MISUSES)
        kw: dict[str, Any] = {"cursor": misused, "misuse": misuse}
        if misuse == "principal":
            kw["principal"] = env.foreigner
        elif misuse == "workspace":
            kw["workspace"] = env.archive
        elif misuse == "title":
            kw["title"] = env.title + " (other)"
        elif misuse == "tampered":
            kw["cursor"] = tamper(misused, env.rng)
        else:
            kw["cursor"] = asked.token
        await list_page(env, 1, 1, **kw)
        altered = {"altered": "token"}
        await confirm(env, asked, note, token=misused, expect="no_mutation", extra=altered)
    await confirm(env, asked, note)


async def search_call(
    env: FlowEnv,
    listing: int,
    *,
    workspace: str | None,
    responses: dict[str, Any] | None = None,
    shows: str = "",
    given: list[str] | None = None,
    picked: str | None = None,
) -> Outcome:
    """One ``notes_search`` of the flow's title: in ``workspace``, or (None) in the roots the
    client gives when asked; ``shows`` names the workspace a complete answer searches.
    ``given``: the roots the client answers with (recorded with the workspaces the principal
    is granted, so the checker can hold the node's offers to both); ``picked``: the workspace
    the client picked from the node's form."""
    args: dict[str, Any] = {"title": env.title}
    if workspace is not None:
        args["workspaceUri"] = workspace
    params: dict[str, Any] = {"name": "notes_search", "arguments": args}
    if responses is not None:
        params["inputResponses"] = responses
    invoke: dict[str, Any] = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": workspace or shows,
        "title": env.title,
        "listing": listing,
        "page": 0,
        "cursor": False,
        "roots": workspace is None,
    }
    if given is not None:
        invoke["given"] = list(given)
        invoke["granted"] = [env.inbox, env.archive]
    if picked is not None:
        invoke["picked"] = picked
    msg = request("tools/call", params, capabilities=ROOTS_CAPABILITIES)
    c = env.client
    return await c.op(
        "search",
        env.flow,
        env.kind,
        invoke,
        c.pick_node(),
        env.principal,
        msg,
        annotate=_offered,
    )


PICK_KEY = "workspace"
"""The key of ``notes_search``'s pick form (which workspace, when the roots cover several)."""


def pick_options(result: dict[str, Any] | None) -> list[str]:
    """The workspaces a ``notes_search`` pick form offers (its ``oneOf`` consts), in order."""
    requests = (result or {}).get("inputRequests") or {}
    form = requests.get(PICK_KEY) if isinstance(requests, dict) else None
    params = form.get("params") if isinstance(form, dict) else None
    schema = params.get("requestedSchema") if isinstance(params, dict) else None
    props = schema.get("properties") if isinstance(schema, dict) else None
    field = props.get("workspaceUri") if isinstance(props, dict) else None
    options = field.get("oneOf") if isinstance(field, dict) else None
    if not isinstance(options, list):
        return []
    return [str(o.get("const")) for o in options if isinstance(o, dict) and "const" in o]


def _offered(out: Outcome) -> dict[str, Any]:
    """A re-ask's pick form options, as ``offered`` (what the checker holds to the roots)."""
    if out.type != "ok" or not out.value.get("reask"):
        return {}
    offered = pick_options(out.result)
    return {"offered": offered} if offered else {}


def drawn_roots(env: FlowEnv) -> list[str]:
    """The roots a ``search`` flow answers with, drawn: the tenant's root (covers the inbox and
    the archive), the inbox alone, or either beside the archive alone."""
    if not env.root:
        return [env.inbox]
    return env.rng.choice(([env.root], [env.inbox], [env.archive], [env.inbox, env.archive]))


def ungranted_roots(env: FlowEnv) -> list[str]:
    """A ``roots_ungranted`` flow's roots: one of the principal's own beside a root it is not
    granted (another tenant's, drawn: its root or its inbox)."""
    own = env.rng.choice(([env.root], [env.inbox])) if env.root else [env.inbox]
    stranger = env.rng.choice((env.stranger_root, env.stranger_root + "/inbox"))
    return env.rng.sample([*own, stranger], k=len(own) + 1)


async def roots_search(env: FlowEnv, given: list[str]) -> None:
    """A search by roots answered with ``given``; when the node offers a pick form, a pick
    drawn among the offered workspaces (seeded), answered with the same roots."""
    asked_roots = await search_call(env, 1, workspace=None)
    if asked_roots.type != "ok" or not asked_roots.value.get("reask"):
        return
    roots = {"roots": {"roots": [{"uri": uri} for uri in given]}}
    covered = [ws for ws in (env.inbox, env.archive) if any(within(r, ws) for r in given)]
    only = covered[0] if len(covered) == 1 else ""
    out = await search_call(env, 2, workspace=None, responses=roots, shows=only, given=given)
    offered = out.value.get("offered") if out.type == "ok" else None
    if isinstance(offered, list) and offered:
        choice = str(env.rng.choice(offered))
        pick = {"action": "accept", "content": {"workspaceUri": choice}}
        responses = roots | {PICK_KEY: pick}
        await search_call(
            env, 3, workspace=None, responses=responses, shows=choice, given=given, picked=choice
        )


async def flow_search(env: FlowEnv, asked: Asked, note: str) -> None:
    # By workspace, then by roots drawn among the principal's own (its tenant's root covers
    # the inbox and the archive, so the node asks which one; the pick is drawn among what the
    # form offers, so a form that offers a wrong workspace can be answered with it).
    await search_call(env, 0, workspace=env.inbox)
    await roots_search(env, drawn_roots(env))
    await confirm(env, asked, note)


async def flow_roots_ungranted(env: FlowEnv, asked: Asked, note: str) -> None:
    # Roots that include another tenant's workspace, which this principal is not granted: the
    # node must neither offer it in its pick form nor search it.
    await roots_search(env, ungranted_roots(env))
    await confirm(env, asked, note)


async def setup_call(
    env: FlowEnv,
    action: str,
    *,
    token: str | None = None,
    tool: str = SETUP_TOOL,
    misuse: str | None = None,
) -> Outcome:
    """One ``notes_setup`` call (round 1 when ``token`` is None; else a retry answering the
    URL elicitation with ``action``, or ``silence``); ``tool`` other than ``notes_setup``
    presents a setup state to another tool (``misuse``)."""
    args: dict[str, Any] = {"workspaceUri": env.inbox}
    if tool != SETUP_TOOL:
        args["title"] = env.title
    params: dict[str, Any] = {"name": tool, "arguments": args}
    if token is not None:
        params["requestState"] = token
        if action not in ("silence", "round1"):
            params["inputResponses"] = {SETUP_KEY: {"action": action}}
    invoke: dict[str, Any] = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": env.inbox,
        "action": action,
        "tool": tool,
        "redis_ms": env.redis_now_ms(),
    }
    if misuse is not None:
        invoke["misuse"] = misuse
    msg = request("tools/call", params, capabilities=URL_CAPABILITIES)
    c = env.client
    return await c.op(
        "setup",
        env.flow,
        env.kind,
        invoke,
        c.pick_node(),
        env.principal,
        msg,
        annotate=lambda o: _setup_facts(env, o, tool),
    )


def _setup_facts(env: FlowEnv, out: Outcome, tool: str) -> dict[str, Any]:
    """A setup state's nonce and expiry, under names the confirmation checks do not read."""
    facts = state_facts(env, out, tool)
    if not facts:
        return {}
    return {"state_nonce": facts["nonce"], "exp_ms": facts["exp_ms"], "state_tool": facts["tool"]}


COMPLETE_SHARE = 0.5
"""Share of ``setup`` flows that complete the setup page in between (where the transport can
open one, ``loadgen.transport.PageTransport``)."""

SIMULATED_CREDENTIAL = "simulated-report-key"
"""What the workload types into the setup page: the report service is simulated."""


def link_path(result: dict[str, Any] | None) -> str:
    """The path of the setup link a ``notes_setup`` round 1 offers ("" when there is none)."""
    requests = (result or {}).get("inputRequests") or {}
    ask = requests.get(SETUP_KEY) if isinstance(requests, dict) else None
    params = ask.get("params") if isinstance(ask, dict) else None
    url = params.get("url") if isinstance(params, dict) else None
    return urlsplit(url).path if isinstance(url, str) else ""


async def open_setup_page(env: FlowEnv, path: str, nonce: object) -> None:
    """Complete the setup page at ``path`` as the flow's principal (a non-browser client with
    its bearer token), recorded as a ``setup_page`` op: ``ok {status}`` with the page's HTTP
    status, or ``info`` when the node could not be reached or did not answer in time."""
    c = env.client
    opener = getattr(c.transport, "open_page", None)
    if opener is None:
        return
    node = c.pick_node()
    invoke = {
        "principal": env.principal,
        "tenant": env.tenant,
        "workspace": env.inbox,
        "state_nonce": nonce,
        "redis_ms": env.redis_now_ms(),
        "node": node,
    }
    sent = c.history.record(c.process, "invoke", "setup_page", env.flow, env.kind, invoke)
    value: dict[str, Any] = {"reason": "timeout"}
    kind: Any = "info"
    with trio.move_on_after(c.timeout_s):
        try:
            status = await opener(node, env.principal, path, {"api_key": SIMULATED_CREDENTIAL})
            kind, value = "ok", {"status": int(status)}
        except (NodeDown, OSError) as exc:
            value = {"reason": f"unreachable: {type(exc).__name__}"}
    c.history.record(c.process, kind, "setup_page", env.flow, env.kind, value, sent.index)
    c.last_type = kind


async def flow_setup(env: FlowEnv, asked: Asked, note: str) -> None:
    # Up to the URL-mode elicitation; in half of the flows (where the transport opens pages)
    # the setup page is completed and an accept must then say configured. Silence or an
    # accept before it re-offer the link; decline and cancel end it unconfigured; the setup
    # state is refused by notes_delete, and the delete state by notes_setup.
    first = await setup_call(env, "round1")
    token = str((first.result or {}).get("requestState") or "")
    if token:
        await setup_call(env, env.rng.choice(("silence", "accept")), token=token)
        path = link_path(first.result)
        if path and env.rng.random() < COMPLETE_SHARE:
            await open_setup_page(env, path, first.value.get("state_nonce"))
            await setup_call(env, "accept", token=token)
        await setup_call(env, "accept", token=token, tool=DELETE_TOOL, misuse="setup_state")
        await setup_call(env, env.rng.choice(("decline", "cancel")), token=token)
    await setup_call(env, "accept", token=asked.token, misuse="delete_state")
    await confirm(env, asked, note)


async def flow_wrong_tool(env: FlowEnv, asked: Asked, note: str) -> None:
    # The delete state presented to notes_archive with the same arguments: the fixed refusal
    # (the state binds its tool), and the state stays usable for the accept that follows.
    wrong = Asked(
        asked.token, asked.nonce, asked.exp_ms, asked.candidates, asked.arguments, ARCHIVE_TOOL
    )
    altered = {"altered": "tool"}
    await confirm(env, wrong, note, expect="no_mutation", extra=altered)
    await confirm(env, asked, note)


WRITE_FS = {"notes_create": "create", "notes_update": "update", "notes_move": "move"}


async def write(
    env: FlowEnv,
    tool: str,
    args: dict[str, Any],
    *,
    key: str | None = None,
    node: int | None = None,
    lose: bool = False,
    expect: str = "apply",
    client: Client | None = None,
    principal: str | None = None,
) -> Outcome:
    """One write (``notes_create``, ``notes_update``, ``notes_move``) with an idempotency key
    when given; ``lose`` drops the reply after the node answered (the outcome is unknown to
    the client). ``expect`` ``key_conflict``: the key was used before with other arguments.
    ``client`` and ``principal``: who sends it (default: the flow's own)."""
    f = WRITE_FS[tool]
    who = principal or env.principal
    invoke: dict[str, Any] = {
        "principal": who,
        "tenant": env.tenant,
        "workspace": args["workspaceUri"],
        "expect": expect,
    }
    if f == "create":
        invoke["title"] = args["title"]
        invoke["bytes"] = len(args["title"].encode("utf-8")) + len(args["body"].encode("utf-8"))
        invoke["redis_ms"] = env.redis_now_ms()
    else:
        invoke["noteId"] = args["noteId"]
    if f == "move":
        invoke["from"], invoke["to"] = args["workspaceUri"], args["targetWorkspaceUri"]
    if key is not None:
        invoke["key"] = key
    msg = request("tools/call", {"name": tool, "arguments": args}, idempotency_key=key)
    c = client or env.client
    target = c.pick_node() if node is None else node
    return await c.op(f, env.flow, env.kind, invoke, target, who, msg, lose_response=lose)


async def keyed(env: FlowEnv, tool: str, args: dict[str, Any], key: str) -> Outcome:
    """A write whose first reply is lost, retried with the same key on another node until its
    outcome is known (the node answers the recorded result, marked as a replay)."""
    first = env.client.pick_node()
    out = await write(env, tool, args, key=key, node=first, lose=True)
    node = first
    for attempt in range(1, SETUP_ATTEMPTS + 1):
        node = env.client.pick_node(avoid=node)
        out = await write(env, tool, args, key=key, node=node)
        if out.type != "info":
            break
        await trio.sleep(backoff_s(attempt, env.rng))
    return out


async def flow_write_retry(env: FlowEnv, asked: Asked, note: str) -> None:
    # Every write retried with its idempotency key after a lost reply: a create (one note),
    # a move of that note (one move), an edit of the flow's note (one version step); the same
    # key with other arguments is refused. Then the accept, re-asked since the note changed.
    tag = f"flow.{env.tag}.{env.flow}.{env.rng.getrandbits(64):016x}"  # 16-128 characters
    args = {"workspaceUri": env.inbox, "title": env.title, "body": f"keyed {env.flow}"}
    env.leave(env.inbox)
    made = await keyed(env, "notes_create", args, f"{tag}-create")
    extra = made.value.get("noteId") if made.type == "ok" else None
    if isinstance(extra, str):
        env.leave(env.archive)
        move = {"workspaceUri": env.inbox, "noteId": extra, "targetWorkspaceUri": env.archive}
        await keyed(env, "notes_move", move, f"{tag}-move")
    edit = {"workspaceUri": env.inbox, "noteId": note, "body": f"keyed edit {env.flow}"}
    await keyed(env, "notes_update", edit, f"{tag}-update")
    other = {**edit, "body": f"another edit {env.flow}"}
    await write(env, "notes_update", other, key=f"{tag}-update", expect="key_conflict")
    out = await confirm(env, asked, note)
    again = reasked(out, asked)
    if again is not None:
        await confirm(env, again, note)
