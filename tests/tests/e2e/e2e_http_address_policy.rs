//! Hardening F7 end to end: which destinations `http.request` may reach is the worker's setting. A `cairn
//! worker` started without `CAIRN_HTTP_ALLOW_LOOPBACK` refuses a stub on 127.0.0.1 with a failure record naming
//! the setting (and the stub sees nothing); with it, the same plan succeeds; the in-process worker of `cairn run`
//! allows loopback by default.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{CairnProcess, HttpApp, Stub, TempDir, cairn, step, within_or};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";
const LIMIT: Duration = Duration::from_secs(60);

fn ping(stub: &Stub) -> Value {
    json!({"steps": [{"id": "ping", "action": "http.request", "args": {"url": format!("{}/ping", stub.url())}}]})
}

async fn finished(app: &HttpApp, run_id: &str, worker: &CairnProcess) -> Value {
    within_or(
        LIMIT,
        || async {
            let run = app.run(run_id).await;
            run["finished_at_ms"].is_i64().then_some(run)
        },
        || format!("waiting until run {run_id} finishes; worker log:\n{}", worker.log()),
    )
    .await
}

on_both_backends!(a_worker_refuses_loopback_unless_its_settings_allow_it);
/// A worker reaches loopback only when its own settings allow it, and the setting is what decides either way.
async fn a_worker_refuses_loopback_unless_its_settings_allow_it(backend: Backend) {
    let stub = Stub::start(|_| (200, json!({"pong": true}))).await;

    let strict_app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let dir = TempDir::new();
    // Spawned directly: the harness' `worker` would allow loopback.
    let tmp = dir.path().display().to_string();
    let strict =
        CairnProcess::spawn("strict", dir.path(), &["worker", "--server", &strict_app.grpc_url], &[("TMPDIR", tmp)]);
    let run_id = strict_app.submit(ping(&stub)).await;
    let run = finished(&strict_app, &run_id, &strict).await;

    assert_eq!(run["status"], "failed", "{backend:?}: {run:#}");
    let failure = &step(&run, "ping")["failures"][0];
    assert_eq!(failure["code"], "invalid_args", "{backend:?}: {run:#}");
    assert_eq!(failure["retryable"], false, "{backend:?}: {run:#}");
    assert_eq!(failure["details"]["refused"], "loopback", "{backend:?}: {run:#}");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.contains("http_allow_loopback") && message.contains("CAIRN_HTTP_ALLOW_LOOPBACK"),
        "{backend:?}: the failure names the setting that allows it: {message}"
    );
    assert!(message.contains(&stub.url()["http://".len()..]), "{backend:?}: and the destination: {message}");
    assert!(stub.calls().is_empty(), "{backend:?}: nothing reached the stub");
    drop(strict);

    let allowing_app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let allowing = CairnProcess::worker(
        "allowing",
        &allowing_app.grpc_url,
        dir.path(),
        &[],
        &[("CAIRN_HTTP_ALLOW_LOOPBACK", "true".into())],
    );
    let run_id = allowing_app.submit(ping(&stub)).await;
    let run = finished(&allowing_app, &run_id, &allowing).await;

    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    assert_eq!(step(&run, "ping")["output"]["body"], json!({"pong": true}), "{backend:?}: {run:#}");
    assert_eq!(stub.calls_to("/ping").len(), 1, "{backend:?}: one request");
}

/// `cairn run` without `--server` starts its own orchestrator and worker: a developer's machine, where the
/// plan's local services must be reachable.
#[tokio::test]
async fn the_in_process_worker_of_cairn_run_reaches_loopback_by_default() {
    let stub = Stub::start(|_| (200, json!({"pong": true}))).await;
    let dir = TempDir::new();
    let plan = dir.path().join("ping.json");
    std::fs::write(&plan, ping(&stub).to_string()).unwrap();

    let out = cairn(dir.path(), &["run", plan.to_str().unwrap(), "--json"]).await;

    assert_eq!(out.code, Some(0), "the run succeeds: {out:?}");
    assert_eq!(stub.calls_to("/ping").len(), 1, "the in-process worker called the stub");
}
