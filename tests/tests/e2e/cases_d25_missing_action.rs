//! Case D25 of `../shared/cases/cases2.md` (Temporal Go SDK #465, Cadence #1522): a step dispatched to a worker
//! that lacks its action sat until it timed out. Two workers over the real worker protocol: W-old serves
//! `{noop, http.request}`, W-new also `report.render`.
//!
//! - (a) With only W-old connected the step is never handed to it and says what it waits for
//!   (`waiting_for: {kind: "worker", action}`); W-new's first poll gets it.
//! - (b) An attempt that reaches a worker lacking the action anyway (a registry race) is handed back at once
//!   (`FailRequest.not_started`, what the Rust worker runtime and the Python SDK do): ready again without using
//!   up an attempt or waiting for `timeout_ms`, and W-new runs it as attempt 1.
//! - (e) A plan naming an action no worker ever registered is refused with `unknown_action`.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::clock::ManualClock;
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_proto::v1::{ActionDescriptor, Effect, FailRequest, Failure, PollRequest, RegisterRequest, ReportOutcome};
use cairn_tests::http::{HttpApp, step};
use cairn_tests::{Backend, on_both_backends};
use serde_json::json;
use tonic::transport::Channel;

const START: &str = "2027-03-14T12:00:00Z";

fn descriptor(name: &str) -> ActionDescriptor {
    ActionDescriptor {
        name: name.into(),
        version: "1".into(),
        description: String::new(),
        args_schema_json: json!({"type": "object"}).to_string(),
        output_schema_json: json!({}).to_string(),
        effect: Effect::Read.into(),
        grounded_args: Vec::new(),
        recipient_args: Vec::new(),
        example_output_json: None,
    }
}

async fn worker(app: &HttpApp, id: &str, actions: &[&str]) -> WorkerServiceClient<Channel> {
    let mut client = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    let actions = actions.iter().map(|a| descriptor(a)).collect();
    client.register(RegisterRequest { worker_id: id.into(), actions, protocol_version: 1 }).await.unwrap();
    client
}

fn poll(id: &str, actions: &[&str]) -> PollRequest {
    PollRequest {
        worker_id: id.into(),
        actions: actions.iter().map(|a| (*a).to_owned()).collect(),
        max_attempts: 4,
        wait_ms: 200,
    }
}

fn render() -> serde_json::Value {
    json!({"steps": [{"id": "render", "action": "report.render", "args": {"doc": "q3"}, "timeout_ms": 600000,
        "idempotent": true}]})
}

on_both_backends!(
    d25_a_b_a_step_waits_visibly_for_a_worker_that_serves_it_and_one_handed_to_the_wrong_worker_comes_back
);
async fn d25_a_b_a_step_waits_visibly_for_a_worker_that_serves_it_and_one_handed_to_the_wrong_worker_comes_back(
    backend: Backend,
) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let mut new = worker(&app, "w-new", &["noop", "http.request", "report.render"]).await;
    let mut old = worker(&app, "w-old", &["noop", "http.request"]).await;
    // W-new goes away: three poll intervals pass with only W-old polling.
    app.clock.advance(std::time::Duration::from_secs(16));
    let run_id = app.submit(render()).await;

    let old_gets = old.poll(poll("w-old", &["noop", "http.request"])).await.unwrap().into_inner().attempts;
    let waiting = app.run(&run_id).await;
    // (b) A registry race hands `render` to W-old anyway; it lacks the action and hands it back unstarted.
    let raced = old.poll(poll("w-old", &["report.render"])).await.unwrap().into_inner().attempts;
    let back = old
        .fail(FailRequest {
            worker_id: "w-old".into(),
            lease: raced[0].lease.clone(),
            failure: Some(Failure {
                code: "action_error".into(),
                did_not_take_effect: true,
                retryable: true,
                ..Failure::default()
            }),
            not_started: true,
        })
        .await
        .unwrap()
        .into_inner();
    let after_race = app.run(&run_id).await;
    let new_gets =
        new.poll(poll("w-new", &["noop", "http.request", "report.render"])).await.unwrap().into_inner().attempts;

    assert!(old_gets.is_empty(), "{backend:?}: (a) W-old never receives render");
    assert_eq!(step(&waiting, "render")["waiting_for"], json!({"kind": "worker", "action": "report.render"}));
    assert_eq!(back.outcome(), ReportOutcome::RetryScheduled, "{backend:?}: (b) the claim is undone");
    let render = step(&after_race, "render");
    assert_eq!(
        (render["status"].as_str(), render["attempts"].as_u64()),
        (Some("ready"), Some(0)),
        "{backend:?}: (b) ready at once, no attempt used: {render:#}"
    );
    assert_eq!(new_gets.len(), 1, "{backend:?}: W-new's first poll gets it");
    assert_eq!(new_gets[0].lease.as_ref().unwrap().attempt, 1, "{backend:?}: as attempt 1");
}

on_both_backends!(d25_e_an_action_no_worker_ever_registered_is_refused_at_validation);
async fn d25_e_an_action_no_worker_ever_registered_is_refused_at_validation(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;

    let (status, refused) = app.post("/v1/runs", &json!({"plan": render()})).await;

    assert_eq!(status, 422, "{backend:?}: {refused:#}");
    let codes: Vec<&str> =
        refused["details"]["diagnostics"].as_array().unwrap().iter().filter_map(|d| d["code"].as_str()).collect();
    assert_eq!(codes, ["unknown_action"], "{backend:?}");
}
