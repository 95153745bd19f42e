"""The setup page's browser sign-in: a sealed sign-in cookie and the CSRF token of its form.

Layer: node, transport support. Pure module: no I/O and no clock (the caller passes the Redis
clock). Shared by nothing but ``nodes.setup_page``.

A person who opens a setup link in a browser cannot send an ``Authorization`` header, so the page
asks for the principal's bearer token once and answers with a cookie:

- The value is a ``StatePayload`` sealed with the cluster's key ring (AES-GCM, ``nodes.sealing``)
  under its own audience (``<server_name>#setup-session``) and phase, so it never opens as a
  ``requestState`` or a link, and any node of the cluster opens it. It binds the principal, the
  link's nonce (one cookie serves one link), an expiry on the Redis clock and a random CSRF secret.
- ``HttpOnly; SameSite=Strict``, ``Secure`` when the public URL is https, ``Max-Age`` as short as
  the sealed expiry, ``Path`` the setup pages only. Its name carries a digest of the link's nonce,
  so two links open in one browser do not overwrite each other's cookie.
- The completion form carries the CSRF secret in a hidden field; a POST is accepted only when the
  field equals the sealed one (compared in constant time). Another site can neither read the form
  nor the sealed cookie, and SameSite=Strict keeps the browser from sending the cookie at all on a
  cross-site POST.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie

from nodes.sealing import KeyRing, StatePayload, StateRejected
from nodes.setup_links import SETUP_PATH_PREFIX, SetupLink
from store import randomness

SIGNIN_TTL_MS = 600_000
"""How long a sign-in lasts (ten minutes, capped by the link's own expiry): long enough to paste a
credential, short enough that a cookie left in a shared browser is soon useless."""

SIGNIN_PHASE = "setup-session"
SIGNIN_METHOD = "setup/session"
"""Sealed into every sign-in cookie (with the audience): their values stay as issued, so a
cookie sealed by a node of an earlier release still opens."""
COOKIE_PREFIX = "nc_setup_"
CSRF_FIELD = "csrf"
CSRF_BYTES = 32
"""Entropy of the CSRF secret (256 bits)."""


def signin_audience(server_name: str) -> str:
    """The audience sign-in cookies are sealed for, set apart from states and links."""
    return f"{server_name}#setup-session"


@dataclass(frozen=True)
class SignIn:
    """What an opened sign-in cookie binds."""

    principal: str
    nonce: str
    """The nonce of the link the sign-in was for."""
    exp_ms: int
    """Expiry, on the Redis server clock."""
    csrf: str


def cookie_name(link: SetupLink) -> str:
    """The cookie of ``link``'s sign-in: a digest of its nonce, which the name must not reveal."""
    return COOKIE_PREFIX + hashlib.sha256(link.nonce.encode("ascii")).hexdigest()[:16]


def seal_signin(
    ring: KeyRing, server_name: str, link: SetupLink, redis_now_ms: int
) -> tuple[str, SignIn]:
    """A fresh sign-in for ``link``'s principal: the cookie value and what it binds."""
    exp_ms = min(redis_now_ms + SIGNIN_TTL_MS, link.exp_ms)
    csrf = randomness.token_urlsafe(CSRF_BYTES)
    payload = StatePayload(
        principal=link.principal,
        audience=signin_audience(server_name),
        method=SIGNIN_METHOD,
        tool="",
        args_digest="",
        workspace=link.workspace,
        tenant=link.tenant,
        candidates=(),
        phase=SIGNIN_PHASE,
        nonce=link.nonce,
        issued_ms=redis_now_ms,
        exp_ms=exp_ms,
        extra={CSRF_FIELD: csrf},
    )
    return ring.seal(payload), SignIn(link.principal, link.nonce, exp_ms, csrf)


def open_signin(ring: KeyRing, server_name: str, value: str) -> SignIn:
    """Open a cookie value; any failure raises ``StateRejected`` (the reason is for the log)."""
    payload = ring.open(value, audience=signin_audience(server_name))
    csrf = payload.extra.get(CSRF_FIELD, "")
    if payload.method != SIGNIN_METHOD or payload.phase != SIGNIN_PHASE or not csrf:
        raise StateRejected("not a setup sign-in")
    return SignIn(payload.principal, payload.nonce, payload.exp_ms, csrf)


def read_cookie(header: str | None, name: str) -> str | None:
    """The value of cookie ``name`` in a ``Cookie`` header, or None (also for a malformed one)."""
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    morsel = jar.get(name)
    return None if morsel is None else morsel.value


def set_cookie(name: str, value: str, *, max_age_s: int, secure: bool, base_path: str) -> bytes:
    """A ``Set-Cookie`` value for the setup pages under ``base_path`` (the public URL's path)."""
    path = base_path.rstrip("/") + SETUP_PATH_PREFIX
    attrs = [f"{name}={value}", f"Path={path}", f"Max-Age={max(max_age_s, 0)}"]
    attrs += ["HttpOnly", "SameSite=Strict"]
    if secure:
        attrs.append("Secure")
    return "; ".join(attrs).encode("ascii")


def csrf_matches(signin: SignIn, given: str | None) -> bool:
    """Whether a form's CSRF field is the sign-in's (constant time)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8"), signin.csrf.encode("utf-8"))
