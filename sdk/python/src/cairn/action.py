"""Actions: a handler with its name, effect and schemas, and how one attempt of it runs.

The attempt runner here is shared by :class:`cairn.Worker` and :mod:`cairn.testing`, so a handler behaves the same
in a unit test as under the orchestrator: args parsed into the hinted type, the output converted to JSON and
checked against the declared schema, exceptions turned into failure records.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import threading
import traceback
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import pydantic

from . import schema as _schema
from .context import Cancelled, Context
from .errors import ActionFailure

__all__ = ["Action", "Effect", "FailureRecord", "action", "Outcome"]

Effect = Literal["read", "idempotent_write", "non_idempotent"]
EFFECTS: tuple[str, ...] = ("read", "idempotent_write", "non_idempotent")

log = logging.getLogger("cairn.worker")

# Failure codes this SDK reports.
INVALID_ARGS = "invalid_args"
INVALID_OUTPUT = "invalid_output"
OUTPUT_NOT_SERIALIZABLE = "output_not_serializable"
ACTION_ERROR = "action_error"
TIMEOUT = "timeout"


@dataclass
class FailureRecord:
    """How an attempt failed, as the worker reports it (``Failure`` in the worker protocol)."""

    code: str
    message: str
    details: Any = None
    retryable: bool = True
    retry_after_ms: int | None = None
    did_not_take_effect: bool = False
    degraded: bool = False

    @property
    def retry_after(self) -> float | None:
        """``retry_after_ms`` in seconds."""
        return None if self.retry_after_ms is None else self.retry_after_ms / 1000

    def details_json(self) -> str:
        """The details as JSON text (empty when there are none)."""
        if self.details is None:
            return ""
        try:
            return _schema.dumps(_schema.to_json_value(self.details))
        except (TypeError, ValueError):
            return _schema.dumps({"repr": repr(self.details)})


@dataclass
class Outcome:
    """How one attempt ended: ``output`` (plain JSON) on success, ``failure`` on failure, or neither when there is
    nothing to report (``no_report``: the lease is gone or the worker gave the attempt up)."""

    output: Any = None
    output_json: str | None = None
    failure: FailureRecord | None = None
    no_report: str | None = None
    #: A sync handler's thread still running after the attempt ended (it ignored the cancellation).
    straggler: asyncio.Future[Any] | None = field(default=None, repr=False)

    @property
    def succeeded(self) -> bool:
        return self.output_json is not None


def _bad_args(message: str, details: Any = None) -> Outcome:
    return Outcome(failure=FailureRecord(INVALID_ARGS, message, details, retryable=False, did_not_take_effect=True))


class Action:
    """An action a worker serves: a handler plus what the orchestrator needs to know about it.

    Built by :meth:`cairn.Worker.action` or :func:`cairn.action`; the decorated function stays callable as it was
    and carries its action as ``fn.__cairn_action__``.
    """

    def __init__(
        self,
        handler: Callable[..., Any],
        name: str,
        *,
        effect: str = "read",
        args_schema: Any = None,
        output_schema: Any = None,
        grounded_args: list[str] | None = None,
        example_output: Any = None,
        description: str | None = None,
        version: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("an action needs a non-empty name, e.g. 'crm.lookup'")
        if effect not in EFFECTS:
            raise ValueError(f"effect must be one of {', '.join(EFFECTS)}; got {effect!r}")
        if not callable(handler):
            raise TypeError("the handler must be a function")
        #: The action's name, as plans write it in ``action``.
        self.name = name
        #: ``read``, ``idempotent_write`` or ``non_idempotent``: decides whether a step may be re-executed.
        self.effect: str = effect
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None))
        self._params, self._ctx_index, args_hint, out_hint = _signature(handler)
        self.args_type: Any = args_hint
        self.output_type: Any = out_hint
        #: JSON Schema of the args (closed), sent at registration; the orchestrator checks plans against it.
        self.args_schema: dict[str, Any] = _explicit(args_schema, "validation") or _schema.schema_for(
            args_hint, "validation") or {"type": "object"}
        #: JSON Schema of the output; every output is checked against it before it is reported.
        self.output_schema: dict[str, Any] = _explicit(output_schema, "serialization") or _schema.schema_for(
            out_hint, "serialization") or {}
        if isinstance(args_schema, type) and self.args_type is None:
            self.args_type = args_schema
        if isinstance(output_schema, type) and self.output_type is None:
            self.output_type = output_schema
        #: JSON pointers into the args whose literal values must appear in the plan's ``context.source_text``.
        self.grounded_args = [g if g.startswith("/") else "/" + g for g in (grounded_args or [])]
        self.example_output = None
        if example_output is not None:
            plain = _schema.to_json_value(example_output)
            errors = _schema.validate(plain, self.output_schema)
            if errors:
                raise ValueError(f"example_output of {name!r} does not match its output schema: {errors[0]}")
            self.example_output = plain
        doc = inspect.getdoc(handler) or ""
        #: Shown to people and to the planner (defaults to the handler's docstring's first paragraph).
        self.description = description if description is not None else doc.split("\n\n")[0].strip()
        #: The action's version (free text).
        self.version = version or "1"

    def __repr__(self) -> str:
        return f"Action({self.name!r}, effect={self.effect!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.handler(*args, **kwargs)

    # --- running ----------------------------------------------------------------------------------------------

    def parse_args(self, value: Any) -> Any:
        """The args (plain JSON) as the handler's hinted type. Raises ``pydantic.ValidationError``."""
        tp = self.args_type
        if tp is None or tp is Any:
            return value
        if _schema.is_model(tp):
            return tp.model_validate(value)
        return _schema.adapter(tp).validate_python(value)

    def _call(self, args: Any, ctx: Context) -> Any:
        positional: list[Any] = []
        for i in range(len(self._params)):
            positional.append(ctx if i == self._ctx_index else args)
        return self.handler(*positional)

    async def run(
        self,
        *,
        args_json: str,
        ctx: Context,
        heartbeat_every: float | None,
        abandon: asyncio.Event | None = None,
    ) -> Outcome:
        """Runs one attempt to its end and says what to report.

        When a heartbeat learns that the orchestrator no longer counts the attempt, the handler is cancelled and
        nothing is reported; when ``abandon`` is set (the worker's drain timeout) likewise, and the lease expires.
        The deadline is the context's. Heartbeats are sent every ``heartbeat_every`` seconds while the handler
        runs (``None``: none).
        """
        try:
            value = json.loads(args_json) if args_json else {}
        except ValueError as e:
            return _bad_args(f"the args are not JSON: {e}")
        errors = _schema.validate(value, self.args_schema)
        if errors:
            return _bad_args(f"the args do not match the args schema of {self.name!r}: {errors[0]}",
                             {"errors": errors[:50]})
        try:
            args = self.parse_args(value)
        except pydantic.ValidationError as e:
            return _bad_args(f"the args do not fit {_type_name(self.args_type)}: {_first_error(e)}",
                             {"errors": json.loads(e.json(include_url=False))})

        loop = asyncio.get_running_loop()
        gone = asyncio.Event()

        def on_cancel() -> None:
            if ctx._reason == "lease_gone":
                loop.call_soon_threadsafe(gone.set)

        ctx._on_cancel.append(on_cancel)
        if ctx._reason == "lease_gone":
            gone.set()
        if self.is_async:
            work: asyncio.Future[Any] = asyncio.ensure_future(self._call(args, ctx))
        else:
            work = _in_thread(loop, self._call, args, ctx)
        beats = asyncio.ensure_future(_heartbeats(ctx, heartbeat_every)) if heartbeat_every else None
        gone_wait = asyncio.ensure_future(gone.wait())
        abandon_wait = asyncio.ensure_future(abandon.wait()) if abandon is not None else None
        waiters = [w for w in (work, gone_wait, abandon_wait) if w is not None]
        try:
            done, _ = await asyncio.wait(waiters, timeout=ctx.remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in (beats, gone_wait, abandon_wait):
                if w is not None:
                    w.cancel()
        # Once the lease is gone, a result returned in the same instant is void.
        if gone.is_set() or ctx._reason == "lease_gone":
            ctx._cancel("lease_gone")
            return self._left(work, "lease_gone")
        if abandon is not None and abandon.is_set() and work not in done:
            ctx._cancel("shutdown")
            return self._left(work, "shutdown")
        if work not in done:
            ctx._cancel("deadline")
            outcome = self._left(work, None)
            outcome.failure = FailureRecord(
                TIMEOUT,
                f"the action ran past timeout_ms ({int(ctx.timeout * 1000)} ms) and was cancelled by the worker",
                {"timeout_ms": int(ctx.timeout * 1000)},
                retryable=True,
            )
            return outcome
        return self._finish(work, ctx)

    def _left(self, work: asyncio.Future[Any], no_report: str | None) -> Outcome:
        """The handler is still running but the attempt is over: cancel it (an async task) or leave it (a thread,
        which cannot be stopped from outside; it sees ``ctx.cancelled``)."""
        if self.is_async:
            work.cancel()
            return Outcome(no_report=no_report)
        work.add_done_callback(_quiet)
        return Outcome(no_report=no_report, straggler=work)

    def _finish(self, work: asyncio.Future[Any], ctx: Context) -> Outcome:
        try:
            result = work.result()
        except ActionFailure as e:
            return Outcome(failure=FailureRecord(
                e.code, e.message, e.details, retryable=e.retryable,
                retry_after_ms=None if e.retry_after is None else int(round(e.retry_after * 1000)),
                did_not_take_effect=e.did_not_take_effect, degraded=e.degraded,
            ))
        except (Cancelled, asyncio.CancelledError) as e:
            reason = ctx.cancel_reason or getattr(e, "reason", None)
            if reason == "deadline":
                return Outcome(failure=FailureRecord(
                    TIMEOUT, f"the action stopped at its deadline (timeout_ms {int(ctx.timeout * 1000)} ms)",
                    {"timeout_ms": int(ctx.timeout * 1000)}, retryable=True))
            if reason in ("lease_gone", "shutdown"):
                return Outcome(no_report=reason)
            return _action_error(e)
        except Exception as e:  # noqa: BLE001 - every other exception is a retryable action_error
            return _action_error(e)
        return self.output(result)

    def output(self, result: Any) -> Outcome:
        """A handler's return value as the outcome to report: JSON, checked against the output schema."""
        try:
            plain = _schema.to_json_value(result)
        except _schema.NotJSONSerializable as e:
            return Outcome(failure=FailureRecord(
                OUTPUT_NOT_SERIALIZABLE,
                f"the action {self.name!r} returned a value that is not JSON-serialisable: {e}",
                {"path": e.path, "type": e.type_name, "repr": _clip(repr(result))},
                retryable=False,
            ))
        errors = _schema.validate(plain, self.output_schema)
        if errors:
            return Outcome(failure=FailureRecord(
                INVALID_OUTPUT,
                f"the output of {self.name!r} does not match its declared output schema: {errors[0]}",
                {"errors": errors[:50], "output": plain if len(_schema.dumps(plain)) <= 4096 else "<too large>"},
                retryable=False,
            ))
        return Outcome(output=plain, output_json=_schema.dumps(plain))


def action(
    name: str,
    effect: str = "read",
    *,
    args_schema: Any = None,
    output_schema: Any = None,
    grounded_args: list[str] | None = None,
    example_output: Any = None,
    description: str | None = None,
    version: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declares a function as an action without a worker (add it later with :meth:`cairn.Worker.add`).

    Takes the same arguments as :meth:`cairn.Worker.action`. The function is returned unchanged, with its
    :class:`Action` as ``fn.__cairn_action__``.
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        act = Action(fn, name, effect=effect, args_schema=args_schema, output_schema=output_schema,
                     grounded_args=grounded_args, example_output=example_output, description=description,
                     version=version)
        try:
            fn.__cairn_action__ = act  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # pragma: no cover - builtins and such
            pass
        return fn

    return wrap


def as_action(obj: Any) -> Action:
    """``obj`` as an :class:`Action`: an action, a decorated function, or a plain function (whose name and hints
    make an action with effect ``read``)."""
    if isinstance(obj, Action):
        return obj
    found = getattr(obj, "__cairn_action__", None)
    if isinstance(found, Action):
        return found
    if callable(obj):
        return Action(obj, getattr(obj, "__name__", "action"))
    raise TypeError(f"{obj!r} is not an action or a function")


# --- helpers ----------------------------------------------------------------------------------------------------


def _explicit(given: Any, mode: str) -> dict[str, Any] | None:
    if given is None:
        return None
    if isinstance(given, dict):
        json.dumps(given)  # a schema must be JSON itself
        return given
    return _schema.schema_for(given, mode)


def _signature(fn: Callable[..., Any]) -> tuple[list[inspect.Parameter], int | None, Any, Any]:
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable forward references: fall back to raw annotations
        hints = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if not isinstance(v, str)}
    positional = [p for p in sig.parameters.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    if len(required) > 2 or any(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
                                for p in sig.parameters.values()):
        raise TypeError(f"{getattr(fn, '__name__', fn)!r}: a handler takes (args) or (args, ctx), not "
                        f"{len(required)} required parameters")

    def is_ctx(p: inspect.Parameter) -> bool:
        hint = hints.get(p.name)
        return (isinstance(hint, type) and issubclass(hint, Context)) or p.name in ("ctx", "context")

    # The args, then the context; a defaulted parameter is passed only when it is the context.
    params = [p for i, p in enumerate(positional[:2]) if p.default is inspect.Parameter.empty or is_ctx(p)]
    ctx_index = next((i for i, p in enumerate(params) if is_ctx(p)), None)
    if ctx_index is None and len(params) == 2:
        ctx_index = 1
    args_params = [p for i, p in enumerate(params) if i != ctx_index]
    args_hint = hints.get(args_params[0].name) if args_params else None
    out_hint = hints.get("return")
    if _is_awaitable_hint(out_hint):
        out_hint = typing.get_args(out_hint)[-1] if typing.get_args(out_hint) else None
    if out_hint is type(None):
        out_hint = None
    return params, ctx_index, args_hint, out_hint


def _is_awaitable_hint(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return origin is not None and getattr(origin, "__name__", "") in ("Awaitable", "Coroutine")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _first_error(e: pydantic.ValidationError) -> str:
    first = e.errors(include_url=False)[0]
    where = "/" + "/".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg')}"


def _clip(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _action_error(e: BaseException) -> Outcome:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return Outcome(failure=FailureRecord(
        ACTION_ERROR,
        f"{type(e).__name__}: {e}" if str(e) else type(e).__name__,
        {"exception": f"{type(e).__module__}.{type(e).__qualname__}", "traceback": _clip(tb, 16_000)},
        retryable=True,
    ))


def _quiet(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _in_thread(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """Runs ``fn(*args)`` in a daemon thread of its own and returns a future of its result. Daemon threads, not a
    ``ThreadPoolExecutor``: a handler that ignores its cancellation must not keep the process from exiting."""
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def target() -> None:
        try:
            result = context.run(fn, *args)
        except BaseException as e:  # noqa: BLE001 - handed to the loop
            outcome: tuple[bool, Any] = (False, e)
        else:
            outcome = (True, result)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop closed meanwhile (process exiting)
            pass

    threading.Thread(target=target, name="cairn-handler", daemon=True).start()
    return future


async def _heartbeats(ctx: Context, every: float) -> None:
    """Heartbeats every ``every`` seconds until the orchestrator says the attempt no longer counts."""
    while True:
        await asyncio.sleep(every)
        if not await ctx.aheartbeat():
            return

