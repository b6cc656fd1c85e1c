"""cairn.Client and cairn.AsyncClient against real ``cairn serve`` processes: typed runs, the event stream, step
decisions, validation, plan files, schedules, external events, and every error as its exception."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import cairn

from conftest import Server, WorkerProc, free_port, wait_run


def greet_plan(w: WorkerProc, name: str = "Ada", **step: object) -> dict:
    return {"steps": [{"id": "hello", "action": w.a("greet"), "args": {"name": name}, **step}]}


def test_submit_get_wait_and_the_event_stream(general_worker: WorkerProc, client: cairn.Client) -> None:
    submitted = client.submit(greet_plan(general_worker), input={"unused": True})
    assert isinstance(submitted, cairn.Run) and submitted.status in ("pending", "running", "succeeded")
    assert submitted.step("hello").id == "hello"
    run = client.wait(submitted.id, timeout=30)
    assert run.status == "succeeded" and run.finished and run.succeeded
    assert run.outputs == {"hello": run.step("hello").output}
    assert client.get(run.id).model_dump() == run.model_dump()
    summary = client.summary(run.id)
    assert summary.status == "succeeded" and summary.steps == [] and summary.step_count == 1
    kinds = [e.kind for e in client.events(run.id)]  # ends by itself: the run is finished
    assert kinds[0] == "run_created" and kinds[-1] == "run_succeeded"
    assert "step_started" in kinds and "step_succeeded" in kinds
    assert [e.kind for e in client.history(run.id)] == kinds
    events = client.history(run.id)
    assert [e.kind for e in client.history(run.id, after=events[1].id)] == kinds[2:]
    assert run.id in {r.id for r in client.runs(status="succeeded", limit=500)}
    with pytest.raises(KeyError):
        run.step("nope")


def test_the_event_stream_follows_a_live_run(general_worker: WorkerProc, client: cairn.Client) -> None:
    run = client.submit({"steps": [
        {"id": "gate", "action": general_worker.a("greet"), "args": {"name": "x"}, "approval": {"required": True}},
    ]})
    stream = client.events(run.id)
    seen = []
    for event in stream:
        seen.append(event.kind)
        if event.kind == "step_waiting_approval" or (event.step_id == "gate" and "approval" in event.kind):
            client.approve(run.id, "gate", by="pytest")
    assert seen[-1] == "run_succeeded", seen
    assert client.get(run.id).step("gate").status == "succeeded"


def test_approve_reject_and_wait_timeout(general_worker: WorkerProc, client: cairn.Client) -> None:
    w = general_worker
    plan = {"steps": [
        {"id": "a", "action": w.a("greet"), "args": {"name": "a"}, "approval": {"required": True}},
        {"id": "b", "action": w.a("greet"), "args": {"name": "b"}, "approval": {"required": True}},
    ]}
    run = client.submit(plan)
    wait_run(client, run.id, "both steps wait for approval",
             lambda r: all(s.status == "waiting_approval" for s in r.steps))
    with pytest.raises(TimeoutError):
        client.wait(run.id, timeout=0.3)
    assert {(a["run_id"], a["step_id"]) for a in client.approvals()} >= {(run.id, "a"), (run.id, "b")}
    client.approve(run.id, "a", by="alice")
    rejected = client.reject(run.id, "b", by="bob")
    assert rejected.step("b").status == "failed"
    final = client.wait(run.id, timeout=30)
    assert final.status == "failed"
    assert final.step("a").status == "succeeded"
    assert final.step("b").error is not None and final.step("b").error.code == "approval_rejected"
    with pytest.raises(cairn.Conflict) as late:
        client.approve(run.id, "b")
    assert late.value.code == "wrong_state" and late.value.status == 409
    with pytest.raises(cairn.Conflict):
        client.skip(run.id, "a")


def test_retry_of_a_failed_step_with_repaired_args(general_worker: WorkerProc, client: cairn.Client) -> None:
    w = general_worker
    plan = {"steps": [
        {"id": "a", "action": w.a("greet"), "args": {"name": "a"}},
        {"id": "b", "action": w.a("missing"), "depends_on": ["a"], "args": {"id": 7}},
    ]}
    run = client.submit(plan)
    failed = client.wait(run.id, timeout=30)
    assert failed.status == "failed" and failed.step("b").error.details == {"customer": 7}
    retried = client.retry(run.id, "b", by="ops", reason="wrong customer", args={"id": 8})
    assert retried.status == "running"
    final = wait_run(client, run.id, "the retried step fails again",
                     lambda r: r.status == "failed" and r.step("b").attempts == 2)
    assert final.step("b").error.details == {"customer": 8}, "the repaired args ran"
    assert (final.step("b").args, final.step("b").args_revision) == ({"id": 8}, 1)
    assert final.step("a").attempts == 1, "the succeeded step never ran again"
    kinds = [e.kind for e in client.events(run.id)]
    assert "run_reopened" in kinds and "operator_retry" in kinds
    with pytest.raises(cairn.Conflict):
        client.retry(run.id, "a")
    redriven = client.redrive(run.id, by="ops", reason="once more")
    assert redriven.status == "running"
    again = wait_run(client, run.id, "the redriven step fails again",
                     lambda r: r.status == "failed" and r.step("b").attempts == 3)
    assert again.step("b").error.details == {"customer": 8}, "a redrive keeps the repaired args"
    assert again.step("a").attempts == 1
    rerun = client.rerun(run.id, "b", by="ops")
    assert rerun.id != run.id and rerun.rerun_of == run.id
    assert rerun.step("a").status == "succeeded" and rerun.step("a").attempts == 0, "a is reused, not run"
    assert client.wait(rerun.id, timeout=30).status == "failed"


def test_pause_and_resume(general_worker: WorkerProc, client: cairn.Client) -> None:
    w = general_worker
    plan = {"steps": [{"id": "a", "action": w.a("greet"), "args": {"name": "a"}, "not_before": "+2s"}]}
    run = client.submit(plan)
    paused = client.pause(run.id, by="ops", reason="hold on")
    assert paused.status == "paused"
    with pytest.raises(cairn.Conflict):
        client.pause(run.id)
    resumed = client.resume(run.id, by="ops")
    assert resumed.status == "running"
    assert client.wait(run.id, timeout=30).status == "succeeded"
    kinds = [e.kind for e in client.events(run.id)]
    assert kinds.index("run_paused") < kinds.index("run_resumed")


def test_idempotency_keys(general_worker: WorkerProc, client: cairn.Client) -> None:
    key = f"order-{free_port()}-{id(client)}"
    first = client.submit(greet_plan(general_worker), idempotency_key=key)
    again = client.submit(greet_plan(general_worker), idempotency_key=key)
    assert again.id == first.id
    with pytest.raises(cairn.Conflict) as conflict:
        client.submit(greet_plan(general_worker, name="Bob"), idempotency_key=key)
    assert conflict.value.code == "conflict" and conflict.value.details == {"run_id": first.id}
    client.wait(first.id, timeout=30)


def test_validate_returns_diagnostics_as_objects(general_worker: WorkerProc, client: cairn.Client) -> None:
    ok = client.validate(greet_plan(general_worker))
    assert ok.valid and ok.errors == []
    bad = client.validate({"steps": [
        {"id": "a", "action": "no.such.action", "args": {}},
        {"id": "b", "action": general_worker.a("greet"), "depends_on": ["zz"], "args": {"name": "x"}},
    ]})
    assert not bad.valid
    codes = {d.code for d in bad.errors}
    assert {"unknown_action", "unknown_dependency"} <= codes
    first = bad.errors[0]
    assert isinstance(first, cairn.Diagnostic) and first.pointer and first.message
    assert first.code in str(first)


def test_plan_files_json_and_yaml(general_worker: WorkerProc, client: cairn.Client, tmp_path: Path) -> None:
    plan = greet_plan(general_worker, name="File")
    as_json = tmp_path / "plan.json"
    as_json.write_text(json.dumps(plan))
    as_yaml = tmp_path / "plan.yaml"
    as_yaml.write_text(f"steps:\n  - id: hello\n    action: {general_worker.a('greet')}\n    args:\n"
                       "      name: Yaml\n")
    assert client.run(as_json, timeout=30).step("hello").output["text"] == "Hello, File"
    assert client.run(str(as_yaml), timeout=30).step("hello").output["text"] == "Hello, Yaml"
    twice = tmp_path / "twice.json"
    twice.write_text('{"steps": [], "steps": []}')
    with pytest.raises(ValueError, match="appears twice"):
        client.submit(twice)
    with pytest.raises(FileNotFoundError):
        client.submit(tmp_path / "missing.json")


def test_errors_are_typed(server: Server, client: cairn.Client) -> None:
    with pytest.raises(cairn.NotFound) as missing:
        client.get("01000000-0000-7000-8000-000000000000")
    assert missing.value.code == "not_found" and missing.value.status == 404
    with cairn.Client(server.api_url, token="wrong") as intruder:
        with pytest.raises(cairn.Unauthorized) as denied:
            intruder.runs()
    assert denied.value.code == "unauthorized"
    with cairn.Client(f"http://127.0.0.1:{free_port()}", token="x", timeout=2) as nowhere:
        with pytest.raises(cairn.Unavailable) as down:
            nowhere.get("x")
    assert down.value.code == "unreachable"
    with pytest.raises(cairn.Unavailable) as planner:
        client.draft("remind me to take an umbrella")
    assert planner.value.code == "planner_unconfigured"
    with pytest.raises(cairn.InvalidPlan) as invalid:
        client.submit({"steps": [{"id": "a", "action": "no.such.action"}]})
    assert [d.code for d in invalid.value.diagnostics] == ["unknown_action"]
    assert "unknown_action" in str(invalid.value)
    assert isinstance(invalid.value, cairn.ApiError)


def test_schedules(general_worker: WorkerProc, client: cairn.Client) -> None:
    sid = f"nightly-{free_port()}"
    created = client.schedules.create("0 3 * * *", greet_plan(general_worker), id=sid, timezone="Europe/Paris")
    assert created.id == sid and created.timezone == "Europe/Paris" and not created.paused
    assert created.next_fire_at is not None
    assert sid in {s.id for s in client.schedules.list()}
    assert client.schedules.get(sid).ticks == []
    assert client.schedules.pause(sid).paused
    assert not client.schedules.resume(sid).paused
    assert client.schedules.update(sid, cron="30 4 * * *").cron == "30 4 * * *"
    fires = client.schedules.next(sid, count=3)
    assert len(fires) == 3 and all(f.local and "04:30" in f.local for f in fires)
    with pytest.raises(cairn.Conflict):
        client.schedules.create("0 3 * * *", greet_plan(general_worker), id=sid)
    assert client.schedules.pause(sid).paused
    run_id = client.schedules.trigger(sid)
    assert client.wait(run_id, timeout=30).status == "succeeded", "run now works while paused"
    assert client.schedules.get(sid).ticks[0]["outcome"] == "started"
    client.schedules.delete(sid)
    with pytest.raises(cairn.NotFound):
        client.schedules.get(sid)


def test_external_events_complete_event_waits(client: cairn.Client) -> None:
    run = client.submit({"steps": [{"id": "paid", "action": "event.wait", "args": {"name": "payment", "key": "o-1"}}]})
    wait_run(client, run.id, "the wait is armed", lambda r: r.step("paid").status == "running")
    delivered = client.send_event("payment", key="o-1", payload={"amount": 12})
    assert {"run_id": run.id, "step_id": "paid"} in delivered["matched"]
    final = client.wait(run.id, timeout=30)
    assert final.status == "succeeded" and final.step("paid").output == {"amount": 12}


def test_async_client(server: Server, general_worker: WorkerProc) -> None:
    async def main() -> None:
        async with cairn.AsyncClient(server.api_url, token=server.api_token) as client:
            run = await client.run(greet_plan(general_worker, name="Async"), timeout=30)
            assert run.status == "succeeded" and run.step("hello").output["text"] == "Hello, Async"
            kinds = [e.kind async for e in client.events(run.id)]
            assert kinds[-1] == "run_succeeded"
            assert (await client.get(run.id)).id == run.id
            assert (await client.validate(greet_plan(general_worker))).valid
            assert general_worker.a("greet") in {a.name for a in await client.actions()}
            gate = await client.submit({"steps": [
                {"id": "g", "action": general_worker.a("greet"), "args": {"name": "x"},
                 "approval": {"required": True}}]})
            with pytest.raises(TimeoutError):
                await client.wait(gate.id, timeout=0.3)
            cancelled = await client.cancel(gate.id)
            assert cancelled.id == gate.id
            assert (await client.wait(gate.id, timeout=30)).status == "cancelled"
            with pytest.raises(cairn.NotFound):
                await client.get("01000000-0000-7000-8000-000000000000")

    asyncio.run(main())
