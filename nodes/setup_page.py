"""The setup page behind ``notes_setup``'s URL-mode elicitation: ``GET|POST /setup/<token>``.

Layer: node, transport support. The HTTP app (``nodes.http``) routes ``/setup/...`` here with the
method, the lowercased headers and (for POST) the body; this module answers a small HTML page. It
knows the link format (``nodes.setup_links``), the token table and the store; nothing of MCP.

- Every request needs the bearer token (``Authorization``) of the principal the link was issued
  to: none or an unknown one is 401, another principal's is 403, and nothing is recorded.
- ``GET`` shows the form (or says the link is already completed or expired).
- ``POST`` (``application/x-www-form-urlencoded``, field ``api_key``) completes the link once,
  before its expiry on the Redis clock (``store/scripts/setup.lua``): 200, or 409 when the link
  was used already, 410 when it expired.
- The report service is simulated: its credential is checked for shape and then dropped. It is
  never stored, echoed or logged; neither is the link token nor the bearer token. Responses carry
  ``Cache-Control: no-store`` and ``Referrer-Policy: no-referrer`` so the link does not leak.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs

from nodes.auth import TokenTable
from nodes.config import NodeConfig
from nodes.scope import ScopeError
from nodes.sealing import StateRejected
from nodes.setup_links import SETUP_PATH_PREFIX, SetupLink, open_link
from store.api import NoteStoreAPI

log = logging.getLogger("nodes.setup_page")

CREDENTIAL_FIELD = "api_key"
CREDENTIAL_MAX = 512
"""Longest report-service credential the form takes."""
MAX_FORM_FIELDS = 8

REALM = "notes-cluster"

_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/html; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
)


@dataclass(frozen=True)
class Page:
    """One HTML answer."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = _HEADERS


def _page(
    status: int, heading: str, text: str, form: str = "", *extra: tuple[bytes, bytes]
) -> Page:
    doc = (
        "<!doctype html><html><head><meta charset='utf-8'><title>notes-cluster setup</title>"
        f"</head><body><h1>{html.escape(heading)}</h1><p>{html.escape(text)}</p>{form}"
        "</body></html>"
    )
    return Page(status, doc.encode("utf-8"), _HEADERS + extra)


_UNAUTHENTICATED = _page(
    401,
    "Sign-in required",
    "This page needs your notes-cluster bearer token.",
    "",
    (b"www-authenticate", f'Bearer realm="{REALM}"'.encode("ascii")),
)
_NOT_FOUND = _page(404, "Not found", "This setup link is not valid.")
_FOREIGN = _page(403, "Forbidden", "This setup link was issued to another user.")
_METHOD = _page(405, "Method not allowed", "Use GET or POST.", "", (b"allow", b"GET, POST"))
_EXPIRED = _page(410, "Link expired", "This setup link has expired; start the setup again.")
_USED = _page(409, "Link already used", "This setup link was already used.")
_MEDIA = _page(415, "Unsupported form", "Send the form as application/x-www-form-urlencoded.")
_DONE = _page(200, "Report service connected", "Return to your client and accept.")
SERVICE_UNAVAILABLE_PAGE = _page(503, "Try again", "The setup could not be checked; try again.")


def _form(error: str = "") -> str:
    note = f"<p><strong>{html.escape(error)}</strong></p>" if error else ""
    return (
        f"{note}<form method='post'><label>Report service API key "
        f"<input type='password' name='{CREDENTIAL_FIELD}' required "
        f"maxlength='{CREDENTIAL_MAX}' autocomplete='off'></label> "
        "<button type='submit'>Connect</button></form>"
    )


def _credential_ok(body: bytes) -> bool:
    """Whether the form carries one plausible credential (which is then dropped)."""
    try:
        fields = parse_qs(
            body.decode("ascii"), strict_parsing=False, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        return False
    values = fields.get(CREDENTIAL_FIELD, [])
    if len(values) != 1:
        return False
    value = values[0]
    return 0 < len(value) <= CREDENTIAL_MAX and value.isprintable() and value == value.strip()


class SetupPages:
    """Answers ``/setup/<token>`` for one node (reads its config on every request)."""

    def __init__(self, config: NodeConfig, store: NoteStoreAPI, tokens: TokenTable) -> None:
        self.config = config
        self.store = store
        self.tokens = tokens

    @staticmethod
    def handles(path: str) -> bool:
        """Whether ``path`` is a setup page."""
        return path.startswith(SETUP_PATH_PREFIX)

    async def answer(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Page:
        """The page for one request (``body`` is empty for GET)."""
        if method not in ("GET", "POST"):
            return _METHOD
        principal = self.tokens.authenticate(headers.get("authorization"))
        if principal is None:
            return _UNAUTHENTICATED
        try:
            link = open_link(
                self.config.key_ring,
                self.config.server_name,
                path.removeprefix(SETUP_PATH_PREFIX),
            )
        except StateRejected as exc:
            log.info("setup link rejected: %s", exc.reason)
            return _NOT_FOUND
        if link.principal != principal:
            log.info("setup link refused: opened by another principal")
            return _FOREIGN
        try:
            self.config.scope.authorize(principal, link.workspace)
        except ScopeError:
            log.info("setup link refused: workspace no longer authorized")
            return _FOREIGN
        if method == "GET":
            return await self._show(link)
        return await self._complete(link, headers, body)

    async def _show(self, link: SetupLink) -> Page:
        if await self.store.setup_completed_by(link.tenant, link.nonce) is not None:
            return _USED
        if await self.store.redis_time_ms() >= link.exp_ms:
            return _EXPIRED
        text = f"Connect the report service for {link.workspace}."
        return _page(200, "Connect the report service", text, _form())

    async def _complete(self, link: SetupLink, headers: Mapping[str, str], body: bytes) -> Page:
        content_type = headers.get("content-type", "").partition(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            return _MEDIA
        if not _credential_ok(body):
            text = f"Connect the report service for {link.workspace}."
            return _page(400, "Connect the report service", text, _form("Enter the API key."))
        out = await self.store.complete_setup(link.tenant, link.nonce, link.principal, link.exp_ms)
        if out.status == "completed":
            log.info("setup link completed (tenant=%s)", link.tenant)
            return _DONE
        return _USED if out.status == "used" else _EXPIRED
