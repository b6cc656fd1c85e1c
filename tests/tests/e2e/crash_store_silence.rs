//! A PostgreSQL silence never parks a healthy step (issue "Hardening", F4; contract §5, "Leases").
//!
//! The race it guards against: after a 40 s silence of the database, the reaper's first pass can fail every lease
//! that expired meanwhile before the workers' resent reports arrive (9 ms later, when it was seen), parking
//! healthy non-idempotent steps as `outcome_unknown`. The reaper therefore spares, for one lease TTL after the
//! store answers again, the leases that expired while it was silent.
//!
//! Real processes: `cairn serve` reaches PostgreSQL through a proxy that goes silent (forwarding nothing, closing
//! nothing); a real `cairn worker` runs a non-idempotent `sleep`. The worker is frozen across the silence and for
//! a while after it, so without the rule the reaper would certainly pass first (and the step would end
//! `outcome_unknown`); thawed within the spared TTL, its heartbeat and report land and the step succeeds in its
//! one attempt.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_tests::http::{TempDir, step};
use cairn_tests::process::Orchestrator;
use cairn_tests::silent_proxy::SilentProxy;
use serde_json::json;

const TTL_MS: u64 = 3_000;
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: this PostgreSQL silence test is skipped")]
async fn leases_that_expired_while_the_store_was_silent_get_one_more_ttl() {
    let dir = TempDir::new();
    let url = cairn_tests::postgres_url().await;
    let _database = cairn_tests::Dropped(url.clone());
    let (prefix, database) = url.rsplit_once('/').unwrap();
    let server: std::net::SocketAddr = "127.0.0.1:5432".parse().unwrap();
    assert!(prefix.contains("127.0.0.1:5432") || prefix.contains("localhost"), "the test's server: {prefix}");
    let proxy = SilentProxy::start(server).await;
    let proxied = format!("{}/{database}", prefix.replace("127.0.0.1:5432", &proxy.addr.to_string()));
    let orchestrator = Orchestrator::start_on(proxied, dir.path(), TTL_MS).await;
    let worker = orchestrator.worker("w1", &[], &[]);
    let plan = json!({"steps": [
        {"id": "charge", "action": "sleep", "args": {"duration_ms": 6_000}, "idempotent": false, "timeout_ms": 60_000},
        {"id": "receipt", "action": "noop", "depends_on": ["charge"], "args": {}}
    ]});
    let run_id = orchestrator.submit(plan).await;
    orchestrator.wait_run(&run_id, "charge runs", LIMIT, |run| step(run, "charge")["status"] == "running").await;

    worker.freeze();
    proxy.silence();
    // Longer than a lease TTL: every lease in flight expires while the store is silent.
    tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
    proxy.speak();
    // The reaper's passes now reach the store; without the spared TTL, the first of them would fail the lease.
    tokio::time::sleep(Duration::from_millis(TTL_MS / 2)).await;
    worker.thaw();

    let settled =
        |r: &serde_json::Value| !["running", "ready"].contains(&step(r, "charge")["status"].as_str().unwrap_or(""));
    let run = orchestrator.wait_run(&run_id, "charge settles", LIMIT, settled).await;
    let charge = step(&run, "charge");
    assert_eq!(charge["status"], "succeeded", "the healthy step was not parked:{run:#}\n{}", orchestrator.logs());
    assert_eq!(charge["attempts"], 1, "one attempt, never reclaimed: {run:#}");
    let run = orchestrator.wait_run(&run_id, "the run ends", LIMIT, |r| r["status"] != "running").await;
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert!(orchestrator.logs().contains("the store was silent"), "the reaper saw the silence");
}
