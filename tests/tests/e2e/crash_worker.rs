//! Crash tests with real processes (issue 4 acceptance; case C12 of `../shared/cases/cases.md`): a real `cairn serve`
//! over a SQLite file (and a fresh PostgreSQL database when `DATABASE_URL` is set), real `cairn worker` processes
//! killed with `SIGKILL` or frozen with `SIGSTOP` mid-step, and a local endpoint standing in for the service the
//! step calls (it records each call and whether the caller hung up).
//!
//! The orchestrator runs with a 2 s lease TTL (`CAIRN_LEASE_TTL_MS`), so a lost worker is noticed within
//! 2 s + one reaper tick (1 s). Mapping to the case: `weather.lookup` blocking on its first call → `http.request`
//! to `/slow` (slow on the first call only); "worker lost" → failure code `lease_lost`; C12 c (network cut) is
//! covered in-process by `cases_failures.rs`.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_tests::http::{TempDir, holds_for, step, within_or};
use cairn_tests::process::{Endpoint, Orchestrator, Proc};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Lease TTL of the orchestrator (liveness timeout).
const TTL_MS: u64 = 2_000;
/// Bound of every wait: generous, as three debug processes share two cores.
const LIMIT: Duration = Duration::from_secs(40);
/// From a worker's death to its attempt being reclaimed: TTL (the last heartbeat was at most TTL/4 earlier, so
/// this is pessimistic), one reaper tick (1 s), and slack for a busy machine.
const RECLAIMED_WITHIN: Duration = Duration::from_millis(TTL_MS + 1_000 + 2_000);

fn retry(max_attempts: u32) -> Value {
    json!({"max_attempts": max_attempts, "initial_interval_ms": 100, "backoff_coefficient": 1.0,
        "max_interval_ms": 100, "jitter": "none"})
}

fn finished(run: &Value) -> bool {
    ["succeeded", "failed", "cancelled"].contains(&run["status"].as_str().unwrap_or_default())
}

/// A plan whose `fetch` step calls `/slow` (slow on its first call only), then a `noop` that uses its output.
fn slow_plan(endpoint: &Endpoint, method: &str, idempotent: bool) -> Value {
    json!({"steps": [
        {"id": "fetch", "action": "http.request", "idempotent": idempotent, "timeout_ms": 60000, "retry": retry(3),
         "args": {"method": method, "url": format!("{}/slow?ms=60000&then=0", endpoint.url())}},
        {"id": "after", "action": "noop", "depends_on": ["fetch"], "args": {"slow_call": "$fetch.output.body.slow_call"}}
    ]})
}

/// Waits until the endpoint has seen `n` calls to `/slow`.
async fn slow_calls(endpoint: &Endpoint, n: usize, orchestrator: &Orchestrator) {
    within_or(
        LIMIT,
        || async { (endpoint.calls_to("/slow").len() >= n).then_some(()) },
        || format!("waiting for {n} call(s) to /slow:{}", orchestrator.logs()),
    )
    .await;
}

/// Starts worker A, submits `plan` and waits until its first `/slow` call is in flight; then starts the healthy
/// worker B, so it is registered and polling when A's lease is reclaimed.
async fn a_is_calling(orchestrator: &Orchestrator, endpoint: &Endpoint, plan: Value) -> (String, Proc, Proc) {
    let a = orchestrator.worker("worker-a", &[], &[]);
    let run_id = orchestrator.submit(plan).await;
    slow_calls(endpoint, 1, orchestrator).await;
    let b = orchestrator.worker("worker-b", &[], &[]);
    // The case injects the fault 200 ms into attempt 1.
    tokio::time::sleep(Duration::from_millis(200)).await;
    (run_id, a, b)
}

on_both_backends!(c12a_a_killed_workers_idempotent_step_is_rerun_on_another_worker);
/// C12 a with real processes: worker A is killed (`kill -9`) while its idempotent `http.request` waits on the
/// endpoint; the endpoint sees the connection closed; after the lease expires the attempt is failed `lease_lost`
/// and re-run on worker B, the dependent step runs once on the new output, and the run succeeds.
async fn c12a_a_killed_workers_idempotent_step_is_rerun_on_another_worker(backend: Backend) {
    let dir = TempDir::new();
    let endpoint = Endpoint::start(|_| (404, json!({}))).await;
    let orchestrator = Orchestrator::start(backend, dir.path(), TTL_MS).await;
    let (run_id, mut a, _b) = a_is_calling(&orchestrator, &endpoint, slow_plan(&endpoint, "GET", true)).await;

    let killed = Instant::now();
    a.kill();
    within_or(
        LIMIT,
        || async { endpoint.calls_to("/slow")[0].hung_up().then_some(()) },
        || format!("{backend:?}: waiting until the dead worker's connection closes:{}", orchestrator.logs()),
    )
    .await;

    let run = orchestrator.wait_run(&run_id, "it finishes", LIMIT, finished).await;
    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    let fetch = step(&run, "fetch");
    assert_eq!(fetch["attempts"], 2, "{backend:?}: re-run once: {run:#}");
    let failures = fetch["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{backend:?}: one failure record: {run:#}");
    assert_eq!(failures[0]["code"], "lease_lost", "{backend:?}: {run:#}");
    assert_eq!(failures[0]["attempt"], 1, "{backend:?}: {run:#}");
    assert_eq!(failures[0]["worker_id"], "worker-a", "{backend:?}: {run:#}");
    assert_eq!(fetch["output"]["body"]["slow_call"], 2, "{backend:?}: the output is the second call's");

    let calls = endpoint.calls_to("/slow");
    assert_eq!(calls.len(), 2, "{backend:?}: exactly one re-run");
    assert!(calls[1].answered, "{backend:?}: the re-run got its answer");
    let reclaimed = calls[1].started - killed;
    assert!(reclaimed <= RECLAIMED_WITHIN, "{backend:?}: re-run {reclaimed:?} after the kill");
    let after = step(&run, "after");
    assert_eq!((&after["attempts"], &after["output"]), (&json!(1), &json!({"slow_call": 2})), "{backend:?}");
}

on_both_backends!(c12a_a_killed_workers_non_idempotent_step_is_outcome_unknown_until_an_operator_retries);
/// C12 a, non-idempotent: the killed worker's `POST` may have taken effect, so the step goes to
/// `outcome_unknown` with a `lease_lost` failure record and is **not** re-run, although a healthy worker is idle;
/// the run stays open. An operator `retry` then runs it again and the run succeeds.
async fn c12a_a_killed_workers_non_idempotent_step_is_outcome_unknown_until_an_operator_retries(backend: Backend) {
    let dir = TempDir::new();
    let endpoint = Endpoint::start(|_| (404, json!({}))).await;
    let orchestrator = Orchestrator::start(backend, dir.path(), TTL_MS).await;
    let (run_id, mut a, _b) = a_is_calling(&orchestrator, &endpoint, slow_plan(&endpoint, "POST", false)).await;

    let killed = Instant::now();
    a.kill();
    let run = orchestrator
        .wait_run(&run_id, "fetch is outcome_unknown", LIMIT, |run| {
            step(run, "fetch")["status"] != "running" || finished(run)
        })
        .await;
    assert!(killed.elapsed() <= RECLAIMED_WITHIN, "{backend:?}: noticed {:?} after the kill", killed.elapsed());
    let fetch = step(&run, "fetch");
    assert_eq!(fetch["status"], "outcome_unknown", "{backend:?}: {run:#}");
    assert_eq!(fetch["attempts"], 1, "{backend:?}: {run:#}");
    assert_eq!(fetch["failures"][0]["code"], "lease_lost", "{backend:?}: a failure record: {run:#}");
    assert_eq!(fetch["failures"][0]["worker_id"], "worker-a", "{backend:?}: {run:#}");
    assert_eq!(run["status"], "running", "{backend:?}: the run waits for an operator: {run:#}");

    // Worker B is idle and polling: nothing may run the step again on its own.
    holds_for(Duration::from_millis(TTL_MS + 1_000), "nothing re-runs the non-idempotent step", || async {
        let run = orchestrator.run(&run_id).await;
        endpoint.calls_to("/slow").len() == 1
            && step(&run, "fetch")["status"] == "outcome_unknown"
            && step(&run, "after")["status"] == "pending"
    })
    .await;

    let (status, answer) = orchestrator.post(&format!("/v1/runs/{run_id}/steps/fetch:retry"), &json!({})).await;
    assert_eq!(status, 200, "{backend:?}: the operator's retry is accepted: {answer:#}");
    let run = orchestrator.wait_run(&run_id, "it finishes", LIMIT, finished).await;
    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    let fetch = step(&run, "fetch");
    assert_eq!(fetch["attempts"], 2, "{backend:?}: {run:#}");
    assert_eq!(fetch["output"]["body"]["slow_call"], 2, "{backend:?}: {run:#}");
    assert_eq!(endpoint.calls_to("/slow").len(), 2, "{backend:?}: one call per execution");
    assert_eq!(step(&run, "after")["attempts"], 1, "{backend:?}");
}

on_both_backends!(c12b_a_frozen_workers_late_report_is_rejected_after_the_step_ran_elsewhere);
/// C12 b with real processes: worker A is frozen (`SIGSTOP`, sockets open, no heartbeats) mid-call; its lease
/// expires, the attempt is failed `lease_lost` and re-run on worker B, and the run succeeds. The endpoint holds
/// A's call until A is frozen and answers it then, so A holds a result. After `SIGCONT`, A's late report (or its heartbeat)
/// is refused as stale: the run, the step's output (the second call's) and its attempts are unchanged, and
/// nothing runs a third time.
async fn c12b_a_frozen_workers_late_report_is_rejected_after_the_step_ran_elsewhere(backend: Backend) {
    let dir = TempDir::new();
    let endpoint = Endpoint::start(|_| (404, json!({}))).await;
    let orchestrator = Orchestrator::start(backend, dir.path(), TTL_MS).await;
    let plan = json!({"steps": [
        {"id": "fetch", "action": "http.request", "idempotent": true, "timeout_ms": 60000, "retry": retry(3),
         "args": {"method": "GET", "url": format!("{}/slow?ms=held&then=0", endpoint.url())}},
        {"id": "after", "action": "noop", "depends_on": ["fetch"],
         "args": {"slow_call": "$fetch.output.body.slow_call"}}
    ]});
    let (run_id, a, _b) = a_is_calling(&orchestrator, &endpoint, plan).await;

    a.freeze();
    endpoint.release();
    let run = orchestrator.wait_run(&run_id, "it finishes", LIMIT, finished).await;
    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    let fetch = step(&run, "fetch");
    assert_eq!(fetch["attempts"], 2, "{backend:?}: {run:#}");
    assert_eq!(fetch["failures"][0]["code"], "lease_lost", "{backend:?}: {run:#}");
    assert_eq!(fetch["failures"][0]["worker_id"], "worker-a", "{backend:?}: {run:#}");
    assert_eq!(fetch["output"]["body"]["slow_call"], 2, "{backend:?}: {run:#}");
    let calls = endpoint.calls_to("/slow");
    assert!(calls[0].answered, "{backend:?}: A's call was answered while A was frozen");

    a.thaw();
    let refused = within_or(
        LIMIT,
        || async {
            let log = a.log();
            ["report was stale", "no longer counts this attempt"].into_iter().find(|line| log.contains(line))
        },
        || format!("{backend:?}: waiting until the thawed worker learns its lease is gone:{}", orchestrator.logs()),
    )
    .await;
    eprintln!("{backend:?}: the thawed worker was told: {refused}");

    let later = orchestrator.run(&run_id).await;
    assert_eq!(later["status"], "succeeded", "{backend:?}: {later:#}");
    assert_eq!(step(&later, "fetch"), fetch, "{backend:?}: the late report changed nothing");
    assert_eq!(step(&later, "after")["attempts"], 1, "{backend:?}: the dependent ran once");
    assert_eq!(endpoint.calls_to("/slow").len(), 2, "{backend:?}: one call per attempt, no third");
}

on_both_backends!(a_restarted_worker_continues_a_step_from_its_last_checkpoint);
/// A worker killed after its `sleep` saved a checkpoint: the next attempt, on another worker, receives the last
/// checkpoint and waits only for the rest (`resumed_from_ms`), instead of starting over.
async fn a_restarted_worker_continues_a_step_from_its_last_checkpoint(backend: Backend) {
    const DURATION_MS: u64 = 4_000;
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(backend, dir.path(), TTL_MS).await;
    let mut a = orchestrator.worker("worker-a", &[], &[]);
    let plan = json!({"steps": [{"id": "nap", "action": "sleep", "args": {"duration_ms": DURATION_MS},
            "timeout_ms": 30000, "retry": retry(3)}]});
    let run_id = orchestrator.submit(plan).await;
    let run = orchestrator
        .wait_run(&run_id, "a checkpoint is saved", LIMIT, |run| {
            step(run, "nap")["checkpoint"]["elapsed_ms"].as_u64().is_some_and(|ms| ms >= 1_000)
        })
        .await;
    a.kill();
    let saved = step(&run, "nap")["checkpoint"]["elapsed_ms"].as_u64().unwrap();
    let _b = orchestrator.worker("worker-b", &[], &[]);

    let run = orchestrator.wait_run(&run_id, "it finishes", LIMIT, finished).await;
    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    let nap = step(&run, "nap");
    assert_eq!(nap["attempts"], 2, "{backend:?}: {run:#}");
    assert_eq!(nap["failures"][0]["code"], "lease_lost", "{backend:?}: {run:#}");
    let resumed = nap["output"]["resumed_from_ms"].as_u64().unwrap();
    assert!(
        (saved..DURATION_MS).contains(&resumed),
        "{backend:?}: attempt 2 resumed from {resumed} ms, the checkpoint seen before the kill was {saved} ms"
    );
    assert_eq!(nap["output"]["slept_ms"], DURATION_MS, "{backend:?}: {run:#}");
    // Attempt 2 only waited for the rest: from the reaper's failure of attempt 1 to the run's end.
    let reaped = nap["failures"][0]["ended_at_ms"].as_i64().unwrap();
    let second = run["finished_at_ms"].as_i64().unwrap() - reaped;
    let rest = i64::try_from(DURATION_MS - resumed).unwrap();
    assert!(second < rest + 1_500, "{backend:?}: attempt 2 took {second} ms for the remaining {rest} ms");
}
