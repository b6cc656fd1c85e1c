//! Issue 6, second acceptance point: `GET /metrics` moves as a run progresses (and, issue 8, counts the chain
//! steps PostgreSQL writes in one call). The orchestrator runs on a manual
//! clock; a real `cairn worker` process (build it first: `cargo build -p cairn-cli`) is started only once the
//! queue has been observed, so the queue, timer and age gauges are seen before they drain.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_orchestrator::EngineConfig;
use cairn_tests::Backend;
use cairn_tests::http::{CairnProcess, HttpApp, HttpAppOptions, TempDir};
use serde_json::json;

const START: &str = "2027-03-14T12:00:00Z";
/// Generous: the worker is a separate process on a busy machine.
const LIMIT: Duration = Duration::from_secs(60);

/// One scrape: `name{labels}` → value.
struct Scrape(HashMap<String, f64>);

impl Scrape {
    /// A sample's value; 0 when the scrape does not have it (a label set not seen yet).
    fn get(&self, sample: &str) -> f64 {
        self.0.get(sample).copied().unwrap_or(0.0)
    }
}

async fn scrape(app: &HttpApp) -> Scrape {
    let response = reqwest::get(format!("{}/metrics", app.base_url)).await.unwrap();
    assert_eq!(response.status(), 200, "/metrics answers");
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "Prometheus text format: {content_type}");
    let text = response.text().await.unwrap();
    let samples = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (sample, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {line}"));
            (sample.to_owned(), value.parse::<f64>().unwrap_or_else(|_| panic!("a numeric value: {line}")))
        })
        .collect();
    Scrape(samples)
}

/// Scrapes until `sample` reaches `expected` or [`LIMIT`] passes, and returns the last scrape: the writer counts
/// a batch's calls after answering it, so a run seen finished may not be counted yet.
async fn scrape_until(app: &HttpApp, sample: &str, expected: f64) -> Scrape {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let scraped = scrape(app).await;
        if scraped.get(sample) >= expected || tokio::time::Instant::now() >= deadline {
            return scraped;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_run_from_queued_to_succeeded() {
    // Arrange: an orchestrator with no worker yet.
    let clock = Arc::new(ManualClock::new(START.parse().unwrap()));
    let app = HttpApp::start(Backend::Sqlite, clock, None).await;
    let before = scrape(&app).await;
    assert_eq!(before.get("cairn_store_up"), 1.0, "the database is readable");
    assert_eq!(before.get("cairn_runs{status=\"succeeded\"}"), 0.0, "a fresh database has no runs");

    // Act 1: submit a run whose second step waits for a timer, and let the timer come due.
    let plan = json!({"goal": "metrics", "steps": [
        {"id": "first", "action": "noop", "args": {}},
        {"id": "timed", "action": "noop", "args": {}, "not_before": "+1h"}]});
    let run_id = app.submit(plan).await;
    app.set_time_ms(app.now_ms() + 2 * 3_600_000);
    let queued = scrape(&app).await;

    // Assert 1: the run waits in the queue.
    assert_eq!(queued.get("cairn_runs{status=\"pending\"}"), 1.0, "the run is pending");
    assert_eq!(queued.get("cairn_steps{status=\"ready\"}"), 2.0, "both steps are ready");
    assert_eq!(queued.get("cairn_queue_depth"), 2.0, "both steps are due with no worker to take them");
    assert_eq!(queued.get("cairn_timers_due_unfired"), 1.0, "the timer is due and nobody fired it");
    assert_eq!(
        queued.get("cairn_oldest_ready_step_age_seconds"),
        7200.0,
        "the first step has been claimable since submission, two hours ago on the orchestrator's clock"
    );
    assert_eq!(queued.get("cairn_connected_workers"), 0.0, "no worker has called yet");

    // Act 2: a worker drains the queue.
    let dir = TempDir::new();
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &[], &[]);
    let run = app.wait_run(&run_id, "the run finished", LIMIT, |run| run["status"] == "succeeded").await;
    assert_eq!(run["status"], "succeeded", "worker log:\n{}", worker.log());
    let after = scrape(&app).await;

    // Assert 2: counters and histograms moved by the run's two attempts; the queue is empty.
    let moved = |sample: &str| after.get(sample) - before.get(sample);
    assert_eq!(moved("cairn_runs{status=\"succeeded\"}"), 1.0, "one more run succeeded");
    assert_eq!(after.get("cairn_runs{status=\"pending\"}"), 0.0, "no run is left pending");
    assert_eq!(moved("cairn_steps{status=\"succeeded\"}"), 2.0, "both steps succeeded");
    assert_eq!(moved("cairn_attempts_total{action=\"noop\",status=\"succeeded\"}"), 2.0, "two noop attempts");
    assert_eq!(moved("cairn_dispatch_latency_seconds_count{action=\"noop\"}"), 2.0, "two dispatches observed");
    assert_eq!(
        moved("cairn_dispatch_latency_seconds_sum{action=\"noop\"}"),
        7200.0 + 3600.0,
        "each step waited from becoming claimable to the worker's arrival"
    );
    assert_eq!(
        moved("cairn_step_duration_seconds_count{action=\"noop\",outcome=\"succeeded\"}"),
        2.0,
        "two attempt durations observed"
    );
    assert_eq!(after.get("cairn_queue_depth"), 0.0, "the queue is drained");
    assert_eq!(after.get("cairn_timers_due_unfired"), 0.0, "the timer fired");
    assert_eq!(after.get("cairn_active_leases"), 0.0, "no attempt is running");
    assert_eq!(after.get("cairn_connected_workers"), 1.0, "the worker is connected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: the one-call batches are PostgreSQL's")]
async fn a_chain_and_leaves_on_postgresql_count_their_batches_written_in_one_call() {
    // Arrange: a chain of three `noop` steps, and a real worker process with one slot (so no poll of its own
    // shares a batch with a completion, and each completion comes with the claim for the slot it frees).
    let clock = Arc::new(ManualClock::new(START.parse().unwrap()));
    let app = HttpApp::start(Backend::Postgres, clock, None).await;
    let dir = TempDir::new();
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &["--concurrency", "1"], &[]);
    let plan = json!({"goal": "chain", "steps": [
        {"id": "a", "action": "noop", "args": {}},
        {"id": "b", "action": "noop", "args": {}, "depends_on": ["a"]},
        {"id": "c", "action": "noop", "args": {}, "depends_on": ["b"]}]});

    // Act
    let run_id = app.submit(plan).await;
    let run = app.wait_run(&run_id, "the run finished", LIMIT, |run| run["status"] == "succeeded").await;
    assert_eq!(run["status"], "succeeded", "worker log:\n{}", worker.log());
    let leaf_committed = "cairn_one_call_completions_total{outcome=\"committed\",path=\"leaves\"}";
    let after = scrape_until(&app, leaf_committed, 1.0).await;

    // Assert: a → b and b → c were each one call, and c's completion (a leaf, which ends the run) a leaf call.
    // The gRPC handler queues a completion and its claim as one operation, so the writer always has them in one
    // batch.
    let chain =
        |outcome: &str| after.get(&format!("cairn_one_call_completions_total{{outcome=\"{outcome}\",path=\"chain\"}}"));
    let committed = chain("committed");
    assert_eq!(committed, 2.0, "calls committed; worker log:\n{}", worker.log());
    assert_eq!(chain("fell_back"), 0.0, "no call was wasted");
    assert_eq!(chain("unknown"), 0.0);
    assert_eq!(after.get(leaf_committed), 1.0, "c's completion; worker log:\n{}", worker.log());

    // Act: three independent steps, each a leaf whose completion rides with the claim of the next.
    let plan = json!({"goal": "leaves", "steps": [
        {"id": "x", "action": "noop", "args": {}},
        {"id": "y", "action": "noop", "args": {}},
        {"id": "z", "action": "noop", "args": {}}]});
    let run_id = app.submit(plan).await;
    let run = app.wait_run(&run_id, "the run finished", LIMIT, |run| run["status"] == "succeeded").await;
    assert_eq!(run["status"], "succeeded", "worker log:\n{}", worker.log());
    let after = scrape_until(&app, leaf_committed, 4.0).await;

    // Assert: the completions of x and y each went with the claim of the next in one call, and z's (which ends
    // the run, its claim finding nothing) too: three more.
    let leaves = |outcome: &str| {
        after.get(&format!("cairn_one_call_completions_total{{outcome=\"{outcome}\",path=\"leaves\"}}"))
    };
    let committed = leaves("committed");
    assert_eq!(committed, 4.0, "leaf calls committed; worker log:\n{}", worker.log());
    assert_eq!(leaves("fell_back"), 0.0, "no leaf call was wasted");
    assert_eq!(leaves("unknown"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: the one-call batches are PostgreSQL's")]
async fn with_the_fast_path_off_the_same_chain_and_leaves_take_no_call() {
    // Arrange: the workload of the test above, which takes five one-call batches with the fast path on.
    let clock = Arc::new(ManualClock::new(START.parse().unwrap()));
    let engine = EngineConfig { pg_fast_path: false, ..EngineConfig::default() };
    let app = HttpApp::start_with(Backend::Postgres, clock, HttpAppOptions { engine, ..Default::default() }).await;
    let dir = TempDir::new();
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &["--concurrency", "1"], &[]);
    let chain = json!({"goal": "chain", "steps": [
        {"id": "a", "action": "noop", "args": {}},
        {"id": "b", "action": "noop", "args": {}, "depends_on": ["a"]},
        {"id": "c", "action": "noop", "args": {}, "depends_on": ["b"]}]});
    let leaves = json!({"goal": "leaves", "steps": [
        {"id": "x", "action": "noop", "args": {}},
        {"id": "y", "action": "noop", "args": {}},
        {"id": "z", "action": "noop", "args": {}}]});

    // Act
    for plan in [chain, leaves] {
        let run_id = app.submit(plan).await;
        let run = app.wait_run(&run_id, "the run finished", LIMIT, |run| run["status"] == "succeeded").await;
        assert_eq!(run["status"], "succeeded", "worker log:\n{}", worker.log());
    }
    let after = scrape_until(&app, "cairn_runs{status=\"succeeded\"}", 2.0).await;

    // Assert: both runs went the general way; nothing was tried in one call.
    let one_call: Vec<(&String, &f64)> =
        after.0.iter().filter(|(sample, _)| sample.starts_with("cairn_one_call_completions_total")).collect();
    assert!(one_call.iter().all(|(_, value)| **value == 0.0), "no one-call batch: {one_call:?}");
}
