"""Interop with the TypeScript side: the MCP Inspector's CLI and the two TypeScript SDK clients.

Layer: tests. The clients are npm packages no one here wrote, pinned in ``tests/js/package.json``
and run on Node 22 (``.ci/install-node`` installs both; see ``tests/js_clients.py``): the
Inspector (``@modelcontextprotocol/inspector`` CLI), the v2 client
(``@modelcontextprotocol/client``, 2026-07-28: ``input_required`` and ``requestState``) driven by
``tests/js/client_v2.mjs``, and
the v1 SDK (``@modelcontextprotocol/sdk``, 2025-11-25, the legacy adapter) driven by
``tests/js/client_legacy.mjs``. Two HTTP nodes serve one store (embedded and real Redis, as in
``tests/test_sdk_interop.py``); the scripts' fetch sends each HTTP request to the next node, so
the rounds of a delete and the answers to a node's questions land on different nodes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from cluster.serve import seed_demo_notes, start_http_nodes
from nodes.results import META_ERROR, META_REPLAY
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_TENANT, TEAM
from nodes.serving.settings import demo_settings
from nodes.tools import DEFAULT_TOOLS
from store.client_factory import open_redis
from store.notes import NoteStore
from tests.js_clients import JsEnv, NodeRun, require_js, run_node
from tests.test_sdk_interop import ALICE_TOKEN, CREATED_2024, TPS, tps_reports

ALICE_DOCS = "file:///Users/alice/Documents"
OUR_TOOLS = sorted(t.name for t in DEFAULT_TOOLS)
INSPECTOR = "@modelcontextprotocol/inspector"
SCHEMA_ERRORS = ("must have required property", "output schema", "outputSchema")
"""What a client-side schema error of the TypeScript SDK says (a defect of the SDK)."""


@pytest.fixture
def js() -> JsEnv:
    return require_js()


@pytest.fixture
async def node_urls(
    redis_url: str, embedded_url: str, key_prefix: str, nursery: trio.Nursery
) -> list[str]:
    """Two HTTP nodes over the store under test, seeded with the demo notes."""
    embedded = redis_url == embedded_url
    await seed_demo_notes(redis_url, embedded, prefix=key_prefix)
    return await start_http_nodes(
        nursery, demo_settings(), redis_url, count=2, embedded=embedded, prefix=key_prefix
    )


@pytest.fixture
async def embedded_cluster(
    embedded_url: str, nursery: trio.Nursery
) -> AsyncIterator[tuple[list[str], NoteStore]]:
    """Two HTTP nodes over the embedded store, and that store. (The Inspector's calls cost a
    Node start each; what they check is the node's answers, the same on either store.)"""
    prefix = "nct" + secrets.token_hex(5)
    await seed_demo_notes(embedded_url, True, prefix=prefix)
    urls = await start_http_nodes(
        nursery, demo_settings(), embedded_url, count=2, embedded=True, prefix=prefix
    )
    async with open_redis(embedded_url, embedded=True) as client:
        yield urls, NoteStore(client, prefix=prefix)


async def run_client(js: JsEnv, script: str, urls: list[str], home: Path) -> dict[str, Any]:
    """Run one client script as alice against ``urls``; its one JSON line."""
    env = {"NOTES_URLS": ",".join(urls), "NOTES_TOKEN": ALICE_TOKEN}
    done = await run_node(js, [script], home=home, env=env)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = done.json_line()
    return out


def the_2024_report(before: dict[str, int]) -> str:
    """The 2024 TPS report (the one the scripts pick), by the store's own record."""
    (picked,) = (n for n, ms in before.items() if ms == 1_719_835_200_000)
    return picked


def delete_form_options(forms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in forms if "noteId" in f["requestedSchema"]["properties"]]


async def test_the_v2_typescript_client_deletes_across_two_nodes_and_sees_the_replay(
    js: JsEnv, node_urls: list[str], store: NoteStore, tmp_path: Path
) -> None:
    before = await tps_reports(store)
    assert len(before) == 3
    picked = the_2024_report(before)
    out = await run_client(js, "client_v2.mjs", node_urls, tmp_path)

    assert (out["protocolVersion"], out["era"]) == ("2026-07-28", "modern")
    assert out["tools"] == OUR_TOOLS
    created = out["created"]
    assert created["title"] == "TS v2 interop"
    assert "TS v2 interop" in out["listedTitles"]
    assert (await store.get(DEMO_TENANT, created["noteId"])) is not None
    # notes_search without a workspace: the client's roots (one root over two workspaces), then
    # its pick, through MRTR.
    assert out["rootsAsked"] >= 1
    assert {n["workspaceUri"] for n in out["searched"]["notes"]} == {ALICE_NOTES}
    assert {n["noteId"] for n in out["searched"]["notes"]} == set(before)

    (form,) = delete_form_options(out["forms"])
    options = form["requestedSchema"]["properties"]["noteId"]["oneOf"]
    assert {o["const"] for o in options} == set(before)
    assert CREATED_2024 in next(o["title"] for o in options if o["const"] == picked)
    assert out["deleted"] == {
        "isError": False,
        "structuredContent": {"deleted": True, "noteId": picked},
    }
    # The same confirmation again: the recorded outcome, marked as a replay.
    assert out["replayed"] == {
        "isError": False,
        "structuredContent": {"deleted": True, "noteId": picked},
        "replay": True,
    }
    after = await tps_reports(store)
    assert after == {k: v for k, v in before.items() if k != picked}

    # Round 1, round 2 and the retry of round 2: each on the other node than the one before.
    rounds = [h for h in out["hops"] if h["name"] == "notes_delete"]
    assert [h["retry"] for h in rounds] == [False, True, True]
    assert rounds[0]["node"] != rounds[1]["node"] != rounds[2]["node"]
    assert len({h["id"] for h in rounds}) == 3
    assert out["refused"] == {
        "isError": True,
        "text": "not authorized for workspace 'file:///Users/alice/Documents/Notes-evil'",
    }


async def test_the_v1_typescript_sdk_deletes_once_through_the_legacy_adapter_across_two_nodes(
    js: JsEnv, node_urls: list[str], store: NoteStore, tmp_path: Path
) -> None:
    before = await tps_reports(store)
    picked = the_2024_report(before)
    out = await run_client(js, "client_legacy.mjs", node_urls, tmp_path)

    assert out["protocolVersion"] == "2025-11-25"
    assert out["sessionId"] is True
    assert out["tools"] == OUR_TOOLS
    assert "TS legacy interop" in out["listedTitles"]
    assert (await store.get(DEMO_TENANT, out["created"]["noteId"])) is not None
    assert {n["noteId"] for n in out["searched"]["notes"]} == set(before)
    assert out["rootsAsked"] >= 1

    first, second = delete_form_options(out["forms"])
    shown = first["requestedSchema"]["properties"]["noteId"]["oneOf"]
    assert {o["const"] for o in shown} == set(before)
    assert out["deleted"] == {
        "isError": False,
        "structuredContent": {"deleted": True, "noteId": picked},
    }
    # Every answer was POSTed twice, to both nodes (as after a lost 202): both accepted, only
    # the first counted. The retried delete shows only what is left; it was declined.
    answers = [h for h in out["hops"] if h["method"] == "response"]
    assert answers
    for hop in answers:
        assert hop["status"] == 202
        assert hop["duplicate"]["status"] == 202
        assert hop["duplicate"]["node"] != hop["node"]
    left = {o["const"] for o in second["requestedSchema"]["properties"]["noteId"]["oneOf"]}
    assert left == set(before) - {picked}
    assert out["again"] == {"isError": False, "structuredContent": {"deleted": False}}
    assert await tps_reports(store) == {k: v for k, v in before.items() if k != picked}

    # The call and the answer to its form were served by different nodes.
    hops = out["hops"]
    for i, hop in enumerate(hops):
        if hop["name"] == "notes_delete":
            answer = next(h for h in hops[i + 1 :] if h["method"] == "response")
            assert answer["node"] != hop["node"]
    assert out["refused"]["isError"] is True
    assert out["refused"]["text"].startswith(
        f"The workspace {TEAM} is outside this client's roots: the roots it listed ({ALICE_DOCS})"
    )


# --- the MCP Inspector's CLI ----------------------------------------------------------------


class Inspector:
    """``npx @modelcontextprotocol/inspector --cli`` as a user runs it, against node 0."""

    def __init__(self, js: JsEnv, url: str, home: Path) -> None:
        self.js = js
        self.url = url
        self.home = home
        self.script = js.bin(INSPECTOR, "mcp-inspector")
        self.config = home / "inspector.json"
        self.config.write_text(
            json.dumps(
                {
                    "mcpServers": {
                        "notes": {
                            "type": "streamable-http",
                            "url": url,
                            "headers": {"Authorization": f"Bearer {ALICE_TOKEN}"},
                            "roots": [{"uri": ALICE_DOCS, "name": "Documents"}],
                        }
                    }
                }
            )
        )

    async def call(self, mode: str, tool: str, **args: str) -> NodeRun:
        """One ``tools/call``: ``mode`` is ``legacy`` (the CLI's default: 2025-11-25, roots
        declared, none listed), ``roots`` (legacy, with a root in the config file) or
        ``modern`` (``--protocol-era modern``)."""
        if mode == "roots":
            target = ["--config", str(self.config), "--server", "notes"]
        else:
            auth = f"Authorization: Bearer {ALICE_TOKEN}"
            target = [self.url, "--header", auth, "--protocol-era", mode]
        argv: list[str | Path] = [self.script, "--cli", *target, "--format", "json"]
        argv += [
            "--method",
            "tools/call",
            "--tool-name",
            tool,
            "--tool-args-json",
            json.dumps(args),
        ]
        done = await run_node(
            self.js, argv, home=self.home, env={"MCP_INSPECTOR_SECRET_STORE": "memory"}
        )
        for text in (done.stdout, done.stderr):
            for schema_error in SCHEMA_ERRORS:
                assert schema_error not in text, (tool, mode, done)
        return done


def tool_result(done: NodeRun) -> dict[str, Any]:
    """What the Inspector printed for a tool result (exit 0, or 5 for ``isError``)."""
    assert done.returncode in (0, 5), done
    result: dict[str, Any] = json.loads(done.stdout)["result"]
    assert (done.returncode == 5) is (result.get("isError") is True), done
    return result


def error_text(done: NodeRun) -> str:
    """The tool's error text as the Inspector printed it: the text of an ``isError`` result."""
    result = tool_result(done)
    assert result["isError"] is True
    assert "structuredContent" not in result
    text: str = result["content"][0]["text"]
    assert result["_meta"][META_ERROR]["error"] == text
    return text


def rpc_error(done: NodeRun) -> str:
    """The message of a JSON-RPC error, as the Inspector printed it (exit 1, on stderr)."""
    assert done.returncode == 1, done
    last = [line for line in done.stderr.splitlines() if line.startswith("{")][-1]
    message: str = json.loads(last)["error"]["message"]
    return message


async def test_the_inspector_cli_prints_every_tools_result_or_its_error_text(
    js: JsEnv, embedded_cluster: tuple[list[str], NoteStore], tmp_path: Path
) -> None:
    node_urls, store = embedded_cluster
    inspector = Inspector(js, node_urls[0], tmp_path)
    notes = {"workspaceUri": ALICE_NOTES}
    before = await tps_reports(store)

    # Its default: 2025-11-25, the roots capability declared, no root listed. Every tool that
    # names a workspace is refused with the reason and what to do; nothing changes.
    empty_roots = "the client declared the roots capability but listed no roots"
    for tool, args in [
        ("notes_list", notes),
        ("notes_create", {**notes, "title": "From the Inspector"}),
        ("notes_delete", {**notes, "title": TPS}),
        ("notes_archive", {**notes, "title": TPS}),
        ("notes_setup", notes),
        ("notes_update", {**notes, "noteId": "n0000000000000000", "title": "x"}),
        ("notes_move", {**notes, "noteId": "n0000000000000000", "targetWorkspaceUri": TEAM}),
    ]:
        text = error_text(await inspector.call("legacy", tool, **args))
        assert empty_roots in text, (tool, text)
        assert "add it (or a folder above it) to the client's roots" in text
    text = error_text(await inspector.call("legacy", "notes_search", title=TPS))
    assert text.startswith("None of your roots contains a workspace you are authorized for")
    assert await tps_reports(store) == before

    # With a root in its config file, and with --protocol-era modern: results.
    for mode in ("roots", "modern"):
        listed = tool_result(await inspector.call(mode, "notes_list", **notes))
        assert {n["noteId"] for n in listed["structuredContent"]["notes"]} >= set(before)
        found = tool_result(await inspector.call(mode, "notes_search", title=TPS, **notes))
        assert {n["noteId"] for n in found["structuredContent"]["notes"]} == set(before)
        created = tool_result(await inspector.call(mode, "notes_create", title=mode, **notes))
        note = created["structuredContent"]["noteId"]
        updated = tool_result(
            await inspector.call(mode, "notes_update", noteId=note, title=f"{mode} 2", **notes)
        )
        assert updated["structuredContent"]["title"] == f"{mode} 2"
        moved = tool_result(
            await inspector.call(
                mode, "notes_move", noteId=note, targetWorkspaceUri=ALICE_ARCHIVE, **notes
            )
        )
        assert moved["structuredContent"]["uri"] == f"{ALICE_ARCHIVE}/{note}.md"
        # The CLI cannot show a form: it declares no elicitation, and the node says which
        # capability the tool needs (legacy: -32602, modern: -32021; same message).
        for tool, needed in [
            ("notes_delete", "elicitation.form"),
            ("notes_archive", "elicitation.form"),
            ("notes_setup", "elicitation.url"),
        ]:
            args = notes if tool == "notes_setup" else {**notes, "title": TPS}
            message = rpc_error(await inspector.call(mode, tool, **args))
            assert message == f"Missing required client capability: {needed}", (mode, tool)
        # A refusal is the tool's own text.
        evil = {"workspaceUri": "file:///Users/alice/Documents/Notes-evil"}
        text = error_text(await inspector.call(mode, "notes_list", **evil))
        if mode == "roots":
            assert "not authorized" in text  # inside the root, outside the grants
        else:
            assert text == "not authorized for workspace 'file:///Users/alice/Documents/Notes-evil'"
    assert await tps_reports(store) == before


def test_the_replay_key_the_scripts_read_is_the_nodes() -> None:
    # client_v2.mjs reads the replay mark under this key; keep them together.
    script = (Path(__file__).parent / "js" / "client_v2.mjs").read_text()
    assert f"'{META_REPLAY}'" in script


@pytest.mark.parametrize(
    ("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)]
)
def test_missing_node_fails_under_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("NOTES_CLUSTER_NODE_HOME", str(tmp_path))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"no Node 22 at .*: run \.ci/install-node"):
        require_js()
