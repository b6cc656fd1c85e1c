//! Failure cases about corrupt state, retries, lost workers and oversized outputs, run through the real engine
//! and store on every available backend: C03 (b), C10, C12, C23. Case names map to the contract as in
//! `cases_validation.rs` (`weather.lookup` → `weather.forecast`, `reminder.create` → `notify.send` with
//! `not_before`, retry fields → `initial_interval_ms`/`backoff_coefficient`/`max_interval_ms`/`jitter`).
//!
//! These are engine-level: the in-process [`TestWorker`] stands in for worker processes, and "a worker dies" is a
//! handler that never reports ([`Outcome::Hang`]). The worker-process parts (SIGKILL/SIGSTOP, a cut network, the
//! stub seeing its connection closed) belong to the worker-protocol issue.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_core::failure::Failure;
use cairn_orchestrator::EngineConfig;
use cairn_store::{HeartbeatOutcome, Report};
use cairn_tests::{Backend, Outcome, TestApp, TestWorker, on_both_backends, raw};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";
const LEASE_TTL_MS: i64 = 10_000;

fn advance_ms(app: &TestApp, ms: i64) {
    app.advance(Duration::from_millis(u64::try_from(ms).unwrap()));
}

on_both_backends!(c03b_a_missing_step_row_fails_the_run_at_restart_instead_of_hanging);
/// C03 (b): a run whose `weather` row vanished while it ran (store corruption) is failed with `integrity_error`
/// at the restart; `remind` is cancelled, never left `pending`, and never dispatched; a late report is stale.
async fn c03b_a_missing_step_row_fails_the_run_at_restart_instead_of_hanging(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let run = app
        .submit(json!({"context":{"timezone":"Asia/Shanghai"},"steps":[
          {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"}},
          {"id":"remind","action":"notify.send","args":{"text":"umbrella"},
           "not_before":"tomorrow 08:00","depends_on":["weather"]}
        ]}))
        .await;
    let hung = TestWorker::new("w1").on("weather.forecast", |_| Outcome::Hang);
    assert_eq!(hung.run_until_idle(&app.engine).await, 1);
    let deleted =
        raw::execute(app.store(), "DELETE FROM steps WHERE run_id = $1 AND step_id = $2", &[&run, "weather"]).await;
    assert_eq!(deleted, 1, "{backend:?}: the fault is injected");

    let app = app.restart().await;

    let summary = app.run(&run).await;
    assert_eq!(summary.status, "failed", "{backend:?}: the run fails at start-up");
    assert_eq!(summary.failure.unwrap()["code"], "integrity_error");
    assert_eq!(app.status(&run, "remind").await, "cancelled", "{backend:?}: remind is final, never left pending");
    let events = app.store().events(&run, 0, 1000).await.unwrap();
    assert!(
        events.iter().any(|e| e.kind == "run_failed" && e.data["code"] == "integrity_error"),
        "the failure is recorded as an event: {events:?}"
    );
    let late = app.engine.complete(&hung.calls()[0].lease, &json!({"precip_prob": 0.9})).await.unwrap();
    assert_eq!(late, Report::Stale, "a report for the deleted row changes nothing");
    app.set_time("2027-03-16T00:00:00Z");
    let sender = TestWorker::new("w2").echo("notify.send").echo("weather.forecast");
    assert_eq!(
        sender.run_until_idle(&app.engine).await,
        0,
        "{backend:?}: remind is never dispatched without its dependency"
    );
}

/// Runs the one-step always-failing plan to its end, moving the clock to each retry's due time, and submits a
/// healthy plan every 50 attempts. Returns (run id, healthy run ids).
async fn drive_to_exhaustion(app: &TestApp, plan: Value) -> (String, Vec<String>) {
    let worker = TestWorker::new("w1")
        .on("http.request", |_| Outcome::Fail(Failure::new("action_error", "500", true)))
        .echo("noop");
    let run = app.submit(plan).await;
    let mut healthy = Vec::new();
    for round in 0.. {
        if round % 50 == 0 {
            healthy.push(app.submit(json!({"steps":[{"id":"ok","action":"noop","args":{"round":round}}]})).await);
        }
        worker.run_until_idle(&app.engine).await;
        let step = app.step(&run, "flaky").await;
        if step.status != "ready" {
            break;
        }
        app.set_time_ms(step.available_at_ms.unwrap());
    }
    worker.run_until_idle(&app.engine).await;
    (run, healthy)
}

on_both_backends!(c10_backoff_never_overflows_and_attempts_are_exact);
/// C10: backoff past the point where `coefficient^attempt` overflows u64 (plan A) and f64 (plan B) stays within
/// `[0, max_interval_ms]`, the attempt count is exact, the step ends failed with "retries exhausted", and
/// unrelated runs keep completing meanwhile.
async fn c10_backoff_never_overflows_and_attempts_are_exact(backend: Backend) {
    let plans = [
        (
            "flaky",
            200,
            50,
            json!({"max_attempts":200,"initial_interval_ms":1,"backoff_coefficient":10.0,
                                 "max_interval_ms":50,"jitter":"full"}),
        ),
        (
            "flaky",
            1100,
            20,
            json!({"max_attempts":1100,"initial_interval_ms":1,"backoff_coefficient":2.0,
                                  "max_interval_ms":20,"jitter":"none"}),
        ),
    ];
    for (id, attempts, cap, retry) in &plans {
        let app = TestApp::new(backend, START).await;
        let plan = json!({"steps":[{"id":id,"action":"http.request","timeout_ms":1000,"idempotent":true,
                "args":{"method":"GET","url":"http://127.0.0.1:18080/always500"},"retry":retry}]});
        let (run, healthy) = drive_to_exhaustion(&app, plan).await;

        let records = app.store().attempts(&run).await.unwrap();
        assert_eq!(records.len(), *attempts, "{backend:?}: exactly max_attempts attempts");
        for pair in records.windows(2) {
            let gap = pair[1].started_at_ms - pair[0].ended_at_ms.unwrap();
            assert!(
                (0..=*cap).contains(&gap),
                "{backend:?}: gap {gap} ms after attempt {} must be in [0, {cap}]",
                pair[0].attempt
            );
        }
        let step = app.step(&run, "flaky").await;
        assert_eq!(step.status, "failed");
        assert_eq!(step.attempts as usize, *attempts);
        let message = step.error.unwrap()["message"].as_str().unwrap().to_owned();
        assert!(message.contains("retries exhausted"), "{message}");
        assert_eq!(app.run(&run).await.status, "failed");
        for h in healthy {
            assert_eq!(app.run(&h).await.status, "succeeded", "{backend:?}: unrelated runs complete");
        }
    }
}

fn c12_plan() -> Value {
    json!({"steps":[
      {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"},"timeout_ms":30000,"idempotent":true,
       "retry":{"max_attempts":3,"initial_interval_ms":500,"backoff_coefficient":2.0,"max_interval_ms":5000,
                "jitter":"equal"}},
      {"id":"notify","action":"notify.send","args":{"text":"$weather.output.summary"},"depends_on":["weather"]}
    ]})
}

on_both_backends!(c12_a_lost_worker_is_reaped_and_a_healthy_worker_finishes_the_run);
/// C12 (a/b/c): a worker that stops reporting loses its lease after `lease_ttl`; the reaper records `lease_lost`,
/// a healthy worker runs attempt 2, `notify` runs once, and the dead worker's late report is stale.
async fn c12_a_lost_worker_is_reaped_and_a_healthy_worker_finishes_the_run(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    app.advance(Duration::from_secs(60)); // past the start-up grace: the reaper is fully active
    let run = app.submit(c12_plan()).await;
    let dead = TestWorker::new("w1").on("weather.forecast", |_| Outcome::Hang);
    let healthy = TestWorker::new("w2")
        .on("weather.forecast", |_| Outcome::Succeed(json!({"summary":"rain"})))
        .echo("notify.send");
    assert_eq!(dead.run_until_idle(&app.engine).await, 1);
    let lost = dead.calls()[0].lease.clone();

    advance_ms(&app, LEASE_TTL_MS - 1);
    assert_eq!(app.reap().await, 0, "the lease is still live");
    advance_ms(&app, 1);
    assert_eq!(app.reap().await, 1, "{backend:?}: reaped at the liveness timeout");
    let records = app.store().attempts(&run).await.unwrap();
    assert_eq!(records[0].status, "failed");
    assert_eq!(records[0].failure.as_ref().unwrap()["code"], "lease_lost");

    app.set_time_ms(app.step(&run, "weather").await.available_at_ms.unwrap());
    healthy.run_until_idle(&app.engine).await;
    let weather = app.step(&run, "weather").await;
    assert_eq!((weather.status.as_str(), weather.attempts), ("succeeded", 2));
    assert_eq!(healthy.calls_for("notify").len(), 1, "notify runs once");
    assert_eq!(healthy.calls_for("notify")[0].args["text"], "rain");
    assert_eq!(app.run(&run).await.status, "succeeded");

    let late = app.engine.complete(&lost, &json!({"summary":"late"})).await.unwrap();
    assert_eq!(late, Report::Stale, "{backend:?}: the stale worker is fenced");
    assert_eq!(app.engine.heartbeat(&lost, None).await.unwrap(), HeartbeatOutcome::Gone);
    assert_eq!(app.step(&run, "weather").await.output.unwrap()["summary"], "rain");
}

on_both_backends!(c12_d_without_a_healthy_worker_the_step_fails_and_never_stays_running);
/// C12 (d): with no healthy worker every attempt is reaped and the step fails once attempts run out, within
/// `timeout_ms` + the liveness timeout; it is never `running` past its lease; the run fails.
async fn c12_d_without_a_healthy_worker_the_step_fails_and_never_stays_running(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    app.advance(Duration::from_secs(60)); // past the start-up grace: the reaper is fully active
    let t0 = app.now_ms();
    let run = app.submit(c12_plan()).await;
    let dead = TestWorker::new("w1").on("weather.forecast", |_| Outcome::Hang);
    loop {
        dead.run_until_idle(&app.engine).await;
        advance_ms(&app, LEASE_TTL_MS);
        app.reap().await;
        let step = app.step(&run, "weather").await;
        assert_ne!(step.status, "running", "{backend:?}: never running past the lease");
        if step.status != "ready" {
            break;
        }
        app.set_time_ms(step.available_at_ms.unwrap());
    }
    let weather = app.step(&run, "weather").await;
    assert_eq!((weather.status.as_str(), weather.attempts), ("failed", 3));
    assert!(app.now_ms() - t0 <= 30_000 + LEASE_TTL_MS, "final by timeout_ms + liveness timeout");
    assert_eq!(app.status(&run, "notify").await, "skipped");
    assert_eq!(app.run(&run).await.status, "failed", "{backend:?}");
}

on_both_backends!(c12_heartbeats_never_extend_an_attempt_past_its_timeout);
/// C12: a worker that keeps heartbeating cannot keep an attempt past `timeout_ms`: the lease is capped at the
/// deadline, and the reaper records `timeout` a tenth of the timeout later (the worker enforces the timeout
/// itself; the orchestrator's backstop allows for its clock running up to 10 % fast while it catches up with a
/// step of its reference). C12 asks for the end by the timeout plus the liveness timeout; this is well within.
async fn c12_heartbeats_never_extend_an_attempt_past_its_timeout(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    app.advance(Duration::from_secs(60)); // past the start-up grace: the reaper is fully active
    let run = app.submit(c12_plan()).await;
    let frozen = TestWorker::new("w1").on("weather.forecast", |_| Outcome::Hang);
    frozen.run_until_idle(&app.engine).await;
    let lease = frozen.calls()[0].lease.clone();
    for _ in 0..5 {
        advance_ms(&app, 5_000);
        assert!(matches!(app.engine.heartbeat(&lease, None).await.unwrap(), HeartbeatOutcome::Extended { .. }));
        assert_eq!(app.reap().await, 0, "a heartbeating attempt is live until its deadline");
    }
    advance_ms(&app, 5_000); // start + timeout_ms
    assert_eq!(app.reap().await, 0, "{backend:?}: the backstop's tenth of the timeout");
    advance_ms(&app, 3_000); // start + timeout_ms × 1.1
    assert_eq!(app.reap().await, 1, "{backend:?}: reaped by the backstop");
    let weather = app.step(&run, "weather").await;
    assert_ne!(weather.status, "running", "{backend:?}: not running at timeout_ms");
    let records = app.store().attempts(&run).await.unwrap();
    assert_eq!(records[0].failure.as_ref().unwrap()["code"], "timeout");
}

on_both_backends!(c12_cancel_of_a_run_with_a_stuck_step_moves_it_to_cancelled);
/// C12: cancelling a run whose step is stuck `running` really cancels it (not a silent no-op).
async fn c12_cancel_of_a_run_with_a_stuck_step_moves_it_to_cancelled(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    app.advance(Duration::from_secs(60)); // past the start-up grace: the reaper is fully active
    let run = app.submit(c12_plan()).await;
    let dead = TestWorker::new("w1").on("weather.forecast", |_| Outcome::Hang);
    dead.run_until_idle(&app.engine).await;
    assert!(app.engine.cancel_run(&run).await.unwrap(), "cancel takes effect");
    assert_eq!(app.run(&run).await.status, "cancelled", "{backend:?}");
    for step in ["weather", "notify"] {
        assert_eq!(app.status(&run, step).await, "cancelled", "{backend:?} {step}");
    }
    let lease = &dead.calls()[0].lease;
    assert_eq!(app.engine.heartbeat(lease, None).await.unwrap(), HeartbeatOutcome::Gone);
    advance_ms(&app, 60_000);
    assert_eq!(app.reap().await, 0, "nothing left to reap");
    assert_eq!(dead.run_until_idle(&app.engine).await, 0, "nothing is dispatched again");
}

const LIMIT: usize = 64 * 1024;

/// An output `{"body": …}` whose JSON text is exactly `size` bytes, with multi-byte characters in it.
fn output_of_size(size: usize) -> Value {
    let empty = json!({"body": ""}).to_string().len();
    let rain = "雨".repeat(1000);
    let body = format!("{rain}{}", "a".repeat(size - empty - rain.len()));
    let output = json!({"body": body});
    assert_eq!(output.to_string().len(), size);
    output
}

fn c23_plan() -> Value {
    json!({"steps":[
      {"id":"big","action":"http.request","args":{"method":"GET","url":"http://127.0.0.1:18080/bytes"},
       "idempotent":true,"retry":{"max_attempts":3,"initial_interval_ms":100,"backoff_coefficient":2.0,
                                  "max_interval_ms":1000,"jitter":"none"}},
      {"id":"use","action":"llm.chat","args":{"prompt":"$big.output.body"},"depends_on":["big"]}
    ]})
}

on_both_backends!(c23_an_oversized_output_fails_the_step_and_the_run_never_stays_running);
/// C23: an output one byte over `max_output_bytes` fails the step with `output_too_large` (size and limit in the
/// details), is not retried, skips `use` and fails the run, still failed after a restart; an output of exactly
/// the limit succeeds and reaches `use` byte-for-byte; other runs keep progressing.
async fn c23_an_oversized_output_fails_the_step_and_the_run_never_stays_running(backend: Backend) {
    let config = EngineConfig { max_output_bytes: LIMIT, ..EngineConfig::default() };
    let app = TestApp::with_config(backend, START, config.clone()).await;
    let over = TestWorker::new("w1")
        .on("http.request", |_| Outcome::Succeed(output_of_size(LIMIT + 1)))
        .on("llm.chat", |_| Outcome::Succeed(json!({"text":"ok"})))
        .echo("noop");
    let run = app.submit(c23_plan()).await;
    over.run_until_idle(&app.engine).await;
    advance_ms(&app, 10_000);
    over.run_until_idle(&app.engine).await;
    let big = app.step(&run, "big").await;
    assert_eq!((big.status.as_str(), big.attempts), ("failed", 1), "{backend:?}: not retried");
    let error = big.error.unwrap();
    assert_eq!(error["code"], "output_too_large");
    assert_eq!(error["details"]["size_bytes"], LIMIT + 1);
    assert_eq!(error["details"]["limit_bytes"], LIMIT);
    assert!(big.output.is_none(), "the oversized output is never written");
    assert_eq!(app.status(&run, "use").await, "skipped");
    assert!(over.calls_for("use").is_empty(), "use never runs");
    assert_eq!(app.run(&run).await.status, "failed");

    let app = app.restart().await;
    assert_eq!(app.run(&run).await.status, "failed", "{backend:?}: still failed after restart");
    let other = app.submit(json!({"steps":[{"id":"ok","action":"noop","args":{}}]})).await;
    over.run_until_idle(&app.engine).await;
    assert_eq!(app.run(&other).await.status, "succeeded", "other runs keep progressing");

    let exact = output_of_size(LIMIT);
    let fits = TestWorker::new("w2")
        .on("http.request", {
            let exact = exact.clone();
            move |_| Outcome::Succeed(exact.clone())
        })
        .on("llm.chat", |_| Outcome::Succeed(json!({"text":"ok"})));
    let run = app.submit(c23_plan()).await;
    fits.run_until_idle(&app.engine).await;
    assert_eq!(app.status(&run, "big").await, "succeeded", "{backend:?}: exactly LIMIT fits");
    assert_eq!(fits.calls_for("use")[0].args["prompt"], exact["body"], "use receives the body byte-for-byte");
    assert_eq!(app.run(&run).await.status, "succeeded");
}
