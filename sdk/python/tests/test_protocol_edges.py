"""Worker-protocol edges a real orchestrator cannot be made to produce on demand — a poll answering more attempts
than asked, a report refused with INVALID_ARGUMENT or INTERNAL, an UNAVAILABLE answer to a report, an attempt
handed over with a completion — checked against a scripted in-process gRPC server speaking
``proto/cairn/v1``. Everything else is tested against real ``cairn serve`` processes (``test_*_e2e.py``)."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from typing import Any, Callable

import grpc
import grpc.aio
import pytest

import cairn
from cairn._proto.cairn.v1 import worker_pb2 as pb
from cairn._proto.cairn.v1 import worker_pb2_grpc as pb_grpc


def attempt(step: str, action: str = "edge.echo", n: int = 1, args: Any = None, remaining_ms: int = 20_000
            ) -> pb.Attempt:
    return pb.Attempt(lease=pb.Lease(run_id="run-1", step_id=step, attempt=n), action=action,
                      args_json=json.dumps(args or {}), idempotency_key=f"run-1/{step}", remaining_ms=remaining_ms,
                      timeout_ms=remaining_ms)


class Scripted(pb_grpc.WorkerServiceServicer):
    """Answers polls from ``polls`` (then empty after a short wait) and reports from ``complete``/``fail``
    (a list of answers or status codes, consumed in order; then SUCCEEDED)."""

    def __init__(self) -> None:
        self.calls: dict[str, list[Any]] = defaultdict(list)
        self.polls: list[Any] = []
        self.complete: list[Any] = []
        self.fail: list[Any] = []
        self.alive = True
        self.changed = asyncio.Event()

    def _record(self, name: str, request: Any) -> None:
        self.calls[name].append(request)
        self.changed.set()

    async def _answer(self, script: list[Any], context: grpc.aio.ServicerContext, default: Any) -> Any:
        item = script.pop(0) if script else default
        if isinstance(item, grpc.StatusCode):
            await context.abort(item, "scripted")
        return item

    async def Register(self, request, context):  # noqa: N802 - gRPC names
        self._record("Register", request)
        return pb.RegisterResponse(lease_ttl_ms=2000, heartbeat_interval_ms=100)

    async def Poll(self, request, context):  # noqa: N802
        self._record("Poll", request)
        if self.polls:
            return await self._answer(self.polls, context, None)
        await asyncio.sleep(0.05)
        return pb.PollResponse()

    async def Heartbeat(self, request, context):  # noqa: N802
        self._record("Heartbeat", request)
        return pb.HeartbeatResponse(alive=self.alive)

    async def Complete(self, request, context):  # noqa: N802
        self._record("Complete", request)
        return await self._answer(self.complete, context, pb.ReportResponse(outcome=pb.REPORT_OUTCOME_SUCCEEDED))

    async def Fail(self, request, context):  # noqa: N802
        self._record("Fail", request)
        return await self._answer(self.fail, context, pb.ReportResponse(outcome=pb.REPORT_OUTCOME_RETRY_SCHEDULED))


async def serve(script: Scripted, setup: Callable[[cairn.Worker], None], check: Callable[[], Any],
                concurrency: int = 1) -> cairn.Worker:
    """Runs a worker against ``script`` until ``check()`` holds (bounded), then stops it."""
    server = grpc.aio.server()
    pb_grpc.add_WorkerServiceServicer_to_server(script, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    worker = cairn.Worker(f"http://127.0.0.1:{port}", concurrency=concurrency, worker_id="edge", poll_wait=0.2,
                          drain_timeout=5)
    setup(worker)
    running = asyncio.ensure_future(worker.run_async())
    try:
        async def until() -> None:
            while not check():
                if running.done():
                    running.result()
                script.changed.clear()
                try:
                    await asyncio.wait_for(script.changed.wait(), 0.2)
                except asyncio.TimeoutError:
                    pass

        await asyncio.wait_for(until(), 20)
    finally:
        worker.stop()
        try:
            await asyncio.wait_for(running, 20)
        finally:
            await server.stop(None)
    return worker


def echo(worker: cairn.Worker) -> None:
    @worker.action("edge.echo")
    def handler(args: dict, ctx: cairn.Context) -> dict:
        return {"step": ctx.step_id, "attempt": ctx.attempt}


def test_surplus_attempts_are_handed_back_unstarted() -> None:
    script = Scripted()
    script.polls = [pb.PollResponse(attempts=[attempt("a"), attempt("b")])]

    asyncio.run(serve(script, echo, lambda: script.calls["Complete"] and script.calls["Fail"]))
    [poll, *_] = script.calls["Poll"]
    assert poll.max_attempts == 1 and poll.worker_id == "edge" and list(poll.actions) == ["edge.echo"]
    [done] = script.calls["Complete"]
    assert done.lease.step_id == "a" and json.loads(done.output_json) == {"step": "a", "attempt": 1}
    assert done.next_max_attempts == 1 and list(done.next_actions) == ["edge.echo"]
    [returned] = script.calls["Fail"]
    assert returned.lease.step_id == "b" and returned.not_started
    assert returned.failure.did_not_take_effect and returned.failure.code == "worker_shutdown"


def test_a_report_refused_with_invalid_argument_or_internal_is_not_resent() -> None:
    for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL):
        script = Scripted()
        script.polls = [pb.PollResponse(attempts=[attempt("a")]), pb.PollResponse(attempts=[attempt("b")])]
        script.complete = [code]
        asyncio.run(serve(script, echo, lambda: len(script.calls["Complete"]) >= 2))
        assert [c.lease.step_id for c in script.calls["Complete"]] == ["a", "b"], code


def test_transient_errors_are_resent_until_the_report_lands() -> None:
    script = Scripted()
    script.polls = [pb.PollResponse(attempts=[attempt("a", action="edge.fail")])]
    script.fail = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN]

    def failing(worker: cairn.Worker) -> None:
        @worker.action("edge.fail")
        def handler(args: dict) -> dict:
            raise cairn.Retryable("rate_limited", "later", retry_after=3)

    asyncio.run(serve(script, failing, lambda: len(script.calls["Fail"]) >= 4))
    fails = script.calls["Fail"]
    assert len(fails) == 4 and all(f.lease.step_id == "a" and not f.not_started for f in fails)
    assert fails[-1].failure.code == "rate_limited" and fails[-1].failure.retry_after_ms == 3000
    assert fails[-1].failure.retryable and not fails[-1].failure.did_not_take_effect


def test_an_attempt_handed_over_with_a_completion_runs_in_the_freed_slot() -> None:
    script = Scripted()
    script.polls = [pb.PollResponse(attempts=[attempt("first")])]
    script.complete = [pb.ReportResponse(outcome=pb.REPORT_OUTCOME_SUCCEEDED, next=[attempt("second")])]
    asyncio.run(serve(script, echo, lambda: len(script.calls["Complete"]) >= 2))
    assert [c.lease.step_id for c in script.calls["Complete"]] == ["first", "second"]


def test_heartbeat_alive_false_cancels_and_reports_nothing() -> None:
    script = Scripted()
    script.alive = False
    script.polls = [pb.PollResponse(attempts=[attempt("a", action="edge.wait")])]
    saw: list[str | None] = []

    def waiting(worker: cairn.Worker) -> None:
        @worker.action("edge.wait")
        def handler(args: dict, ctx: cairn.Context) -> dict:
            ctx.wait_cancelled(10)
            saw.append(ctx.cancel_reason)
            return {"late": True}

    asyncio.run(serve(script, waiting, lambda: bool(saw)))
    assert saw == ["lease_gone"]
    assert script.calls["Heartbeat"][0].lease.step_id == "a"
    assert not script.calls["Complete"] and not script.calls["Fail"]


def test_the_deadline_is_enforced_by_the_worker() -> None:
    script = Scripted()
    script.polls = [pb.PollResponse(attempts=[attempt("a", action="edge.slow", remaining_ms=300)])]

    def slow(worker: cairn.Worker) -> None:
        @worker.action("edge.slow")
        async def handler(args: dict) -> dict:
            await asyncio.sleep(30)
            return {}

    asyncio.run(serve(script, slow, lambda: bool(script.calls["Fail"])))
    [failed] = script.calls["Fail"]
    assert failed.failure.code == "timeout" and failed.failure.retryable
    assert not failed.failure.did_not_take_effect, "the action may have acted before it was stopped"


def test_a_refused_poll_stops_the_worker() -> None:
    script = Scripted()
    script.polls = [grpc.StatusCode.UNAUTHENTICATED]
    with pytest.raises(cairn.WorkerRejected) as refused:
        asyncio.run(serve(script, echo, lambda: False))
    assert refused.value.code == "UNAUTHENTICATED"


def test_a_failed_poll_registers_again_first() -> None:
    script = Scripted()
    script.polls = [grpc.StatusCode.UNAVAILABLE, pb.PollResponse(attempts=[attempt("a")])]
    asyncio.run(serve(script, echo, lambda: bool(script.calls["Complete"])))
    assert len(script.calls["Register"]) == 2
