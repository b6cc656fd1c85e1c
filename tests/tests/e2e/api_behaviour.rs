//! The REST API's contract through a real server on port 0: bearer-token auth, idempotency keys, cancellation,
//! step decisions in the wrong state, the run's summary view, the OpenAPI document, and the live event stream (SSE).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{HttpApp, step};
use cairn_tests::{Backend, TestWorker, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";
const LIMIT: Duration = Duration::from_secs(15);

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(START.parse().unwrap()))
}

fn noop_plan(x: i64) -> Value {
    json!({"steps": [{"id": "a", "action": "noop", "args": {"x": x}}]})
}

#[tokio::test]
async fn with_a_token_configured_only_the_right_bearer_gets_in() {
    let app = HttpApp::start(Backend::Sqlite, clock(), Some("s3cret-token".into())).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/runs", app.base_url);

    for (what, request) in [
        ("no Authorization header", client.get(&url)),
        ("a wrong token", client.get(&url).bearer_auth("wrong")),
        ("the token without the Bearer scheme", client.get(&url).header("Authorization", "s3cret-token")),
    ] {
        let (status, body) = HttpApp::send(request).await;
        assert_eq!(status, 401, "{what} is refused: {body}");
        assert_eq!(body["code"], "unauthorized", "{what}: the refusal is a JSON error: {body}");
    }
    let (status, body) = HttpApp::send(client.post(&url).json(&json!({"plan": noop_plan(1)}))).await;
    assert_eq!(status, 401, "a submission without the token is refused before its body is read: {body}");
    assert!(app.runs().await.is_empty(), "the refused submission stored nothing");

    let (status, body) = app.get("/v1/runs").await;
    assert_eq!(status, 200, "the right token is accepted: {body}");
    let (status, _) = HttpApp::send(client.get(format!("{}/healthz", app.base_url))).await;
    assert_eq!(status, 200, "health checks need no token");
}

on_both_backends!(an_idempotency_key_returns_the_same_run_for_the_same_plan_and_conflicts_for_another);
async fn an_idempotency_key_returns_the_same_run_for_the_same_plan_and_conflicts_for_another(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let body = json!({"plan": noop_plan(1), "idempotency_key": "order-42"});

    let (first, run) = app.post("/v1/runs", &body).await;
    assert_eq!(first, 201, "{backend:?}: the first submission creates the run: {run:#}");
    let (again, same) = app.post("/v1/runs", &body).await;
    assert_eq!(again, 200, "{backend:?}: the same key and plan returns the existing run: {same:#}");
    assert_eq!(same["id"], run["id"], "{backend:?}: the same run id");

    let other = json!({"plan": noop_plan(2), "idempotency_key": "order-42"});
    let (status, conflict) = app.post("/v1/runs", &other).await;
    assert_eq!(status, 409, "{backend:?}: the same key with another plan conflicts: {conflict:#}");
    assert_eq!(conflict["code"], "conflict");
    assert_eq!(conflict["details"]["run_id"], run["id"], "{backend:?}: the conflict names the existing run");
    assert_eq!(app.runs().await.len(), 1, "{backend:?}: one run in all");
}

on_both_backends!(a_submission_answers_the_run_exactly_as_a_read_right_after_shows_it);
/// The answer to `POST /v1/runs` is built from what the submission inserted when no root needed a decision
/// (no read-back), and read otherwise: either way it must be exactly what `GET` shows right after (no worker
/// runs here, so nothing moves in between).
async fn a_submission_answers_the_run_exactly_as_a_read_right_after_shows_it(backend: Backend) {
    let plans: [(&str, Value, &[&str]); 4] = [
        ("one ready root", noop_plan(1), &["ready"]),
        (
            "a timer root, a ready root and dependents, in a zone",
            json!({"context": {"timezone": "Asia/Shanghai"}, "steps": [
                {"id": "later", "action": "noop", "args": {}, "not_before": "tomorrow 08:00"},
                {"id": "now", "action": "noop", "args": {"text": "héllo ☂"}},
                {"id": "after", "action": "noop", "args": {"v": "$now.output"}, "depends_on": ["now", "later"],
                 "not_before": "2027-03-20T09:30:00Z"},
            ]}),
            &["ready", "ready", "pending"],
        ),
        (
            "a root that needs approval (decided in the transaction, so read back)",
            json!({"steps": [{"id": "gate", "action": "noop", "args": {}, "approval": {"required": true}}]}),
            &["waiting_approval"],
        ),
        (
            "a root whose condition is false (skipped, the run finishes in the transaction)",
            json!({"steps": [{"id": "maybe", "action": "noop", "args": {}, "when": "1 == 2"}]}),
            &["skipped"],
        ),
    ];
    let app = HttpApp::start(backend, clock(), None).await;
    for (what, plan, expected) in &plans {
        let (status, answer) = app.post("/v1/runs", &json!({"plan": plan})).await;
        assert_eq!(status, 201, "{backend:?}, {what}: accepted: {answer:#}");
        let run_id = answer["id"].as_str().expect("the answer has the run id");
        let read = app.run(run_id).await;
        assert_eq!(answer, read, "{backend:?}, {what}: the answer is the run as stored");
        let statuses: Vec<&str> =
            answer["steps"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
        assert_eq!(&statuses, expected, "{backend:?}, {what}: {answer:#}");
    }
}

on_both_backends!(the_summary_view_is_the_run_without_its_steps_and_an_unknown_view_is_refused);
async fn the_summary_view_is_the_run_without_its_steps_and_an_unknown_view_is_refused(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let run_id = app.submit(json!({"steps": [
            {"id": "a", "action": "noop", "args": {}}, {"id": "b", "action": "noop", "args": {}, "depends_on": ["a"]}]}))
        .await;
    TestWorker::new("w").echo("noop").run_until_idle(app.engine()).await;

    let (status, summary) = app.get(&format!("/v1/runs/{run_id}?view=summary")).await;
    let (_, full) = app.get(&format!("/v1/runs/{run_id}?view=full")).await;

    assert_eq!(status, 200, "{backend:?}: {summary:#}");
    assert_eq!(summary["status"], "succeeded", "{backend:?}: the run ran to its end: {summary:#}");
    let mut without_steps = full.clone();
    without_steps.as_object_mut().unwrap().remove("steps");
    without_steps.as_object_mut().unwrap().remove("input");
    assert_eq!(summary, without_steps, "{backend:?}: the summary is the full view less its input and steps");
    assert_eq!(full, app.run(&run_id).await, "{backend:?}: `full` is the default");
    let (status, refused) = app.get(&format!("/v1/runs/{run_id}?view=steps")).await;
    assert_eq!((status, refused["code"].as_str()), (400, Some("invalid_view")), "{backend:?}: {refused:#}");
    let (status, missing) = app.get("/v1/runs/nope?view=summary").await;
    assert_eq!((status, missing["code"].as_str()), (404, Some("not_found")), "{backend:?}: {missing:#}");
}

on_both_backends!(cancel_finishes_the_run_once_and_a_second_cancel_conflicts);
async fn cancel_finishes_the_run_once_and_a_second_cancel_conflicts(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let run_id = app.submit(noop_plan(1)).await;

    let (status, run) = app.post(&format!("/v1/runs/{run_id}:cancel"), &json!({})).await;
    assert_eq!(status, 200, "{backend:?}: cancel is accepted: {run:#}");
    assert_eq!(run["status"], "cancelled", "{backend:?}: the answer shows the run cancelled");
    assert_eq!(step(&run, "a")["status"], "cancelled", "{backend:?}: its open step is cancelled");
    assert_eq!(app.run(&run_id).await["status"], "cancelled", "{backend:?}: and it stays cancelled");

    let (status, again) = app.post(&format!("/v1/runs/{run_id}:cancel"), &json!({})).await;
    assert_eq!(status, 409, "{backend:?}: cancelling a finished run conflicts: {again:#}");
    assert_eq!(again["code"], "already_finished");

    let (status, missing) = app.post("/v1/runs/no-such-run:cancel", &json!({})).await;
    assert_eq!(status, 404, "{backend:?}: cancelling an unknown run is 404: {missing:#}");
    let worker = TestWorker::new("w").echo("noop");
    assert_eq!(worker.run_until_idle(app.engine()).await, 0, "{backend:?}: nothing of a cancelled run is dispatched");
}

#[tokio::test]
async fn a_decision_on_a_step_in_the_wrong_state_conflicts() {
    let app = HttpApp::start(Backend::Sqlite, clock(), None).await;
    let plan = json!({"steps": [
        {"id": "a", "action": "noop", "args": {}},
        {"id": "gate", "action": "noop", "args": {}, "depends_on": ["a"], "approval": {"required": true}}
    ]});
    let run_id = app.submit(plan).await;

    for verb in ["approve", "reject"] {
        let (status, body) = app.post(&format!("/v1/runs/{run_id}/steps/a:{verb}"), &json!({})).await;
        assert_eq!(status, 409, "{verb} on a step not waiting for approval conflicts: {body:#}");
        assert_eq!(body["code"], "wrong_state");
    }
    let (status, body) = app.post(&format!("/v1/runs/{run_id}/steps/a:retry"), &json!({})).await;
    assert_eq!(status, 409, "retry on a step that is not outcome_unknown conflicts: {body:#}");
    for verb in ["approve", "skip", "fail"] {
        let (status, body) = app.post(&format!("/v1/runs/{run_id}/steps/nope:{verb}"), &json!({})).await;
        assert_eq!((status, body["message"].clone()), (404, json!("step not found")), "{verb}: no such step: {body:#}");
    }
    let (status, body) = app.post("/v1/runs/01000000-0000-7000-8000-000000000000/steps/a:skip", &json!({})).await;
    assert_eq!((status, body["message"].clone()), (404, json!("run not found")), "no such run: {body:#}");

    TestWorker::new("w").echo("noop").run_until_idle(app.engine()).await;
    let run = app.run(&run_id).await;
    assert_eq!(step(&run, "gate")["status"], "waiting_approval", "the gate waits for a human: {run:#}");
    let (status, body) = app.post(&format!("/v1/runs/{run_id}/steps/gate:approve"), &json!({"bye": "alice"})).await;
    assert_eq!(status, 422, "a decision body with an unknown field is refused: {body:#}");
    assert_eq!(body["code"], "invalid_request");
    assert_eq!(step(&app.run(&run_id).await, "gate")["status"], "waiting_approval", "and decides nothing");
    let (status, run) = app.post(&format!("/v1/runs/{run_id}/steps/gate:approve"), &json!({"by": "alice"})).await;
    assert_eq!(status, 200, "approving the waiting step is accepted: {run:#}");
    let (status, body) = app.post(&format!("/v1/runs/{run_id}/steps/gate:approve"), &json!({})).await;
    assert_eq!(status, 409, "approving twice conflicts: {body:#}");
    TestWorker::new("w").echo("noop").run_until_idle(app.engine()).await;
    assert_eq!(app.run(&run_id).await["status"], "succeeded", "the approved run finishes");
}

#[tokio::test]
async fn the_openapi_document_is_openapi_3_1_and_lists_the_runs_path() {
    let app = HttpApp::start(Backend::Sqlite, clock(), Some("token".into())).await;
    let (status, doc) = HttpApp::send(reqwest::Client::new().get(format!("{}/openapi.json", app.base_url))).await;
    assert_eq!(status, 200, "the document is public: {doc}");
    assert_eq!(doc["openapi"], "3.1.0", "OpenAPI 3.1");
    assert!(doc["paths"]["/v1/runs"]["post"].is_object(), "submitting runs is documented");
    assert!(doc["paths"]["/v1/runs"]["get"].is_object(), "listing runs is documented");
    assert!(doc["components"]["schemas"]["Plan"].is_object(), "the plan schema is included");
}

#[tokio::test]
async fn unknown_runs_and_routes_are_json_404s() {
    let app = HttpApp::start(Backend::Sqlite, clock(), None).await;
    for path in ["/v1/runs/nope", "/v1/runs/nope/events", "/v2/anything"] {
        let (status, body) = app.get(path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["code"], "not_found", "{path}: a JSON error: {body}");
    }
}

/// Parses a `text/event-stream` body into `(event, data)` pairs.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(kind) = line.strip_prefix("event:") {
                    event = Some(kind.trim().to_owned());
                } else if let Some(chunk) = line.strip_prefix("data:") {
                    data.push_str(chunk.trim_start());
                }
            }
            Some((event?, serde_json::from_str(&data).ok()?))
        })
        .collect()
}

on_both_backends!(the_event_stream_sends_history_then_live_events_and_ends_when_the_run_finishes);
async fn the_event_stream_sends_history_then_live_events_and_ends_when_the_run_finishes(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let run_id = app.submit(noop_plan(7)).await;
    let mut stream = app
        .request(reqwest::Method::GET, &format!("/v1/runs/{run_id}/events"))
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let content_type = stream.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/event-stream"), "{backend:?}: an SSE stream: {content_type}");

    let mut text = String::new();
    let history = tokio::time::timeout(LIMIT, async {
        while !sse_events(&text).iter().any(|(kind, _)| kind == "run_created") {
            let bytes = stream.chunk().await.unwrap().expect("the stream stays open while the run is open");
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    })
    .await;
    assert!(history.is_ok(), "{backend:?}: the stream sends the history so far: {text}");
    assert!(
        !sse_events(&text).iter().any(|(kind, _)| kind == "step_succeeded"),
        "{backend:?}: nothing ran yet: {text}"
    );

    TestWorker::new("w").echo("noop").run_until_idle(app.engine()).await;
    let ended = tokio::time::timeout(LIMIT, async {
        while let Some(bytes) = stream.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    })
    .await;
    assert!(ended.is_ok(), "{backend:?}: the stream ends after the run finished; so far: {text}");

    let kinds: Vec<String> = sse_events(&text).into_iter().map(|(kind, _)| kind).collect();
    for kind in ["run_created", "step_started", "step_succeeded", "run_succeeded"] {
        assert!(kinds.contains(&kind.to_owned()), "{backend:?}: the stream carried `{kind}`: {kinds:?}");
    }
    assert_eq!(kinds.last().map(String::as_str), Some("run_succeeded"), "{backend:?}: the last event ends the run");
    let (status, history) = app.get(&format!("/v1/runs/{run_id}/events")).await;
    assert_eq!(status, 200);
    assert_eq!(
        history["events"].as_array().unwrap().len(),
        kinds.len(),
        "{backend:?}: the stream sent each history entry exactly once"
    );
}
