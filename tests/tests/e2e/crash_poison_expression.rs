//! A poison `condition.eval` expression fails its step, never the worker (issue "Hardening", F3).
//!
//! Without the bounds, an expression of 10,000 `1 +` terms overflows the stack of the worker thread compiling
//! it: the process aborts with every attempt it holds, its non-idempotent ones go to `outcome_unknown`, and the
//! next worker to take the step dies the same way. The expression reaches the worker by interpolation (an earlier
//! step's output), so validation cannot see it. Real processes: `cairn serve` and one `cairn worker`.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_tests::http::{TempDir, step};
use cairn_tests::process::Orchestrator;
use cairn_tests::{Backend, on_both_backends};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(40);

on_both_backends!(an_interpolated_poison_expression_fails_with_invalid_args_and_the_worker_lives_on);
async fn an_interpolated_poison_expression_fails_with_invalid_args_and_the_worker_lives_on(backend: Backend) {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(backend, dir.path(), 2_000).await;
    let mut worker = orchestrator.worker("w1", &[], &[]);
    let poison = format!("{} == 0", vec!["1"; 10_000].join(" + "));
    let plan = json!({"steps": [
        {"id": "w", "action": "noop", "args": {"expr": poison}},
        {"id": "check", "action": "condition.eval", "depends_on": ["w"], "args": {"expr": "${w.output.expr}"}}
    ]});
    let run_id = orchestrator.submit(plan).await;

    let run = orchestrator
        .wait_run(&run_id, "the run ends", LIMIT, |r| r["status"] == "failed" || r["status"] == "succeeded")
        .await;
    let after = orchestrator.submit(json!({"steps": [{"id": "a", "action": "noop", "args": {"x": 1}}]})).await;
    let next = orchestrator.wait_run(&after, "the next run ends", LIMIT, |r| r["status"] == "succeeded").await;

    let check = step(&run, "check");
    assert_eq!(check["status"], "failed", "{backend:?}: {run:#}");
    assert_eq!(check["error"]["code"], "invalid_args", "{backend:?}: {check:#}");
    assert_eq!(check["attempts"], 1, "{backend:?}: not retried: it would fail the same way");
    assert_eq!(next["status"], "succeeded");
    assert!(!worker.exited(), "{backend:?}: the worker survived:\n{}", worker.log());
}
