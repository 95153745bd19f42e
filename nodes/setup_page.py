"""The setup page behind ``notes_setup``'s URL-mode elicitation: ``GET|POST /setup/<token>``.

Layer: node, transport support. The HTTP app (``nodes.http``) routes ``/setup/...`` here with the
method, the lowercased headers and a body reader; this module answers a small HTML page. It knows
the link format (``nodes.setup_links``), the sign-in cookie (``nodes.setup_signin``), the token
table and the store; nothing of MCP.

Who may use a link is decided before any body is read (the reader is called only after):

- **A browser** opening the link gets a sign-in form (401) asking for the principal's bearer token.
  Posting it (the one body read before authentication: a valid sealed link is required first, and
  the form is capped at ``FORM_MAX_BYTES``) sets a short-lived ``HttpOnly; SameSite=Strict`` cookie
  bound to that principal and that link, and redirects (303) to the link. With the cookie, ``GET``
  shows the completion form, which carries a CSRF token bound to the cookie; ``POST`` completes.
  A wrong token is 401 (the form again), another principal's token or cookie 403, a missing or
  wrong CSRF token 403.
- **A non-browser client** may instead send ``Authorization: Bearer <token>`` on every request
  (no cookie, no CSRF token: a browser cannot be made to send that header to another site).
- ``POST`` of the completion form (``application/x-www-form-urlencoded``, field ``api_key``)
  completes the link once, before its expiry on the Redis clock (``store/scripts/setup.lua``): 200,
  or 409 when the link was used already, 410 when it expired.
- The report service is simulated: its credential is checked for shape and then dropped. It is
  never stored, echoed or logged; neither is the link token, the bearer token, the cookie or the
  CSRF token. Every refusal logs its reason. Responses carry ``Cache-Control: no-store``,
  ``Referrer-Policy: no-referrer`` and a CSP that allows nothing but posting to the page itself.
"""

from __future__ import annotations

import base64
import hashlib
import html
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from nodes.auth import TokenTable
from nodes.config import NodeConfig
from nodes.scope import ScopeError
from nodes.sealing import StateRejected
from nodes.setup_links import SETUP_PATH_PREFIX, SetupLink, open_link
from nodes.setup_signin import (
    CSRF_FIELD,
    SignIn,
    cookie_name,
    csrf_matches,
    open_signin,
    read_cookie,
    seal_signin,
    set_cookie,
)
from store.api import NoteStoreAPI, StoreUnavailable

log = logging.getLogger("nodes.setup_page")

CREDENTIAL_FIELD = "api_key"
TOKEN_FIELD = "token"  # noqa: S105 - the name of a form field, not a secret
CREDENTIAL_MAX = 512
"""Longest report-service credential the form takes."""
MAX_FORM_FIELDS = 8
FORM_MAX_BYTES = 4096
"""Largest form body either page takes: a credential or a bearer token, plus the CSRF token."""

REALM = "notes-cluster"

BodyReader = Callable[[int], Awaitable[bytes]]
"""Reads the request body, refusing (413) one larger than the given number of bytes."""

STYLE = (
    "body{font:1rem/1.5 system-ui,sans-serif;max-width:34rem;margin:2rem auto;padding:0 1rem;"
    "color:#1f2328;background:#fff}"
    "h1{font-size:1.5rem;margin:0 0 .5rem}"
    "label{display:block;font-weight:600;margin:1rem 0 .25rem}"
    "input{display:block;width:100%;box-sizing:border-box;font:inherit;padding:.5rem;"
    "border:1px solid #57606a;border-radius:6px;color:inherit;background:inherit}"
    "button{margin-top:1rem;font:inherit;padding:.5rem 1.25rem;border:0;border-radius:6px;"
    "background:#0969da;color:#fff;cursor:pointer}"
    ":focus-visible{outline:3px solid #bf8700;outline-offset:2px}"
    ".error{color:#cf222e;font-weight:600}"
    "@media (prefers-color-scheme:dark){body{color:#e6edf3;background:#0d1117}"
    "input{border-color:#8b949e}button{background:#1f6feb}.error{color:#ff7b72}}"
)
"""The pages' one style sheet: readable type and width, visible focus, labels above their
fields, contrast of 4.5:1 or more in light and dark mode. Inline, allowed by its hash in the
CSP (which still refuses every other style, script and resource)."""

_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode("utf-8")).digest()).decode("ascii")

_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/html; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (
        b"content-security-policy",
        (
            "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
            f"style-src 'sha256-{_STYLE_HASH}'"
        ).encode("ascii"),
    ),
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
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(heading)} · notes-cluster setup</title><style>{STYLE}</style>"
        f"</head><body><main><h1>{html.escape(heading)}</h1><p>{html.escape(text)}</p>{form}"
        "</main></body></html>"
    )
    return Page(status, doc.encode("utf-8"), _HEADERS + extra)


_CHALLENGE = (b"www-authenticate", f'Bearer realm="{REALM}"'.encode("ascii"))
_NOT_FOUND = _page(404, "Not found", "This setup link is not valid.")
_FOREIGN = _page(403, "Forbidden", "This setup link was issued to another user.")
_CSRF = _page(403, "Forbidden", "The form was not sent from this page; open the link again.")
_METHOD = _page(405, "Method not allowed", "Use GET or POST.", "", (b"allow", b"GET, POST"))
_EXPIRED = _page(410, "Link expired", "This setup link has expired; start the setup again.")
_USED = _page(409, "Link already used", "This setup link was already used.")
_MEDIA = _page(415, "Unsupported form", "Send the form as application/x-www-form-urlencoded.")
_DONE = _page(200, "Report service connected", "Return to your client and accept.")
SERVICE_UNAVAILABLE_PAGE = _page(503, "Try again", "The setup could not be checked; try again.")


def _error(error: str) -> str:
    """An error note that screen readers announce (``role=alert``)."""
    return f"<p class='error' role='alert'>{html.escape(error)}</p>" if error else ""


def _sign_in(error: str = "") -> Page:
    note = _error(error)
    form = (
        f"{note}<form method='post'><label for='token'>Your notes-cluster token</label>"
        f"<input id='token' type='password' name='{TOKEN_FIELD}' required autocomplete='off'>"
        "<button type='submit'>Sign in</button></form>"
    )
    return _page(401, "Sign in", "Sign in to connect the report service.", form, _CHALLENGE)


def _form(csrf: str | None, error: str = "") -> str:
    note = _error(error)
    hidden = (
        ""
        if csrf is None
        else f"<input type='hidden' name='{CSRF_FIELD}' value='{html.escape(csrf)}'>"
    )
    return (
        f"{note}<form method='post'>{hidden}<label for='credential'>Report service API key"
        f"</label><input id='credential' type='password' name='{CREDENTIAL_FIELD}' required "
        f"maxlength='{CREDENTIAL_MAX}' autocomplete='off'>"
        "<button type='submit'>Connect</button></form>"
    )


def _fields(headers: Mapping[str, str], body: bytes) -> dict[str, list[str]] | None:
    """The form's fields, or None unless it is a well-formed urlencoded ASCII form."""
    content_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        return None
    try:
        return parse_qs(body.decode("ascii"), strict_parsing=False, max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError):
        return {}


def _one(fields: Mapping[str, list[str]], name: str) -> str | None:
    values = fields.get(name, [])
    return values[0] if len(values) == 1 else None


def _credential_ok(value: str | None) -> bool:
    """Whether the form carries one plausible credential (which is then dropped)."""
    if value is None:
        return False
    return 0 < len(value) <= CREDENTIAL_MAX and value.isprintable() and value == value.strip()


@dataclass(frozen=True)
class _Request:
    """One request to a link, past the link and scope checks."""

    method: str
    token: str
    """The link token: the last segment of the path."""
    link: SetupLink
    headers: Mapping[str, str]
    read_body: BodyReader


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

    async def answer(
        self, method: str, path: str, headers: Mapping[str, str], read_body: BodyReader
    ) -> Page:
        """The page for one request; ``read_body`` is called only once the caller is known
        (or, for the sign-in form, once the link itself has opened)."""
        if method not in ("GET", "POST"):
            return _METHOD
        token = path.removeprefix(SETUP_PATH_PREFIX)
        try:
            link = open_link(self.config.key_ring, self.config.server_name, token)
        except StateRejected as exc:
            log.info("setup link rejected: %s", exc.reason)
            return _NOT_FOUND
        try:
            self.config.scope.authorize(link.principal, link.workspace)
        except ScopeError:
            log.info("setup link refused: workspace no longer authorized")
            return _FOREIGN
        request = _Request(method, token, link, headers, read_body)
        try:
            return await self._for_caller(request)
        except StoreUnavailable as exc:
            # Not a bug of the page: the try-again page and one line, no traceback. The message
            # names the store call and the Redis error, never the link or a token.
            log.warning("setup page answered 503, store error: %s", exc)
            return SERVICE_UNAVAILABLE_PAGE

    async def _for_caller(self, r: _Request) -> Page:
        """The page for a bearer client, a signed-in browser, or one still to sign in."""
        if "authorization" in r.headers:
            return await self._with_bearer(r)
        value = read_cookie(r.headers.get("cookie"), cookie_name(r.link))
        if value is not None:
            return await self._with_cookie(r, value)
        if r.method == "GET":
            return _sign_in()
        return await self._sign_in(r)

    async def _with_bearer(self, r: _Request) -> Page:
        """A non-browser client: the bearer token on every request, no CSRF token."""
        principal = self.tokens.authenticate(r.headers.get("authorization"))
        if principal is None:
            log.info("setup link refused: unknown bearer token")
            return _sign_in()
        if principal != r.link.principal:
            log.info("setup link refused: bearer token of another principal")
            return _FOREIGN
        if r.method == "GET":
            return await self._show(r.link, None)
        fields = _fields(r.headers, await r.read_body(FORM_MAX_BYTES))
        return await self._complete(r.link, fields, None)

    async def _with_cookie(self, r: _Request, value: str) -> Page:
        """A browser that signed in: the cookie names the principal, the form its CSRF token."""
        signin = await self._signin(r.link, value)
        if isinstance(signin, Page):
            return signin
        if r.method == "GET":
            return await self._show(r.link, signin.csrf)
        fields = _fields(r.headers, await r.read_body(FORM_MAX_BYTES))
        if fields is not None and not csrf_matches(signin, _one(fields, CSRF_FIELD)):
            log.info("setup form refused: missing or wrong CSRF token")
            return _CSRF
        return await self._complete(r.link, fields, signin.csrf)

    async def _signin(self, link: SetupLink, value: str) -> SignIn | Page:
        """The cookie's sign-in if it is valid for ``link`` now, else the page to answer."""
        try:
            signin = open_signin(self.config.key_ring, self.config.server_name, value)
        except StateRejected as exc:
            log.info("setup cookie rejected: %s", exc.reason)
            return _sign_in("Your sign-in is not valid; sign in again.")
        if signin.principal != link.principal or signin.nonce != link.nonce:
            log.info("setup cookie refused: issued for another principal or link")
            return _FOREIGN
        if await self.store.redis_time_ms() >= signin.exp_ms:
            # A link that cannot be completed any more says so, rather than asking to sign in.
            closed = await self._closed(link)
            if closed is not None:
                return closed
            log.info("setup cookie refused: sign-in expired")
            return _sign_in("Your sign-in expired; sign in again.")
        return signin

    async def _sign_in(self, r: _Request) -> Page:
        """Check the posted bearer token; on success set the sign-in cookie and redirect."""
        fields = _fields(r.headers, await r.read_body(FORM_MAX_BYTES))
        if fields is None:
            return _MEDIA
        principal = self.tokens.authenticate(f"Bearer {_one(fields, TOKEN_FIELD) or ''}")
        if principal is None:
            log.info("setup sign-in refused: unknown token")
            return _sign_in("That token was not accepted.")
        if principal != r.link.principal:
            log.info("setup sign-in refused: token of another principal")
            return _FOREIGN
        closed = await self._closed(r.link)
        if closed is not None:
            return closed
        now = await self.store.redis_time_ms()
        value, signin = seal_signin(self.config.key_ring, self.config.server_name, r.link, now)
        base = urlsplit(self.config.public_url or "")
        cookie = set_cookie(
            cookie_name(r.link),
            value,
            max_age_s=(signin.exp_ms - now) // 1000,
            secure=base.scheme == "https",
            base_path=base.path,
        )
        log.info("setup sign-in accepted (tenant=%s)", r.link.tenant)
        # 303: the browser follows with a GET of the link itself. A relative reference (the
        # token, the path's last segment) keeps any path prefix a proxy in front may add.
        target = r.token.encode("ascii")
        return Page(303, b"", (*_HEADERS, (b"set-cookie", cookie), (b"location", target)))

    async def _closed(self, link: SetupLink) -> Page | None:
        """The page for a link that can no longer be completed (used, expired), or None."""
        if await self.store.setup_completed_by(link.tenant, link.nonce) is not None:
            return _USED
        if await self.store.redis_time_ms() >= link.exp_ms:
            return _EXPIRED
        return None

    async def _show(self, link: SetupLink, csrf: str | None) -> Page:
        closed = await self._closed(link)
        if closed is not None:
            return closed
        text = f"Connect the report service for {link.workspace}."
        return _page(200, "Connect the report service", text, _form(csrf))

    async def _complete(
        self, link: SetupLink, fields: Mapping[str, list[str]] | None, csrf: str | None
    ) -> Page:
        if fields is None:
            return _MEDIA
        if not _credential_ok(_one(fields, CREDENTIAL_FIELD)):
            text = f"Connect the report service for {link.workspace}."
            return _page(400, "Connect the report service", text, _form(csrf, "Enter the API key."))
        out = await self.store.complete_setup(link.tenant, link.nonce, link.principal, link.exp_ms)
        if out.status == "completed":
            log.info("setup link completed (tenant=%s)", link.tenant)
            return _DONE
        log.info("setup link refused: %s", out.status)
        return _USED if out.status == "used" else _EXPIRED
