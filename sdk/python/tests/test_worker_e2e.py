"""The Python worker against real ``cairn serve`` processes (SQLite and PostgreSQL): issue 32's acceptance points
that concern the SDK, each asserted on what the orchestrator stored (statuses, attempts, failure records, event
times), never on how long something took."""

from __future__ import annotations

import signal

import pytest

import cairn

from conftest import Procs, Server, WorkerProc, eventually, new_prefix, wait_run


def finished(run: cairn.Run) -> bool:
    return run.finished


def test_typed_action_runs_through_the_python_client(server: Server, general_worker: WorkerProc,
                                                     client: cairn.Client) -> None:
    w = general_worker
    plan = {
        "goal": "greet twice",
        "input": {"who": "Ada"},
        "steps": [
            {"id": "hello", "action": w.a("greet"), "args": {"name": "$input.who", "excited": True}},
            {"id": "again", "action": w.a("async_greet"), "depends_on": ["hello"],
             "args": {"name": "${hello.output.text} and Grace"}},
        ],
    }
    run = client.run(plan, timeout=30)
    assert run.status == "succeeded", run
    hello = run.step("hello")
    assert hello.status == "succeeded" and hello.attempts == 1
    assert hello.output == {"text": "Hello, Ada!", "attempt": 1, "idempotency_key": f"{run.id}/hello"}
    assert run.step("again").output["text"] == "Hello from asyncio, Hello, Ada! and Grace"
    # The action was registered with its derived, closed schema.
    info = {a.name: a for a in client.actions()}[w.a("greet")]
    assert info.effect == "read"
    assert info.args_schema["additionalProperties"] is False
    assert info.args_schema["required"] == ["name"]
    assert info.output_schema["properties"]["attempt"]["type"] == "integer"
    assert info.description == "Greets someone by name."


def test_args_breaking_the_schema_are_refused_at_submit(server: Server, general_worker: WorkerProc,
                                                        client: cairn.Client) -> None:
    w = general_worker
    before = len(client.runs(limit=500))
    with pytest.raises(cairn.InvalidPlan) as refused:
        client.submit({"steps": [
            {"id": "typo", "action": w.a("greet"), "args": {"name": "Ada", "excitd": True}},
            {"id": "wrong_type", "action": w.a("greet"), "args": {"name": 42}},
        ]})
    diagnostics = refused.value.diagnostics
    assert refused.value.status == 422 and refused.value.code == "invalid_plan"
    assert {(d.code, d.step_id) for d in diagnostics} == {("args_schema", "typo"), ("args_schema", "wrong_type")}
    assert any(d.pointer == "/steps/1/args/name" for d in diagnostics)
    assert all(isinstance(d, cairn.Diagnostic) for d in diagnostics)
    assert len(client.runs(limit=500)) == before, "an invalid plan stores nothing"


def test_output_breaking_the_declared_schema_is_a_failure_record(general_worker: WorkerProc,
                                                                 client: cairn.Client) -> None:
    run = client.run({"steps": [{"id": "lie", "action": general_worker.a("lie"), "args": {"name": "x"},
                                 "retry": {"max_attempts": 1}}]}, timeout=30)
    step = run.step("lie")
    assert run.status == "failed" and step.status == "failed"
    assert step.output is None
    [failure] = step.failures
    assert failure.code == "invalid_output"
    assert failure.retryable is False
    assert "does not match its declared output schema" in failure.message
    assert any("/text" in e for e in failure.details["errors"])
    assert run.failure is not None and run.failure.code == "invalid_output"


def test_non_json_return_is_a_clear_failure_and_the_worker_lives_on(general_worker: WorkerProc,
                                                                    client: cairn.Client) -> None:
    w = general_worker
    run = client.run({"steps": [{"id": "odd", "action": w.a("unjson"), "args": {}}]}, timeout=30)
    step = run.step("odd")
    assert step.status == "failed"
    [failure] = step.failures
    assert failure.code == "output_not_serializable"
    assert "not JSON-serialisable" in failure.message and "datetime" in failure.message
    assert failure.details["path"] == "/when"
    # The same worker process still serves.
    assert w.proc.alive()
    again = client.run({"steps": [{"id": "ok", "action": w.a("greet"), "args": {"name": "Bo"}}]}, timeout=30)
    assert again.status == "succeeded"


def test_exceptions_become_failure_records(general_worker: WorkerProc, client: cairn.Client) -> None:
    w = general_worker
    retry = {"max_attempts": 2, "initial_interval_ms": 100, "backoff_coefficient": 1.0}
    run = client.run({"steps": [
        {"id": "boom", "action": w.a("boom"), "args": {}, "retry": retry},
        {"id": "missing", "action": w.a("missing"), "args": {"id": 7}, "retry": {"max_attempts": 3}},
        {"id": "refused", "action": w.a("refused"), "args": {}, "retry": retry},
    ]}, timeout=30)
    boom = run.step("boom")
    assert boom.status == "failed" and boom.attempts == 2, "an ordinary exception is retryable"
    assert [f.code for f in boom.failures] == ["action_error", "action_error"]
    assert boom.failures[0].retryable is True
    assert "kaboom" in boom.failures[0].message
    assert "Traceback (most recent call last)" in boom.failures[0].details["traceback"]
    assert boom.failures[0].details["exception"] == "builtins.ValueError"
    missing = run.step("missing")
    assert missing.status == "failed" and missing.attempts == 1, "Permanent is not retried"
    assert missing.failures[0].code == "not_found" and missing.failures[0].details == {"customer": 7}
    refused = run.step("refused")
    assert refused.status == "succeeded" and refused.attempts == 2, \
        "DidNotTakeEffect retries even a non-idempotent step"
    assert refused.failures[0].code == "unavailable"


def test_long_non_idempotent_step_heartbeats_past_its_heartbeat_timeout(general_worker: WorkerProc,
                                                                        client: cairn.Client) -> None:
    # 2.5 s of work against a 1 s heartbeat timeout and a 2 s lease: only the worker's own heartbeats keep it.
    run = client.run({"steps": [{"id": "long", "action": general_worker.a("patient"), "args": {"seconds": 2.5},
                                 "heartbeat_timeout_ms": 1000, "timeout_ms": 60000}]}, timeout=60)
    step = run.step("long")
    assert run.status == "succeeded", run
    assert step.attempts == 1 and step.failures == []
    assert step.output == {"slept": 2.5, "attempt": 1}


def test_cancel_reaches_the_running_handler_through_ctx(general_worker: WorkerProc,
                                                        client: cairn.Client) -> None:
    w = general_worker
    run = client.submit({"steps": [{"id": "c", "action": w.a("cancellable"), "args": {}}]})
    w.wait_mark("running")
    cancelled = client.cancel(run.id)
    assert cancelled.id == run.id
    assert w.wait_mark("saw-cancel") == {"reason": "lease_gone"}
    final = client.wait(run.id, timeout=30)
    assert final.status == "cancelled"
    assert final.step("c").status == "cancelled"
    assert final.step("c").output is None, "a cancelled attempt reports nothing"
    with pytest.raises(cairn.Conflict) as again:
        client.cancel(run.id)
    assert again.value.code == "already_finished"


def test_retry_after_delays_the_next_attempt(general_worker: WorkerProc, client: cairn.Client) -> None:
    # The backoff alone would be 100 ms; the action asks for 1.5 s, which wins.
    retry = {"max_attempts": 3, "initial_interval_ms": 100, "backoff_coefficient": 1.0, "jitter": "none"}
    run = client.run({"steps": [{"id": "rl", "action": general_worker.a("ratelimited"), "args": {},
                                 "retry": retry}]}, timeout=30)
    step = run.step("rl")
    assert step.status == "succeeded" and step.attempts == 2
    [failure] = step.failures
    assert failure.code == "rate_limited" and failure.retryable
    assert failure.retry_after_ms == 1500 and failure.retry_after == 1.5
    assert failure.details == {"limit": 10}
    # The stored history: attempt 2 started no earlier than the failure's end + retry_after.
    started = [e for e in client.history(run.id) if e.kind == "step_started" and e.step_id == "rl"]
    second = next(e for e in started if e.data["attempt"] == 2)
    assert failure.ended_at_ms is not None
    assert second.at_ms >= failure.ended_at_ms + 1500


def test_kill_9_mid_step(server: Server, procs: Procs, client: cairn.Client) -> None:
    """`kill -9` of the worker: the idempotent step is retried, the non-idempotent one goes to outcome_unknown
    (and runs again only when an operator says so), and a saved checkpoint reaches the next attempt."""
    prefix = new_prefix()
    first = server.worker(procs, prefix, name="doomed")
    first.wait_connected()
    retry = {"max_attempts": 3, "initial_interval_ms": 100}
    run = client.submit({"steps": [
        {"id": "idem", "action": first.a("hang_idem"), "args": {}, "retry": retry},
        {"id": "nonidem", "action": first.a("hang_nonidem"), "args": {}, "retry": retry},
        {"id": "ckpt", "action": first.a("progress"), "args": {}, "retry": retry},
    ]})
    first.wait_mark("started-idem")
    first.wait_mark("started-nonidem")
    assert first.wait_mark("checkpointed") == {"stored": True}
    # The replacement polls from now on; every step is leased to the first worker until its leases expire.
    second = server.worker(procs, prefix, name="replacement")
    second.wait_connected()
    first.proc.kill()

    run_now = wait_run(client, run.id, "the idempotent steps are retried and the other is outcome_unknown",
                       lambda r: r.step("idem").status == "succeeded" and r.step("ckpt").status == "succeeded"
                       and r.step("nonidem").status == "outcome_unknown", 30, procs.logs)
    idem = run_now.step("idem")
    assert idem.attempts == 2 and idem.output == {"attempt": 2, "key": f"{run.id}/idem"}
    assert idem.failures[0].worker_id == "doomed"
    assert idem.failures[0].code in ("lease_lost", "heartbeat_timeout", "timeout")
    ckpt = run_now.step("ckpt")
    assert ckpt.output == {"resumed_from": {"done": 5, "of": 10}, "attempt": 2}
    nonidem = run_now.step("nonidem")
    assert nonidem.attempts == 1, "a non-idempotent step is never re-executed blindly"
    assert nonidem.failures[0].worker_id == "doomed"
    assert run_now.status not in ("succeeded", "failed", "cancelled")

    # The operator decides: run it again.
    client.retry(run.id, "nonidem", by="pytest")
    final = client.wait(run.id, timeout=30)
    assert final.status == "succeeded"
    assert final.step("nonidem").attempts == 2
    assert final.step("nonidem").output == {"attempt": 2, "key": f"{run.id}/nonidem"}


def test_sigterm_drains_in_flight_attempts_and_exits_0(server: Server, procs: Procs,
                                                       client: cairn.Client) -> None:
    prefix = new_prefix()
    worker = server.worker(procs, prefix, name="draining", CAIRN_TEST_CONCURRENCY="2")
    worker.wait_connected()
    run = client.submit({"steps": [{"id": "work", "action": worker.a("drain"), "args": {"seconds": 1.5}}]})
    worker.wait_mark("drain-started")
    worker.proc.signal(signal.SIGTERM)
    eventually(lambda: "shutting down" in worker.proc.log(), "the worker begins its shutdown", 10)
    # Submitted while it drains, with a slot free: it must not be taken (polling stopped at once).
    later = client.submit({"steps": [{"id": "later", "action": worker.a("greet"), "args": {"name": "x"}}]})
    assert worker.proc.wait(timeout=30) == 0, worker.proc.log()
    final = client.wait(run.id, timeout=30)
    assert final.status == "succeeded"
    step = final.step("work")
    assert step.attempts == 1 and step.failures == [] and step.output == {"finished": True, "attempt": 1}
    log = worker.proc.log()
    assert "SIGTERM received" in log and "stopped" in log
    assert client.get(later.id).step("later").attempts == 0
    client.cancel(later.id)


def test_worker_reconnects_after_the_orchestrator_restarts(fresh_server: Server, procs: Procs) -> None:
    server = fresh_server
    client = server.client
    assert client is not None
    prefix = new_prefix()
    worker = server.worker(procs, prefix, name="steadfast")
    worker.wait_connected()
    plan = {"steps": [{"id": "g", "action": worker.a("greet"), "args": {"name": "before"}}]}
    assert client.run(plan, timeout=30).status == "succeeded"
    server.kill()
    server.start()
    # The restarted orchestrator learns the action again from the worker's re-registration.
    eventually(lambda: worker.a("greet") in {a.name for a in client.actions()},
               "the worker registered again", 30, lambda: procs.logs() + server.procs.logs())
    plan["steps"][0]["args"]["name"] = "after"
    run = client.run(plan, timeout=30)
    assert run.status == "succeeded" and run.step("g").output["text"] == "Hello, after"
    assert worker.proc.alive()
    assert "registered again" in worker.proc.log()


def test_a_report_is_resent_until_the_restarted_orchestrator_takes_it(fresh_server: Server,
                                                                      procs: Procs) -> None:
    """The orchestrator dies while a non-idempotent attempt runs: the finished attempt's report is resent with
    backoff until the orchestrator is back, and lands within its start-up grace: one attempt, no failure."""
    server = fresh_server
    client = server.client
    assert client is not None
    worker = server.worker(procs, new_prefix(), name="faithful")
    worker.wait_connected()
    run = client.submit({"steps": [{"id": "pay", "action": worker.a("drain"), "args": {"seconds": 1.0}}]})
    worker.wait_mark("drain-started")
    server.kill()
    eventually(lambda: "not delivered (UNAVAILABLE" in worker.proc.log(),
               "the worker tried to report while the orchestrator was down", 30, procs.logs)
    server.start()
    final = client.wait(run.id, timeout=30)
    step = final.step("pay")
    assert final.status == "succeeded", procs.logs()
    assert step.attempts == 1 and step.failures == [] and step.output == {"finished": True, "attempt": 1}


def test_a_wrong_token_stops_the_worker_with_a_clear_error(server: Server, procs: Procs) -> None:
    worker = server.worker(procs, new_prefix(), name="intruder", token="not-the-token")
    code = worker.proc.wait(timeout=30)
    assert code != 0
    assert "refused the worker" in worker.proc.log() and "UNAUTHENTICATED" in worker.proc.log()
