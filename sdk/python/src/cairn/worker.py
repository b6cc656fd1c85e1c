"""``cairn.Worker``: serves your actions to a Cairn orchestrator over the worker protocol (gRPC).

What it does, in order (the same as Cairn's Rust worker runtime):

1. ``Register`` its actions (name, version, effect, args/output JSON Schemas, grounded args), retrying with
   capped, jittered backoff while the orchestrator is unreachable; a refusal (wrong token, a schema the
   orchestrator rejects) stops it with :class:`cairn.WorkerRejected`.
2. Long-poll ``Poll`` for exactly as many attempts as it has free slots (``concurrency``), so every attempt it
   receives starts at once. A failed poll waits with backoff (100 ms doubling to 5 s, with jitter) and registers
   again first, since a restarted orchestrator has forgotten the registered actions.
3. Run each attempt: args checked against the schema and parsed into the handler's hinted type; sync handlers in
   a thread of their own, ``async def`` handlers on the worker's event loop; a heartbeat every interval the
   orchestrator asked for (more often when the step's heartbeat timeout is shorter); the deadline enforced.
4. Report ``Complete`` (asking for the next attempt for the freed slot) or ``Fail``, resending on
   ``UNAVAILABLE``, ``UNKNOWN``, ``DEADLINE_EXCEEDED``, ``CANCELLED``, ``ABORTED`` and ``RESOURCE_EXHAUSTED`` with
   backoff capped at the heartbeat interval for up to ``report_give_up_after`` (never on ``INVALID_ARGUMENT``,
   ``INTERNAL`` and the like: the lease then expires and the orchestrator decides). Every report is fenced by
   its lease, so a resend changes nothing twice.
5. On SIGTERM/SIGINT (or :meth:`Worker.stop`): stop polling at once, let attempts in flight finish and report
   for up to ``drain_timeout``, cancel what is still running (left to lease expiry), return any attempt received
   but not started (``FailRequest.not_started``), and return.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import socket
import threading
import time
from typing import Any, Callable
from urllib.parse import urlparse

import grpc
import grpc.aio

from . import _otel
from ._proto.cairn.v1 import worker_pb2 as pb
from ._proto.cairn.v1 import worker_pb2_grpc as pb_grpc
from .action import Action, FailureRecord, Outcome, as_action
from .context import Context
from .errors import WorkerRejected
from .schema import dumps

__all__ = ["Worker"]

log = logging.getLogger("cairn.worker")

CALL_TIMEOUT = 30.0
# The worker protocol's major version this SDK speaks (`RegisterRequest.protocol_version`).
PROTOCOL_VERSION = 1
POLL_SLACK = 10.0
RETURN_WAIT = 10.0
WORKER_SHUTDOWN = "worker_shutdown"

_EFFECTS = {
    "read": pb.EFFECT_READ,
    "idempotent_write": pb.EFFECT_IDEMPOTENT_WRITE,
    "non_idempotent": pb.EFFECT_NON_IDEMPOTENT,
}
# Worth resending: the orchestrator is unreachable or restarting, the call timed out or was cut, its store was
# briefly unavailable. Repeating anything else gets the same answer.
TRANSIENT = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED,
})
# A poll failing so means this worker is not welcome: stop.
REFUSED = frozenset({
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED,
})
_OUTCOMES = {v: k for k, v in pb.ReportOutcome.items()}


def default_worker_id() -> str:
    """``<hostname>-<pid>``: distinct per process on a host, recognisable in failure records."""
    host = os.environ.get("HOSTNAME") or socket.gethostname() or "worker"
    return f"{host.strip()}-{os.getpid()}"


class _Backoff:
    """Exponential backoff with jitter: ``min`` doubling up to ``max``, plus up to as much again at random."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high, self.n = low, high, 0

    def next(self) -> float:
        delay = min(self.high, self.low * (2 ** self.n))
        self.n = min(self.n + 1, 32)
        return delay + random.uniform(0, delay)

    def reset(self) -> None:
        self.n = 0


def _target(url: str) -> tuple[str, bool]:
    """``http://host:port`` → (``host:port``, secure?)."""
    if "://" not in url:
        return url, False
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https", "grpc", "grpcs"):
        raise ValueError(f"the orchestrator URL must be http://HOST:PORT or https://HOST:PORT, got {url!r}")
    if not parsed.hostname or not parsed.port:
        raise ValueError(f"the orchestrator URL needs a host and a port, got {url!r}")
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return f"{host}:{parsed.port}", parsed.scheme in ("https", "grpcs")


def setup_logging(level: int = logging.INFO) -> None:
    """Makes the worker's log lines visible: a stderr handler on the root logger when there is none yet (so an
    application's own logging configuration wins), and ``level`` on the ``cairn`` logger when it has none."""
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cairn_logger = logging.getLogger("cairn")
    if cairn_logger.level == logging.NOTSET:
        cairn_logger.setLevel(level)


class _LeaseProgress:
    """Heartbeats and checkpoints of one attempt. One call at a time, so checkpoints arrive in order; a checkpoint
    whose heartbeat failed stays pending and rides on the next one."""

    def __init__(self, worker: "Worker", lease: pb.Lease) -> None:
        self.worker = worker
        self.lease = lease
        self.lock = asyncio.Lock()
        self.unsent: str | None = None
        self.gone = False

    async def beat(self, checkpoint_json: str | None) -> tuple[bool, bool]:
        async with self.lock:
            if checkpoint_json is not None:
                self.unsent = checkpoint_json
            if self.gone:
                return False, False
            request = pb.HeartbeatRequest(worker_id=self.worker.worker_id, lease=self.lease)
            if self.unsent is not None:
                request.checkpoint_json = self.unsent
            try:
                response = await self.worker._stub.Heartbeat(request, timeout=CALL_TIMEOUT,
                                                             metadata=self.worker._metadata)
            except grpc.aio.AioRpcError as e:
                log.warning("heartbeat of %s/%s attempt %d failed: %s: %s", self.lease.run_id, self.lease.step_id,
                            self.lease.attempt, e.code().name, e.details())
                return True, False
            self.unsent = None
            if not response.alive:
                self.gone = True
                log.info("the orchestrator no longer counts %s/%s attempt %d (cancelled, timed out or reclaimed); "
                         "stopping it", self.lease.run_id, self.lease.step_id, self.lease.attempt)
            return response.alive, True


class Worker:
    """Serves actions to the orchestrator at ``url`` (its gRPC address, ``http://HOST:PORT``).

    >>> worker = cairn.Worker("http://127.0.0.1:7401", token=os.environ.get("CAIRN_WORKER_TOKEN"))
    >>> @worker.action("crm.lookup", effect="read")
    ... def lookup(args: LookupArgs, ctx: cairn.Context) -> Customer: ...
    >>> worker.run()  # blocks; SIGTERM/SIGINT drain in-flight attempts

    :param token: the worker token (``CAIRN_WORKER_TOKEN`` of the orchestrator), sent as a bearer token.
    :param concurrency: most attempts run at once.
    :param worker_id: recorded on every attempt; default ``<hostname>-<pid>``.
    :param poll_wait: longest one long poll waits for work, seconds (the orchestrator caps it).
    :param drain_timeout: on shutdown, how long attempts in flight may still run and report, seconds.
    :param report_give_up_after: how long a finished attempt's report is resent while the orchestrator is
        unreachable, seconds.
    :param log_level: level of the ``cairn`` logger that :meth:`run` sets up when the application set none.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        concurrency: int = 8,
        worker_id: str | None = None,
        *,
        poll_wait: float = 30.0,
        drain_timeout: float = 30.0,
        report_give_up_after: float = 600.0,
        log_level: int = logging.INFO,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.url = url
        self._target, self._secure = _target(url)
        if token is not None and (not token or not token.isprintable() or not token.isascii()):
            raise ValueError("the worker token must be non-empty printable ASCII")
        self._token = token
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        if not self.worker_id.strip():
            raise ValueError("the worker id is empty")
        self.poll_wait = poll_wait
        self.drain_timeout = drain_timeout
        self.report_give_up_after = report_give_up_after
        self.log_level = log_level
        #: The actions served, by name.
        self.actions: dict[str, Action] = {}
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_requested = threading.Event()
        self._fatal: BaseException | None = None
        self._started = threading.Event()

    def __repr__(self) -> str:
        return f"Worker({self.url!r}, worker_id={self.worker_id!r}, actions={sorted(self.actions)})"

    # --- declaring actions ------------------------------------------------------------------------------------

    def action(
        self,
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
        """Declares the decorated function as the handler of action ``name``.

        The handler takes ``(args)`` or ``(args, ctx: cairn.Context)`` and may be ``async def``. Schemas come from
        its hints — a pydantic v2 model, a dataclass, a TypedDict, or any type pydantic can describe — closed with
        ``additionalProperties: false``, or from ``args_schema`` / ``output_schema`` (a JSON Schema dict, or a
        type). Args are parsed into the hinted type; the return value is converted to JSON and checked against
        the output schema before it is reported (a mismatch is an ``invalid_output`` failure, never a success).

        :param effect: ``"read"``, ``"idempotent_write"`` or ``"non_idempotent"`` (never re-executed blindly).
        :param grounded_args: JSON pointers (``"/city"``) into the args whose literal values must appear in
            the plan's ``context.source_text``.
        :param example_output: an output example, checked against the output schema.
        :param description: shown to people and the planner; default the docstring's first paragraph.
        :param version: the action's version, free text (default ``"1"``).
        :returns: the function, unchanged (its :class:`cairn.Action` is ``fn.__cairn_action__``).
        """

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            act = Action(fn, name, effect=effect, args_schema=args_schema, output_schema=output_schema,
                         grounded_args=grounded_args, example_output=example_output, description=description,
                         version=version)
            self._add(act)
            try:
                fn.__cairn_action__ = act  # type: ignore[attr-defined]
            except (AttributeError, TypeError):  # pragma: no cover
                pass
            return fn

        return wrap

    def add(self, *actions: Any) -> None:
        """Serves actions declared elsewhere (:func:`cairn.action`, :class:`cairn.Action`)."""
        for obj in actions:
            self._add(as_action(obj))

    def _add(self, act: Action) -> None:
        if act.name in self.actions:
            raise ValueError(f"action {act.name!r} is served twice")
        self.actions[act.name] = act

    # --- running ----------------------------------------------------------------------------------------------

    def run(self) -> None:
        """Connects, serves until SIGTERM or SIGINT (or :meth:`stop`), drains, and returns.

        Blocks the calling thread (the main thread, so it can take the signals). Sets up logging when the
        application has none, so the connection and the actions served are visible.

        :raises cairn.WorkerRejected: the orchestrator refused the token or the actions.
        """
        setup_logging(self.log_level)
        asyncio.run(self.run_async(handle_signals=threading.current_thread() is threading.main_thread()))

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Blocks (another thread than the worker's) until the worker registered with the orchestrator; True
        once it did, False after ``timeout`` seconds. For applications that run the worker in a thread."""
        return self._started.wait(timeout)

    def stop(self) -> None:
        """Begins shutdown (from any thread): no new attempts; attempts in flight drain. :meth:`run` returns when
        they are done."""
        self._stop_requested.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)

    async def run_async(self, *, handle_signals: bool = False) -> None:
        """:meth:`run` as a coroutine, for applications that run their own event loop. With ``handle_signals``,
        SIGTERM and SIGINT begin the shutdown; a second one abandons the drain."""
        if not self.actions:
            raise ValueError("the worker serves no actions: declare some with @worker.action(...)")
        if self._loop is not None:
            raise RuntimeError("this worker is already running")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stopping = asyncio.Event()
        self._abandon = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._returns: set[asyncio.Task[Any]] = set()
        self._fatal = None
        if self._stop_requested.is_set():
            self._stopping.set()
        installed: list[int] = []
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - not the main thread
                    pass
        options = [
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # Reconnect quickly once a restarted orchestrator is back (gRPC's default backoff reaches 120 s).
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 5_000),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ]
        if self._secure:
            channel = grpc.aio.secure_channel(self._target, grpc.ssl_channel_credentials(), options=options)
        else:
            channel = grpc.aio.insecure_channel(self._target, options=options)
        self._stub = pb_grpc.WorkerServiceStub(channel)
        self._descriptors = [self._descriptor(a) for a in self.actions.values()]
        try:
            registered = await self._register_until_done()
            if registered is not None:
                hb = registered.heartbeat_interval_ms
                self._heartbeat_every = hb / 1000 if hb else 1.0
                log.info("worker %s connected to %s; serving %s (concurrency %d, heartbeat every %d ms)",
                         self.worker_id, self.url, ", ".join(sorted(self.actions)), self.concurrency,
                         int(self._heartbeat_every * 1000))
                self._started.set()
                self._slots = asyncio.Semaphore(self.concurrency)
                fetcher = asyncio.ensure_future(self._fetch_loop())
                await self._stopping.wait()
                if self._fatal is None:
                    log.info("shutting down: no new attempts; draining %d in flight (at most %.0f s)",
                             len(self._tasks), self.drain_timeout)
                await fetcher
                await self._drain()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await channel.close(grace=None)
            self._loop = None
            self._started.clear()
        if self._fatal is not None:
            raise self._fatal
        log.info("worker %s stopped", self.worker_id)

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        assert self._stopping is not None
        if self._stopping.is_set():
            log.warning("%s again: abandoning the attempts still running; their leases will expire", name)
            self._abandon.set()
            return
        log.info("%s received", name)
        self._stopping.set()

    async def _drain(self) -> None:
        if self._tasks:
            _done, pending = await asyncio.wait(set(self._tasks), timeout=self.drain_timeout)
            if pending and not self._abandon.is_set():
                log.warning("drain timeout (%.0f s) passed: cancelling %d attempt(s) still running; their leases "
                            "will expire", self.drain_timeout, len(pending))
            self._abandon.set()
            if pending:
                _done, pending = await asyncio.wait(pending, timeout=2.0)
                for task in pending:
                    task.cancel()
        if self._returns:
            _done, pending = await asyncio.wait(set(self._returns), timeout=RETURN_WAIT)
            if pending:
                log.warning("gave up returning %d unstarted attempt(s); their leases will expire", len(pending))

    def _descriptor(self, act: Action) -> pb.ActionDescriptor:
        descriptor = pb.ActionDescriptor(
            name=act.name, version=act.version, description=act.description,
            args_schema_json=dumps(act.args_schema), output_schema_json=dumps(act.output_schema),
            effect=_EFFECTS[act.effect], grounded_args=act.grounded_args,
        )
        if act.example_output is not None:
            descriptor.example_output_json = dumps(act.example_output)
        return descriptor

    async def _register_once(self) -> pb.RegisterResponse:
        request = pb.RegisterRequest(
            worker_id=self.worker_id, actions=self._descriptors, protocol_version=PROTOCOL_VERSION
        )
        return await self._stub.Register(request, timeout=CALL_TIMEOUT, metadata=self._metadata)

    async def _register_until_done(self) -> pb.RegisterResponse | None:
        """Registers, retrying transient errors for as long as it takes (the orchestrator may be starting);
        ``None`` when shutdown began first."""
        assert self._stopping is not None
        backoff = _Backoff(0.2, 5.0)
        while not self._stopping.is_set():
            try:
                return await self._register_once()
            except grpc.aio.AioRpcError as e:
                if e.code() not in TRANSIENT:
                    raise WorkerRejected(e.code().name, e.details() or "") from None
                wait = backoff.next()
                log.warning("cannot register with the orchestrator at %s yet (%s: %s); retrying in %d ms",
                            self.url, e.code().name, e.details(), int(wait * 1000))
                await self._sleep_unless_stopping(wait)
        return None

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    # --- fetching ---------------------------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        """Long-polls for as many attempts as there are free slots, until shutdown."""
        assert self._stopping is not None
        stopping = self._stopping
        stop_wait = asyncio.ensure_future(stopping.wait())
        backoff = _Backoff(0.1, 5.0)
        register_first = False
        try:
            while not stopping.is_set():
                slot_wait = asyncio.ensure_future(self._slots.acquire())
                await asyncio.wait({slot_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not slot_wait.done():
                    slot_wait.cancel()
                    break
                held = 1
                while not self._slots.locked():
                    await self._slots.acquire()
                    held += 1
                if stopping.is_set():
                    self._release(held)
                    break
                try:
                    if register_first:
                        await self._register_once()
                        register_first = False
                        log.info("registered again with the orchestrator")
                    attempts = await self._poll(held, stop_wait)
                except grpc.aio.AioRpcError as e:
                    self._release(held)
                    if e.code() in REFUSED:
                        log.error("the orchestrator refused the worker (%s: %s); stopping", e.code().name,
                                  e.details())
                        self._fatal = WorkerRejected(e.code().name, e.details() or "")
                        stopping.set()
                        break
                    wait = backoff.next()
                    log.warning("polling the orchestrator failed (%s: %s); retrying in %d ms", e.code().name,
                                e.details(), int(wait * 1000))
                    register_first = True
                    await self._sleep_unless_stopping(wait)
                    continue
                backoff.reset()
                if attempts is None:  # shutdown began during the poll
                    self._release(held)
                    break
                take, surplus = attempts[:held], attempts[held:]
                self._release(held - len(take))
                for attempt in take:
                    if stopping.is_set():
                        self._release(1)
                        self._give_back([attempt])
                    else:
                        self._start(attempt)
                if surplus:
                    log.warning("the orchestrator sent %d more attempt(s) than asked; returning them", len(surplus))
                    self._give_back(surplus)
        finally:
            stop_wait.cancel()

    def _release(self, n: int) -> None:
        for _ in range(n):
            self._slots.release()

    async def _poll(self, slots: int, stop_wait: asyncio.Future[Any]) -> list[pb.Attempt] | None:
        """One long poll, abandoned when shutdown begins; a poll answered in that same instant has its attempts
        returned unstarted. ``None`` when abandoned."""
        request = pb.PollRequest(worker_id=self.worker_id, actions=sorted(self.actions), max_attempts=slots,
                                 wait_ms=int(self.poll_wait * 1000))
        call = self._stub.Poll(request, timeout=self.poll_wait + POLL_SLACK, metadata=self._metadata)

        async def answer() -> pb.PollResponse:
            return await call

        polled = asyncio.ensure_future(answer())
        await asyncio.wait({polled, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if polled.done():
            return list(polled.result().attempts)  # raises the call's error
        call.cancel()
        try:
            response = await polled
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            return None
        self._give_back(list(response.attempts))
        return None

    def _give_back(self, attempts: list[pb.Attempt]) -> None:
        """Returns attempts that never started (``not_started``): the orchestrator undoes the claim."""
        for attempt in attempts:
            task = asyncio.ensure_future(self._return_unstarted(attempt))
            self._returns.add(task)
            task.add_done_callback(self._returns.discard)

    async def _return_unstarted(self, attempt: pb.Attempt) -> None:
        if not attempt.HasField("lease"):
            return
        lease = attempt.lease
        failure = pb.Failure(code=WORKER_SHUTDOWN, message="the worker returned the attempt without starting it",
                             retryable=True, did_not_take_effect=True)
        request = pb.FailRequest(worker_id=self.worker_id, lease=lease, failure=failure, not_started=True)
        try:
            response = await self._stub.Fail(request, timeout=CALL_TIMEOUT, metadata=self._metadata)
            log.info("returned %s/%s attempt %d unstarted (%s)", lease.run_id, lease.step_id, lease.attempt,
                     _OUTCOMES.get(response.outcome, response.outcome))
        except grpc.aio.AioRpcError as e:
            log.warning("could not return %s/%s attempt %d unstarted (%s); its lease will expire", lease.run_id,
                        lease.step_id, lease.attempt, e.code().name)

    # --- attempts ---------------------------------------------------------------------------------------------

    def _start(self, attempt: pb.Attempt) -> None:
        """Runs ``attempt`` in a task holding one slot (released when the attempt and its report are done)."""
        task = asyncio.ensure_future(self._slot_flow(attempt))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _slot_flow(self, attempt: pb.Attempt) -> None:
        next_attempt: pb.Attempt | None = attempt
        try:
            while next_attempt is not None:
                next_attempt = await self._attempt(next_attempt)
                if next_attempt is not None and self._stopping is not None and self._stopping.is_set():
                    self._give_back([next_attempt])
                    next_attempt = None
        finally:
            self._slots.release()

    async def _attempt(self, attempt: pb.Attempt) -> pb.Attempt | None:
        """Runs and reports one attempt; returns the attempt handed over with its completion, if any."""
        if not attempt.HasField("lease"):
            log.error("received an attempt of %s without a lease; ignoring it", attempt.action)
            return None
        lease = attempt.lease
        act = self.actions.get(attempt.action)
        if act is None:
            failure = FailureRecord("action_error", f"this worker does not serve {attempt.action!r}",
                                    retryable=False, did_not_take_effect=True)
            await self._report_failure(lease, failure)
            return None
        checkpoint = None
        if attempt.HasField("checkpoint_json"):
            try:
                checkpoint = json.loads(attempt.checkpoint_json)
            except ValueError:
                log.warning("the last checkpoint of %s/%s is not JSON; starting without it", lease.run_id,
                            lease.step_id)
        hb_timeout = attempt.heartbeat_timeout_ms / 1000 if attempt.HasField("heartbeat_timeout_ms") else None
        assert self._loop is not None
        ctx = Context(
            run_id=lease.run_id, step_id=lease.step_id, attempt=lease.attempt, action=attempt.action,
            idempotency_key=attempt.idempotency_key or f"{lease.run_id}/{lease.step_id}",
            remaining_s=attempt.remaining_ms / 1000, timeout_s=attempt.timeout_ms / 1000,
            heartbeat_timeout_s=hb_timeout, last_checkpoint=checkpoint, traceparent=attempt.traceparent,
            progress=_LeaseProgress(self, lease), loop=self._loop,
        )
        every = self._heartbeat_every
        if hb_timeout:
            every = min(every, hb_timeout / 3)
        every = max(every, 0.05)
        started = time.monotonic()
        log.debug("attempt %s/%s #%d of %s started", lease.run_id, lease.step_id, lease.attempt, attempt.action)
        with _otel.attempt_span(attempt.action, lease.run_id, lease.step_id, lease.attempt,
                                attempt.traceparent) as span:
            outcome = await act.run(args_json=attempt.args_json, ctx=ctx, heartbeat_every=every,
                                    abandon=self._abandon)
            if outcome.failure is not None:
                _otel.record_failure(span, outcome.failure.code, outcome.failure.message)
        took = int((time.monotonic() - started) * 1000)
        handed: list[pb.Attempt] = []
        where = f"{lease.run_id}/{lease.step_id} attempt {lease.attempt} ({attempt.action})"
        if outcome.no_report is not None:
            log.info("%s ended without a report (%s) after %d ms", where, outcome.no_report, took)
        elif outcome.output_json is not None:
            log.info("%s succeeded in %d ms", where, took)
            handed = await self._report_success(lease, outcome.output_json)
        elif outcome.failure is not None:
            log.warning("%s failed in %d ms: %s: %s", where, took, outcome.failure.code, outcome.failure.message)
            await self._report_failure(lease, outcome.failure)
        await self._wait_straggler(outcome, where)
        if not handed:
            return None
        first, rest = handed[0], handed[1:]
        if rest:
            log.warning("the orchestrator handed over %d more attempt(s) than asked; returning them", len(rest))
            self._give_back(rest)
        return first

    async def _wait_straggler(self, outcome: Outcome, where: str) -> None:
        """A sync handler still running after its attempt ended keeps its slot until it returns (or the worker
        abandons it at shutdown), so the worker never runs more than ``concurrency`` handlers."""
        if outcome.straggler is None or outcome.straggler.done():
            return
        log.warning("%s: the handler is still running after the attempt ended; it keeps its slot until it "
                    "returns (check ctx.cancelled in long handlers)", where)
        abandon = asyncio.ensure_future(self._abandon.wait())
        await asyncio.wait({outcome.straggler, abandon}, return_when=asyncio.FIRST_COMPLETED)
        abandon.cancel()

    async def _report_success(self, lease: pb.Lease, output_json: str) -> list[pb.Attempt]:
        assert self._stopping is not None
        next_max = 0 if self._stopping.is_set() else 1
        request = pb.CompleteRequest(worker_id=self.worker_id, lease=lease, output_json=output_json,
                                     next_max_attempts=next_max, next_actions=sorted(self.actions))
        response = await self._deliver(
            lambda: self._stub.Complete(request, timeout=CALL_TIMEOUT, metadata=self._metadata), lease)
        if response is None:
            return []
        self._log_outcome(lease, response.outcome)
        return list(response.next)

    async def _report_failure(self, lease: pb.Lease, failure: FailureRecord) -> None:
        proto = pb.Failure(code=failure.code, message=failure.message, details_json=failure.details_json(),
                           retryable=failure.retryable, did_not_take_effect=failure.did_not_take_effect,
                           degraded=failure.degraded)
        if failure.retry_after_ms is not None:
            proto.retry_after_ms = failure.retry_after_ms
        request = pb.FailRequest(worker_id=self.worker_id, lease=lease, failure=proto)
        response = await self._deliver(
            lambda: self._stub.Fail(request, timeout=CALL_TIMEOUT, metadata=self._metadata), lease)
        if response is not None:
            self._log_outcome(lease, response.outcome)

    @staticmethod
    def _log_outcome(lease: pb.Lease, outcome: int) -> None:
        if outcome == pb.REPORT_OUTCOME_STALE:
            log.info("the report of %s/%s attempt %d was stale: the lease had already ended; nothing changed",
                     lease.run_id, lease.step_id, lease.attempt)
        else:
            log.debug("report of %s/%s attempt %d: %s", lease.run_id, lease.step_id, lease.attempt,
                      _OUTCOMES.get(outcome, outcome))

    async def _deliver(self, send: Callable[[], Any], lease: pb.Lease) -> Any:
        """Sends a report, resending on transient errors with backoff capped at the heartbeat interval (so a
        report lands within a restarted orchestrator's grace period) for up to ``report_give_up_after``."""
        cap = self._heartbeat_every
        backoff = _Backoff(min(0.1, cap), cap)
        give_up = time.monotonic() + self.report_give_up_after
        while True:
            try:
                return await send()
            except grpc.aio.AioRpcError as e:
                code = e.code()
                if code not in TRANSIENT:
                    log.error("the orchestrator refused the report of %s/%s attempt %d (%s: %s); the lease will "
                              "expire and the orchestrator will decide", lease.run_id, lease.step_id,
                              lease.attempt, code.name, e.details())
                    return None
                wait = backoff.next()
                if time.monotonic() + wait > give_up:
                    log.error("giving up on the report of %s/%s attempt %d after %.0f s (%s); the lease will "
                              "expire", lease.run_id, lease.step_id, lease.attempt, self.report_give_up_after,
                              code.name)
                    return None
                log.warning("report of %s/%s attempt %d not delivered (%s: %s); retrying in %d ms", lease.run_id,
                            lease.step_id, lease.attempt, code.name, e.details(), int(wait * 1000))
                await asyncio.sleep(wait)
