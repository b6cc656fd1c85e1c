"""Finding runs and acting on many through the Python client, against real ``cairn serve`` processes (SQLite and
PostgreSQL): labels at submission and from a schedule, every filter, cursor pages, attention, bulk operations."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import cairn

from conftest import Server, WorkerProc, new_prefix


def greet(w: WorkerProc, goal: str, **step: object) -> dict:
    return {"goal": goal, "steps": [{"id": "hello", "action": w.a("greet"), "args": {"name": "x"}, **step}]}


def test_runs_are_found_by_labels_goal_action_and_time(general_worker: WorkerProc, client: cairn.Client) -> None:
    tag = new_prefix()
    before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
    first = client.run(greet(general_worker, f"{tag} Umbrella reminder"), labels={"tag": tag, "env": "prod"},
                       timeout=30)
    second = client.run(greet(general_worker, f"{tag} sunscreen"), labels={"tag": tag, "env": "dev"}, timeout=30)
    assert client.get(first.id).labels == {"tag": tag, "env": "prod"}
    assert [r.id for r in client.runs(labels={"tag": tag})] == [second.id, first.id]
    assert [r.id for r in client.runs(labels={"tag": tag, "env": "prod"})] == [first.id]
    assert [r.id for r in client.runs(q=f"{tag} UMBRELLA")] == [first.id]
    assert client.runs(labels={"tag": tag}, status="succeeded", action=general_worker.a("greet"),
                       created_after=before)[0].goal == f"{tag} sunscreen"
    assert client.runs(labels={"tag": tag}, created_before=before) == []
    page = client.runs_page(limit=1, labels={"tag": tag})
    assert [r.id for r in page.runs] == [second.id] and page.next_cursor
    assert [r.id for r in client.iter_runs(page_size=1, labels={"tag": tag})] == [second.id, first.id]
    with pytest.raises(cairn.ApiError) as bad:
        client.submit(greet(general_worker, "x"), labels={"Bad Key": "v"})
    assert bad.value.code == "invalid_labels"


def test_attention_lists_a_waiting_approval(general_worker: WorkerProc, client: cairn.Client) -> None:
    tag = new_prefix()
    gate = client.submit(greet(general_worker, "gate", approval={"required": True}), labels={"tag": tag})
    [found] = client.runs(labels={"tag": tag}, attention=True)
    assert found.id == gate.id
    assert [(a.step_id, a.reason) for a in found.attention] == [("hello", "waiting_approval")]
    client.cancel(gate.id)


def test_bulk_operations_count_then_act(general_worker: WorkerProc, client: cairn.Client) -> None:
    tag = new_prefix()
    later = {"not_before": "in 1h"}
    runs = [client.submit(greet(general_worker, f"bulk {i}", **later), labels={"tag": tag}) for i in range(3)]
    counted = client.cancel_runs(dry_run=True, labels={"tag": tag})
    assert (counted.matched, counted.dry_run, counted.runs) == (3, True, [])
    done = client.cancel_runs(labels={"tag": tag}, by="ops", reason="wrong batch")
    assert (done.matched, done.changed, done.more) == (3, 3, False)
    assert {o.outcome for o in done.runs} == {"cancelled"}
    assert all(client.summary(r.id).status == "cancelled" for r in runs)
    redriven = client.redrive_runs(labels={"tag": tag}, status="cancelled", by="ops")
    assert redriven.changed == 3 and all(client.summary(r.id).status == "running" for r in runs)
    retried = client.retry_failed_runs(labels={"tag": tag})
    assert retried.changed == 0 and {o.outcome for o in retried.runs} == {"no_failed_steps"}
    client.cancel_runs(labels={"tag": tag})
    with pytest.raises(cairn.ApiError) as empty:
        client.cancel_runs()
    assert empty.value.status == 400


def test_a_schedule_labels_its_runs_and_the_async_client_filters(server: Server, general_worker: WorkerProc,
                                                                 client: cairn.Client) -> None:
    tag = new_prefix()
    schedule = client.schedules.create("0 9 * * *", greet(general_worker, "daily"), id=tag, labels={"tag": tag})
    assert schedule.labels == {"tag": tag}
    run_id = client.schedules.trigger(tag)

    async def main() -> None:
        async with cairn.AsyncClient(server.api_url, token=server.api_token) as aclient:
            runs = [r.id async for r in aclient.iter_runs(labels={"tag": tag})]
            assert runs == [run_id]
            assert (await aclient.cancel_runs(dry_run=True, labels={"tag": tag})).matched == 1

    asyncio.run(main())
    client.wait(run_id, timeout=30)
    client.schedules.delete(tag)
