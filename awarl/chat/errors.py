"""What can go wrong in a chat request, in the chat's own terms: each error is a kind (what the
caller did or met), a stable ``code``, a message and details. The chat logic raises these and knows
nothing of HTTP; `awarl.chat.app` maps each kind to a status in one table (``STATUS``).
"""

from __future__ import annotations

from typing import Any


class ChatError(Exception):
    """Base of the chat's errors: a stable ``code`` (``thread_not_found``), a message naming what is
    wrong and how to fix it, and optional details (JSON-able)."""

    def __init__(self, code: str, message: str, details: Any = None):
        super().__init__(message)
        self.code, self.message, self.details = code, message, details


class BadInput(ChatError):
    """The request itself cannot be read (no Host, a malformed header)."""


class Invalid(ChatError):
    """A request of the right shape with values that cannot work (an empty prompt, too many answers)."""


class NotAuthenticated(ChatError):
    """The request needs a credential it does not carry."""


class Forbidden(ChatError):
    """The credential, the host or the value is not allowed (a reviewer changing config, a generator
    off the allow-list, a foreign Host)."""


class NotFound(ChatError):
    """No such thread, review or policy."""


class Conflict(ChatError):
    """The thing is not in a state that allows this (not waiting for answers, already decided, a
    supported sentence rejected without override)."""


class Unavailable(ChatError):
    """The server cannot do this now (validate-only mode asked to generate)."""
