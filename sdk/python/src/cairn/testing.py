"""Run a handler without an orchestrator, for your own unit tests.

>>> from cairn import testing
>>> assert testing.run(lookup, {"email": "ada@example.com"}) == {"id": 7, "name": "Ada"}
>>> with pytest.raises(testing.ActionFailed) as failed:
...     testing.run(refund, {"order": "o-1"}, attempt=2)
>>> assert failed.value.failure.code == "rate_limited"

The attempt goes through exactly what the worker does with it: args checked against the action's args schema and
parsed into the hinted type, the handler run (sync ones in a thread, ``async def`` ones on an event loop) with a
:class:`cairn.Context`, its return value converted to JSON and checked against the output schema, and exceptions
turned into failure records. Heartbeats and checkpoints are recorded instead of sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from . import schema as _schema
from .action import FailureRecord, as_action
from .context import Context

__all__ = ["run", "arun", "attempt", "aattempt", "AttemptResult", "ActionFailed", "AttemptCancelled"]


class ActionFailed(Exception):
    """The attempt ended with a failure record (``failure``), as the worker would report it."""

    def __init__(self, failure: FailureRecord) -> None:
        super().__init__(f"{failure.code}: {failure.message}")
        #: The failure record: ``code``, ``message``, ``details``, ``retryable``, ``retry_after_ms``, …
        self.failure = failure


class AttemptCancelled(Exception):
    """The attempt ended with nothing to report: it was cancelled (``cancel_after``) and stopped."""


@dataclass
class AttemptResult:
    """Everything one test attempt did."""

    #: The output (plain JSON) when it succeeded.
    output: Any = None
    #: The failure record when it failed.
    failure: Optional[FailureRecord] = None
    #: True when it ended with nothing to report (cancelled).
    cancelled: bool = False
    #: Every checkpoint saved, in order (plain JSON).
    checkpoints: list[Any] = field(default_factory=list)
    #: How many heartbeats (checkpoints included) the handler sent.
    heartbeats: int = 0

    @property
    def ok(self) -> bool:
        return self.failure is None and not self.cancelled


class _Recorder:
    def __init__(self) -> None:
        self.checkpoints: list[Any] = []
        self.heartbeats = 0
        self.gone = False
        self.lock = threading.Lock()

    async def beat(self, checkpoint_json: Optional[str]) -> tuple[bool, bool]:
        with self.lock:
            self.heartbeats += 1
            if self.gone:
                return False, True
            if checkpoint_json is not None:
                self.checkpoints.append(json.loads(checkpoint_json))
            return True, True


async def aattempt(
    handler: Any,
    args: Any = None,
    *,
    attempt: int = 1,
    checkpoint: Any = None,
    idempotency_key: Optional[str] = None,
    run_id: str = "run-test",
    step_id: str = "step",
    timeout: float = 20.0,
    heartbeat_timeout: Optional[float] = None,
    cancel_after: Optional[float] = None,
) -> AttemptResult:
    """Runs one attempt of ``handler`` (a function declared with ``@worker.action``/``@cairn.action``, an
    :class:`cairn.Action`, or a plain function) with ``args`` and returns what it did; never raises for the
    handler's failures.

    :param args: the args as a plan would resolve them: plain JSON, or a pydantic model / dataclass instance.
    :param attempt: the attempt number the handler sees (``ctx.attempt``).
    :param checkpoint: the checkpoint an earlier attempt saved (``ctx.last_checkpoint``).
    :param idempotency_key: default ``<run_id>/<step_id>``.
    :param timeout: the step's ``timeout_ms`` in seconds: the deadline, enforced as the worker does.
    :param cancel_after: cancel the attempt after this many seconds, as a cancelled run would (``ctx.cancelled``
        turns true, an ``async def`` handler's task is cancelled, nothing is reported).
    """
    act = as_action(handler)
    recorder = _Recorder()
    loop = asyncio.get_running_loop()
    ctx = Context(
        run_id=run_id, step_id=step_id, attempt=attempt, action=act.name,
        idempotency_key=idempotency_key or f"{run_id}/{step_id}", remaining_s=timeout, timeout_s=timeout,
        heartbeat_timeout_s=heartbeat_timeout, last_checkpoint=_schema.to_json_value(checkpoint),
        traceparent="", progress=recorder, loop=loop,
    )
    timer = None
    if cancel_after is not None:
        def cancel() -> None:
            recorder.gone = True
            ctx._cancel("lease_gone")

        timer = loop.call_later(cancel_after, cancel)
    args_json = _schema.dumps(_schema.to_json_value({} if args is None else args))
    try:
        outcome = await act.run(args_json=args_json, ctx=ctx, heartbeat_every=None)
        if outcome.straggler is not None:
            await asyncio.wait([outcome.straggler])  # its late result or error is void
    finally:
        if timer is not None:
            timer.cancel()
    return AttemptResult(output=outcome.output, failure=outcome.failure, cancelled=outcome.no_report is not None,
                         checkpoints=recorder.checkpoints, heartbeats=recorder.heartbeats)


def attempt(handler: Any, args: Any = None, **options: Any) -> AttemptResult:
    """:func:`aattempt` from synchronous code (a test function); see it for the options."""
    return asyncio.run(aattempt(handler, args, **options))


async def arun(handler: Any, args: Any = None, **options: Any) -> Any:
    """Like :func:`run`, in asyncio code."""
    return _unwrap(await aattempt(handler, args, **options))


def run(handler: Any, args: Any = None, **options: Any) -> Any:
    """Runs one attempt of ``handler`` with ``args`` and returns its output (plain JSON, as the orchestrator would
    store it). Raises :class:`ActionFailed` with the failure record when the attempt fails, and
    :class:`AttemptCancelled` when it was cancelled. Options as for :func:`aattempt` (``attempt``, ``checkpoint``,
    ``timeout``, ``cancel_after``, …)."""
    return _unwrap(attempt(handler, args, **options))


def _unwrap(result: AttemptResult) -> Any:
    if result.failure is not None:
        raise ActionFailed(result.failure)
    if result.cancelled:
        raise AttemptCancelled("the attempt was cancelled and reported nothing")
    return result.output
