//! The API the dashboard relies on, without a browser, on both backends: the run list as a live SSE stream
//! (the first page at once, another when the page changed, the same filters as the JSON list), a run's plan,
//! and the workers with their attempts in flight.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_tests::http::{TempDir, step};
use cairn_tests::process::Orchestrator;
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// The `runs` events of an SSE body, each page's run ids.
fn pages(text: &str) -> Vec<Vec<String>> {
    text.split("\n\n")
        .filter(|block| block.lines().any(|l| l == "event: runs"))
        .filter_map(|block| {
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            let page: Value = serde_json::from_str(&data).ok()?;
            Some(page["runs"].as_array()?.iter().map(|r| r["id"].as_str().unwrap_or_default().to_owned()).collect())
        })
        .collect()
}

on_both_backends!(the_live_run_list_sends_its_page_then_the_page_again_when_a_matching_run_appears);
async fn the_live_run_list_sends_its_page_then_the_page_again_when_a_matching_run_appears(backend: Backend) {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(backend, dir.path(), 10_000).await;
    let plan = json!({"steps": [{"id": "a", "action": "noop", "args": {}}]});
    let (_, first) = orchestrator.post("/v1/runs", &json!({"plan": plan, "labels": {"team": "ops"}})).await;
    let first = first["id"].as_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let mut stream = client
        .get(format!("{}/v1/runs?label=team:ops", orchestrator.base_url))
        .bearer_auth(orchestrator.api_token())
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200, "{backend:?}");

    let mut text = String::new();
    let read = async |stream: &mut reqwest::Response, text: &mut String, until: &dyn Fn(&[Vec<String>]) -> bool| {
        tokio::time::timeout(LIMIT, async {
            while !until(&pages(text)) {
                let bytes = stream.chunk().await.unwrap().expect("the stream stays open");
                text.push_str(&String::from_utf8_lossy(&bytes));
            }
        })
        .await
        .is_ok()
    };
    let got_first = read(&mut stream, &mut text, &|p| !p.is_empty()).await;
    orchestrator.post("/v1/runs", &json!({"plan": plan, "labels": {"team": "web"}})).await;
    let (_, second) = orchestrator.post("/v1/runs", &json!({"plan": plan, "labels": {"team": "ops"}})).await;
    let second = second["id"].as_str().unwrap().to_owned();
    let got_second = read(&mut stream, &mut text, &|p| p.iter().any(|ids| ids.contains(&second))).await;

    assert!(got_first && got_second, "{backend:?}: both pages arrived: {text}");
    let pages = pages(&text);
    assert_eq!(pages[0], vec![first.clone()], "{backend:?}: the first page at once, filtered by label");
    assert_eq!(pages.last().unwrap(), &vec![second, first], "{backend:?}: the page again, newest first, ops only");
    assert!(pages.windows(2).all(|w| w[0] != w[1]), "{backend:?}: a page is sent only when it changed: {pages:?}");
}

on_both_backends!(a_run_s_plan_and_the_workers_with_their_attempts_in_flight_are_listed);
async fn a_run_s_plan_and_the_workers_with_their_attempts_in_flight_are_listed(backend: Backend) {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(backend, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w-ui", &[], &[]);
    let plan = json!({"steps": [
        {"id": "nap", "action": "sleep", "args": {"duration_ms": 600_000}},
        {"id": "after", "action": "noop", "depends_on": ["nap"], "args": {}}]});
    let run_id = orchestrator.submit(plan).await;
    orchestrator.wait_run(&run_id, "nap runs", LIMIT, |r| step(r, "nap")["status"] == "running").await;

    let (code, stored) = orchestrator.get(&format!("/v1/runs/{run_id}/plan")).await;
    let (_, workers) = orchestrator.get("/v1/workers").await;
    let (missing, _) = orchestrator.get("/v1/runs/no-such-run/plan").await;

    assert_eq!(code, 200, "{backend:?}: {stored:#}");
    assert_eq!(stored["steps"][1]["depends_on"], json!(["nap"]), "{backend:?}: the plan's edges: {stored:#}");
    assert_eq!(missing, 404, "{backend:?}");
    let worker = workers["workers"].as_array().unwrap().iter().find(|w| w["worker_id"] == "w-ui").cloned();
    let worker = worker.unwrap_or_else(|| panic!("{backend:?}: the worker is listed: {workers:#}"));
    assert_eq!(worker["in_flight"], 1, "{backend:?}: one attempt in flight: {worker:#}");
    assert_eq!(worker["connected"], true, "{backend:?}: {worker:#}");
    assert!(worker["actions"].as_array().unwrap().contains(&json!("sleep")), "{backend:?}: {worker:#}");
}
