//! Case D16 a of `../shared/cases/cases2.md` (LittleHorse #2339): the timeout of a retry attempt was dropped and
//! the attempt ran forever. Real processes: `cairn serve`, a real `cairn worker`, and a local service that never
//! answers `/slow`. Each of the three attempts times out on its own, about 2 s after it started (the worker
//! enforces `timeout_ms`), with its own attempt number in its failure record; then the step and the run fail
//! and nothing is left running. Variants b and c are in `cases_d14_d15_leases.rs`; variant d (the retry of the
//! failed step) in `repair_retry.rs`.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_tests::http::{TempDir, step};
use cairn_tests::process::{Endpoint, Orchestrator};
use cairn_tests::{Backend, on_both_backends};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

on_both_backends!(d16_a_every_retry_attempt_times_out_on_its_own_clock);
async fn d16_a_every_retry_attempt_times_out_on_its_own_clock(backend: Backend) {
    let dir = TempDir::new();
    let endpoint = Endpoint::start(|_| (200, json!({}))).await;
    let orchestrator = Orchestrator::start(backend, dir.path(), 2_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let plan = json!({"steps": [{"id": "call", "action": "http.request", "timeout_ms": 2000, "idempotent": true,
            "args": {"method": "GET", "url": format!("{}/slow?ms=600000", endpoint.url())},
            "retry": {"max_attempts": 3, "initial_interval_ms": 500, "backoff_coefficient": 2, "max_interval_ms": 5000,
                      "jitter": "none"}}]});
    let run_id = orchestrator.submit(plan).await;

    let run = orchestrator
        .wait_run(&run_id, "the run ends", LIMIT, |r| r["status"] != "running" && r["status"] != "pending")
        .await;

    assert_eq!(run["status"], "failed", "{backend:?}: {run:#}");
    let call = step(&run, "call");
    assert_eq!(call["status"], "failed", "{backend:?}: nothing is left running");
    assert_eq!(call["attempts"], 3, "{backend:?}: attempts(call) == 3");
    let (_, attempts) = orchestrator.get(&format!("/v1/runs/{run_id}")).await;
    let failures = step(&attempts, "call")["failures"].as_array().unwrap().clone();
    assert_eq!(failures.len(), 3, "{backend:?}: one failure record per attempt: {failures:#?}");
    for (i, f) in failures.iter().enumerate() {
        assert_eq!(f["attempt"], i + 1, "{backend:?}: each record names its own attempt");
        assert_eq!(f["code"], "timeout", "{backend:?}: attempt {}: {f:#}", i + 1);
        let took = f["ended_at_ms"].as_i64().unwrap() - f["started_at_ms"].as_i64().unwrap();
        assert!((1_500..=3_500).contains(&took), "{backend:?}: attempt {} took about 2 s, not {took} ms", i + 1);
    }
    assert_eq!(endpoint.calls_to("/slow").len(), 3, "{backend:?}: one call per attempt, no fourth");
}
