//! Cases D11 and D12 of `../shared/cases/cases2.md`: idempotency keys of runs.
//!
//! D11 (DBOS #544): twenty concurrent submissions with one key, ten through each of two orchestrators on
//! PostgreSQL (one on SQLite, which serves one orchestrator): one run, every answer names it, none fails. D12
//! (DBOS #725, Trigger.dev #4819, Temporal #2140): the same key with a different plan is refused with 409 (code
//! `conflict`, the existing run's id in the details: Cairn's name for the case's `idempotency_conflict`) and
//! changes nothing; the same plan re-serialised (keys reordered, whitespace) is the same plan, while writing a
//! default value out is another plan (plans are compared as written; variant b2 leaves the choice to the
//! product, documented in `docs/architecture.md` §6); a key keeps naming its run after the run failed; an empty
//! key is 422.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::catalog::StaticCatalog;
use cairn_core::clock::ManualClock;
use cairn_core::failure::Failure;
use cairn_orchestrator::{Engine, SubmitRequest};
use cairn_store::Store;
use cairn_tests::http::HttpApp;
use cairn_tests::{Backend, Outcome, TestApp, TestWorker, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn charge_plan() -> Value {
    json!({"steps": [
        {"id": "charge", "action": "http.request", "idempotent": false,
         "args": {"method": "POST", "url": "http://127.0.0.1:18080/hold?tag=charge", "body": {"order": 42}}},
        {"id": "receipt", "action": "notify.send", "args": {"channels": ["stdout"], "text": "paid"}, "depends_on": ["charge"]}
    ]})
}

fn keyed(plan: Value, key: &str) -> SubmitRequest {
    SubmitRequest { plan, input: None, idempotency_key: Some(key.to_owned()), labels: Default::default() }
}

on_both_backends!(d11_concurrent_submissions_with_one_key_make_one_run);
async fn d11_concurrent_submissions_with_one_key_make_one_run(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let second = if backend == Backend::Postgres {
        let store = Store::connect(&app.url).await.unwrap();
        Engine::start(store, app.clock.clone(), Arc::new(StaticCatalog::builtin()), app.config.clone()).await.unwrap()
    } else {
        app.engine.clone()
    };
    let request = keyed(charge_plan(), "order-42");

    let submissions = (0..20).map(|i| {
        let (engine, request) = (if i % 2 == 0 { app.engine.clone() } else { second.clone() }, request.clone());
        tokio::spawn(async move { engine.submit(&request).await })
    });
    let answers: Vec<_> = futures::future::join_all(submissions).await.into_iter().map(|a| a.unwrap()).collect();

    let answers: Vec<_> =
        answers.into_iter().map(|a| a.unwrap_or_else(|e| panic!("{backend:?}: no error: {e}"))).collect();
    let run_id = &answers[0].run_id;
    assert!(answers.iter().all(|a| &a.run_id == run_id), "{backend:?}: every answer names the one run");
    assert_eq!(answers.iter().filter(|a| !a.existing).count(), 1, "{backend:?}: one created, the others existing");
    let runs = app.store().runs(None, 100, 0).await.unwrap();
    assert_eq!(runs.len(), 1, "{backend:?}: exactly one run exists with that key");
    let worker = TestWorker::new("w1").echo("http.request").echo("notify.send");
    worker.run_until_idle(&app.engine).await;
    assert_eq!(worker.calls_for("charge").len(), 1, "{backend:?}: calls(charge) == 1");
    assert_eq!(worker.calls_for("receipt").len(), 1, "{backend:?}: calls(receipt) == 1");
}

on_both_backends!(d12_a_the_same_key_with_another_plan_is_409_and_changes_nothing);
async fn d12_a_the_same_key_with_another_plan_is_409_and_changes_nothing(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let (status, first) = app.post("/v1/runs", &json!({"plan": charge_plan(), "idempotency_key": "k"})).await;
    assert_eq!(status, 201, "{first:#}");
    let mut other = charge_plan();
    other["steps"][0]["args"]["body"] = json!({"order": 43});

    let (status, refused) = app.post("/v1/runs", &json!({"plan": other, "idempotency_key": "k"})).await;

    assert_eq!(status, 409, "{backend:?}: {refused:#}");
    assert_eq!(refused["code"], "conflict");
    assert_eq!(refused["details"]["run_id"], first["id"], "{backend:?}: the existing run is named");
    assert_eq!(app.runs().await.len(), 1, "{backend:?}: nothing of the second plan is stored");
    let run = app.run(first["id"].as_str().unwrap()).await;
    assert_eq!(run["plan_id"], first["plan_id"], "{backend:?}: the first run keeps its plan (content hash)");
}

on_both_backends!(d12_b_the_same_plan_re_serialised_is_the_same_plan);
async fn d12_b_the_same_plan_re_serialised_is_the_same_plan(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let (_, first) = app.post("/v1/runs", &json!({"plan": charge_plan(), "idempotency_key": "k"})).await;
    let reordered = r#"{"idempotency_key": "k", "plan": {"steps": [
            {"args": {"body": {"order": 42}, "url": "http://127.0.0.1:18080/hold?tag=charge", "method": "POST"},
             "idempotent": false, "action": "http.request", "id": "charge"},
            {"depends_on": ["charge"], "args": {"text": "paid", "channels": ["stdout"]}, "action": "notify.send",
             "id": "receipt"}
        ]}}"#;
    let mut explicit = charge_plan();
    explicit["steps"][1]["timeout_ms"] = json!(20_000);

    let (status, again) = app.post_bytes("/v1/runs", Some("application/json"), reordered.as_bytes().to_vec()).await;
    let (b2, answer) = app.post("/v1/runs", &json!({"plan": explicit, "idempotency_key": "k"})).await;

    // b2: plans are compared as written, defaults not filled in: writing a default out is another plan.
    assert_eq!((b2, answer["code"].as_str()), (409, Some("conflict")), "{backend:?}: b2 {answer:#}");
    assert_eq!(status, 200, "{backend:?}: keys reordered and whitespace changed: {again:#}");
    assert_eq!(again["id"], first["id"], "{backend:?}: the existing run");
}

on_both_backends!(d12_c_a_key_names_its_run_after_the_run_failed_and_d_an_empty_key_is_refused);
async fn d12_c_a_key_names_its_run_after_the_run_failed_and_d_an_empty_key_is_refused(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let plan = json!({"steps": [{"id": "a", "action": "noop", "args": {}}]});
    let (_, first) = app.post("/v1/runs", &json!({"plan": plan, "idempotency_key": "k"})).await;
    let broken = TestWorker::new("w1").on("noop", |_| Outcome::Fail(Failure::new("boom", "broken", false)));
    broken.run_until_idle(app.engine()).await;
    assert_eq!(app.run(first["id"].as_str().unwrap()).await["status"], "failed");

    let (status, again) = app.post("/v1/runs", &json!({"plan": plan, "idempotency_key": "k"})).await;
    let (empty, refused) = app.post("/v1/runs", &json!({"plan": plan, "idempotency_key": ""})).await;

    assert_eq!((status, &again["id"]), (200, &first["id"]), "{backend:?}: (c) the failed run, not a new one");
    assert_eq!(again["status"], "failed", "{backend:?}: (c) rerunning it is a redrive or a new key");
    assert_eq!((empty, refused["code"].as_str()), (422, Some("invalid_request")), "{backend:?}: (d) {refused:#}");
}
