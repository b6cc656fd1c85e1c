//! `cairn bench --orchestrators N` (issue 8): several orchestrator processes on one PostgreSQL database, the REST
//! calls through the first and the workers on the others, so each run's first step is submitted through one
//! orchestrator and dispatched by another; and the flag refused on SQLite, which serves one orchestrator process.
//! Behaviour only, at a small size: the figures themselves are for `cairn bench`.

#![allow(clippy::unwrap_used)]

use cairn_tests::http::{TempDir, cairn};
use cairn_tests::postgres_url;
use serde_json::Value;

#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: two orchestrators share one database only on PostgreSQL")]
async fn chain_runs_across_two_orchestrators_on_postgresql() {
    let dir = TempDir::new();
    let db = postgres_url().await;
    let _database = cairn_tests::Dropped(db.clone());

    let out = cairn(
        dir.path(),
        &["bench", "chain", "--db", &db, "--orchestrators", "2", "--runs", "4", "--steps", "5", "--json"],
    )
    .await;

    assert_eq!(out.code, Some(0), "the bench succeeds: {}", out.stderr);
    let figures: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(figures["orchestrators"], 2, "{figures}");
    assert_eq!(figures["db"], "postgres");
    let means = figures["per_step_ms_run_means"].as_array().unwrap();
    assert_eq!(means.len(), 4, "every run went through both orchestrators to its end: {figures}");
}

#[tokio::test]
async fn more_than_one_orchestrator_needs_postgresql() {
    let dir = TempDir::new();

    let out = cairn(dir.path(), &["bench", "chain", "--orchestrators", "2"]).await;

    assert_eq!(out.code, Some(2), "refused as an error (exit code 2): {out:?}");
    assert!(out.stderr.contains("--orchestrators above 1 needs a PostgreSQL --db"), "says why: {}", out.stderr);
}
