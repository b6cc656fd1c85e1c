//! SIGTERM stops `cairn serve` and `cairn dev` gracefully (issue "Hardening", F8): Docker and systemd stop with
//! SIGTERM, and a process that waited for ctrl-c only would die of it (exit status -15).
//!
//! A graceful stop answers the worker's long poll and ends live event streams at once, lets requests in flight
//! finish, flushes traces and exits 0; a run in flight loses nothing: its worker resends its report to the
//! restarted orchestrator, and the step succeeds in its first attempt.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_tests::http::{TempDir, step, within};
use cairn_tests::process::{Orchestrator, Proc, free_port};
use cairn_tests::{Backend, on_both_backends};
use futures::StreamExt;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

on_both_backends!(sigterm_stops_serve_with_exit_0_ending_streams_and_losing_nothing);
async fn sigterm_stops_serve_with_exit_0_ending_streams_and_losing_nothing(backend: Backend) {
    let dir = TempDir::new();
    let mut orchestrator = Orchestrator::start(backend, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &["--concurrency", "2"], &[]);
    let plan = json!({"steps": [{"id": "nap", "action": "sleep", "args": {"duration_ms": 1500}}]});
    let run_id = orchestrator.submit(plan).await;
    orchestrator.wait_run(&run_id, "nap runs", LIMIT, |run| step(run, "nap")["status"] == "running").await;
    let stream = reqwest::Client::new()
        .get(format!("{}/v1/runs/{run_id}/events", orchestrator.base_url))
        .bearer_auth(orchestrator.api_token())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200, "the live stream opens");
    let reading = tokio::spawn(async move { stream.bytes_stream().count().await });

    let code = orchestrator.terminate(LIMIT);

    assert_eq!(code, Some(0), "{backend:?}: SIGTERM is a graceful stop, exit 0:{}", orchestrator.logs());
    let ended = tokio::time::timeout(Duration::from_secs(5), reading).await;
    assert!(ended.is_ok(), "{backend:?}: the live event stream ended with the orchestrator");
    assert!(orchestrator.logs().contains("orchestrator stopped"), "it stopped through its shutdown path");
    assert!(
        !orchestrator.logs().contains("shutdown grace over"),
        "{backend:?}: nothing was left to wait out the grace for (the database clock's sampler never ends on its \
             own and is not waited for):{}",
        orchestrator.logs()
    );

    orchestrator.restart().await;
    let run = orchestrator.wait_run(&run_id, "the run ends", LIMIT, |r| r["status"] == "succeeded").await;
    assert_eq!(
        step(&run, "nap")["attempts"],
        1,
        "{backend:?}: the report was resent to the restarted orchestrator: {run:#}"
    );
}

#[tokio::test]
async fn sigterm_stops_dev_with_exit_0() {
    cairn_workers::actions::install_crypto_provider();
    let dir = TempDir::new();
    let (http, grpc) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let db = format!("sqlite:{}", dir.path().join("dev.db").display());
    let mut dev = Proc::spawn("dev", dir.path(), &["dev", "--db", &db, "--http", &http, "--grpc", &grpc], &[]);
    let healthz = format!("http://{http}/healthz");
    within(LIMIT, "cairn dev answers", || {
        let healthz = healthz.clone();
        async move { reqwest::get(healthz).await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
    })
    .await;
    let submitted: Value = reqwest::Client::new()
        .post(format!("http://{http}/v1/runs"))
        .json(&json!({"plan": {"steps": [{"id": "a", "action": "noop", "args": {"x": 1}}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(submitted["id"].is_string(), "a run is accepted: {submitted:#}");

    let code = dev.terminate(LIMIT);

    assert_eq!(code, Some(0), "SIGTERM is a graceful stop of cairn dev, exit 0:\n{}", dev.log());
}
