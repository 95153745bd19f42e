"""Exit codes mean one thing each, a failure is one line, and run folders never collide.

0 valid, 1 a violation, 2 usage or configuration, 3 unknown, 4 the run could not be carried out
(store unreachable, interrupted, I/O error), 130 Ctrl-C (``cluster.exit_codes``; the stop
signals themselves are in ``tests/test_stop_signals.py``). Bad input is refused before anything
is written: the Redis of the test's own stays empty.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import coredis.exceptions
import pytest
import redis
from click.testing import CliRunner

from cluster.cli import main
from cluster.commands.base import DEBUG_ENV, Commands
from cluster.exit_codes import EXIT_NOT_CARRIED_OUT, EXIT_USAGE, EXIT_VALID
from loadgen.run.folder import INCOMPLETE_FILE
from store.client_factory import check_redis_url
from tests.cli_process import GIVE_UP_S, finish, run, start
from tests.own_redis import OwnRedis, free_port, own_redis


@pytest.fixture(scope="module")
def server() -> Iterator[OwnRedis]:
    """A Redis of this module's own: the tests look at every key it holds."""
    with own_redis(None) as started:
        yield started


def _dbsize(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.dbsize())
    finally:
        client.close()


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.slow
def test_an_unreachable_redis_is_exit_4_in_one_line_and_no_run_folder(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    code, _, err = run(["simulate", "--redis", url, "--flows", "10"], tmp_path)
    assert code == EXIT_NOT_CARRIED_OUT, err
    line = _one_error_line(err)
    assert line.startswith(f"Error: cannot reach Redis at {url}")
    assert "Nothing was run" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["http", "https", "redis+tcp"])
def test_a_wrong_url_scheme_is_exit_2_in_one_line_and_writes_no_key(
    server: OwnRedis, tmp_path: Path, scheme: str
) -> None:
    url = f"{scheme}://127.0.0.1:{server.port}/4"
    code, _, err = run(["simulate", "--redis", url, "--flows", "10"], tmp_path)
    assert code == EXIT_USAGE, err
    line = _one_error_line(err)
    assert line.startswith(f"Error: --redis: '{url}' has '{scheme}://'"), line
    assert _dbsize(f"redis://127.0.0.1:{server.port}/4") == 0
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("127.0.0.1:6379", "no scheme"),
        ("redis://:6379/0", "names no host"),
        ("redis://127.0.0.1:99999/0", "not a valid URL"),
        ("redis://127.0.0.1:6379/notes", "must be a number"),
        ("redis://127.0.0.1:0/0", "port 0"),
        ("unix://", "socket's path"),
    ],
)
def test_a_redis_url_is_checked_before_anything_connects(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_redis_url(url)


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://user:pw@cache.example:6380/2", "unix:///r.sock"]
)
def test_good_redis_urls_pass_unchanged(url: str) -> None:
    assert check_redis_url(url) == url


def _failing_group() -> click.Group:
    @click.group(cls=Commands)
    def cli() -> None:
        pass

    @cli.command()
    def unreachable() -> None:
        raise ExceptionGroup("nursery", [coredis.exceptions.ConnectionError("refused")])

    @cli.command()
    def broken() -> None:
        raise KeyError("surprise")

    return cli


def test_a_store_error_deep_in_an_exception_group_is_one_line_exit_4() -> None:
    result = CliRunner().invoke(_failing_group(), ["unreachable"])
    assert result.exit_code == EXIT_NOT_CARRIED_OUT
    assert result.output.strip() == (
        "Error: the store did not answer (refused); is Redis running at the --redis URL? "
        "Nothing was checked."
    )


def test_any_other_failure_is_one_line_exit_4_and_debug_adds_the_traceback() -> None:
    result = CliRunner().invoke(_failing_group(), ["broken"])
    assert result.exit_code == EXIT_NOT_CARRIED_OUT
    assert result.output.strip() == (
        "Error: the run failed: KeyError: 'surprise' (rerun with --debug for the traceback)."
    )
    debug = CliRunner().invoke(_failing_group(), ["broken"], env={DEBUG_ENV: "1"})
    assert debug.exit_code == EXIT_NOT_CARRIED_OUT
    assert "Traceback (most recent call last)" in debug.output
    assert debug.output.strip().splitlines()[-1].startswith("Error: the run failed: KeyError")


SMALL_RUN = ["simulate", "--flows", "150", "--concurrency", "8", "--seed", "3"]


@pytest.mark.slow
def test_two_simulations_started_together_in_one_folder_both_finish(tmp_path: Path) -> None:
    first, second = start(SMALL_RUN, tmp_path), start(SMALL_RUN, tmp_path)
    results = [finish(first), finish(second)]
    for code, out, err in results:
        assert code == EXIT_VALID, out[-2000:] + err[-2000:]
    folders = sorted(p for p in (tmp_path / "runs").iterdir())
    assert len(folders) == 2, folders
    for folder in folders:
        assert (folder / "results.json").is_file()
        assert not (folder / INCOMPLETE_FILE).exists()  # both ran to their end


@pytest.mark.slow
def test_out_refuses_a_non_empty_folder_unless_replace_names_a_run(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work\n", encoding="utf-8")
    code, _, err = run([*SMALL_RUN, "--out", str(mine)], tmp_path)
    assert code == EXIT_USAGE, err
    assert "is not empty; give --replace" in _one_error_line(err)
    code, _, err = run([*SMALL_RUN, "--out", str(mine), "--replace"], tmp_path)
    assert code == EXIT_USAGE, err
    assert "holds files but no run" in _one_error_line(err)
    assert (mine / "thesis.tex").read_text(encoding="utf-8") == "years of work\n"

    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "results.json").write_text("{}\n", encoding="utf-8")
    (earlier / "stale.txt").write_text("from the earlier run\n", encoding="utf-8")
    code, out, err = run([*SMALL_RUN, "--out", str(earlier), "--replace"], tmp_path)
    assert code == EXIT_VALID, out[-2000:] + err[-2000:]
    assert not (earlier / "stale.txt").exists()
    assert json.loads((earlier / "results.json").read_text(encoding="utf-8"))["verdict"] == "valid"


@pytest.mark.slow
def test_check_refuses_an_incomplete_run_folder_and_says_why(tmp_path: Path) -> None:
    folder = tmp_path / "cut"
    folder.mkdir()
    (folder / "history.jsonl").write_text("", encoding="utf-8")
    (folder / INCOMPLETE_FILE).write_text(
        "2026-12-01 10:00:00 started (pid 1): notes-cluster simulate\n"
        "2026-12-01 10:00:09 stopped by SIGTERM\n",
        encoding="utf-8",
    )
    code, out, err = run(["check", str(folder)], tmp_path)
    assert code == EXIT_NOT_CARRIED_OUT, out + err
    line = _one_error_line(err)
    assert "its run did not finish" in line
    assert "stopped by SIGTERM" in line
    assert "Nothing was checked" in line


@pytest.fixture(scope="module")
def valid_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated run whose verdict is VALID (read only: tests copy it to change it)."""
    folder = tmp_path_factory.mktemp("valid") / "run"
    code, out, err = run([*SMALL_RUN, "--out", str(folder)], folder.parent)
    assert code == EXIT_VALID, out[-2000:] + err[-2000:]
    return folder


def _cli() -> list[str]:
    return [sys.executable, "-c", "from cluster.cli import main; main()"]


@pytest.mark.slow
def test_a_valid_run_piped_into_head_exits_0(valid_run: Path) -> None:
    """``notes-cluster check RUN | head -1`` with pipefail: the check's own exit code."""
    check = subprocess.Popen(
        [*_cli(), "check", str(valid_run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert check.stdout is not None
    head = subprocess.run(
        ["head", "-1"], stdin=check.stdout, capture_output=True, timeout=GIVE_UP_S, check=True
    )
    check.stdout.close()  # only head reads the pipe: when it exits, the reader is gone
    _, err = check.communicate(timeout=GIVE_UP_S)
    assert check.returncode == EXIT_VALID, err
    assert b"Verdict: VALID" in head.stdout
    assert b"Traceback" not in err, err
    assert b"BrokenPipe" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_output_into_a_pipe_already_closed_keeps_the_verdict_s_exit_code(
    valid_run: Path, extra: list[str]
) -> None:
    """The reader is gone before the first byte (``check RUN | true``): every write meets EPIPE,
    the exit flush included, and the exit code is still the verdict's, with nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        check = subprocess.Popen(
            [*_cli(), "check", str(valid_run), *extra], stdout=write_end, stderr=subprocess.PIPE
        )
    finally:
        os.close(write_end)
    _, err = check.communicate(timeout=GIVE_UP_S)
    assert check.returncode == EXIT_VALID, err
    assert err == b"", err


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("with_redis", [False, True])
def test_check_of_a_parent_of_two_runs_exits_2_and_writes_nothing(
    valid_run: Path, server: OwnRedis, tmp_path: Path, with_redis: bool
) -> None:
    parent = tmp_path / "runs"
    for name in ("a", "b"):
        shutil.copytree(valid_run, parent / name)
    before = _tree(parent)
    redis_args = ["--redis", f"redis://127.0.0.1:{server.port}/6"] if with_redis else []
    code, out, err = run(["check", str(parent), *redis_args], tmp_path)
    assert code == EXIT_USAGE, out + err
    line = _one_error_line(err)
    assert "is not a run folder but holds 2 runs (a, b)" in line, line
    assert "Nothing was checked" in line
    assert out == ""
    assert _tree(parent) == before
    assert sorted(p.name for p in parent.iterdir()) == ["a", "b"]  # no store/ written


def test_check_of_a_folder_holding_no_run_exits_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "is not a run folder (no history.jsonl or results.json in it)" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.slow
def test_a_run_of_its_own_inside_a_run_folder_is_no_part_of_its_check(
    valid_run: Path, tmp_path: Path
) -> None:
    """Only ``worker-*`` subfolders are the run's load processes: a run kept inside another
    (``shrunk/``, a copy) is not merged into its check."""
    outer = tmp_path / "run"
    shutil.copytree(valid_run, outer)
    shutil.copytree(valid_run, outer / "shrunk")
    alone = json.loads(run(["check", "--json", str(valid_run)], tmp_path)[1])
    code, out, err = run(["check", "--json", str(outer)], tmp_path)
    assert code == EXIT_VALID, err
    assert json.loads(out)["counts"] == alone["counts"]


def test_conformance_against_a_target_nobody_listens_on_exits_4_in_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    result = CliRunner().invoke(main, ["conformance", "--target", url])
    assert result.exit_code == EXIT_NOT_CARRIED_OUT, result.output
    line = _one_error_line(result.output)
    assert line.startswith(f"Error: cannot reach --target {url} (")
    assert "Nothing was checked" in line
    assert "FAILURE" not in result.output


@pytest.mark.slow
@pytest.mark.parametrize("module", ["hdrh", "rich", "httpx"])
def test_check_without_the_sim_extra_names_it(valid_run: Path, module: str) -> None:
    """The module is made missing as an uninstalled one is (``sys.modules[name] = None``)."""
    code = f"import sys; sys.modules[{module!r}] = None; from cluster.cli import main; main()"
    out = subprocess.run(
        [sys.executable, "-c", code, "check", str(valid_run)],
        capture_output=True,
        text=True,
        timeout=GIVE_UP_S,
        check=False,
    )
    assert out.returncode == EXIT_USAGE, out.stderr
    line = _one_error_line(out.stderr)
    assert f"needs the 'sim' extra (missing: {module})" in line, line
    assert "pip install 'notes-cluster[sim]'" in line


def test_any_command_importing_a_missing_extra_s_module_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command that does not ask ``require_extra`` first still names the extra."""
    monkeypatch.setitem(sys.modules, "hdrh", None)

    @click.group(cls=Commands)
    def cli() -> None:
        pass

    @cli.command()
    def histogram() -> None:
        import hdrh  # noqa: F401

    result = CliRunner().invoke(cli, ["histogram"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert _one_error_line(result.output) == (
        "Error: this command needs the 'sim' extra (missing: hdrh); "
        "install it with: pip install 'notes-cluster[sim]'"
    )


@pytest.mark.slow
def test_check_with_redis_never_replaces_the_store_facts_a_run_holds(
    valid_run: Path, server: OwnRedis, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(valid_run, folder)
    before = _tree(folder)
    url = f"redis://127.0.0.1:{server.port}/7"
    code, out, err = run(["check", "--redis", url, str(folder)], tmp_path)
    assert code == EXIT_USAGE, out + err
    line = _one_error_line(err)
    assert "already holds its store facts (store/meta.json)" in line, line
    assert _tree(folder) == before
    assert _dbsize(url) == 0
