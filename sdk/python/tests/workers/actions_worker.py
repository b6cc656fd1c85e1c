"""The worker process the end-to-end tests start: every test action, named ``<CAIRN_TEST_PREFIX>.<name>``.

Handlers write marker files into ``CAIRN_TEST_MARKS`` (atomically: write, then rename) so a test knows, without
guessing at timings, when a handler reached a point (started, checkpointed, saw its cancellation).
"""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

import cairn

PREFIX = os.environ["CAIRN_TEST_PREFIX"]
MARKS = Path(os.environ["CAIRN_TEST_MARKS"])

worker = cairn.Worker(
    os.environ["CAIRN_TEST_GRPC"],
    token=os.environ.get("CAIRN_WORKER_TOKEN") or None,
    concurrency=int(os.environ.get("CAIRN_TEST_CONCURRENCY", "8")),
    worker_id=os.environ.get("CAIRN_TEST_WORKER_ID"),
    drain_timeout=float(os.environ.get("CAIRN_TEST_DRAIN_TIMEOUT", "30")),
)


def mark(name: str, value: object = True) -> None:
    tmp = MARKS / f".{name}.tmp"
    tmp.write_text(json.dumps(value))
    tmp.rename(MARKS / name)


def a(name: str) -> str:
    return f"{PREFIX}.{name}"


class GreetArgs(BaseModel):
    name: str
    excited: bool = False


class Greeting(BaseModel):
    text: str
    attempt: int
    idempotency_key: str


class Patience(BaseModel):
    seconds: float


@worker.action(a("greet"), effect="read", example_output={"text": "Hello, Ada", "attempt": 1,
                                                           "idempotency_key": "run/step"})
def greet(args: GreetArgs, ctx: cairn.Context) -> Greeting:
    """Greets someone by name."""
    text = f"Hello, {args.name}" + ("!" if args.excited else "")
    return Greeting(text=text, attempt=ctx.attempt, idempotency_key=ctx.idempotency_key)


@worker.action(a("async_greet"), effect="read")
async def async_greet(args: GreetArgs, ctx: cairn.Context) -> Greeting:
    """The same, as a coroutine."""
    await ctx.asleep(0.01)
    return Greeting(text=f"Hello from asyncio, {args.name}", attempt=ctx.attempt,
                    idempotency_key=ctx.idempotency_key)


@worker.action(a("lie"), effect="read")
def lie(args: GreetArgs) -> Greeting:
    """Declares a Greeting and returns something else."""
    return {"text": 5, "attempt": "one"}  # type: ignore[return-value]


@worker.action(a("unjson"), effect="read")
def unjson(args: dict) -> dict:
    """Returns a value JSON cannot carry."""
    return {"when": datetime.datetime(2027, 1, 1), "what": object()}


@worker.action(a("patient"), effect="non_idempotent")
def patient(args: Patience, ctx: cairn.Context) -> dict:
    """Runs `seconds` without heartbeating itself: the worker heartbeats for it."""
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        if not ctx.sleep(min(0.1, max(end - time.monotonic(), 0))):
            return {"cancelled": ctx.cancel_reason}
    return {"slept": args.seconds, "attempt": ctx.attempt}


def _hang_first(ctx: cairn.Context, tag: str) -> Optional[dict]:
    if ctx.attempt == 1:
        mark(f"started-{tag}", {"attempt": ctx.attempt})
        while not ctx.cancelled:
            time.sleep(0.05)
        return None
    return {"attempt": ctx.attempt, "key": ctx.idempotency_key}


@worker.action(a("hang_idem"), effect="idempotent_write")
def hang_idem(args: dict, ctx: cairn.Context) -> dict:
    """Hangs on its first attempt (until killed), succeeds on the next."""
    return _hang_first(ctx, "idem") or {}


@worker.action(a("hang_nonidem"), effect="non_idempotent")
def hang_nonidem(args: dict, ctx: cairn.Context) -> dict:
    """Hangs on its first attempt (until killed), succeeds on the next."""
    return _hang_first(ctx, "nonidem") or {}


@worker.action(a("progress"), effect="idempotent_write")
def progress(args: dict, ctx: cairn.Context) -> dict:
    """Saves a checkpoint, then hangs on its first attempt; a later attempt returns what it resumed from."""
    if ctx.attempt == 1:
        stored = ctx.checkpoint({"done": 5, "of": 10})
        mark("checkpointed", {"stored": stored})
        while not ctx.cancelled:
            time.sleep(0.05)
        return {}
    return {"resumed_from": ctx.last_checkpoint, "attempt": ctx.attempt}


@worker.action(a("cancellable"), effect="read")
def cancellable(args: dict, ctx: cairn.Context) -> dict:
    """Runs until its context says it was cancelled, and records that it saw it."""
    mark("running", {"attempt": ctx.attempt})
    while not ctx.cancelled:
        time.sleep(0.02)
    mark("saw-cancel", {"reason": ctx.cancel_reason})
    return {"stopped": True}


@worker.action(a("ratelimited"), effect="read")
def ratelimited(args: dict, ctx: cairn.Context) -> dict:
    """Asks for 1.5 s before its second attempt."""
    if ctx.attempt == 1:
        raise cairn.Retryable("rate_limited", "the service said 429", retry_after=1.5, details={"limit": 10})
    return {"attempt": ctx.attempt}


@worker.action(a("boom"), effect="read")
def boom(args: dict) -> dict:
    """Raises an ordinary exception."""
    raise ValueError("kaboom: the handler broke")


@worker.action(a("missing"), effect="read")
def missing(args: dict) -> dict:
    """A permanent failure."""
    raise cairn.Permanent("not_found", "no such customer", details={"customer": args.get("id")})


@worker.action(a("refused"), effect="non_idempotent")
def refused(args: dict, ctx: cairn.Context) -> dict:
    """Certainly did nothing on its first attempt."""
    if ctx.attempt == 1:
        raise cairn.DidNotTakeEffect("unavailable", "the payment service refused the connection")
    return {"attempt": ctx.attempt}


@worker.action(a("drain"), effect="non_idempotent")
def drain(args: Patience, ctx: cairn.Context) -> dict:
    """Marks its start, then works `seconds` (ignoring shutdown: it must be allowed to finish)."""
    mark("drain-started", {"attempt": ctx.attempt})
    time.sleep(args.seconds)
    return {"finished": True, "attempt": ctx.attempt}


if __name__ == "__main__":
    worker.run()
