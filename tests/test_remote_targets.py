"""A ``--target`` beyond loopback is refused unless the user asks for it, and checked before
anything is sent (``nodes.loopback.remote_hosts``).

The check is pure (no name is resolved, no socket opened), so it is tested on the URLs alone;
the commands' refusal is tested end to end with a target no test may reach (TEST-NET-1,
192.0.2.0/24): it must exit 2 with one line before sending. Nothing here sends traffic beyond
loopback.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cluster.cli import main
from nodes.loopback import (
    REMOTE_MAX_CONCURRENCY,
    REMOTE_MAX_RATE,
    TargetRefused,
    remote_hosts,
    remote_load_bounds,
    remote_traffic_line,
    target_urls,
)

LOOPBACK = [
    "http://127.0.0.1:8700/mcp",
    "http://127.3.4.5/mcp",
    "http://localhost:9000/mcp",
    "http://[::1]:8700/mcp",
    "https://127.0.0.1/mcp",
]
REMOTE = [
    "http://192.0.2.1/mcp",
    "https://staging.example/mcp",
    "http://10.0.0.5:8080/mcp",
    "http://[2001:db8::1]/mcp",
    "http://localhost.example/mcp",
    "http://127.0.0.1.nip.example/mcp",
]


@pytest.mark.parametrize("url", LOOPBACK)
def test_a_loopback_target_needs_no_option(url: str) -> None:
    assert remote_hosts([url], allow_remote=False) == []


@pytest.mark.parametrize("url", REMOTE)
def test_a_target_beyond_loopback_is_refused_without_the_option_naming_it(url: str) -> None:
    with pytest.raises(TargetRefused) as refused:
        remote_hosts(["http://127.0.0.1:8700/mcp", url], allow_remote=False)
    message = str(refused.value)
    assert url in message
    assert "--allow-remote" in message
    assert "nothing was sent" in message
    assert "\n" not in message


@pytest.mark.parametrize("url", REMOTE)
def test_with_the_option_a_target_beyond_loopback_passes_and_is_named(url: str) -> None:
    hosts = remote_hosts(["http://127.0.0.1:8700/mcp", url, url], allow_remote=True)
    assert len(hosts) == 1
    assert hosts[0] in url
    line = remote_traffic_line("loadgen", [url], hosts)
    assert hosts[0] in line
    assert f"at most {REMOTE_MAX_RATE:g} per second" in line


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/mcp", "127.0.0.1:8700/mcp", "http:///mcp", "http://127.0.0.1:99999/"]
)
def test_a_target_that_is_no_http_url_is_refused_even_with_the_option(url: str) -> None:
    with pytest.raises(TargetRefused):
        remote_hosts([url], allow_remote=True)


def test_a_load_beyond_loopback_is_bounded_whatever_was_asked() -> None:
    assert remote_load_bounds(None, 16) == (REMOTE_MAX_RATE, REMOTE_MAX_CONCURRENCY)
    assert remote_load_bounds(1000.0, 4096) == (REMOTE_MAX_RATE, REMOTE_MAX_CONCURRENCY)
    assert remote_load_bounds(0.5, 1) == (0.5, 1)


def test_targets_may_be_repeated_or_comma_separated() -> None:
    given = ("http://127.0.0.1:1/mcp, http://127.0.0.1:2/mcp", "http://127.0.0.1:3/mcp")
    assert target_urls(given) == [f"http://127.0.0.1:{i}/mcp" for i in (1, 2, 3)]


@pytest.mark.parametrize(
    "args",
    [
        ["conformance", "--target", "http://192.0.2.1/mcp"],
        ["loadgen", "--foreign", "--state-ttl", "5", "--target", "http://192.0.2.1/mcp"],
        ["loadgen", "--demo", "--target", "http://127.0.0.1:9/mcp,http://192.0.2.1/mcp"],
    ],
)
def test_the_commands_refuse_a_remote_target_in_one_line_with_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "192.0.2.1 is beyond loopback" in lines[0]
    assert "--allow-remote" in lines[0]


def test_with_allow_remote_the_command_says_where_traffic_goes_before_anything_else() -> None:
    # Bad --arguments stop the command after the target check and before any request: the line
    # is printed, nothing is sent.
    args = ["conformance", "--allow-remote", "--target", "http://192.0.2.1/mcp"]
    result = CliRunner().invoke(main, [*args, "--tool", "t", "--arguments", "[1]"])
    assert result.exit_code == 2, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("conformance: sending traffic beyond loopback to 192.0.2.1")
    assert "--arguments: not a JSON object" in result.output
