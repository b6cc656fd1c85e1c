"""``cairn.Context``: what a handler knows about its attempt, and how it reports progress."""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import threading
import time
from typing import Any, Awaitable, Callable, Protocol

from .schema import dumps, to_json_value

__all__ = ["Context", "Cancelled"]


class Cancelled(Exception):
    """Raised by :meth:`Context.raise_if_cancelled` once the attempt no longer counts (run cancelled, deadline
    passed, lease reclaimed, worker shutting down). Let it propagate: the worker reports what the cancellation
    calls for (a ``timeout`` failure past the deadline, nothing when the lease is gone)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the attempt was cancelled: {reason}")
        #: ``"lease_gone"``, ``"deadline"`` or ``"shutdown"``.
        self.reason = reason


class _AttemptLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = self.extra or {}
        kwargs["extra"] = {**extra, **kwargs.get("extra", {})}
        prefix = f"[{extra.get('cairn_run_id')}/{extra.get('cairn_step_id')} #{extra.get('cairn_attempt')}]"
        return f"{prefix} {msg}", kwargs


class Progress(Protocol):
    """Where heartbeats and checkpoints go (the orchestrator, or a test recorder)."""

    async def beat(self, checkpoint_json: str | None) -> tuple[bool, bool]:
        """Sends a heartbeat, with a checkpoint when given. Returns ``(alive, stored)``: whether the attempt
        still counts, and whether the orchestrator acknowledged the call (so the checkpoint is saved)."""
        ...


class Context:
    """The attempt a handler runs: identity, deadline, cancellation, heartbeats and checkpoints.

    A handler receives it as its second parameter (``def handler(args, ctx: cairn.Context)``). Everything here is
    safe to use from a sync handler's thread; in an ``async def`` handler, ``await`` :meth:`aheartbeat` and
    :meth:`acheckpoint` instead of the blocking forms.
    """

    def __init__(
        self,
        *,
        run_id: str,
        step_id: str,
        attempt: int,
        action: str,
        idempotency_key: str,
        remaining_s: float,
        timeout_s: float,
        heartbeat_timeout_s: float | None,
        last_checkpoint: Any,
        traceparent: str,
        progress: Progress,
        loop: asyncio.AbstractEventLoop,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
    ) -> None:
        #: The run's id.
        self.run_id = run_id
        #: The step's id in its plan.
        self.step_id = step_id
        #: The attempt number, from 1.
        self.attempt = attempt
        #: The action's name.
        self.action = action
        #: ``<run_id>/<step_id>``: the same for every attempt of the step. Pass it to the services you call
        #: (for example as an ``Idempotency-Key`` header) so a retried effect happens once.
        self.idempotency_key = idempotency_key
        #: The step's start-to-close limit, in seconds.
        self.timeout = timeout_s
        #: The step's heartbeat timeout in seconds, when it has one (the worker heartbeats often enough by itself).
        self.heartbeat_timeout = heartbeat_timeout_s
        #: W3C ``traceparent`` of the attempt.
        self.traceparent = traceparent
        self._last_checkpoint = last_checkpoint
        self._monotonic_deadline = time.monotonic() + max(remaining_s, 0.0)
        #: When the attempt's deadline passes (UTC); the worker cancels the attempt then.
        self.deadline = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=max(remaining_s, 0.0))
        self._progress = progress
        self._loop = loop
        self._cancelled = threading.Event()
        self._reason: str | None = None
        self._on_cancel: list[Callable[[], None]] = []
        base = logger or logging.getLogger(f"cairn.action.{action}")
        #: A logger (``cairn.action.<name>``) whose lines start with ``[run/step #attempt]``; the records also
        #: carry ``cairn_run_id``, ``cairn_step_id`` and ``cairn_attempt`` for structured handlers.
        self.logger: logging.LoggerAdapter[logging.Logger] = _AttemptLogger(
            base if isinstance(base, logging.Logger) else base.logger,
            {"cairn_run_id": run_id, "cairn_step_id": step_id, "cairn_attempt": attempt},
        )

    def __repr__(self) -> str:
        return (f"Context(run_id={self.run_id!r}, step_id={self.step_id!r}, attempt={self.attempt}, "
                f"cancelled={self.cancelled})")

    # --- time and cancellation --------------------------------------------------------------------------------

    @property
    def remaining(self) -> float:
        """Seconds left until the deadline (0 once it passed), on this process's monotonic clock."""
        return max(0.0, self._monotonic_deadline - time.monotonic())

    @property
    def cancelled(self) -> bool:
        """True once the attempt no longer counts: the run was cancelled or the lease reclaimed (a heartbeat was
        answered ``alive = false``), the deadline passed, or the worker is stopping past its drain timeout. A
        long handler should check it and return (or call :meth:`raise_if_cancelled`)."""
        return self._cancelled.is_set() or self.remaining <= 0.0

    @property
    def cancel_reason(self) -> str | None:
        """Why the attempt was cancelled (``"lease_gone"``, ``"deadline"``, ``"shutdown"``), or ``None``."""
        if self._reason is None and self.remaining <= 0.0:
            return "deadline"
        return self._reason

    def raise_if_cancelled(self) -> None:
        """Raises :class:`Cancelled` when :attr:`cancelled` is true."""
        if self.cancelled:
            raise Cancelled(self.cancel_reason or "cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Blocks (sync handlers) until the attempt is cancelled or ``timeout`` seconds pass; returns
        :attr:`cancelled`. Never waits past the deadline."""
        limit = self.remaining if timeout is None else min(timeout, self.remaining)
        self._cancelled.wait(limit)
        return self.cancelled

    def sleep(self, seconds: float) -> bool:
        """Sleeps ``seconds`` (sync handlers) but wakes at once on cancellation; returns True when the whole sleep
        passed, False when cancelled."""
        return not self.wait_cancelled(seconds)

    async def asleep(self, seconds: float) -> bool:
        """Like :meth:`sleep` for ``async def`` handlers (which are also cancelled through their task)."""
        end = time.monotonic() + seconds
        while not self.cancelled:
            left = end - time.monotonic()
            if left <= 0:
                return True
            await asyncio.sleep(min(left, 0.05))
        return False

    def _cancel(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
        self._cancelled.set()
        for callback in list(self._on_cancel):
            try:
                callback()
            except Exception:  # noqa: BLE001 - a callback must not break cancellation
                logging.getLogger("cairn.worker").exception("a cancellation callback failed")

    # --- progress ---------------------------------------------------------------------------------------------

    @property
    def last_checkpoint(self) -> Any:
        """The latest checkpoint: the one this attempt saved last, else the one an earlier attempt saved (plain
        JSON), else ``None``. Resume from it after a crash."""
        return self._last_checkpoint

    def heartbeat(self) -> bool:
        """Extends the lease now (the worker also heartbeats on its own). Returns False once the attempt no longer
        counts. Blocks in a sync handler; in an ``async def`` handler use :meth:`aheartbeat`."""
        return self._blocking(self.aheartbeat)

    def checkpoint(self, value: Any) -> bool:
        """Saves ``value`` (JSON-serialisable: plain JSON, a pydantic model, a dataclass) as the step's
        checkpoint; the next attempt receives it as :attr:`last_checkpoint`. Blocks until the orchestrator stored
        it and returns True then; False when it could not be reached (the checkpoint then rides on the next
        heartbeat). In an ``async def`` handler use :meth:`acheckpoint`."""
        text = self._encode(value)
        return self._blocking(lambda: self._send(text))

    async def aheartbeat(self) -> bool:
        """:meth:`heartbeat` for ``async def`` handlers."""
        alive, _stored = await self._progress.beat(None)
        if not alive:
            self._cancel("lease_gone")
        return alive

    async def acheckpoint(self, value: Any) -> bool:
        """:meth:`checkpoint` for ``async def`` handlers."""
        return await self._send(self._encode(value))

    def _encode(self, value: Any) -> str:
        plain = to_json_value(value)
        self._last_checkpoint = plain
        return dumps(plain)

    async def _send(self, text: str) -> bool:
        alive, stored = await self._progress.beat(text)
        if not alive:
            self._cancel("lease_gone")
        return alive and stored

    def _blocking(self, make: Callable[[], Awaitable[bool]]) -> bool:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            # Called from an async handler: the loop cannot wait on itself. Send it and answer optimistically.
            task = self._loop.create_task(make())  # type: ignore[arg-type]
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            return not self.cancelled
        future = asyncio.run_coroutine_threadsafe(make(), self._loop)  # type: ignore[arg-type]
        return future.result()
