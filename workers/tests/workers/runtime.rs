//! The worker runtime against a real orchestrator in-process (engine, SQLite, gRPC on 127.0.0.1, reaper): a plan
//! runs to success, a wrong token is refused, timeouts cancel the action, panics become failure records, a
//! restarted worker resumes from the last checkpoint, a refused heartbeat stops the action, shutdown drains,
//! and a result survives the orchestrator being away (case C14).

#![allow(clippy::unwrap_used)]

mod harness;

use std::sync::Arc;
use std::time::Duration;

use cairn_core::catalog::Effect;
use cairn_workers::action::{Action, ActionError};
use cairn_workers::context::ActionContext;
use cairn_workers::runtime::RuntimeError;
use harness::{DropFlag, Flags, Orchestrator, RunningWorker, Scripted, engine_config, within, worker_config};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;

const LIMIT: Duration = Duration::from_secs(15);

/// A typed action (through the `Action` trait and its `DynAction` blanket impl).
struct Echo;

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct EchoOutput {
    text: String,
    attempt: u32,
}

impl Action for Echo {
    type Args = EchoArgs;
    type Output = EchoOutput;
    const NAME: &'static str = "test.echo";
    const DESCRIPTION: &'static str = "Echoes its text.";
    const EFFECT: Effect = Effect::Read;

    async fn run(&self, args: EchoArgs, ctx: &ActionContext) -> Result<EchoOutput, ActionError> {
        Ok(EchoOutput { text: args.text, attempt: ctx.attempt })
    }
}

fn one_step(action: &str, extra: Value) -> Value {
    let mut step = json!({"id": "s", "action": action, "args": {}});
    if let (Some(step), Some(extra)) = (step.as_object_mut(), extra.as_object()) {
        step.extend(extra.clone());
    }
    json!({"steps": [step]})
}

fn no_retry() -> Value {
    json!({"max_attempts": 1})
}

#[tokio::test]
async fn a_plan_runs_to_success_through_the_worker_runtime() {
    let orch = Orchestrator::start(engine_config()).await;
    let worker = RunningWorker::spawn(worker_config(&orch, "w-success", vec![Arc::new(Echo)]));
    orch.wait_registered("test.echo").await;

    let run = orch
        .submit(json!({"steps": [
            {"id": "first", "action": "test.echo", "args": {"text": "hello"}},
            {"id": "second", "action": "test.echo", "args": {"text": "again"}, "depends_on": ["first"]}
        ]}))
        .await;

    let summary = orch.wait_run(&run, &["succeeded", "failed"], LIMIT).await;
    assert_eq!(summary.status, "succeeded", "both steps ran in the worker and were reported");
    let first = orch.step(&run, "first").await.unwrap();
    assert_eq!(first.output, Some(json!({"text": "hello", "attempt": 1})), "the output is the action's");
    let attempts = orch.attempts(&run).await;
    assert_eq!(attempts.len(), 2, "one attempt per step");
    assert!(attempts.iter().all(|a| a.worker_id.as_deref() == Some("w-success")), "attempts name the worker");
    worker.shutdown(LIMIT).await.unwrap();
}

#[tokio::test]
async fn a_worker_runs_at_most_its_concurrency_and_fetches_only_for_free_slots() {
    let orch = Orchestrator::start(engine_config()).await;
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (count, gate) = (running.clone(), release.clone());
    let gated = Scripted::action("test.gate", Effect::Read, move |_args, _ctx| {
        let (count, gate) = (count.clone(), gate.clone());
        async move {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            Ok(json!({}))
        }
    });
    let mut config = worker_config(&orch, "w-slots", vec![gated]);
    config.concurrency = 2;
    let worker = RunningWorker::spawn(config);
    orch.wait_registered("test.gate").await;
    let steps: Vec<Value> = (0..5).map(|i| json!({"id": format!("s{i}"), "action": "test.gate", "args": {}})).collect();
    let run = orch.submit(json!({"steps": steps})).await;

    within(LIMIT, "two attempts run", || async {
        (running.load(std::sync::atomic::Ordering::SeqCst) == 2).then_some(())
    })
    .await;
    let leased = orch.engine.store().steps(&run).await.unwrap().iter().filter(|s| s.attempts > 0).count();
    assert_eq!(leased, 2, "only as many attempts were fetched as there are slots");

    release.add_permits(5);
    let summary = orch.wait_run(&run, &["succeeded", "failed"], LIMIT).await;
    assert_eq!(summary.status, "succeeded", "every step ran as slots freed up");
    assert_eq!(running.load(std::sync::atomic::Ordering::SeqCst), 5);
    worker.shutdown(LIMIT).await.unwrap();
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_refused() {
    let orch = Orchestrator::start(engine_config()).await;
    for token in [Some("not-the-token".to_owned()), None] {
        let mut config = worker_config(&orch, "w-token", vec![Arc::new(Echo)]);
        config.token = token.clone().map(Into::into);
        let outcome = RunningWorker::spawn(config).finished(LIMIT).await;
        assert!(
            matches!(&outcome, Err(RuntimeError::Rejected(status)) if status.code() == tonic::Code::Unauthenticated),
            "token {token:?} is refused at registration, got {outcome:?}"
        );
    }
    assert!(
        !orch.engine.catalog().specs().iter().any(|s| s.name == "test.echo"),
        "a refused worker registered nothing"
    );
}

#[tokio::test]
async fn an_action_past_its_timeout_is_cancelled_dropped_and_reported_as_timeout() {
    // No reaper: only the worker can time the attempt out.
    let orch = Orchestrator::start_without_reaper(engine_config()).await;
    let flags = Arc::new(Flags::default());
    let seen = flags.clone();
    let hang = Scripted::action("test.hang", Effect::Read, move |_args, ctx| {
        let flags = seen.clone();
        async move {
            let _guard = DropFlag::arm(&ctx, &flags);
            // Ignores its cancellation token on purpose: the runtime must drop the future anyway.
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    });
    let worker = RunningWorker::spawn(worker_config(&orch, "w-timeout", vec![hang]));
    orch.wait_registered("test.hang").await;

    let run = orch.submit(one_step("test.hang", json!({"timeout_ms": 1000, "retry": no_retry()}))).await;

    orch.wait_run(&run, &["failed", "succeeded"], LIMIT).await;
    assert!(Flags::get(&flags.started), "the action started");
    assert!(Flags::get(&flags.dropped), "the action's future was dropped at the deadline");
    assert!(Flags::get(&flags.cancelled_at_drop), "and its context was cancelled first");
    let failure = orch.attempts(&run).await[0].failure.clone().expect("a failure record");
    assert_eq!(failure["code"], "timeout", "reported as a timeout: {failure}");
    assert_eq!(failure["retryable"], true, "a timeout may pass on retry");
    assert!(
        failure["message"].as_str().unwrap().contains("cancelled by the worker"),
        "the worker reported it, not the reaper: {failure}"
    );
    worker.shutdown(LIMIT).await.unwrap();
}

#[tokio::test]
async fn a_panicking_action_becomes_a_failure_record_and_the_worker_goes_on() {
    let orch = Orchestrator::start(engine_config()).await;
    let boom = Scripted::action("test.boom", Effect::Read, |_args, _ctx| async move {
        panic!("boom at step");
    });
    let worker = RunningWorker::spawn(worker_config(&orch, "w-panic", vec![boom, Arc::new(Echo)]));
    orch.wait_registered("test.boom").await;

    let run = orch
        .submit(one_step(
            "test.boom",
            json!({"retry": {"max_attempts": 3, "initial_interval_ms": 10,
        "max_interval_ms": 10}}),
        ))
        .await;

    let summary = orch.wait_run(&run, &["failed", "succeeded"], LIMIT).await;
    assert_eq!(summary.status, "failed", "a panic fails the step");
    let attempts = orch.attempts(&run).await;
    assert_eq!(attempts.len(), 1, "a panic is not retried");
    let failure = attempts[0].failure.clone().expect("a failure record");
    assert_eq!(failure["code"], "action_error");
    assert_eq!(failure["message"], "action panicked: boom at step");
    assert_eq!(failure["retryable"], false);

    let next = orch.submit(one_step("test.echo", json!({"args": {"text": "still here"}}))).await;
    let summary = orch.wait_run(&next, &["failed", "succeeded"], LIMIT).await;
    assert_eq!(summary.status, "succeeded", "the worker survived the panic");
    worker.shutdown(LIMIT).await.unwrap();
}

#[tokio::test]
async fn a_restarted_worker_resumes_from_the_last_checkpoint() {
    let orch = Orchestrator::start(engine_config()).await;
    let resumable = || {
        Scripted::action("test.resumable", Effect::IdempotentWrite, |_args, ctx| async move {
            if let Some(checkpoint) = ctx.last_checkpoint() {
                return Ok(json!({"resumed_from": checkpoint, "attempt": ctx.attempt}));
            }
            assert!(ctx.checkpoint(json!({"page": 3})).await, "the checkpoint is accepted");
            std::future::pending::<()>().await;
            Ok(Value::Null)
        })
    };
    let first = RunningWorker::spawn(worker_config(&orch, "w-first", vec![resumable()]));
    orch.wait_registered("test.resumable").await;
    let run = orch
        .submit(one_step(
            "test.resumable",
            json!({"retry": {"max_attempts": 3, "initial_interval_ms": 10,
            "max_interval_ms": 10}}),
        ))
        .await;
    orch.wait_step(&run, "s", "the first attempt saved its checkpoint", LIMIT, |s| {
        s.checkpoint == Some(json!({"page": 3}))
    })
    .await;

    first.kill().await;
    let second = RunningWorker::spawn(worker_config(&orch, "w-second", vec![resumable()]));

    let step = orch.wait_step(&run, "s", "succeeded", LIMIT, |s| s.status == "succeeded").await;
    assert_eq!(
        step.output,
        Some(json!({"resumed_from": {"page": 3}, "attempt": 2})),
        "the second attempt started from the first one's checkpoint"
    );
    let attempts = orch.attempts(&run).await;
    assert_eq!(attempts[0].failure.as_ref().unwrap()["code"], "lease_lost", "the killed attempt was reclaimed");
    assert_eq!(attempts[1].worker_id.as_deref(), Some("w-second"));
    second.shutdown(LIMIT).await.unwrap();
}

#[tokio::test]
async fn a_heartbeat_answered_not_alive_cancels_the_action() {
    let orch = Orchestrator::start(engine_config()).await;
    let flags = Arc::new(Flags::default());
    let seen = flags.clone();
    let wait = Scripted::action("test.wait", Effect::Read, move |_args, ctx| {
        let flags = seen.clone();
        async move {
            let _guard = DropFlag::arm(&ctx, &flags);
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    });
    let worker = RunningWorker::spawn(worker_config(&orch, "w-cancel", vec![wait]));
    orch.wait_registered("test.wait").await;
    let run = orch.submit(one_step("test.wait", json!({"timeout_ms": 60000}))).await;
    within(LIMIT, "the action started", || async { Flags::get(&flags.started).then_some(()) }).await;

    assert!(orch.engine.cancel_run(&run).await.unwrap(), "the run is cancelled");

    within(LIMIT, "the action was stopped", || async { Flags::get(&flags.dropped).then_some(()) }).await;
    assert!(Flags::get(&flags.cancelled_at_drop), "its context was cancelled before its future was dropped");
    assert_eq!(orch.wait_run(&run, &["cancelled"], LIMIT).await.status, "cancelled");
    worker.shutdown(LIMIT).await.unwrap();
}

#[tokio::test]
async fn shutdown_drains_attempts_in_flight_and_fetches_no_more() {
    let orch = Orchestrator::start(engine_config()).await;
    let started = Arc::new(Notify::new());
    let signal = started.clone();
    let slow = Scripted::action("test.slow", Effect::Read, move |_args, _ctx| {
        let started = signal.clone();
        async move {
            started.notify_one();
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(json!({"done": true}))
        }
    });
    let worker = RunningWorker::spawn(worker_config(&orch, "w-drain", vec![slow]));
    orch.wait_registered("test.slow").await;
    let run = orch.submit(one_step("test.slow", json!({}))).await;
    tokio::time::timeout(LIMIT, started.notified()).await.expect("the attempt started");

    let stopped = tokio::spawn(worker.shutdown(LIMIT));
    let late = orch.submit(one_step("test.slow", json!({}))).await;
    stopped.await.unwrap().unwrap();

    assert_eq!(orch.step(&run, "s").await.unwrap().status, "succeeded", "the attempt in flight finished and reported");
    let late_step = orch.step(&late, "s").await.unwrap();
    assert_eq!(late_step.attempts, 0, "a stopping worker fetched nothing: {late_step:?}");
}

#[tokio::test]
async fn shutdown_cancels_attempts_still_running_after_the_drain_timeout() {
    let orch = Orchestrator::start(engine_config()).await;
    let flags = Arc::new(Flags::default());
    let seen = flags.clone();
    let stuck = Scripted::action("test.stuck", Effect::Read, move |_args, ctx| {
        let flags = seen.clone();
        async move {
            let _guard = DropFlag::arm(&ctx, &flags);
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    });
    let mut config = worker_config(&orch, "w-stuck", vec![stuck]);
    config.drain_timeout = Duration::from_millis(300);
    let worker = RunningWorker::spawn(config);
    orch.wait_registered("test.stuck").await;
    orch.submit(one_step("test.stuck", json!({"timeout_ms": 60000}))).await;
    within(LIMIT, "the action started", || async { Flags::get(&flags.started).then_some(()) }).await;

    worker.shutdown(Duration::from_secs(5)).await.unwrap();

    assert!(Flags::get(&flags.dropped), "the attempt still running at the drain timeout was dropped");
    assert!(Flags::get(&flags.cancelled_at_drop), "and its context cancelled");
}

#[tokio::test]
async fn a_finished_result_is_delivered_after_the_orchestrator_comes_back() {
    // Case C14: the orchestrator is away while an attempt finishes; the worker keeps the result and delivers it.
    let config = cairn_orchestrator::EngineConfig { lease_ttl: Duration::from_secs(30), ..engine_config() };
    let mut orch = Orchestrator::start(config).await;
    let (started, finish, returned) = (Arc::new(Notify::new()), Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (s, f, r) = (started.clone(), finish.clone(), returned.clone());
    let gated = Scripted::action("test.gated", Effect::Read, move |_args, _ctx| {
        let (started, finish, returned) = (s.clone(), f.clone(), r.clone());
        async move {
            started.notify_one();
            finish.notified().await;
            returned.notify_one();
            Ok(json!({"kept": true}))
        }
    });
    let worker = RunningWorker::spawn(worker_config(&orch, "w-c14", vec![gated]));
    orch.wait_registered("test.gated").await;
    let run = orch.submit(one_step("test.gated", json!({"timeout_ms": 60000}))).await;
    tokio::time::timeout(LIMIT, started.notified()).await.expect("the attempt started");

    orch.stop_serving().await;
    finish.notify_one();
    tokio::time::timeout(LIMIT, returned.notified()).await.expect("the action finished");
    assert_eq!(orch.step(&run, "s").await.unwrap().status, "running", "nothing was reported while away");

    orch.serve_again().await;

    let step = orch.wait_step(&run, "s", "succeeded", LIMIT, |s| s.status == "succeeded").await;
    assert_eq!(step.output, Some(json!({"kept": true})), "the kept result was delivered");
    assert_eq!(step.attempts, 1, "and the step was not re-run");
    worker.shutdown(LIMIT).await.unwrap();
}
