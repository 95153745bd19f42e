"""Tests for nodes.scope: strict file-URI parsing, containment and workspace authorization."""

from __future__ import annotations

import ast
import posixpath
import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes import scope
from nodes.scope import (
    MAX_URI_LENGTH,
    Scope,
    ScopeError,
    Workspace,
    canonical_uri,
    contains,
    normalize_uri,
    parse_file_uri,
)

NOTES = "file:///Users/alice/Documents/Notes"
NOTES_EVIL = "file:///Users/alice/Documents/Notes-evil"


def refused(raw: object, reason: str) -> None:
    """Assert `raw` is refused with a message matching `reason` (a regex)."""
    with pytest.raises(ScopeError, match=reason):
        parse_file_uri(raw)  # type: ignore[arg-type]


# --- purity -------------------------------------------------------------------------------------


def test_scope_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(scope.__file__).read_text(encoding="utf-8"))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    assert roots <= set(sys.stdlib_module_names) | {"__future__"}


# --- accepted spellings and canonical forms -----------------------------------------------------


def test_a_plain_file_uri_parses_into_decoded_components() -> None:
    assert parse_file_uri(NOTES) == ("Users", "alice", "Documents", "Notes")


def test_the_root_uri_parses_to_no_components_and_is_its_own_canonical_form() -> None:
    assert parse_file_uri("file:///") == ()
    assert canonical_uri(()) == "file:///"
    assert normalize_uri("file://localhost/") == "file:///"


def test_localhost_is_accepted_in_any_case_and_canonicalized_to_an_empty_host() -> None:
    assert normalize_uri("file://localhost/a/b") == "file:///a/b"
    assert normalize_uri("file://LocalHost/a/b") == "file:///a/b"


def test_the_scheme_is_case_insensitive_and_canonicalized_to_lowercase() -> None:
    assert normalize_uri("FILE:///a") == "file:///a"


def test_a_single_trailing_slash_is_ignored() -> None:
    assert normalize_uri("file://localhost/a/b/") == normalize_uri("file:///a/b") == "file:///a/b"


def test_percent_escapes_are_decoded_once_and_unreserved_letters_canonicalized() -> None:
    assert parse_file_uri("file:///%41") == ("A",)
    assert normalize_uri("file:///%41/%7e") == "file:///A/~"


def test_an_encoded_space_is_allowed_and_canonically_encoded() -> None:
    assert parse_file_uri("file:///My%20Notes") == ("My Notes",)
    assert normalize_uri("file:///My%20Notes") == "file:///My%20Notes"


def test_raw_and_encoded_non_ascii_are_the_same_canonical_workspace() -> None:
    assert parse_file_uri("file:///zo%C3%AB") == ("zoë",)
    assert normalize_uri("file:///zoë") == normalize_uri("file:///zo%c3%ab") == "file:///zo%C3%AB"


def test_a_windows_drive_letter_survives_canonicalization() -> None:
    assert normalize_uri("file:///C:/Users/alice") == "file:///C:/Users/alice"
    assert normalize_uri("file:///C%3A/Users/alice") == "file:///C:/Users/alice"


def test_normalize_uri_is_idempotent() -> None:
    for raw in (NOTES, "file://localhost/a%20b/%C3%A9/", "file:///C:/x", "file:///"):
        once = normalize_uri(raw)
        assert normalize_uri(once) == once


def test_canonical_uri_refuses_components_the_parser_would_refuse() -> None:
    for bad in (("",), ("..",), ("a/b",), ("a%b",), ("a\\b",), ("a\x00",)):
        with pytest.raises(ScopeError):
            canonical_uri(bad)


# --- refusals: the whole string -----------------------------------------------------------------


def test_non_string_input_is_refused() -> None:
    refused(b"file:///a", "must be a string")
    refused(None, "must be a string")


def test_an_empty_uri_is_refused() -> None:
    refused("", "empty")


def test_uris_longer_than_the_limit_are_refused_without_being_echoed() -> None:
    raw = "file:///" + "a" * MAX_URI_LENGTH
    with pytest.raises(ScopeError, match="limit is 2048") as info:
        parse_file_uri(raw)
    assert "aaaa" not in str(info.value)
    assert len(parse_file_uri("file:///" + "a" * (MAX_URI_LENGTH - 8))[0]) == MAX_URI_LENGTH - 8


def test_error_messages_never_echo_more_than_about_200_characters_of_input() -> None:
    for raw in ("http://" + "x" * 1500, "file://" + "h" * 1500 + "/a", "file:///" + "%zz" * 500):
        with pytest.raises(ScopeError) as info:
            parse_file_uri(raw)
        assert len(str(info.value)) < 300


@pytest.mark.parametrize("raw", ["file:///a\x00b", "file:///a/\x00"])
def test_a_raw_nul_is_refused(raw: str) -> None:
    refused(raw, "NUL")


@pytest.mark.parametrize("raw", ["file:///a\x01", "file:///a\x1f", "file:///a\x7f", "file:///a\nb"])
def test_raw_ascii_control_characters_are_refused(raw: str) -> None:
    refused(raw, "control character")


def test_a_raw_backslash_is_refused() -> None:
    refused("file:///a\\..\\b", "backslash")
    refused("file:///Notes\\", "backslash")


@pytest.mark.parametrize(
    "raw", ["file:///a b", "file:///a\u00a0b", "file:///a\u3000b", " file:///a"]
)
def test_raw_whitespace_is_refused(raw: str) -> None:
    refused(raw, "whitespace")


@pytest.mark.parametrize("raw", ["file:///a?x=1", "file:///a?", "file:///?"])
def test_a_query_is_refused_even_when_empty(raw: str) -> None:
    refused(raw, "query")


@pytest.mark.parametrize("raw", ["file:///a#top", "file:///a#", "file:///#"])
def test_a_fragment_is_refused_even_when_empty(raw: str) -> None:
    refused(raw, "fragment")


# --- refusals: scheme and authority -------------------------------------------------------------


@pytest.mark.parametrize(
    "raw", ["http://localhost/a", "https:///a", "HTTPS://evil.com/a", "ftp:///a", "files:///a"]
)
def test_schemes_other_than_file_are_refused(raw: str) -> None:
    refused(raw, "scheme .* is not allowed")


@pytest.mark.parametrize("raw", ["/Users/alice/Notes", "Notes", "C:/Users", "://a", "1file:///a"])
def test_strings_that_are_not_absolute_uris_are_refused(raw: str) -> None:
    refused(raw, "not an absolute URI|scheme")


@pytest.mark.parametrize("raw", ["file:/a/b", "file:a/b", "file:"])
def test_file_uris_without_an_authority_are_refused(raw: str) -> None:
    refused(raw, "must have an authority")


@pytest.mark.parametrize(
    "raw", ["file://evil.com/a", "file://127.0.0.1/a", "file://local%68ost/a", "file://[::1]/a"]
)
def test_hosts_other_than_localhost_are_refused(raw: str) -> None:
    refused(raw, "host .* is not allowed")


@pytest.mark.parametrize("raw", ["file://alice@localhost/a", "file://@/a", "file://a:b@/a"])
def test_userinfo_is_refused(raw: str) -> None:
    refused(raw, "userinfo")


@pytest.mark.parametrize("raw", ["file://localhost:8080/a", "file://:22/a", "file://localhost:/a"])
def test_ports_are_refused(raw: str) -> None:
    refused(raw, "port")


def test_an_authority_without_a_path_is_refused() -> None:
    refused("file://", "no path")
    refused("file://localhost", "no path")


# --- refusals: path segments --------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["file:////a", "file:///a//b", "file:///a//", "file:////"])
def test_empty_path_segments_are_refused(raw: str) -> None:
    refused(raw, "empty path segment")


@pytest.mark.parametrize(
    "raw",
    ["file:///a/.", "file:///a/./b", "file:///a/..", "file:///a/../b", "file:///..", "file:///./"],
)
def test_raw_dot_segments_are_refused_not_resolved(raw: str) -> None:
    refused(raw, "dot segment")


@pytest.mark.parametrize("segment", ["%2e", "%2E", "%2e%2e", "%2E%2E", "%2E%2e", ".%2e", "%2e."])
def test_percent_encoded_dot_segments_are_refused(segment: str) -> None:
    refused(f"{NOTES}/{segment}/x", "decodes to the dot segment")


@pytest.mark.parametrize("segment", ["%252e%252e", "%252E%252E", "%25", "a%2541", "%25%32%65"])
def test_double_encoding_is_refused_and_never_decoded_twice(segment: str) -> None:
    refused(f"{NOTES}/{segment}", "decodes to a '%'")


@pytest.mark.parametrize("segment", ["%2f", "%2F", "..%2f..", "a%2Fb"])
def test_an_encoded_slash_is_refused(segment: str) -> None:
    refused(f"{NOTES}/{segment}", "encodes a '/' separator")


@pytest.mark.parametrize("segment", ["%5c", "%5C", "..%5c..", "a%5Cb"])
def test_an_encoded_backslash_is_refused(segment: str) -> None:
    refused(f"{NOTES}/{segment}", "encodes a backslash")


@pytest.mark.parametrize("segment", ["%00", "a%00b", "Notes%00.txt"])
def test_an_encoded_nul_is_refused(segment: str) -> None:
    refused(f"file:///{segment}", "encodes a NUL")


@pytest.mark.parametrize("segment", ["%01", "%0a", "%0D", "%09", "%7f", "%C2%85", "%C2%9B"])
def test_encoded_control_characters_are_refused(segment: str) -> None:
    refused(f"file:///a{segment}", "control or invisible")


@pytest.mark.parametrize("segment", ["%zz", "%2", "a%", "%%41", "%g0", "%\u0663\u0663"])
def test_invalid_percent_escapes_are_refused(segment: str) -> None:
    refused(f"file:///{segment}", "invalid percent-escape")


@pytest.mark.parametrize("segment", ["%ff", "%C3", "%C0%AE", "%C0%AE%C0%AE", "%ED%A0%80", "%80"])
def test_percent_escapes_that_are_not_valid_utf8_are_refused(segment: str) -> None:
    # %C0%AE is an overlong '.', a classic traversal trick.
    refused(f"file:///{segment}", "not decode to valid UTF-8")


def test_a_lone_surrogate_is_refused() -> None:
    refused("file:///a\ud800", "lone surrogate")


@pytest.mark.parametrize("char", ["<", ">", "|", '"', "^", "`", "{", "}", "[", "]"])
def test_reserved_ascii_must_be_percent_encoded(char: str) -> None:
    refused(f"file:///a{char}b", "must be percent-encoded")


@pytest.mark.parametrize("segment", ["e%CC%81", "e\u0301", "A%CC%8A"])
def test_segments_that_are_not_nfc_normalized_are_refused(segment: str) -> None:
    refused(f"file:///caf{segment}", "not NFC")


@pytest.mark.parametrize(
    "segment",
    [
        "\uff0e",  # fullwidth full stop
        "\uff0e\uff0e",
        "%EF%BC%8E%EF%BC%8E",
        "\u2025",  # two dot leader
        "a\uff0fb",  # fullwidth solidus
        "a\uff3cb",  # fullwidth reverse solidus
        "a\uff05b",  # fullwidth percent
    ],
)
def test_unicode_lookalikes_of_dots_separators_and_percent_are_refused(segment: str) -> None:
    refused(f"{NOTES}/{segment}", "look-alike")


@pytest.mark.parametrize("segment", ["%E2%80%AE", "a\u200bb", "%EF%BB%BF", "\u2028"])
def test_invisible_and_bidi_format_characters_are_refused(segment: str) -> None:
    refused(f"file:///{segment}", "control or invisible|whitespace")


# --- contains -----------------------------------------------------------------------------------


def test_a_root_contains_itself_and_its_descendants() -> None:
    assert contains(NOTES, NOTES)
    assert contains(NOTES, NOTES + "/")
    assert contains(NOTES, NOTES + "/Projects/2026")
    assert contains("file:///", NOTES)


def test_a_sibling_sharing_a_name_prefix_is_not_contained() -> None:
    assert not contains(NOTES, NOTES_EVIL)
    assert not contains(NOTES, NOTES_EVIL + "/x")
    assert not contains(NOTES + "/", NOTES_EVIL)


def test_a_parent_is_not_contained_by_its_child() -> None:
    assert not contains(NOTES + "/Projects", NOTES)


def test_containment_compares_canonical_forms() -> None:
    assert contains("file://localhost/Users/alice/Documents/Notes/", NOTES + "/x")
    assert contains(NOTES, "FILE://LOCALHOST/Users/alice/Documents/%4Eotes/x")


@pytest.mark.parametrize(
    "candidate",
    [
        NOTES + "/../Notes-evil",
        NOTES + "/%2e%2e/Notes-evil",
        NOTES + "/%2E%2E/Notes-evil",
        NOTES + "/%252e%252e/Notes-evil",
        NOTES + "/..%2fNotes-evil",
        NOTES + "/..%5cNotes-evil",
        NOTES + "\\..\\Notes-evil",
        NOTES + "/x%00/../..",
    ],
)
def test_traversal_spellings_are_never_contained(candidate: str) -> None:
    assert not contains(NOTES, candidate)


def test_contains_is_false_when_either_uri_fails_to_parse() -> None:
    assert not contains("http:///Users", "http:///Users/alice")
    assert not contains(NOTES, "https:///Users/alice/Documents/Notes/x")
    assert not contains("file:///a/..", "file:///a/b")


# --- Scope --------------------------------------------------------------------------------------


@pytest.fixture
def cluster_scope() -> Scope:
    return Scope.build(
        workspaces={
            NOTES: "acme",
            "file://localhost/Users/alice/Documents/Notes/Projects/": "acme",
            NOTES_EVIL: "evil",
            "file:///srv/bob": "bobco",
        },
        grants={"alice": [NOTES + "/"], "bob": ("file:///srv",), "root": ["file:///"]},
    )


def test_build_normalizes_every_config_uri(cluster_scope: Scope) -> None:
    assert NOTES + "/Projects" in cluster_scope.workspaces
    assert cluster_scope.grants["alice"] == (NOTES,)


def test_build_refuses_a_malformed_config_uri_and_names_the_bad_part() -> None:
    with pytest.raises(ScopeError, match=r"bad workspace URI.*dot segment"):
        Scope.build({"file:///a/..": "t"}, {})
    with pytest.raises(ScopeError, match=r"bad grant URI.*scheme"):
        Scope.build({}, {"alice": ["http:///a"]})


def test_build_refuses_a_bare_string_as_a_grant_list() -> None:
    with pytest.raises(ScopeError, match="collection of URIs"):
        Scope.build({NOTES: "acme"}, {"alice": NOTES})


def test_build_refuses_one_workspace_spelled_twice_with_different_tenants() -> None:
    with pytest.raises(ScopeError, match="two tenants"):
        Scope.build({NOTES: "acme", NOTES + "/": "evil"}, {})


def test_build_refuses_an_empty_tenant_name() -> None:
    with pytest.raises(ScopeError, match="non-empty tenant"):
        Scope.build({NOTES: ""}, {})


def test_scope_mappings_are_read_only(cluster_scope: Scope) -> None:
    with pytest.raises(TypeError):
        cluster_scope.workspaces[NOTES_EVIL] = "acme"  # type: ignore[index]


def test_authorize_accepts_an_exactly_granted_workspace(cluster_scope: Scope) -> None:
    assert cluster_scope.authorize("alice", NOTES) == Workspace(uri=NOTES, tenant="acme")


def test_authorize_accepts_any_spelling_of_a_granted_workspace(cluster_scope: Scope) -> None:
    spelled = "file://LOCALHOST/Users/alice/Documents/N%6ftes/"
    assert cluster_scope.authorize("alice", spelled) == Workspace(uri=NOTES, tenant="acme")


def test_authorize_accepts_a_configured_workspace_beneath_a_granted_root(
    cluster_scope: Scope,
) -> None:
    got = cluster_scope.authorize("alice", NOTES + "/Projects")
    assert got == Workspace(uri=NOTES + "/Projects", tenant="acme")
    assert cluster_scope.authorize("bob", "file:///srv/bob").tenant == "bobco"


def test_authorize_refuses_notes_evil_for_a_principal_granted_notes(cluster_scope: Scope) -> None:
    with pytest.raises(ScopeError, match="not authorized for workspace"):
        cluster_scope.authorize("alice", NOTES_EVIL)


def test_authorize_refuses_an_unknown_principal(cluster_scope: Scope) -> None:
    with pytest.raises(ScopeError, match="not authorized for workspace"):
        cluster_scope.authorize("mallory", NOTES)


def test_authorize_refuses_an_unconfigured_workspace_even_beneath_a_granted_root(
    cluster_scope: Scope,
) -> None:
    with pytest.raises(ScopeError, match="not authorized for workspace"):
        cluster_scope.authorize("alice", NOTES + "/Secret")
    with pytest.raises(ScopeError, match="not authorized for workspace"):
        cluster_scope.authorize("root", "file:///etc")


def test_unknown_and_unauthorized_workspaces_get_the_same_message(cluster_scope: Scope) -> None:
    def message(principal: str, uri: str) -> str:
        with pytest.raises(ScopeError) as info:
            cluster_scope.authorize(principal, uri)
        return str(info.value).replace(uri, "<uri>")

    unknown = message("alice", NOTES + "/Secret")
    assert unknown == message("alice", NOTES_EVIL) == message("mallory", NOTES)
    assert unknown == "not authorized for workspace '<uri>'"


def test_authorize_hands_out_one_workspace_per_configured_uri_and_the_scope_stays_a_value(
    cluster_scope: Scope,
) -> None:
    first = cluster_scope.authorize("alice", NOTES)
    assert cluster_scope.authorize("root", NOTES + "/") is first
    assert first == Workspace(uri=NOTES, tenant="acme")
    with pytest.raises(AttributeError):
        first.tenant = "evil"  # type: ignore[misc]
    # The made-once workspaces are no field: equality, repr and replace see only the config.
    rebuilt = Scope(cluster_scope.workspaces, cluster_scope.grants, cluster_scope.shared)
    assert rebuilt == cluster_scope
    assert repr(rebuilt) == repr(cluster_scope)
    assert rebuilt.authorize("bob", "file:///srv/bob") == Workspace("file:///srv/bob", "bobco")
    with pytest.raises(ScopeError, match="not authorized for workspace"):
        rebuilt.authorize("bob", NOTES)


def test_authorize_reports_a_malformed_uri_with_its_specific_reason(cluster_scope: Scope) -> None:
    with pytest.raises(ScopeError, match="decodes to the dot segment"):
        cluster_scope.authorize("alice", NOTES + "/Projects/%2e%2e")


def test_workspaces_for_lists_only_contained_configured_workspaces_sorted(
    cluster_scope: Scope,
) -> None:
    assert cluster_scope.workspaces_for("alice") == (
        Workspace(uri=NOTES, tenant="acme"),
        Workspace(uri=NOTES + "/Projects", tenant="acme"),
    )
    everything = cluster_scope.workspaces_for("root")
    assert [w.uri for w in everything] == sorted(cluster_scope.workspaces)


def test_workspaces_for_an_unknown_principal_is_empty(cluster_scope: Scope) -> None:
    assert cluster_scope.workspaces_for("mallory") == ()


# --- property: containment survives an independent, maximally lenient resolver ------------------

HOSTILE_SEGMENTS = [
    ".", "..", "...", "%2e", "%2E", "%2e%2e", "%2E%2e", "%2E%2E", ".%2e", "%252e", "%252e%252e",
    "%25", "%2f", "%2F", "..%2f..", "%5c", "%5C", "..%5c..", "\\", "..\\..", "/", "//", "%00",
    "\x00", "Notes-evil", "-evil", "a", "%41", "~", "", "zoë", "zo%C3%AB", "\uff0e\uff0e",
    "%EF%BC%8E%EF%BC%8E", "\u2025", "e\u0301", "%C0%AE%C0%AE", "%zz", "%2", "%", "?", "#",
    " ", "%20", "C:", "@", "%3A", ";", "Notes", "..;", "\u202e",
]  # fmt: skip

ROOTS = [NOTES, "file://LOCALHOST/Users/alice/Documents/Notes/", "file:///srv/w%20s", "file:///"]

_LENIENT_PREFIX = re.compile(r"^file://(localhost)?", re.IGNORECASE)


def lenient_resolve(uri: str) -> list[str]:
    """What a careless server might do: decode until stable, treat `\\` as `/`, normpath."""
    text = uri
    while (decoded := unquote(text)) != text:
        text = decoded
    path = _LENIENT_PREFIX.sub("", text.replace("\\", "/"), count=1)
    return [part for part in posixpath.normpath("/" + path).split("/") if part]


# Benign segments get their own branch so enough candidates are accepted to test the property.
BENIGN_SEGMENTS = ["a", "%41", "~", "Notes", "Notes-evil", "zoë", "zo%C3%AB", "%20", "C:", "..."]
segments = st.one_of(
    st.sampled_from(HOSTILE_SEGMENTS), st.sampled_from(BENIGN_SEGMENTS), st.text(max_size=4)
)


@settings(derandomize=True, max_examples=1000, deadline=None)
@given(
    root=st.sampled_from(ROOTS),
    joiner=st.sampled_from(["/", "", "\\", "%2f"]),
    parts=st.lists(segments, max_size=5),
)
def test_whatever_contains_accepts_stays_inside_the_root_under_a_lenient_resolver(
    root: str, joiner: str, parts: list[str]
) -> None:
    base = root if root.endswith("/") else root + joiner
    candidate = base + "/".join(parts)
    if not contains(root, candidate):
        return
    resolved = lenient_resolve(candidate)
    root_parts = lenient_resolve(root)
    assert resolved[: len(root_parts)] == root_parts
    # Stronger: the strict parse is exactly what even a lenient resolver sees, and is stable.
    assert list(parse_file_uri(candidate)) == resolved
    assert normalize_uri(normalize_uri(candidate)) == normalize_uri(candidate)
