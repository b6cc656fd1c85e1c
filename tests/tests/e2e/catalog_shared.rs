//! The action catalog lives in the database (issue "Your own code", point 4): an action a worker registers
//! through one orchestrator is accepted by every other orchestrator of the database and after a restart, before
//! any worker reconnects; a plan naming an action never registered is refused with `unknown_action` listing what
//! is; and a ready step whose action no connected worker serves says so (`waiting_for`) in the run view, and in
//! `/metrics`.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::catalog::StaticCatalog;
use cairn_core::clock::ManualClock;
use cairn_orchestrator::{Engine, SubmitError, SubmitRequest};
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_proto::v1::{ActionDescriptor, Effect, PollRequest, RegisterRequest};
use cairn_store::Store;
use cairn_tests::http::{HttpApp, step};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn lookup() -> ActionDescriptor {
    ActionDescriptor {
        name: "crm.lookup".into(),
        version: "1".into(),
        description: "Look a customer up".into(),
        args_schema_json: json!({"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}},
            "additionalProperties": false})
        .to_string(),
        output_schema_json: json!({"type": "object"}).to_string(),
        effect: Effect::Read.into(),
        grounded_args: Vec::new(),
        recipient_args: Vec::new(),
        example_output_json: Some(json!({"name": "Ann"}).to_string()),
    }
}

fn plan() -> Value {
    json!({"steps": [{"id": "who", "action": "crm.lookup", "args": {"id": "c-1"}}]})
}

async fn register(app: &HttpApp) -> WorkerServiceClient<tonic::transport::Channel> {
    let mut client = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    let request = RegisterRequest { worker_id: "py-1".into(), actions: vec![lookup()], protocol_version: 1 };
    client.register(request).await.unwrap();
    client
}

async fn other_engine(app: &HttpApp) -> Engine {
    let store = Store::connect(&app.db_url).await.unwrap();
    Engine::start(store, app.clock.clone(), Arc::new(StaticCatalog::builtin()), Default::default()).await.unwrap()
}

on_both_backends!(an_action_registered_through_one_orchestrator_is_accepted_by_another_and_after_a_restart);
async fn an_action_registered_through_one_orchestrator_is_accepted_by_another_and_after_a_restart(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let never = SubmitRequest {
        plan: json!({"steps": [{"id": "x", "action": "crm.refund", "args": {}}]}),
        input: None,
        idempotency_key: None,
        labels: Default::default(),
    };
    let before = other_engine(&app).await;
    assert!(
        matches!(
            before
                .submit(&SubmitRequest { plan: plan(), input: None, idempotency_key: None, labels: Default::default() })
                .await,
            Err(SubmitError::Invalid(_))
        ),
        "{backend:?}: unknown before any worker registered it"
    );

    let _worker = register(&app).await;
    // `before` started ahead of the registration: it finds the action in the database when a plan needs it.
    let through_other = before
        .submit(&SubmitRequest { plan: plan(), input: None, idempotency_key: None, labels: Default::default() })
        .await;
    let restarted = other_engine(&app).await;
    let after_restart = restarted
        .submit(&SubmitRequest { plan: plan(), input: None, idempotency_key: None, labels: Default::default() })
        .await;
    let refused = restarted.submit(&never).await;

    let dir = cairn_tests::http::TempDir::new();
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, plan().to_string()).unwrap();
    let checked =
        cairn_tests::http::cairn(dir.path(), &["validate", "--server", &app.base_url, plan_file.to_str().unwrap()])
            .await;

    assert_eq!(checked.code, Some(0), "{backend:?}: `cairn validate --server` knows it: {}", checked.stdout);
    assert!(through_other.is_ok(), "{backend:?}: another orchestrator accepts it: {through_other:?}");
    assert!(after_restart.is_ok(), "{backend:?}: a restarted one too, no worker reconnected: {after_restart:?}");
    let Err(SubmitError::Invalid(diagnostics)) = refused else { panic!("{backend:?}: refused: {refused:?}") };
    let unknown = diagnostics.iter().find(|d| d.code.as_str() == "unknown_action").unwrap();
    assert!(unknown.hint.as_deref().unwrap_or("").contains("crm.lookup"), "{backend:?}: lists what is: {unknown:?}");
    let bad_args = json!({"steps": [{"id": "who", "action": "crm.lookup", "args": {"id": 7}}]});
    let refused = restarted
        .submit(&SubmitRequest { plan: bad_args, input: None, idempotency_key: None, labels: Default::default() })
        .await;
    assert!(
        matches!(refused, Err(SubmitError::Invalid(ref d)) if d.iter().any(|d| d.code.as_str() == "args_schema")),
        "{backend:?}: its stored schema checks args: {refused:?}"
    );
}

on_both_backends!(a_ready_step_no_connected_worker_serves_says_what_it_waits_for);
async fn a_ready_step_no_connected_worker_serves_says_what_it_waits_for(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let mut worker = register(&app).await;
    let run_id = app.submit(plan()).await;
    // Three poll intervals (5 s with the default lease TTL) after the registration, nobody serves it.
    app.clock.advance(std::time::Duration::from_secs(16));

    let waiting = app.run(&run_id).await;
    let metrics = reqwest::get(format!("{}/metrics", app.base_url)).await.unwrap().text().await.unwrap();
    let poll =
        PollRequest { worker_id: "py-1".into(), actions: vec!["crm.refund".into()], max_attempts: 1, wait_ms: 10 };
    worker.poll(poll).await.unwrap();
    let (_, actions) = app.get("/v1/actions").await;
    let still = app.run(&run_id).await;
    let poll =
        PollRequest { worker_id: "py-1".into(), actions: vec!["crm.lookup".into()], max_attempts: 1, wait_ms: 10 };
    let handed = worker.poll(poll).await.unwrap().into_inner().attempts;
    let (_, after) = app.get("/v1/actions").await;
    let next = app.submit(plan()).await;
    let served = app.run(&next).await;

    let who = step(&waiting, "who");
    assert_eq!(who["waiting_for"], json!({"kind": "worker", "action": "crm.lookup"}), "{backend:?}: {who:#}");
    assert!(metrics.lines().any(|l| l == "cairn_steps_waiting_for_worker{action=\"crm.lookup\"} 1"), "{metrics}");
    let listed =
        |a: &Value| a["actions"].as_array().unwrap().iter().find(|a| a["name"] == "crm.lookup").unwrap().clone();
    assert_eq!(listed(&actions)["connected"], false, "{backend:?}: polling for another action does not serve this one");
    assert!(step(&still, "who")["waiting_for"].is_object());
    assert_eq!(handed.len(), 1, "{backend:?}: the worker polling for it gets the step");
    assert_eq!(listed(&after)["connected"], true, "{backend:?}: {after:#}");
    assert_eq!(listed(&after)["workers"][0]["worker_id"], "py-1");
    let who = step(&served, "who");
    assert_eq!(who["status"], "ready");
    assert!(who.get("waiting_for").is_none(), "{backend:?}: a connected worker serves it: {who:#}");
}

#[tokio::test]
async fn a_worker_speaking_another_protocol_version_is_refused_with_a_clear_message() {
    let app = HttpApp::start(Backend::Sqlite, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let mut client = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();

    let future = RegisterRequest { worker_id: "w9".into(), actions: vec![lookup()], protocol_version: 2 };
    let refused = client.register(future).await.unwrap_err();
    let unset = RegisterRequest { worker_id: "w0".into(), actions: vec![lookup()], protocol_version: 0 };
    let old = client.register(unset).await.unwrap().into_inner();

    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("version 2") && refused.message().contains("version 1"), "{refused:?}");
    assert_eq!(old.protocol_version, 1, "a worker older than the field is served as version 1");
}
