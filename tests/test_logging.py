"""Logging: the level and JSON-lines setup, and a whole run whose log explains every refusal
without ever carrying a secret.

The run serves one node the way ``serve`` does (``cluster.serve.serve_http_node``: the modern
endpoint, the setup page and the legacy adapter) on the embedded store, and goes through
refused states, refused setup links and sign-ins, a refused CSRF token and a refused legacy
request; then every captured record, formatted as text and as JSON, is searched for the tokens,
states, link, cookie, CSRF token, key and credential the run used.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx
import pytest
import trio

from cluster.serve import serve_http_node
from nodes.logging_setup import configure_logging, formatter
from nodes.serving.demo import ALICE_NOTES, DEMO_TENANT
from nodes.serving.settings import ClusterSettings, demo_settings
from store.client_factory import redis_client
from store.notes import NoteStore
from tests.harness import accept, meta
from tests.test_http_transport import delete_call, good_headers

ALICE = "alice-demo-token"
BOB = "bob-demo-token"
SECRET = "rs-live-LOGGED-NEVER-0123456789"
FORM = {"content-type": "application/x-www-form-urlencoded"}
URL_CAPS: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
CSRF_INPUT = re.compile(r"name='csrf' value='([^']+)'")


def test_json_lines_carry_time_level_logger_message_and_extras() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("info", json_lines=True, stream=out)
        logging.getLogger("nodes.example").info("refused: %s", "why", extra={"tool": "t"})
        logging.getLogger("nodes.example").debug("below the level")
    finally:
        root.handlers[:], root.level = saved
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert {k: record[k] for k in ("level", "logger", "message", "tool")} == {
        "level": "INFO",
        "logger": "nodes.example",
        "message": "refused: why",
        "tool": "t",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00", record["time"])


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="log level"):
        configure_logging("chatty")


@dataclass
class Run:
    url: str
    base: str
    client: httpx.AsyncClient
    settings: ClusterSettings
    note_id: str


@pytest.fixture
async def run(embedded_url: str, nursery: trio.Nursery) -> AsyncIterator[Run]:
    settings = demo_settings()
    prefix = "nclog"
    client = redis_client(embedded_url)
    async with client:
        note = await NoteStore(client, prefix=prefix).create(
            DEMO_TENANT, ALICE_NOTES, "TPS report", "body", "alice"
        )
    url = await nursery.start(
        partial(serve_http_node, settings, embedded_url, embedded=True, host="127.0.0.1",
                port=0, node_id="log-0", prefix=prefix)
    )  # fmt: skip
    no_jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    async with httpx.AsyncClient(timeout=10, cookies=no_jar) as http_client:
        yield Run(url, url.removesuffix("/mcp"), http_client, settings, note.note_id)


async def post(r: Run, msg: dict[str, Any], token: str = ALICE) -> httpx.Response:
    return await r.client.post(r.url, json=msg, headers=good_headers(msg, token))


async def refused_states(r: Run) -> list[str]:
    """Round 1, a tampered state, changed arguments, the accepted answer, then a conflicting
    one; returns the states used."""
    first = (await post(r, delete_call())).json()["result"]
    state = first["requestState"]
    tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
    answer = accept(r.note_id)
    for bad in (
        delete_call(requestState=tampered, inputResponses=answer),
        delete_call(requestState=12345, inputResponses=answer),
    ):
        assert (await post(r, bad)).status_code == 400
    changed = delete_call(requestState=state, inputResponses=answer)
    changed["params"]["arguments"]["title"] = "Groceries"
    changed["params"]["_meta"] = meta()
    assert (await post(r, changed)).status_code == 400
    assert (await post(r, delete_call(requestState=state, inputResponses=answer))).is_success
    conflict = delete_call(requestState=state, inputResponses=accept(r.note_id, confirm=False))
    assert (await post(r, conflict)).status_code == 400
    return [state, tampered]


async def refused_setup(r: Run) -> list[str]:
    """A link, sign-ins with a wrong and a foreign token, a wrong CSRF token, a completion, a
    second completion; returns the link token, cookie and CSRF token used."""
    call = {"name": "notes_setup", "arguments": {"workspaceUri": ALICE_NOTES}}
    msg = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {**call}}
    msg["params"]["_meta"] = meta(URL_CAPS)
    first = (await post(r, msg)).json()["result"]
    link = first["inputRequests"]["report_service"]["params"]["url"]
    for token in ("wrong-token", BOB):
        assert (await r.client.post(link, content=f"token={token}", headers=FORM)).status_code in (
            401,
            403,
        )
    signed = await r.client.post(link, content=f"token={ALICE}", headers=FORM)
    name, _, rest = signed.headers["set-cookie"].partition("=")
    cookie = rest.partition(";")[0]
    jar = {"cookie": f"{name}={cookie}"}
    page = await r.client.get(link, headers=jar)
    csrf_match = CSRF_INPUT.search(page.text)
    assert csrf_match is not None
    csrf = csrf_match.group(1)
    headers = {**FORM, **jar}
    wrong = await r.client.post(link, content=f"api_key={SECRET}&csrf=no", headers=headers)
    assert wrong.status_code == 403
    good = f"api_key={SECRET}&csrf={csrf}"
    assert (await r.client.post(link, content=good, headers=headers)).status_code == 200
    assert (await r.client.post(link, content=good, headers=headers)).status_code == 409
    assert (await r.client.get(r.base + "/setup/forged-link")).status_code == 404
    return [httpx.URL(link).path.rpartition("/")[2], cookie, csrf, first["requestState"]]


async def refused_legacy(r: Run) -> None:
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "authorization": f"Bearer {ALICE}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-11-25",
        "mcp-session-id": "not-a-session",
    }
    assert (await r.client.post(r.url, json=msg, headers=headers)).status_code == 404


async def test_every_refusal_is_logged_with_its_reason_and_no_secret_is(
    run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = [ALICE, BOB, SECRET]
    secrets += await refused_states(run)
    secrets += await refused_setup(run)
    await refused_legacy(run)
    for key in run.settings.node.key_ring.keys.values():
        secrets += [base64.b64encode(key).decode(), base64.urlsafe_b64encode(key).decode()]
        secrets += [key.hex(), base64.urlsafe_b64encode(key).decode().rstrip("=")]

    ours = [r for r in caplog.records if r.name.split(".")[0] in ("nodes", "store", "cluster")]
    text, lines = formatter(json_lines=False), formatter(json_lines=True)
    logged = "\n".join(f"{text.format(r)}\n{lines.format(r)}\n{r.args!r}" for r in ours)
    for secret in secrets:
        assert secret not in logged, f"a secret in the log: {secret[:12]}..."
    messages = [r.getMessage() for r in ours]
    for reason in (
        "requestState rejected: authentication failed",
        "requestState rejected: not a string",
        "requestState rejected: args digest mismatch",
        "requestState rejected by the store: conflict",
        "setup sign-in refused: unknown token",
        "setup sign-in refused: token of another principal",
        "setup form refused: missing or wrong CSRF token",
        "setup link refused: used",
        "setup link rejected:",
        "legacy request refused: Session not found",
    ):
        assert any(m.startswith(reason) for m in messages), (reason, messages)
