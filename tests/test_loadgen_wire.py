"""The load generator's own wire definitions: its headers, its reply type and how it classifies
answers. They share no code with the node, so these tests hold them to the node's behaviour.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from cluster.faults import LossyTransport, ResponseLost
from cluster.local import InProcessTransport, open_local_cluster
from loadgen.clients import Client, classify, request
from loadgen.history import History
from loadgen.transport import NodeDown, Reply, Transport, header_value, request_headers
from nodes.headers import check_headers, decode_header_value
from nodes.serving.demo import ALICE_NOTES
from tests.harness import demo_config


def _result(structured: dict[str, Any], **more: Any) -> Reply:
    result = {"resultType": "complete", "structuredContent": structured, "isError": False}
    return Reply(200, {"jsonrpc": "2.0", "id": 1, "result": result | more})


def test_an_archive_answer_is_recorded_as_an_executed_archive_not_as_nothing_deleted() -> None:
    out = classify(_result({"archived": True, "noteId": "n1"}))
    assert out.type == "ok"
    assert out.value["executed"] is True
    assert out.value["op"] == "archive"
    assert (out.value["archived"], out.value["deleted"]) == (True, False)
    assert out.value["noteId"] == "n1"


def test_a_delete_answer_and_its_replay_are_executed_deletes_the_replay_marked() -> None:
    fresh = classify(_result({"deleted": True, "noteId": "n1"}))
    again = classify(
        _result({"deleted": True, "noteId": "n1"}, _meta={"dev.notes-cluster/replay": True})
    )
    assert (fresh.value["op"], fresh.value["replay"]) == ("delete", False)
    assert (again.value["op"], again.value["replay"]) == ("delete", True)


def test_a_declined_answer_and_a_tool_error_executed_nothing() -> None:
    declined = classify(_result({"deleted": False, "noteId": "n1"}))
    failed = classify(_result({"error": "gone", "archived": False}, isError=True))
    for out in (declined, failed):
        assert out.value["executed"] is False
        assert "op" not in out.value
    assert failed.value["isError"] is True


def test_a_reask_and_an_unknown_outcome_are_told_apart() -> None:
    reask = Reply(200, {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required"}})
    unknown = Reply(500, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}})
    assert classify(reask).value["reask"] is True
    assert classify(unknown).type == "info"


@pytest.mark.parametrize(
    "name", ["notes_delete", "Café notes", " leading space", "=?base64?QUJD?=", "tab\there"]
)
def test_the_node_accepts_the_headers_the_load_generator_builds(name: str) -> None:
    message = request("tools/call", {"name": name, "arguments": {}})
    headers = request_headers(message)
    params = message["params"]
    check_headers(headers, "tools/call", params, params["_meta"][META])  # raises on a mismatch
    assert decode_header_value(headers["mcp-name"]) == name
    assert headers["mcp-name"].isascii()
    assert header_value(name) == headers["mcp-name"]


META = "io.modelcontextprotocol/protocolVersion"


async def test_in_process_and_lossy_transports_speak_the_load_generators_contract() -> None:
    async with open_local_cluster(demo_config(), 2) as cluster:
        plain: Transport = InProcessTransport(cluster)
        lossy = LossyTransport(plain, seed=1)
        args = {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
        msg = request("tools/call", {"name": "notes_delete", "arguments": args})
        reply = await plain.send(0, "alice", msg)
        assert type(reply) is Reply  # loadgen's own, converted from the node's
        assert reply.body is not None
        assert reply.body["result"]["resultType"] == "input_required"
        lossy.p = 1.0
        with pytest.raises(ResponseLost):
            await lossy.send(1, "alice", msg)
        assert isinstance(ResponseLost("x"), NodeDown)
        cluster.stop_node(1)
        with pytest.raises(NodeDown):
            await plain.send(1, "alice", msg)
        history = History()
        client = Client(0, lossy, history, rng=random.Random(1))
        out = await client.op("ask", 0, "plain", {}, 1, "alice", msg)
        assert (out.type, out.value["reason"]) == ("info", "unreachable: NodeDown")
