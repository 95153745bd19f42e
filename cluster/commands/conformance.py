"""``notes-cluster conformance``: the MRTR conformance pack against any MCP server.

Layer: cluster. The work is ``cluster.mrtr_conformance`` and ``loadgen.mrtr_pack``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cluster.commands.base import (
    ALLOW_REMOTE_HELP,
    checked_targets,
    require_extra,
    run_until_stopped,
)
from cluster.exit_codes import (
    EXIT_INVALID,
    EXIT_VALID,
    NotCarriedOut,
)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


CONFORMANCE_EXAMPLES = """
\b
Examples (our demo nodes; any server: name its tool with --tool and --arguments):
  notes-cluster serve --demo --nodes 3 --port 8700 --state-ttl 10 &
  notes-cluster conformance --state-ttl 10 --out runs/pack-ours \\
      --target http://127.0.0.1:8700/mcp,http://127.0.0.1:8701/mcp,http://127.0.0.1:8702/mcp
  notes-cluster conformance --tool transfer --arguments '{"account": "acc-{fresh}"}' \\
      --read-tool balance --target http://127.0.0.1:9000/mcp
"""


@click.command(
    "conformance",
    help="Check a confirm-before-act tool of any MCP server for exactly-once under retries, "
    "duplicates, lost responses, expiry and forged states (the MRTR conformance pack). Without "
    "--tool the defaults fit our demo nodes (`serve --demo`). Writes checks.json and checks.md "
    "with --out; exit 0 when no check fails, 1 on a failure, 2 on bad usage, 4 when a target "
    "cannot be reached (nothing is checked).\n" + CONFORMANCE_EXAMPLES,
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    help="An instance's endpoint URL (repeat, or comma-separate, for several instances).",
)
@click.option(
    "--traceability",
    is_flag=True,
    help="Print which spec sentence each check tests (the pack's traceability file, in the "
    "official suite's SEP format) and exit.",
)
@click.option("--tool", default=None, help="The confirm-before-act tool (default: notes_delete).")
@click.option("--arguments", default=None, help="Its arguments, JSON; {fresh} is replaced.")
@click.option("--create-tool", default=None, help="A tool that makes the target first.")
@click.option("--create-arguments", default=None, help="Its arguments (default: --arguments).")
@click.option("--read-tool", default=None, help="A tool that observes the effect.")
@click.option("--read-arguments", default=None, help="Its arguments (default: --arguments).")
@click.option("--other-tool", default=None, help="A second confirm-before-act tool.")
@click.option("--other-arguments", default=None, help="Its arguments (default: --arguments).")
@click.option("--token", default=None, help="Bearer token (default: none; demo: alice's).")
@click.option("--other-token", default=None, help="Another principal's bearer token.")
@click.option("--copies", default=4, show_default=True, type=click.IntRange(2, 64))
@click.option(
    "--state-ttl",
    default=None,
    type=click.FloatRange(0.5, 3600),
    help="The target's requestState lifetime in seconds (the expiry checks need it).",
)
@click.option("--expiry-margin", default=1.0, show_default=True, type=click.FloatRange(0.1, 60))
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print checks.json instead of the table.")
@click.option(
    "--allow-remote",
    is_flag=True,
    help=ALLOW_REMOTE_HELP + " Beyond loopback the scenarios run one at a time.",
)
def conformance(
    targets: tuple[str, ...],
    traceability: bool,
    tool: str | None,
    arguments: str | None,
    create_tool: str | None,
    create_arguments: str | None,
    read_tool: str | None,
    read_arguments: str | None,
    other_tool: str | None,
    other_arguments: str | None,
    token: str | None,
    other_token: str | None,
    copies: int,
    state_ttl: float | None,
    expiry_margin: float,
    out_dir: Path | None,
    as_json: bool,
    allow_remote: bool,
) -> None:
    """``notes-cluster conformance``."""
    import json
    from dataclasses import replace

    if traceability:
        require_extra("sim", only=("yaml",))
        from loadgen.mrtr_pack.traceability import text

        click.echo(text(), nl=False)
        return
    if not targets:
        raise click.UsageError("give --target URL (or --traceability)")
    require_extra("sim", only=("httpx",))
    from cluster.mrtr_conformance import demo_contract, run_conformance
    from loadgen.mrtr_pack.case import Contract, fill
    from loadgen.mrtr_pack.checks import failed, markdown

    urls, remote = checked_targets("conformance", targets, allow_remote)
    if tool is None:
        if arguments is not None:
            raise click.UsageError("--arguments needs --tool")
        base = demo_contract(state_ttl, copies)
    else:
        base = Contract(tool=tool, arguments=arguments or "{}", copies=copies)
        base = replace(base, state_ttl_s=state_ttl)
    given: dict[str, Any] = {
        "create_tool": create_tool,
        "create_arguments": create_arguments,
        "read_tool": read_tool,
        "read_arguments": read_arguments,
        "other_tool": other_tool,
        "other_arguments": other_arguments,
        "token": token,
        "other_token": other_token,
    }
    contract = replace(
        base, expiry_margin_s=expiry_margin, **{k: v for k, v in given.items() if v is not None}
    )
    for name in ("arguments", "create_arguments", "read_arguments", "other_arguments"):
        template = getattr(contract, name)
        try:
            if template is not None:
                fill(template, 1)
        except ValueError as exc:
            option = "--" + name.replace("_", "-")
            raise click.UsageError(f"{option}: not a JSON object ({exc})") from None
    _refuse_unreachable(urls)
    checks = run_until_stopped(
        lambda: run_conformance(urls, contract, out_dir, one_at_a_time=bool(remote))
    )
    if as_json:
        click.echo(json.dumps([c.to_json() for c in checks], indent=2))
    else:
        click.echo(markdown(checks, urls, requirements=False))
    sys.exit(EXIT_INVALID if failed(checks) else EXIT_VALID)


CONNECT_TIMEOUT_S = 5.0
"""How long the reachability probe waits for a target's TCP connection."""


def _refuse_unreachable(urls: list[str]) -> None:
    """Exit 4 in one line when a target's host and port take no connection: a scenario run
    against nothing would report every check failed, which reads as a violation. The probe is a
    TCP connection only, so it sends the server nothing."""
    import socket
    from urllib.parse import urlsplit

    for url in urls:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname or "", port), CONNECT_TIMEOUT_S):
                pass
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise NotCarriedOut(
                f"cannot reach --target {url} ({why}); is the server running? Nothing was checked."
            ) from None
