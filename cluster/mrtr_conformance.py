"""``notes-cluster conformance``: the MRTR exactly-once pack (``loadgen.mrtr_pack``) run against
the instances of any MCP server, with defaults that fit our demo nodes.

Layer: cluster. Knows the demo fixture (its tools, workspace and tokens), which the pack, a
client in loadgen, must not: without ``--tool`` the pack is told our tool contract.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import httpx

from loadgen.mrtr_pack.case import Contract
from loadgen.mrtr_pack.checks import Check
from loadgen.mrtr_pack.pack import PARALLEL, run_pack, write_report
from nodes.serving.demo import ALICE_NOTES, DEMO_TOKENS

DEMO_TITLE = "conformance {fresh}"
"""Each scenario's notes get their own title: the pack never touches the demo's own notes."""


def _token(principal: str) -> str:
    return next(token for token, p in DEMO_TOKENS.items() if p == principal)


def demo_contract(
    state_ttl_s: float | None = None, copies: int = 4, expiry_margin_s: float = 1.0
) -> Contract:
    """Our tool contract on the demo fixture: alice deletes (or archives) a note of her Notes
    that the pack made (``notes_create``) and observes with ``notes_list``; bob is the other
    principal."""
    where = {"workspaceUri": ALICE_NOTES, "title": DEMO_TITLE}
    args = json.dumps(where)
    return Contract(
        tool="notes_delete",
        arguments=args,
        create_tool="notes_create",
        create_arguments=json.dumps({**where, "body": "made by the MRTR conformance pack"}),
        read_tool="notes_list",
        read_arguments=args,
        other_tool="notes_archive",
        other_arguments=args,
        token=_token("alice"),
        other_token=_token("bob"),
        copies=copies,
        state_ttl_s=state_ttl_s,
        expiry_margin_s=expiry_margin_s,
    )


async def run_conformance(
    urls: Sequence[str],
    contract: Contract,
    out_dir: Path | None = None,
    *,
    one_at_a_time: bool = False,
) -> list[Check]:
    """Run the pack against ``urls``; write ``checks.json`` and ``checks.md`` to ``out_dir``.
    ``one_at_a_time``: scenarios in turn (a target beyond loopback gets a trickle)."""
    async with httpx.AsyncClient() as client:
        checks = await run_pack(urls, contract, client, parallel=1 if one_at_a_time else PARALLEL)
    if out_dir is not None:
        write_report(out_dir, checks, urls)
    return checks
