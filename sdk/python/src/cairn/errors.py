"""Exceptions: what an action raises to describe a failure, and what the client raises for API errors."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActionFailure",
    "Retryable",
    "Permanent",
    "DidNotTakeEffect",
    "ApiError",
    "InvalidPlan",
    "Conflict",
    "NotFound",
    "Unauthorized",
    "Unavailable",
    "WorkerRejected",
]


class ActionFailure(Exception):
    """Base of the exceptions an action raises to end its attempt with a structured failure record.

    Raise one of the subclasses: :class:`Retryable`, :class:`Permanent` or :class:`DidNotTakeEffect`. Any other
    exception escaping a handler is reported as a retryable ``action_error`` with its traceback in the details.
    """

    retryable: bool = True
    did_not_take_effect: bool = False

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        details: Any = None,
        retry_after: float | None = None,
        degraded: bool = False,
    ) -> None:
        if not isinstance(code, str) or not code:
            raise ValueError("a failure code must be a non-empty string, e.g. 'rate_limited'")
        if retry_after is not None and retry_after < 0:
            raise ValueError("retry_after must be a number of seconds >= 0")
        super().__init__(f"{code}: {message}" if message else code)
        #: Stable failure code (``rate_limited``, ``not_found``, …).
        self.code = code
        #: Human-readable message.
        self.message = message
        #: Structured, JSON-serialisable details (or ``None``).
        self.details = details
        #: Seconds to wait at least before the next attempt (``None``: the step's backoff decides).
        self.retry_after = retry_after
        #: The action partly succeeded.
        self.degraded = degraded


class Retryable(ActionFailure):
    """Another attempt may succeed (a rate limit, a service briefly down).

    ``retry_after`` (seconds) delays the next attempt at least that long; a longer backoff still wins. The step is
    retried under its retry policy only when it is idempotent; a non-idempotent step fails instead, since the
    handler reports a definite failure (raise :class:`DidNotTakeEffect` when the action certainly did not act, and
    it is retried). Only an attempt whose end is unknown — a timeout, a lost worker — parks a non-idempotent step
    as ``outcome_unknown``.

    >>> raise cairn.Retryable("rate_limited", "the CRM answered 429", retry_after=30)
    """

    retryable = True

    def __init__(
        self, code: str, message: str = "", *, retry_after: float | None = None, details: Any = None,
        degraded: bool = False,
    ) -> None:
        super().__init__(code, message, details=details, retry_after=retry_after, degraded=degraded)


class Permanent(ActionFailure):
    """Repeating the attempt would fail the same way (bad input, a record that does not exist): the step fails."""

    retryable = False

    def __init__(self, code: str, message: str = "", *, details: Any = None, degraded: bool = False) -> None:
        super().__init__(code, message, details=details, degraded=degraded)


class DidNotTakeEffect(ActionFailure):
    """The action certainly had no effect (the request was refused before anything happened).

    Safe to retry even for a non-idempotent step, which is then retried under its policy instead of going to
    ``outcome_unknown``.
    """

    retryable = True
    did_not_take_effect = True

    def __init__(
        self, code: str, message: str = "", *, retry_after: float | None = None, details: Any = None
    ) -> None:
        super().__init__(code, message, details=details, retry_after=retry_after)


class WorkerRejected(Exception):
    """The orchestrator refused the worker (a wrong or missing token, an action it rejects); not retryable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"the orchestrator refused the worker: {code}: {message}")
        #: The gRPC status code name (``UNAUTHENTICATED``, ``INVALID_ARGUMENT``, …).
        self.code = code
        #: The orchestrator's message.
        self.message = message


class ApiError(Exception):
    """An error answered by the REST API: HTTP ``status`` and the JSON body ``{code, message, details}``.

    Subclasses name the common cases; catch :class:`ApiError` for all of them.
    """

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        #: HTTP status.
        self.status = status
        #: Stable error code (``invalid_plan``, ``not_found``, ``conflict``, ``wrong_state``, …).
        self.code = code
        #: Human-readable message.
        self.message = message
        #: Structured details (``None`` when the server sent none).
        self.details = details


class InvalidPlan(ApiError):
    """The plan was refused (422 ``invalid_plan``); nothing was stored. ``diagnostics`` lists every problem."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(status, code, message, details)
        from .models import Diagnostic

        raw = details.get("diagnostics", []) if isinstance(details, dict) else []
        #: Every diagnostic, as :class:`cairn.Diagnostic` objects.
        self.diagnostics: list[Diagnostic] = [Diagnostic.model_validate(d) for d in raw]

    def __str__(self) -> str:
        lines = [super().__str__()]
        lines += [f"  {d}" for d in self.diagnostics if d.severity == "error"]
        return "\n".join(lines)


class Conflict(ApiError):
    """409: an idempotency key reused with another plan (``details['run_id']``), a step not in the state the
    decision needs (``wrong_state``), a finished run (``already_finished``), a taken schedule id, …"""


class NotFound(ApiError):
    """404: no such run, step, schedule or route."""


class Unauthorized(ApiError):
    """401: a missing or wrong API token."""


class Unavailable(ApiError):
    """503 (the database is unavailable, the planner is not configured) or the server could not be reached."""
