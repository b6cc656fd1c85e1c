"""cairn.testing: handlers run without an orchestrator, through the worker's own attempt runner."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

import cairn
from cairn import testing


class Args(BaseModel):
    name: str
    times: int = 1


class Out(BaseModel):
    text: str


@cairn.action("t.greet")
def greet(args: Args, ctx: cairn.Context) -> Out:
    return Out(text=" ".join([f"hi {args.name}"] * args.times) + f" #{ctx.attempt} {ctx.idempotency_key}")


def test_run_returns_the_output_as_json() -> None:
    assert testing.run(greet, {"name": "Ada", "times": 2}) == {"text": "hi Ada hi Ada #1 run-test/step"}
    assert testing.run(greet, Args(name="Bo"), attempt=3, run_id="r", step_id="s") == {"text": "hi Bo #3 r/s"}
    # The decorated function is still the plain function.
    assert callable(greet) and greet.__name__ == "greet"
    assert greet.__cairn_action__.name == "t.greet"  # type: ignore[attr-defined]


def test_plain_functions_and_async_handlers() -> None:
    def plain(args: dict) -> dict:
        return {"echo": args}

    async def coroutine(args: Args, ctx: cairn.Context) -> Out:
        await asyncio.sleep(0)
        return Out(text=f"async {args.name}")

    assert testing.run(plain, {"a": 1}) == {"echo": {"a": 1}}
    assert testing.run(coroutine, {"name": "Cy"}) == {"text": "async Cy"}

    async def inside_a_loop() -> object:
        return await testing.arun(coroutine, {"name": "Di"})

    assert asyncio.run(inside_a_loop()) == {"text": "async Di"}


def test_failures_are_raised_with_their_record() -> None:
    def limited(args: dict) -> dict:
        raise cairn.Retryable("rate_limited", "slow down", retry_after=2.5, details={"limit": 10})

    with pytest.raises(testing.ActionFailed) as failed:
        testing.run(limited)
    f = failed.value.failure
    assert (f.code, f.retryable, f.retry_after_ms, f.retry_after, f.details) == \
        ("rate_limited", True, 2500, 2.5, {"limit": 10})

    def gone(args: dict) -> dict:
        raise cairn.Permanent("not_found", "no such order")

    assert testing.attempt(gone).failure.retryable is False

    def refused(args: dict) -> dict:
        raise cairn.DidNotTakeEffect("connection_refused", "nothing was sent")

    r = testing.attempt(refused).failure
    assert r.retryable and r.did_not_take_effect

    def broken(args: dict) -> dict:
        return {}["missing"]

    b = testing.attempt(broken).failure
    assert b.code == "action_error" and b.retryable
    assert b.details["exception"] == "builtins.KeyError"
    assert "Traceback" in b.details["traceback"] and "missing" in b.details["traceback"]


def test_args_are_checked_and_parsed() -> None:
    wrong = testing.attempt(greet, {"name": 5}).failure
    assert wrong.code == "invalid_args" and not wrong.retryable and wrong.did_not_take_effect
    extra = testing.attempt(greet, {"name": "x", "nick": "y"}).failure
    assert extra.code == "invalid_args" and "nick" in extra.message


def test_outputs_are_checked() -> None:
    @cairn.action("t.lie")
    def lie(args: dict) -> Out:
        return {"text": 1}  # type: ignore[return-value]

    bad = testing.attempt(lie).failure
    assert bad.code == "invalid_output" and not bad.retryable
    assert bad.details["errors"] == ["/text: 1 is not of type string"]

    def odd(args: dict) -> dict:
        return {"at": datetime.datetime(2027, 1, 1)}

    nj = testing.attempt(odd).failure
    assert nj.code == "output_not_serializable" and nj.details["path"] == "/at"

    def path_out(args: dict) -> object:
        return Path("/tmp")

    assert testing.attempt(path_out).failure.code == "output_not_serializable"


def test_checkpoints_are_recorded_and_handed_to_the_next_attempt() -> None:
    def resumable(args: dict, ctx: cairn.Context) -> dict:
        start = (ctx.last_checkpoint or {}).get("done", 0)
        for i in range(start, 3):
            assert ctx.checkpoint({"done": i + 1})
        return {"started_at": start, "last": ctx.last_checkpoint}

    first = testing.attempt(resumable)
    assert first.ok and first.checkpoints == [{"done": 1}, {"done": 2}, {"done": 3}]
    assert first.heartbeats == 3
    second = testing.attempt(resumable, attempt=2, checkpoint={"done": 2})
    assert second.output == {"started_at": 2, "last": {"done": 3}}
    assert second.checkpoints == [{"done": 3}]


def test_cancellation_and_the_deadline() -> None:
    def stubborn(args: dict, ctx: cairn.Context) -> dict:
        while not ctx.cancelled:
            time.sleep(0.01)
        return {"why": ctx.cancel_reason}

    cancelled = testing.attempt(stubborn, cancel_after=0.05)
    assert cancelled.cancelled and cancelled.output is None and cancelled.failure is None
    with pytest.raises(testing.AttemptCancelled):
        testing.run(stubborn, cancel_after=0.05)
    late = testing.attempt(stubborn, timeout=0.1).failure
    assert late.code == "timeout" and late.retryable and not late.did_not_take_effect

    async def sleeper(args: dict, ctx: cairn.Context) -> dict:
        await asyncio.sleep(30)
        return {}

    assert testing.attempt(sleeper, timeout=0.1).failure.code == "timeout"
    assert testing.attempt(sleeper, cancel_after=0.05).cancelled

    def polite(args: dict, ctx: cairn.Context) -> dict:
        ctx.raise_if_cancelled()
        ctx.sleep(5)
        ctx.raise_if_cancelled()
        return {}

    assert testing.attempt(polite, timeout=0.1).failure.code == "timeout"
    assert testing.attempt(polite, cancel_after=0.05).cancelled


def test_the_context() -> None:
    seen: dict[str, object] = {}

    def look(args: dict, ctx: cairn.Context) -> dict:
        seen.update(remaining=ctx.remaining, deadline=ctx.deadline, timeout=ctx.timeout, alive=ctx.heartbeat(),
                    action=ctx.action, hb=ctx.heartbeat_timeout)
        ctx.logger.info("logged")
        return {}

    testing.run(look, timeout=5, heartbeat_timeout=2)
    assert 0 < seen["remaining"] <= 5 and seen["timeout"] == 5 and seen["hb"] == 2 and seen["alive"] is True
    assert isinstance(seen["deadline"], datetime.datetime) and seen["deadline"].tzinfo is not None
    assert seen["action"] == "look"
