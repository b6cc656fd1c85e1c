//! `CompleteBatch` (issue 8): several completions in one gRPC call, each answered exactly as its own `Complete`
//! would be, through the real orchestrator and store on every available backend; and a real `cairn worker`
//! process (build it first: `cargo build -p cairn-cli`) sending the completions that queue up in it together.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_proto::v1::{
    Attempt, CompleteBatchRequest, CompleteRequest, PollRequest, ReportOutcome, ReportResponse, complete_result,
};
use cairn_store::Store;
use cairn_tests::http::{CairnProcess, HttpApp, TempDir, step};
use cairn_tests::{Backend, on_both_backends, raw};
use serde_json::{Value, json};
use tonic::Code;

const START: &str = "2027-03-14T12:00:00Z";

fn completion(attempt: &Attempt, output_json: &str) -> CompleteRequest {
    CompleteRequest {
        // Ignored in a batch: the batch's worker id is used.
        worker_id: "someone else".into(),
        lease: attempt.lease.clone(),
        output_json: output_json.into(),
        next_max_attempts: 1,
        next_actions: vec!["noop".into()],
    }
}

fn response(result: &cairn_proto::v1::CompleteResult) -> &ReportResponse {
    match &result.result {
        Some(complete_result::Result::Response(response)) => response,
        other => panic!("a response, not {other:?}"),
    }
}

fn next_step(response: &ReportResponse) -> Vec<&str> {
    response.next.iter().map(|a| a.lease.as_ref().map_or("", |l| l.step_id.as_str())).collect()
}

/// An orchestrator on `backend` running `plan`, and a worker `w1` that polled up to `max_attempts` of its steps.
async fn leased(
    backend: Backend,
    plan: Value,
    max_attempts: u32,
) -> (HttpApp, String, WorkerServiceClient<tonic::transport::Channel>, Vec<Attempt>) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let run = app.submit(plan).await;
    let mut worker = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    let poll = PollRequest { worker_id: "w1".into(), actions: vec!["noop".into()], max_attempts, wait_ms: 1000 };
    let attempts = worker.poll(poll).await.unwrap().into_inner().attempts;
    (app, run, worker, attempts)
}

on_both_backends!(a_batch_answers_each_completion_as_its_own_call_would);
/// Items of one batch: a completion, a stale one (an attempt number that was never handed out) and one whose
/// output is not JSON (for the same lease as the first). Each gets its own answer, in order; the valid one's claim takes the dependent it released
/// for the batch's worker; a resend of the whole batch is answered as the first time.
async fn a_batch_answers_each_completion_as_its_own_call_would(backend: Backend) {
    let (app, run, mut worker, first) = leased(
        backend,
        json!({"steps":[
            {"id":"a","action":"noop","args":{}},
            {"id":"b","action":"noop","args":{}},
            {"id":"a2","action":"noop","args":{},"depends_on":["a"],"idempotent":false},
            {"id":"b2","action":"noop","args":{},"depends_on":["b"]}
        ]}),
        2,
    )
    .await;
    let of = |id: &str| first.iter().find(|a| a.lease.as_ref().unwrap().step_id == id).unwrap().clone();
    let (a, mut b_stale) = (of("a"), of("b"));
    b_stale.lease.as_mut().unwrap().attempt += 5;
    let batch = CompleteBatchRequest {
        worker_id: "w1".into(),
        items: vec![completion(&a, r#"{"n":1}"#), completion(&b_stale, "{}"), completion(&a, "{oops")],
    };

    let answer = worker.complete_batch(batch.clone()).await.unwrap().into_inner();

    assert_eq!(answer.results.len(), 3, "{backend:?}: one result per item, in order");
    let (done, stale) = (response(&answer.results[0]), response(&answer.results[1]));
    assert_eq!(done.outcome(), ReportOutcome::Succeeded, "{backend:?}");
    assert_eq!(next_step(done), ["a2"], "{backend:?}: the dependent it released, for its slot");
    assert_eq!(stale.outcome(), ReportOutcome::Stale, "{backend:?}: fenced by its own lease");
    assert!(stale.next.is_empty(), "{backend:?}: nothing else was ready for its slot");
    // An output that is not JSON is recorded as the attempt's `invalid_output` failure, after the batch's
    // completions: `a` succeeded with the first item, so this report is stale.
    assert_eq!(response(&answer.results[2]).outcome(), ReportOutcome::Stale, "{backend:?}: the malformed item alone");
    let view = app.run(&run).await;
    assert_eq!(step(&view, "a")["output"], json!({"n": 1}), "{backend:?}: the item's own output");
    assert_eq!(step(&view, "b")["status"], "running", "{backend:?}: the stale report changed nothing");
    let attempts = app.engine().store().attempts(&run).await.unwrap();
    let a2 = attempts.iter().find(|t| t.step_id == "a2").unwrap();
    assert_eq!(a2.worker_id.as_deref(), Some("w1"), "{backend:?}: leased to the batch's worker");

    // The answer was lost: the same batch again is answered as the first time, item by item.
    let resent = worker.complete_batch(batch).await.unwrap().into_inner();
    let again = response(&resent.results[0]);
    assert_eq!(again.outcome(), ReportOutcome::Succeeded, "{backend:?}");
    assert_eq!(again.next, done.next, "{backend:?}: the same attempt, not a second one");
    assert_eq!(response(&resent.results[1]).outcome(), ReportOutcome::Stale, "{backend:?}");
    let attempts = app.engine().store().attempts(&run).await.unwrap();
    assert_eq!(attempts.len(), 3, "{backend:?}: a, b and one attempt of a2: {attempts:?}");
}

/// Refuses the success of step `b` (a stand-in for any statement the database refuses for one operation's data).
async fn refuse_success_of_b(store: &Store) {
    match store {
        Store::Sqlite(_) => {
            const TRIGGER: &str = "CREATE TRIGGER refuse_b BEFORE UPDATE ON steps \
                WHEN NEW.step_id = 'b' AND NEW.status = 'succeeded' BEGIN SELECT RAISE(ABORT, 'refused by test'); END";
            raw::execute(store, TRIGGER, &[]).await;
        }
        Store::Postgres(_) => {
            const FUNCTION: &str = "CREATE FUNCTION refuse_b() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                IF NEW.step_id = 'b' AND NEW.status = 'succeeded' THEN RAISE EXCEPTION 'refused by test'; END IF; \
                RETURN NEW; END $$";
            const TRIGGER: &str =
                "CREATE TRIGGER refuse_b BEFORE UPDATE ON steps FOR EACH ROW EXECUTE FUNCTION refuse_b()";
            raw::execute(store, FUNCTION, &[]).await;
            raw::execute(store, TRIGGER, &[]).await;
        }
    }
}

on_both_backends!(an_item_the_database_refuses_fails_alone_and_the_others_are_recorded);
/// A batch the database refuses because of one item's data is written again item by item: that item fails alone
/// with the database's reason and the others are recorded. (Answering every item "retry" had the worker resend
/// the same mix, to be refused again.) Once the cause is gone the failed item's resend succeeds.
async fn an_item_the_database_refuses_fails_alone_and_the_others_are_recorded(backend: Backend) {
    let three = json!({"steps":[
        {"id":"a","action":"noop","args":{}},
        {"id":"b","action":"noop","args":{}},
        {"id":"c","action":"noop","args":{}}
    ]});
    let (app, run, mut worker, leased) = leased(backend, three, 3).await;
    let of = |id: &str| leased.iter().find(|a| a.lease.as_ref().unwrap().step_id == id).unwrap().clone();
    refuse_success_of_b(app.engine().store()).await;
    let items = vec![completion(&of("a"), "{}"), completion(&of("b"), "{}"), completion(&of("c"), "{}")];

    let answer = worker.complete_batch(CompleteBatchRequest { worker_id: "w1".into(), items }).await;

    let answer = answer.unwrap().into_inner();
    assert_eq!(response(&answer.results[0]).outcome(), ReportOutcome::Succeeded, "{backend:?}");
    assert_eq!(response(&answer.results[2]).outcome(), ReportOutcome::Succeeded, "{backend:?}");
    match &answer.results[1].result {
        Some(complete_result::Result::Error(e)) => {
            assert!(e.message.contains("refused by test"), "{backend:?}: the database's reason: {e:?}");
        }
        other => panic!("{backend:?}: the refused item fails, not {other:?}"),
    }
    let view = app.run(&run).await;
    let statuses: Vec<Value> = ["a", "b", "c"].iter().map(|id| step(&view, id)["status"].clone()).collect();
    assert_eq!(statuses, ["succeeded", "running", "succeeded"], "{backend:?}");

    let drop = if backend == Backend::Sqlite { "DROP TRIGGER refuse_b" } else { "DROP TRIGGER refuse_b ON steps" };
    raw::execute(app.engine().store(), drop, &[]).await;
    let items = vec![completion(&of("b"), "{}")];
    let resent = worker.complete_batch(CompleteBatchRequest { worker_id: "w1".into(), items }).await;
    assert_eq!(response(&resent.unwrap().into_inner().results[0]).outcome(), ReportOutcome::Succeeded);
    let view = app.wait_run(&run, "the run ends", Duration::from_secs(10), |r| r["status"] == "succeeded").await;
    assert_eq!(step(&view, "b")["status"], "succeeded", "{backend:?}");
}

#[tokio::test]
async fn a_batch_over_the_limit_is_refused_whole() {
    let backend = Backend::Sqlite;
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let mut worker = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    let item = CompleteRequest { worker_id: "w1".into(), output_json: "{}".into(), ..CompleteRequest::default() };
    let batch = CompleteBatchRequest { worker_id: "w1".into(), items: vec![item; 257] };

    let refused = worker.complete_batch(batch).await.unwrap_err();

    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("at most 256"), "{refused:?}");
}

/// Completions received by the orchestrator over `call`, from its `/metrics`.
async fn completions_received(app: &HttpApp, call: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", app.base_url)).await.unwrap().text().await.unwrap();
    let sample = format!("cairn_worker_completions_total{{call=\"{call}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&sample)).map_or(0.0, |v| v.trim().parse().unwrap())
}

on_both_backends!(
    a_busy_worker_sends_queued_completions_together_and_each_step_runs_once,
    flavor = "multi_thread",
    worker_threads = 2
);
/// A worker with 64 slots on 400 independent steps: more completions finish at once than it keeps calls in
/// flight (16), so some go in `CompleteBatch`es; every step still runs exactly once and every completion is
/// received.
async fn a_busy_worker_sends_queued_completions_together_and_each_step_runs_once(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let dir = TempDir::new();
    let steps: Vec<_> = (0..400).map(|i| json!({"id": format!("s{i:03}"), "action": "noop", "args": {}})).collect();
    let run = app.submit(json!({"goal": "many leaves", "steps": steps})).await;
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &["--concurrency", "64"], &[]);

    let done = app
        .wait_run(&run, "finished", Duration::from_secs(120), |r| r["status"] != "running" && r["status"] != "pending")
        .await;

    assert_eq!(done["status"], "succeeded", "{backend:?}: worker log:\n{}", worker.log());
    let attempts = app.engine().store().attempts(&run).await.unwrap();
    assert_eq!(attempts.len(), 400, "{backend:?}: one attempt per step, none lost or repeated");
    assert!(attempts.iter().all(|a| a.status == "succeeded"), "{backend:?}");
    let (alone, batched) =
        (completions_received(&app, "complete").await, completions_received(&app, "complete_batch").await);
    // A reporter resends a completion whose answer it did not get, so a loaded machine may count more.
    assert!(alone + batched >= 400.0, "{backend:?}: every completion received ({alone} + {batched})");
    assert!(batched > 0.0, "{backend:?}: some went together ({alone} alone); worker log:\n{}", worker.log());
}
