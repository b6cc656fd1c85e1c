//! Failure cases about orchestrator restarts and wide runs, through the real engine and store on every available
//! backend: C14 (a restart must not re-dispatch in-flight work) and C24 (a 5,000-wide fan-out, with a restart in
//! the middle). A restart is [`TestApp::restart`]: the engine is dropped and a new one starts over the same
//! database, as after SIGKILL of every orchestrator process.
//!
//! Engine-level: the in-process [`TestWorker`] stands in for worker processes; the worker reconnecting over the
//! worker protocol and the stub's call log belong to the worker-protocol issue.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use cairn_core::diagnostic::Code;
use cairn_core::validate::Limits;
use cairn_orchestrator::{EngineConfig, SubmitError, SubmitRequest};
use cairn_store::{HeartbeatOutcome, Lease, Report};
use cairn_tests::{Backend, Outcome, TestApp, TestWorker, on_both_backends, raw};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn c14_plan() -> Value {
    json!({"steps":[
      {"id":"batch","action":"http.request","args":{"method":"POST","url":"http://127.0.0.1:18080/slow?ms=120000"},
       "timeout_ms":300000,"idempotent":false},
      {"id":"notify","action":"notify.send","args":{"text":"batch done"},"depends_on":["batch"]}
    ]})
}

/// Submits the C14 plan, lets a worker start `batch` (and keep working), then restarts the orchestrator with
/// the clock 60 s later (past `lease_ttl`), and runs one reaper pass right after start-up, as the reaper loop
/// would. Returns the app, the run, the worker and the in-flight lease.
async fn batch_in_flight_across_a_restart(backend: cairn_tests::Backend) -> (TestApp, String, TestWorker, Lease) {
    let app = TestApp::new(backend, START).await;
    let run = app.submit(c14_plan()).await;
    let worker = TestWorker::new("w1").on("http.request", |_| Outcome::Hang).echo("notify.send");
    assert_eq!(worker.run_until_idle(&app.engine).await, 1);
    let lease = worker.calls_for("batch")[0].lease.clone();
    app.advance(Duration::from_secs(60));
    let app = app.restart().await;
    assert_eq!(
        app.reap().await,
        0,
        "{backend:?}: the start-up grace keeps a lease that expired while no orchestrator ran"
    );
    assert_eq!(app.status(&run, "batch").await, "running");
    (app, run, worker, lease)
}

async fn assert_batch_ran_once(app: &TestApp, run: &str, worker: &TestWorker) {
    worker.run_until_idle(&app.engine).await;
    let batch = app.step(run, "batch").await;
    assert_eq!((batch.status.as_str(), batch.attempts), ("succeeded", 1), "one attempt, re-attached");
    assert_eq!(worker.calls_for("batch").len(), 1, "batch is never dispatched again");
    assert_eq!(worker.calls_for("notify").len(), 1, "notify runs once");
    assert_eq!(app.run(run).await.status, "succeeded");
}

on_both_backends!(c14_a_restart_reattaches_to_the_running_attempt_instead_of_redispatching);
/// C14: after a restart the worker still running `batch` heartbeats (the lease is extended, not re-dispatched)
/// and then reports; the result is accepted, `notify` runs once, the run succeeds.
async fn c14_a_restart_reattaches_to_the_running_attempt_instead_of_redispatching(backend: Backend) {
    let (app, run, worker, lease) = batch_in_flight_across_a_restart(backend).await;
    assert!(
        matches!(app.engine.heartbeat(&lease, None).await.unwrap(), HeartbeatOutcome::Extended { .. }),
        "{backend:?}: the worker's heartbeat re-attaches"
    );
    assert_eq!(worker.run_until_idle(&app.engine).await, 0, "no new dispatch");
    app.advance(Duration::from_secs(30));
    assert_eq!(app.engine.heartbeat(&lease, None).await.unwrap(), {
        let expires = app.now_ms() + 10_000;
        HeartbeatOutcome::Extended { lease_expires_ms: expires }
    });
    assert_eq!(app.reap().await, 0);
    let report = app.engine.complete(&lease, &json!({"status": 200})).await.unwrap();
    assert_eq!(report, Report::Succeeded, "{backend:?}");
    assert_batch_ran_once(&app, &run, &worker).await;
}

on_both_backends!(c14_b_a_result_held_through_the_outage_is_accepted_after_restart);
/// C14 (b): the action finished while the orchestrator was down; the worker delivers the held result right after
/// the restart, without a heartbeat first, and it is accepted (not lost).
async fn c14_b_a_result_held_through_the_outage_is_accepted_after_restart(backend: Backend) {
    let (app, run, worker, lease) = batch_in_flight_across_a_restart(backend).await;
    let report = app.engine.complete(&lease, &json!({"status": 200})).await.unwrap();
    assert_eq!(report, Report::Succeeded, "{backend:?}: the held result counts");
    assert_batch_ran_once(&app, &run, &worker).await;
}

on_both_backends!(c14_without_a_report_the_non_idempotent_step_becomes_outcome_unknown_after_the_grace);
/// C14: when the worker never comes back, the reaper acts only after the start-up grace, and a non-idempotent
/// step goes to `outcome_unknown` for an operator; it is never re-dispatched.
async fn c14_without_a_report_the_non_idempotent_step_becomes_outcome_unknown_after_the_grace(backend: Backend) {
    let (app, run, worker, _lease) = batch_in_flight_across_a_restart(backend).await;
    app.advance(Duration::from_millis(9_999));
    assert_eq!(app.reap().await, 0, "{backend:?}: still within the grace");
    app.advance(Duration::from_millis(1));
    assert_eq!(app.reap().await, 1, "{backend:?}: reaped once the grace ends");
    let batch = app.step(&run, "batch").await;
    assert_eq!(batch.status, "outcome_unknown");
    assert_eq!(batch.error.unwrap()["code"], "lease_lost");
    app.advance(Duration::from_secs(3600));
    assert_eq!(app.reap().await, 0);
    assert_eq!(
        worker.run_until_idle(&app.engine).await,
        0,
        "{backend:?}: an ambiguous non-idempotent step is never re-dispatched"
    );
    assert_eq!(app.status(&run, "notify").await, "pending");
    assert_eq!(app.run(&run).await.status, "running");
}

const WIDTH: usize = 5_000;

fn fan_out(width: usize) -> Value {
    let pad = "x".repeat(200);
    let mut steps = vec![json!({"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"}})];
    let ids: Vec<String> = (0..width).map(|k| format!("n{k:04}")).collect();
    for (k, id) in ids.iter().enumerate() {
        steps.push(json!({"id":id,"action":"notify.send","depends_on":["weather"],
                          "args":{"text":"rain","i":k,"p":"$weather.output.precip_prob","pad":pad}}));
    }
    steps.push(json!({"id":"summary","action":"noop","args":{},"depends_on":ids}));
    json!({"steps": steps})
}

fn wide_config() -> EngineConfig {
    EngineConfig { limits: Limits { max_steps: 10_000, ..Limits::default() }, ..EngineConfig::default() }
}

fn fan_out_worker(id: &str) -> TestWorker {
    TestWorker::new(id)
        .on("weather.forecast", |_| Outcome::Succeed(json!({"precip_prob": 0.7})))
        .on("notify.send", |_| Outcome::Succeed(json!({"deliveries": []})))
        .echo("noop")
}

/// Every child's `i` across the workers' call logs, checking each got the resolved placeholder.
fn child_indexes(workers: &[&TestWorker]) -> Vec<u64> {
    let calls = workers.iter().flat_map(|w| w.calls());
    let children = calls.filter(|c| c.action == "notify.send");
    children
        .map(|c| {
            assert_eq!(c.args["p"], json!(0.7), "the placeholder resolves for every child");
            c.args["i"].as_u64().unwrap()
        })
        .collect()
}

/// C24 checks after the run: every `i` once, `summary` once and last, and no per-child record near 1 MiB.
async fn assert_fan_out_done(app: &TestApp, run: &str, workers: &[&TestWorker]) {
    let indexes = child_indexes(workers);
    let distinct: BTreeSet<u64> = indexes.iter().copied().collect();
    assert_eq!(indexes.len(), WIDTH, "exactly {WIDTH} child calls");
    assert_eq!(distinct.len(), WIDTH, "every i handled exactly once");
    let last = workers.last().unwrap().calls();
    assert_eq!(last.last().unwrap().lease.step_id, "summary", "summary runs after all children");
    let summaries = workers.iter().map(|w| w.calls_for("summary").len()).sum::<usize>();
    assert_eq!(summaries, 1, "summary runs once");
    assert_eq!(app.run(run).await.status, "succeeded");
    // The plan body (O(n)) is written once and immutable; the rows updated per child must stay bounded.
    let step_row = raw::fetch_i64(
        app.store(),
        "SELECT MAX(LENGTH(CAST(args AS BLOB)) + COALESCE(LENGTH(CAST(output AS BLOB)), 0) \
         + COALESCE(LENGTH(CAST(error AS BLOB)), 0) + LENGTH(CAST(retry AS BLOB))) FROM steps WHERE run_id = $1",
        "SELECT MAX(octet_length(args) + COALESCE(octet_length(output), 0) + COALESCE(octet_length(error), 0) \
         + octet_length(retry))::BIGINT FROM steps WHERE run_id = $1",
        &[run],
    )
    .await;
    let run_row = raw::fetch_i64(
        app.store(),
        "SELECT LENGTH(CAST(input AS BLOB)) + LENGTH(CAST(context AS BLOB)) \
         + COALESCE(LENGTH(CAST(failure AS BLOB)), 0) + 200 FROM runs WHERE id = $1",
        "SELECT (octet_length(input) + octet_length(context) + COALESCE(octet_length(failure), 0) + 200)::BIGINT \
         FROM runs WHERE id = $1",
        &[run],
    )
    .await;
    for (what, size) in [("steps row", step_row), ("runs row", run_row)] {
        assert!(size > 0 && size < 1024 * 1024, "{what} is {size} bytes: must stay under 1 MiB");
    }
}

on_both_backends!(c24_a_five_thousand_wide_fan_out_runs_each_child_once_and_joins_once);
/// C24: a 5,000-wide fan-out validates (how fast is `cairn bench validate`'s figure), runs every child exactly
/// once, joins once, and keeps every per-child record small.
async fn c24_a_five_thousand_wide_fan_out_runs_each_child_once_and_joins_once(backend: Backend) {
    let plan = fan_out(WIDTH);
    let report = cairn_core::validate::validate_value(
        &plan,
        &cairn_core::catalog::StaticCatalog::builtin(),
        &wide_config().limits,
    );
    assert!(report.valid, "{:?}", report.diagnostics.first());
    let app = TestApp::with_config(backend, START, wide_config()).await;
    let run = app.submit(plan.clone()).await;
    let worker = fan_out_worker("w1");
    worker.run_until_idle(&app.engine).await;
    assert_fan_out_done(&app, &run, &[&worker]).await;
}

on_both_backends!(c24_a_restart_in_the_middle_of_a_wide_fan_out_reruns_no_child);
/// C24 variant: the orchestrator restarts after about 2,500 children completed; no completed child runs again
/// and the total stays 5,000.
async fn c24_a_restart_in_the_middle_of_a_wide_fan_out_reruns_no_child(backend: Backend) {
    let app = TestApp::with_config(backend, START, wide_config()).await;
    let run = app.submit(fan_out(WIDTH)).await;
    let before = fan_out_worker("w1");
    while before.calls().len() < 1 + WIDTH / 2 {
        let claimed = app.engine.claim("w1", &before.actions(), 64).await.unwrap();
        assert!(!claimed.is_empty(), "{backend:?}: children are claimable");
        for c in claimed {
            before.handle(&app.engine, c).await;
        }
    }
    let app = app.restart().await;
    let after = fan_out_worker("w2");
    after.run_until_idle(&app.engine).await;
    assert!(after.calls_for("weather").is_empty(), "the root never runs again");
    assert_fan_out_done(&app, &run, &[&before, &after]).await;
}

on_both_backends!(c24_a_fifty_thousand_wide_plan_is_rejected_at_submit_and_nothing_is_stored);
/// C24: a 50,000-wide plan is above the configured width (10,000) and is rejected at submit with
/// `too_many_steps`; nothing is stored.
async fn c24_a_fifty_thousand_wide_plan_is_rejected_at_submit_and_nothing_is_stored(backend: Backend) {
    let mut plan = fan_out(0);
    let steps = plan["steps"].as_array_mut().unwrap();
    let ids: Vec<String> = (0..50_000).map(|k| format!("n{k:05}")).collect();
    let children = ids.iter().map(|id| {
        json!({"id":id,"action":"notify.send","depends_on":["weather"],
        "args":{"text":"rain","p":"$weather.output.precip_prob"}})
    });
    steps.splice(1..1, children);
    steps.last_mut().unwrap()["depends_on"] = json!(ids);
    let app = TestApp::with_config(backend, START, wide_config()).await;
    let req = SubmitRequest { plan: plan.clone(), input: None, idempotency_key: None, labels: Default::default() };
    let Err(SubmitError::Invalid(diagnostics)) = app.engine.submit(&req).await else {
        panic!("{backend:?}: a plan above max_steps must be rejected");
    };
    assert!(diagnostics.iter().any(|d| d.code == Code::TooManySteps), "a clear limit error: {:?}", diagnostics.first());
    assert!(app.store().runs(None, 10, 0).await.unwrap().is_empty(), "no run is stored");
    for (sql, what) in [("SELECT COUNT(*) FROM plans", "plans"), ("SELECT COUNT(*) FROM steps", "steps")] {
        assert_eq!(raw::fetch_i64(app.store(), sql, sql, &[]).await, 0, "no {what} stored");
    }
}
