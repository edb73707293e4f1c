"""Who may do what on the chat server: the admin token, named reviewer tokens, per-thread capabilities,
and the ``Host`` check.

- **admin** (one token: ``admin_token``, ``$AWARL_CHAT_ADMIN_TOKEN``, else the file
  ``<db>.admin-token`` generated at first start, mode 0600, printed once): config changes and
  policy switches, and everything a reviewer may do.
- **reviewer** (``reviewers: {name: token}`` in the server's config): the review queue, the
  thread list, and review decisions, recorded and audited under the reviewer's name.
- **thread capability** (a random token returned by ``POST /api/chat``, kept only as a hash):
  reading and answering that one thread. Required when the server is bound beyond loopback.
- **anonymous**: on loopback, asking (``POST /api/chat``), reading a thread by its id, and the
  read-only config, policies, corrections and health; beyond loopback, nothing.

Tokens travel as ``Authorization: Bearer <admin or reviewer token>`` and
``X-Thread-Token: <capability>``; they are compared in constant time. Every request's ``Host``
must be one of ``allowed_hosts`` (default: the bind address, ``localhost``, ``127.0.0.1``), so a
web page on another origin cannot reach a loopback server by DNS rebinding.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from awarl.chat.config import ChatSettings
from awarl.chat.errors import BadInput, Forbidden, NotAuthenticated

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Principal:
    """Who a request speaks for: ``admin``, ``reviewer`` (with its name) or ``anonymous``."""

    role: str
    name: str | None = None

    @property
    def staff(self) -> bool:
        return self.role in ("admin", "reviewer")


ANONYMOUS = Principal("anonymous")


def is_loopback(host: str) -> bool:
    """>>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(24)


def admin_token_path(db: str | Path) -> Path:
    return Path(f"{db}.admin-token")


def load_admin_token(settings: ChatSettings) -> tuple[str, Path | None]:
    """The admin token and, when this call generated it, the file it was written to (so it is printed once)."""
    if settings.admin_token:
        return settings.admin_token, None
    if settings.admin_token_env and os.environ.get(settings.admin_token_env):
        token = os.environ[settings.admin_token_env].strip()
        if len(token) < 16:
            raise ValueError(f"${settings.admin_token_env} holds an admin token of {len(token)} characters; "
                             "use at least 16 (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        return token, None
    path = admin_token_path(settings.db)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        token = path.read_text(encoding="utf-8").strip()
        if len(token) < 16:
            raise ValueError(f"{path}: the admin token file holds no token of at least 16 characters; delete it to "
                             "generate a new one") from None
        return token, None
    token = new_token()
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return token, path


class Auth:
    def __init__(self, settings: ChatSettings):
        self.loopback = is_loopback(settings.host)
        self.allowed_hosts = {h.lower() for h in (settings.allowed_hosts or [settings.host, "localhost", "127.0.0.1"])}
        self.admin_token, self.generated = load_admin_token(settings)
        self.reviewers = dict(settings.reviewers)
        if self.admin_token in self.reviewers.values():
            raise ValueError("a reviewer's token equals the admin token; give each its own")

    # -- the Host header ---------------------------------------------------------------------------
    def check_host(self, host: str | None) -> None:
        if not host:
            raise BadInput("missing_host", "the request has no Host header")
        name = host.strip().lower()
        if name.startswith("["):  # [::1]:8080
            name = name[1:].split("]", 1)[0]
        elif name.count(":") == 1:
            name = name.split(":", 1)[0]
        if name not in self.allowed_hosts:
            raise Forbidden("host_not_allowed", f"Host {host!r} is not served here (allowed_hosts: "
                            f"{', '.join(sorted(self.allowed_hosts))}); this guards against DNS rebinding")

    # -- credentials -------------------------------------------------------------------------------
    def principal(self, authorization: str | None) -> Principal:
        """Who the bearer token names; a token that names nobody is a 403, never anonymous."""
        if not authorization:
            return ANONYMOUS
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise NotAuthenticated("bad_authorization", "Authorization must be 'Bearer <token>'")
        if hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return Principal("admin", "admin")
        for name, expected in self.reviewers.items():
            if hmac.compare_digest(token.encode(), expected.encode()):
                return Principal("reviewer", name)
        raise Forbidden("bad_token", "the token is neither the admin token nor a reviewer's")

    def require_admin(self, who: Principal) -> None:
        if who.role != "admin":
            raise (NotAuthenticated if who.role == "anonymous" else Forbidden)("admin_required",
                            "this needs the admin token (Authorization: Bearer <token>; it is in <db>.admin-token)")

    def require_staff(self, who: Principal) -> None:
        if not who.staff:
            raise NotAuthenticated("reviewer_required", "this needs a reviewer's or the admin token")

    def require_any(self, who: Principal) -> None:
        """Beyond loopback every route needs a token; on loopback the open routes stay open."""
        if not self.loopback and not who.staff:
            raise NotAuthenticated("token_required", "this server is bound beyond loopback: every request needs a token")

    def require_thread(self, who: Principal, stored_hash: str | None, capability: str | None) -> None:
        """Reading or answering a thread: staff, or its capability token (needed beyond loopback)."""
        if who.staff:
            return
        if capability and stored_hash and hmac.compare_digest(token_hash(capability), stored_hash):
            return
        if capability:
            raise Forbidden("bad_thread_token", "the X-Thread-Token does not belong to this thread")
        if not self.loopback:
            raise NotAuthenticated("thread_token_required", "this server is bound beyond loopback: reading a thread "
                            "needs the token POST /api/chat returned (X-Thread-Token)")
