"""The configuration reference's example (docs/reference/configuration.md) loads."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest

from nodes.serving.settings import load_settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "configuration.md"
TOKEN = "a-test-token-that-is-not-a-secret"
TOKEN_HASH = hashlib.sha256(TOKEN.encode()).hexdigest()


def readme_example() -> str:
    """The one fenced ``toml`` block of the configuration reference."""
    text = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```toml\n(.*?)^```", text, re.S | re.M)
    assert len(blocks) == 1, blocks
    return str(blocks[0])


def test_the_documented_configuration_example_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = readme_example()
    key_file = tmp_path / "k2.key"
    key_file.write_text(base64.b64encode(b"\x02" * 32).decode(), encoding="utf-8")
    monkeypatch.setenv("NOTES_STATE_KEY_K1", base64.b64encode(b"\x01" * 32).decode())
    # Only the two placeholders change: the key file's path and the token's hash.
    example, files = re.subn(r"file:/etc/notes-cluster/k2\.key", f"file:{key_file}", example)
    example, hashes = re.subn(r'"<sha256 hex of the token:.*?>"', f'"{TOKEN_HASH}"', example)
    assert (files, hashes) == (1, 1), "the example's placeholders changed"
    path = tmp_path / "cluster.toml"
    path.write_text(example, encoding="utf-8")

    settings = load_settings(path)

    assert settings.node.server_name == "acme-notes"
    assert settings.node.state_ttl_ms == 300_000
    assert settings.replay_grace_ms == 60_000
    assert dict(settings.node.archives) == {
        "file:///Users/alice/Documents/Notes": "file:///Users/alice/Documents/Archive"
    }
    assert settings.tokens.authenticate(f"Bearer {TOKEN}") == "alice"
