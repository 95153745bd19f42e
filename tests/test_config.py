"""The TOML configuration: a documented file loads; every mistake is a clear ConfigError."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from nodes.serving.durability import AUTO, WaitReplicas
from nodes.serving.settings import ConfigError, load_settings

KEY_K1 = base64.b64encode(b"\x01" * 32).decode()
KEY_K2 = base64.b64encode(b"\x02" * 32).decode()
TOKEN = "a-test-token-that-is-not-a-secret"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(body, encoding="utf-8")
    return path


def config_text(key_file: Path, extra: str = "") -> str:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    return f"""
server_name = "acme-notes"
state_ttl_seconds = 120
replay_grace_seconds = 30
{extra}
[state_keys]
active = "k2"
k1 = "env:NOTES_TEST_KEY_K1"
k2 = "file:{key_file}"

[workspaces]
"file:///Users/alice/Documents/Notes" = "acme"
"file:///Users/alice/Documents/Notes-evil" = "acme"

[principals.alice]
token_sha256 = ["{digest}"]
grants = ["file:///Users/alice/Documents/Notes"]
"""


@pytest.fixture
def key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NOTES_TEST_KEY_K1", KEY_K1)
    path = tmp_path / "k2.key"
    path.write_text(KEY_K2 + "\n", encoding="utf-8")
    return path


def test_a_documented_config_loads_scope_tokens_keys_and_tunables(
    tmp_path: Path, key_file: Path
) -> None:
    settings = load_settings(write(tmp_path, config_text(key_file)))
    node = settings.node
    assert node.server_name == "acme-notes"
    assert node.state_ttl_ms == 120_000
    assert settings.replay_grace_ms == 30_000
    assert node.key_ring.active == "k2"
    assert set(node.key_ring.keys) == {"k1", "k2"}
    assert settings.tokens.authenticate(f"Bearer {TOKEN}") == "alice"
    assert settings.tokens.authenticate("Bearer another-token") is None
    ws = node.scope.authorize("alice", "file:///Users/alice/Documents/Notes")
    assert ws.tenant == "acme"


def test_a_state_sealed_under_the_old_key_still_opens_after_rotation(
    tmp_path: Path, key_file: Path
) -> None:
    from dataclasses import replace

    ring = load_settings(write(tmp_path, config_text(key_file))).node.key_ring
    old = replace(ring, active="k1")
    from nodes.sealing import StatePayload

    payload = StatePayload(
        principal="alice",
        audience="acme-notes",
        method="tools/call",
        tool="notes_delete",
        args_digest="0" * 64,
        workspace="file:///x",
        tenant="acme",
        candidates=(),
        phase="confirm",
        nonce="n" * 22,
        issued_ms=1,
        exp_ms=2,
    )
    assert ring.open(old.seal(payload), audience="acme-notes") == payload


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            "state_ttl_seconds = 120",
            "state_ttl_seconds = 120\nunknown_setting = 1",
            "unknown_setting",
        ),
        ("state_ttl_seconds = 120", "state_ttl_seconds = -5", "state_ttl_seconds"),
        ('server_name = "acme-notes"', "server_name = 7", "server_name"),
    ],
)
def test_a_wrong_setting_is_named_in_the_error(
    tmp_path: Path, key_file: Path, old: str, new: str, needle: str
) -> None:
    body = config_text(key_file).replace(old, new, 1)
    with pytest.raises(ConfigError, match=needle):
        load_settings(write(tmp_path, body))


def test_a_missing_key_variable_is_refused_without_printing_any_key(
    tmp_path: Path, key_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOTES_TEST_KEY_K1")
    with pytest.raises(ConfigError, match="k1") as err:
        load_settings(write(tmp_path, config_text(key_file)))
    assert KEY_K2 not in str(err.value)


def test_invalid_toml_missing_file_and_bad_token_hash_are_clear_errors(
    tmp_path: Path, key_file: Path
) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(write(tmp_path, "server_name = ["))
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.toml")
    bad = config_text(key_file).replace(hashlib.sha256(TOKEN.encode()).hexdigest(), "plain")
    with pytest.raises(ConfigError, match="sha256"):
        load_settings(write(tmp_path, bad))


def test_a_grant_with_a_traversal_uri_is_refused(tmp_path: Path, key_file: Path) -> None:
    bad = config_text(key_file).replace(
        'grants = ["file:///Users/alice/Documents/Notes"]',
        'grants = ["file:///Users/alice/Documents/Notes/%2e%2e"]',
    )
    with pytest.raises(ConfigError):
        load_settings(write(tmp_path, bad))


def test_the_active_key_must_be_named(tmp_path: Path, key_file: Path) -> None:
    with pytest.raises(ConfigError, match="active"):
        load_settings(write(tmp_path, config_text(key_file).replace('active = "k2"\n', "")))


def test_the_input_bounds_have_safe_defaults_and_load_from_the_file(
    tmp_path: Path, key_file: Path
) -> None:
    default = load_settings(write(tmp_path, config_text(key_file))).node
    assert (default.max_note_body_bytes, default.max_notes_per_workspace) == (65_536, 10_000)
    assert default.list_page_size == 100
    extra = "max_note_body_bytes = 4096\nmax_notes_per_workspace = 50\nlist_page_size = 20\n"
    node = load_settings(write(tmp_path, config_text(key_file, extra))).node
    assert (node.max_note_body_bytes, node.max_notes_per_workspace) == (4096, 50)
    assert node.list_page_size == 20


@pytest.mark.parametrize(
    "line",
    ["max_note_body_bytes = 0", "max_notes_per_workspace = 0", "list_page_size = 1001"],
)
def test_an_input_bound_out_of_range_is_refused_by_name(
    tmp_path: Path, key_file: Path, line: str
) -> None:
    with pytest.raises(ConfigError, match=line.split(" ")[0]):
        load_settings(write(tmp_path, config_text(key_file, line + "\n")))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("", AUTO),
        ('wait_replicas = "auto"', AUTO),
        ("wait_replicas = 0", 0),
        ("wait_replicas = 2", 2),
    ],
)
def test_the_config_file_sets_the_durability_mode_auto_by_default(
    tmp_path: Path, key_file: Path, line: str, expected: WaitReplicas
) -> None:
    settings = load_settings(write(tmp_path, config_text(key_file, line)))
    assert settings.wait_replicas == expected


@pytest.mark.parametrize("line", ['wait_replicas = "sometimes"', "wait_replicas = -1"])
def test_a_wrong_durability_mode_is_named_in_the_error(
    tmp_path: Path, key_file: Path, line: str
) -> None:
    with pytest.raises(ConfigError, match="wait_replicas"):
        load_settings(write(tmp_path, config_text(key_file, line)))


def test_the_idempotency_window_is_an_hour_by_default_and_loads_from_the_file(
    tmp_path: Path, key_file: Path
) -> None:
    default = load_settings(write(tmp_path, config_text(key_file))).node
    assert default.idempotency_window_ms == 3_600_000
    extra = "idempotency_window_seconds = 120\n"
    node = load_settings(write(tmp_path, config_text(key_file, extra))).node
    assert node.idempotency_window_ms == 120_000
    with pytest.raises(ConfigError, match="idempotency_window_seconds"):
        load_settings(write(tmp_path, config_text(key_file, "idempotency_window_seconds = 0\n")))


def test_quotas_and_the_header_bound_have_safe_defaults_and_load_from_the_file(
    tmp_path: Path, key_file: Path
) -> None:
    default = load_settings(write(tmp_path, config_text(key_file)))
    assert default.max_header_bytes == 32_768
    node = default.node
    assert (node.max_notes_per_principal, node.max_bytes_per_principal) == (10_000, 64 * 2**20)
    assert node.max_share_of_shared_workspace == 0.5
    extra = (
        "max_header_bytes = 8192\nmax_notes_per_principal = 50\n"
        "max_bytes_per_principal = 100000\nmax_share_of_shared_workspace = 0.25\n"
        "max_notes_per_workspace = 40\n"
    )
    settings = load_settings(write(tmp_path, config_text(key_file, extra)))
    assert settings.max_header_bytes == 8192
    node = settings.node
    assert (node.max_notes_per_principal, node.max_bytes_per_principal) == (50, 100_000)
    # Only alice is granted the workspaces: none is shared, so no share applies.
    assert node.share_of("file:///Users/alice/Documents/Notes") == 0
    quota = node.quota("file:///Users/alice/Documents/Notes")
    assert (quota.notes, quota.bytes, quota.workspace_notes) == (50, 100_000, 0)


def test_a_workspace_two_principals_are_granted_gets_a_share(
    tmp_path: Path, key_file: Path
) -> None:
    bob = hashlib.sha256(b"bob-token").hexdigest()
    extra = "max_notes_per_workspace = 40\nmax_share_of_shared_workspace = 0.25\n"
    text = config_text(key_file, extra) + (
        f'[principals.bob]\ntoken_sha256 = ["{bob}"]\n'
        'grants = ["file:///Users/alice/Documents/Notes"]\n'
    )
    node = load_settings(write(tmp_path, text)).node
    assert node.share_of("file:///Users/alice/Documents/Notes") == 10
    assert node.share_of("file:///Users/alice/Documents/Notes-evil") == 0


@pytest.mark.parametrize(
    "line",
    [
        "max_header_bytes = 100",
        "max_header_bytes = 2000000",
        "max_notes_per_principal = 0",
        "max_bytes_per_principal = 10",
        "max_share_of_shared_workspace = 0.0",
        "max_share_of_shared_workspace = 1.5",
    ],
)
def test_a_quota_or_header_bound_out_of_range_is_refused_by_name(
    tmp_path: Path, key_file: Path, line: str
) -> None:
    with pytest.raises(ConfigError, match=line.split(" ")[0]):
        load_settings(write(tmp_path, config_text(key_file, line + "\n")))


def test_no_configuration_file_can_turn_on_the_conformance_fixtures(
    tmp_path: Path, key_file: Path
) -> None:
    # Only `serve --demo --conformance-fixtures` serves them: a production node never does.
    assert not load_settings(write(tmp_path, config_text(key_file))).node.conformance_fixtures
    with pytest.raises(ConfigError, match="conformance_fixtures"):
        load_settings(write(tmp_path, config_text(key_file, "conformance_fixtures = true")))
