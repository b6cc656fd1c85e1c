//! The example worker end to end: a real `cairn serve`, this example's binary as the worker of `crm.export`, a
//! `cairn worker` for the built-ins, and the example's plan.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use cairn_tests::Backend;
use cairn_tests::http::{TempDir, step};
use cairn_tests::process::Orchestrator;

#[tokio::test]
async fn the_example_worker_serves_its_action_and_the_plan_succeeds() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    // The plan's second step is a built-in (`noop`), served by Cairn's own worker, as `cairn dev` does.
    let _builtins = orchestrator.worker("builtins", &[], &[]);
    let log = std::fs::File::create(dir.path().join("example.log")).unwrap();
    let mut worker = Command::new(env!("CARGO_BIN_EXE_cairn-example-custom-worker"))
        .env("CAIRN_WORKER_URL", &orchestrator.grpc_url)
        .env("CAIRN_WORKER_TOKEN", orchestrator.worker_token())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/plan.json")).unwrap())
            .unwrap();
    // The plan names `crm.export`, known once the worker registered it.
    let mut tries = 0;
    let run_id = loop {
        let (status, run) = orchestrator.post("/v1/runs", &serde_json::json!({"plan": plan})).await;
        if status == 201 {
            break run["id"].as_str().unwrap().to_owned();
        }
        tries += 1;
        assert!(status == 422 && tries < 300, "the worker registers within 30 s: {run:#}\n{}", orchestrator.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let run =
        orchestrator.wait_run(&run_id, "the run ends", Duration::from_secs(60), |r| r["status"] == "succeeded").await;
    let _ = worker.kill();
    let _ = worker.wait();

    let export = step(&run, "export");
    assert_eq!(export["output"]["pages"], 3, "{run:#}");
    assert!(export["output"]["location"].as_str().unwrap().contains(&run_id), "keyed by the idempotency key");
    let logged = std::fs::read_to_string(dir.path().join("example.log")).unwrap();
    assert!(logged.contains("page exported"), "the worker logs by default: {logged}");
}
