"""Explicit workspace scope: which `file:` URIs a principal may name, and what a root contains.

Layer: node core, authorization. Pure module: no I/O, stdlib only. It must not know about MCP,
HTTP, Redis or the filesystem: it never touches a disk, follows a symlink or asks the OS what a
path means. Containment is decided lexically on canonical, decoded path components, so the parser
refuses every spelling whose meaning would depend on some later resolver.

Decisions:

- One accepted shape, `file://[localhost]/path`. `file:/path` and `file:path` (no authority) are
  refused; `localhost` canonicalizes to the empty host.
- The ASCII characters allowed raw in a path are RFC 3986 `pchar`; anything else (`<`, `|`, ...)
  must be percent-encoded. Raw non-ASCII (IRI style) is accepted and canonicalized to
  percent-encoded UTF-8, so `zoë` and `zo%C3%AB` are the same workspace.
- Escapes are decoded exactly once; a decoded segment may not contain `%`, so `%25` is refused
  and nothing is ever decoded twice. A directory literally named with `%` cannot be a workspace.
- Dot segments are refused, raw or encoded, never resolved.
- Unicode: a decoded segment must be NFC; it may not contain control, format (bidi overrides,
  zero-width), surrogate or line/paragraph separator characters; and its NFKC folding may not be
  `.` or `..` nor contain `/`, `\\` or `%` (fullwidth dots, dot leaders, fullwidth solidus).
- Filesystem aliasing (case folding, Windows trailing dots, 8.3 names, symlinks) is not modelled.
  That is safe for `Scope.authorize`, which also requires an exactly configured workspace.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from types import MappingProxyType
from urllib.parse import quote

MAX_URI_LENGTH = 2048
"""Longest workspace URI accepted, in characters: generous for real paths, bounds parsing work."""

_ECHO_LIMIT = 200
"""Most characters of client input quoted back in an error message."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_HEX = frozenset(string.hexdigits)  # ASCII only: int(..., 16) would also take non-ASCII digits
_SUB_DELIMS_AND_COLON_AT = "!$&'()*+,;=:@"
_RAW_PATH_ASCII = frozenset(
    string.ascii_letters + string.digits + "-._~%" + _SUB_DELIMS_AND_COLON_AT
)
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_DOT_SEGMENTS = (".", "..")


class ScopeError(ValueError):
    """A URI was refused; `str(err)` is a specific, human-readable reason safe to show the client
    (never echo more than ~200 chars of the input)."""


@dataclass(frozen=True)
class Workspace:
    """A configured workspace, as returned once a principal is authorized for it."""

    uri: str
    """Canonical workspace URI."""
    tenant: str
    """Name of the tenant whose notes live in this workspace."""


def _show(text: str) -> str:
    """Quote client input for an error message, escaped and cut to `_ECHO_LIMIT` characters."""
    if len(text) > _ECHO_LIMIT:
        return repr(text[:_ECHO_LIMIT]) + "..."
    return repr(text)


PARSE_CACHE_SIZE = 4096
"""Parsed URIs kept per process. Parsing is pure and every call names a workspace or a grant, so a
small cache turns the per-request scope check into dictionary lookups (it was a quarter of a
delete flow's CPU). Refusals are not cached: an exception never is."""


@lru_cache(maxsize=PARSE_CACHE_SIZE)
def parse_file_uri(raw: str) -> tuple[str, ...]:
    """Strictly parse a file URI into its decoded path components (decoded exactly once)."""
    _check_raw(raw)
    path = _strip_authority(_strip_scheme(raw))
    return tuple(_decode_segment(segment) for segment in _split_path(path))


def canonical_uri(components: tuple[str, ...]) -> str:
    """The canonical spelling: 'file:///' + '/'.join(percent-encoded components); root is 'file:///'.

    Components are checked as `parse_file_uri` checks decoded segments, so the result always
    parses back to `components`.
    """
    for component in components:
        if not isinstance(component, str) or not component:
            raise ScopeError("path components must be non-empty strings")
        _check_component(component, _show(component))
    return "file:///" + "/".join(quote(c, safe=_SUB_DELIMS_AND_COLON_AT) for c in components)


@lru_cache(maxsize=PARSE_CACHE_SIZE)
def normalize_uri(raw: str) -> str:
    """Parse `raw` strictly and return its canonical spelling."""
    return canonical_uri(parse_file_uri(raw))


def contains(root: str, candidate: str) -> bool:
    """True iff candidate is root or lies beneath it, comparing whole path components
    (so .../Notes does not contain .../Notes-evil). Either URI failing to parse -> False."""
    try:
        root_parts = parse_file_uri(root)
        candidate_parts = parse_file_uri(candidate)
    except ScopeError:
        return False
    return candidate_parts[: len(root_parts)] == root_parts


def _check_raw(raw: str) -> None:
    """Refuse what no well-formed workspace URI contains anywhere."""
    if not isinstance(raw, str):
        raise ScopeError(f"workspace URI must be a string, not {type(raw).__name__}")
    if not raw:
        raise ScopeError("workspace URI is empty")
    if len(raw) > MAX_URI_LENGTH:
        raise ScopeError(f"workspace URI is {len(raw)} characters; the limit is {MAX_URI_LENGTH}")
    for ch in raw:
        if ch == "\x00":
            raise ScopeError("workspace URI contains a NUL character")
        if ch < " " or ch == "\x7f":
            raise ScopeError(f"workspace URI contains the control character {ch!r}")
        if ch == "\\":
            raise ScopeError("workspace URI contains a backslash")
        if ch.isspace():
            raise ScopeError(f"workspace URI contains unencoded whitespace {ch!r}")
        if ch == "?":
            raise ScopeError("workspace URI must not have a query ('?')")
        if ch == "#":
            raise ScopeError("workspace URI must not have a fragment ('#')")


def _strip_scheme(raw: str) -> str:
    """Check the scheme is `file` (any case) and return what follows `file:`."""
    scheme, colon, rest = raw.partition(":")
    if not colon or not _SCHEME.fullmatch(scheme):
        raise ScopeError(f"not an absolute URI: {_show(raw)}; expected 'file:///...'")
    if scheme.lower() != "file":
        raise ScopeError(f"scheme {_show(scheme)} is not allowed; workspaces are file: URIs")
    return rest


def _strip_authority(rest: str) -> str:
    """Check the authority is empty or localhost; return the path after its leading '/'."""
    if not rest.startswith("//"):
        raise ScopeError(
            "file URI must have an authority: 'file:///path' or 'file://localhost/path'"
        )
    authority, slash, path = rest[2:].partition("/")
    if "@" in authority:
        raise ScopeError("file URI must not contain userinfo ('@')")
    if ":" in authority and not authority.startswith("["):
        raise ScopeError("file URI must not contain a port")
    if authority.lower() not in ("", "localhost"):
        raise ScopeError(f"host {_show(authority)} is not allowed; only empty or 'localhost'")
    if not slash:
        raise ScopeError("file URI has no path; the root is 'file:///'")
    return path


def _split_path(path: str) -> list[str]:
    """Split the path after its leading '/' into raw segments, dropping one trailing '/'."""
    if not path:
        return []
    segments = path.removesuffix("/").split("/")
    if "" in segments:
        raise ScopeError("workspace URI has an empty path segment ('//')")
    return segments


def _decode_segment(segment: str) -> str:
    """Check one raw segment, percent-decode it exactly once and check the result."""
    if segment in _DOT_SEGMENTS:
        raise ScopeError(f"dot segment {segment!r} is not allowed; paths are never resolved")
    for ch in segment:
        if ch < "\x80" and ch not in _RAW_PATH_ASCII:
            raise ScopeError(f"character {ch!r} must be percent-encoded in a path")
    shown = _show(segment)
    text = _percent_decode_once(segment, shown)
    _check_component(text, shown)
    return text


def _percent_decode_once(segment: str, shown: str) -> str:
    """Decode `%XX` escapes (and UTF-8 encode raw characters), then decode strict UTF-8."""
    out = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == "%":
            pair = segment[i + 1 : i + 3]
            if len(pair) != 2 or not _HEX.issuperset(pair):
                raise ScopeError(f"invalid percent-escape in segment {shown}")
            out.append(int(pair, 16))
            i += 3
        else:
            try:
                out += segment[i].encode("utf-8")
            except UnicodeEncodeError:
                raise ScopeError(f"segment {shown} contains a lone surrogate") from None
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise ScopeError(f"segment {shown} does not decode to valid UTF-8") from None


def _check_component(text: str, shown: str) -> None:
    """Refuse a decoded segment whose meaning a later resolver could change."""
    if text in _DOT_SEGMENTS:
        raise ScopeError(f"segment {shown} decodes to the dot segment {text!r}")
    for ch in text:
        if ch == "/":
            raise ScopeError(f"segment {shown} encodes a '/' separator")
        if ch == "\\":
            raise ScopeError(f"segment {shown} encodes a backslash")
        if ch == "%":
            raise ScopeError(f"segment {shown} decodes to a '%'; nothing is ever decoded twice")
        if ch == "\x00":
            raise ScopeError(f"segment {shown} encodes a NUL character")
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            raise ScopeError(f"segment {shown} contains control or invisible U+{ord(ch):04X}")
    if unicodedata.normalize("NFC", text) != text:
        raise ScopeError(f"segment {shown} is not NFC-normalized")
    folded = unicodedata.normalize("NFKC", text)
    if folded in _DOT_SEGMENTS or any(ch in folded for ch in "/\\%"):
        raise ScopeError(f"segment {shown} is a look-alike of a dot segment, separator or '%'")


def _config_uri(raw: str, what: str) -> str:
    """Normalize a URI from server config, naming which part of the config was bad."""
    try:
        return normalize_uri(raw)
    except ScopeError as err:
        raise ScopeError(f"bad {what} URI in scope config: {err}") from err


@dataclass(frozen=True)
class Scope:
    """Server config view: which workspaces exist (uri -> tenant) and which roots each principal
    is granted.

    Build it with `Scope.build`, which normalizes every URI and freezes both mappings.
    """

    workspaces: Mapping[str, str]
    """Canonical workspace URI -> tenant name."""
    grants: Mapping[str, tuple[str, ...]]
    """Principal -> canonical root URIs it may use, sorted and deduplicated."""
    shared: frozenset[str] = frozenset()
    """The workspaces more than one principal is granted (a principal's share of each is
    bounded: ``NodeConfig.quota``)."""

    @classmethod
    def build(cls, workspaces: Mapping[str, str], grants: Mapping[str, Iterable[str]]) -> Scope:
        """Normalize all config URIs; raise ScopeError on a bad URI, an empty tenant, a
        workspace given two tenants, or a grant list that is a bare string."""
        spaces: dict[str, str] = {}
        for raw, tenant in workspaces.items():
            uri = _config_uri(raw, "workspace")
            if not isinstance(tenant, str) or not tenant:
                raise ScopeError(f"workspace {uri!r} needs a non-empty tenant name")
            if spaces.setdefault(uri, tenant) != tenant:
                raise ScopeError(f"workspace {uri!r} is configured with two tenants")
        granted: dict[str, tuple[str, ...]] = {}
        for principal, roots in grants.items():
            if isinstance(roots, str):
                raise ScopeError(f"grants for {principal!r} must be a collection of URIs")
            granted[principal] = tuple(sorted({_config_uri(r, "grant") for r in roots}))
        shared = frozenset(
            uri
            for uri in spaces
            if sum(any(contains(r, uri) for r in roots) for roots in granted.values()) > 1
        )
        return cls(
            workspaces=MappingProxyType(dict(sorted(spaces.items()))),
            grants=MappingProxyType(dict(sorted(granted.items()))),
            shared=shared,
        )

    def authorize(self, principal: str, raw_workspace_uri: str) -> Workspace:
        """Return the workspace `raw_workspace_uri` names if `principal` may use it.

        A malformed URI raises ScopeError with its specific parse reason. An unconfigured
        workspace, an unknown principal and a workspace outside every granted root all raise
        the same "not authorized for workspace '<canonical uri>'", so a client cannot probe
        which workspaces exist.
        """
        uri = normalize_uri(raw_workspace_uri)
        workspace = self._workspace_objects.get(uri)
        roots = self.grants.get(principal, ())
        if workspace is None or not any(contains(root, uri) for root in roots):
            raise ScopeError(f"not authorized for workspace {_show(uri)}")
        return workspace

    @cached_property
    def _workspace_objects(self) -> Mapping[str, Workspace]:
        """A ``Workspace`` per configured URI, made once (it is immutable): ``authorize`` hands
        out these instead of building one per request. Bounded by the configuration."""
        return {uri: Workspace(uri=uri, tenant=tenant) for uri, tenant in self.workspaces.items()}

    def principals_of(self, uri: str) -> tuple[str, ...]:
        """The principals granted the configured workspace ``uri`` (canonical), sorted."""
        found = self._principals.get(uri)
        return () if found is None else found

    @cached_property
    def _principals(self) -> Mapping[str, tuple[str, ...]]:
        """Workspace URI -> the principals granted it, made once (bounded by the config)."""
        return {
            uri: tuple(
                p for p, roots in self.grants.items() if any(contains(r, uri) for r in roots)
            )
            for uri in self.workspaces
        }

    def workspaces_for(self, principal: str) -> tuple[Workspace, ...]:
        """Every configured workspace within one of `principal`'s roots, sorted by URI."""
        roots = self.grants.get(principal, ())
        return tuple(
            Workspace(uri=uri, tenant=tenant)
            for uri, tenant in sorted(self.workspaces.items())
            if any(contains(root, uri) for root in roots)
        )
