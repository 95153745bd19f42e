"""Key layout (store.keys): keys are persisted, so their digests must never change."""

from __future__ import annotations

import hashlib

import pytest

from store import keys
from store.keys import DIGEST_CACHE_SIZE, TenantKeys


def _reference_digest(*parts: str) -> str:
    """The layout's digest as first written: sha256 over each part's UTF-8, length-prefixed."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:32]


def test_keys_keep_their_persisted_layout() -> None:
    k = TenantKeys("nc", "acme")
    assert k.base == "nc:{t:acme}"
    assert k.title("file:///w", "Café ☕") == "nc:{t:acme}:title:9aa47f74692ca3f30e4f46dffff010f0"
    assert k.title("", "") == "nc:{t:acme}:title:374708fff7719dd5979ec875d56cd228"
    assert k.workspace("file:///w") == "nc:{t:acme}:ws:ef2b36eac212900242ca5196983cecef"
    assert k.workspace_usage("file:///w") == "nc:{t:acme}:wsusage:ef2b36eac212900242ca5196983cecef"
    assert k.note("n0123456789abcdef") == "nc:{t:acme}:note:n0123456789abcdef"
    assert k.journal == "nc:{t:acme}:journal"
    assert k.usage == "nc:{t:acme}:usage"


@pytest.mark.parametrize(
    ("workspace", "title"),
    [
        ("a", "bc"),
        ("ab", "c"),
        ("", "abc"),
        ("abc", ""),
        ("w\u00e9", "\ud7ff\U0001f600"),
        ("x", "y" * 5000),
    ],
)
def test_title_digests_are_the_length_prefixed_sha256_of_both_parts(
    workspace: str, title: str
) -> None:
    k = TenantKeys("nc", "acme")
    assert k.title(workspace, title) == f"nc:{{t:acme}}:title:{_reference_digest(workspace, title)}"
    assert k.workspace(workspace) == f"nc:{{t:acme}}:ws:{_reference_digest(workspace)}"


def test_digest_caches_are_bounded_and_the_cached_base_is_no_field() -> None:
    k = TenantKeys("nc", "acme")
    for i in range(DIGEST_CACHE_SIZE + 10):
        k.title("file:///w", f"title {i}")
        k.workspace(f"file:///w/{i}")
    assert keys._digest_pair.cache_info().currsize <= DIGEST_CACHE_SIZE
    assert keys._digest.cache_info().currsize <= DIGEST_CACHE_SIZE
    assert k.base == "nc:{t:acme}"
    assert k == TenantKeys("nc", "acme")
    assert hash(k) == hash(TenantKeys("nc", "acme"))
    assert repr(k) == "TenantKeys(prefix='nc', tenant='acme')"
    with pytest.raises(AttributeError):
        k.tenant = "other"  # type: ignore[misc]
