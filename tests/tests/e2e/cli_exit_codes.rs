//! The `cairn` CLI's exit codes, one table for every command (README, "Exit codes"), what an interrupted
//! `cairn run` says, and `cairn logs --follow`,
//! against a real `cairn serve` and worker. The codes do not depend on the backend: SQLite only.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_tests::Backend;
use cairn_tests::http::{TempDir, cairn_with, within};
use cairn_tests::process::{Orchestrator, Proc};
use serde_json::json;

#[tokio::test]
async fn each_outcome_has_its_exit_code_and_logs_follow_ends_with_the_run() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let token = [("CAIRN_API_TOKEN", orchestrator.api_token().to_owned())];
    let server = orchestrator.base_url.clone();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, json!({"steps": [{"id": "a", "action": "no.such.action"}]}).to_string()).unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(&good, json!({"steps": [{"id": "a", "action": "noop", "args": {"n": 1}}]}).to_string()).unwrap();
    let broken = broken.to_str().unwrap();
    let good = good.to_str().unwrap();
    let cairn = async |args: &[&str]| cairn_with(dir.path(), args, &token).await;

    let validate = cairn(&["validate", broken]).await;
    assert_eq!(validate.code, Some(1), "validate: an invalid plan: {validate:?}");
    let submit = cairn(&["submit", broken, "--server", &server]).await;
    assert_eq!(submit.code, Some(4), "submit: the server refused the plan: {submit:?}");
    assert!(format!("{}{}", submit.stdout, submit.stderr).contains("unknown_action"), "{submit:?}");
    let run = cairn(&["run", broken, "--server", &server]).await;
    assert_eq!(run.code, Some(4), "run: distinct from a failed run: {run:?}");

    let submitted = cairn(&["submit", good, "--server", &server]).await;
    assert_eq!(submitted.code, Some(0), "{submitted:?}");
    let run_id = submitted.stdout.trim().to_owned();
    let logs = cairn(&["logs", &run_id, "--follow", "--server", &server]).await;
    assert_eq!(logs.code, Some(0), "logs --follow ends with the run's success: {logs:?}");
    let kinds: Vec<&str> = logs.stdout.lines().filter_map(|l| l.split_whitespace().nth(1)).collect();
    assert_eq!(kinds.first(), Some(&"run_created"), "{}", logs.stdout);
    assert_eq!(kinds.last(), Some(&"run_succeeded"), "{}", logs.stdout);
    let watch = cairn(&["watch", &run_id, "--server", &server]).await;
    assert_eq!(watch.code, Some(0), "{watch:?}");
    let show = cairn(&["show", &run_id, "--server", &server]).await;
    assert_eq!(show.code, Some(0), "{show:?}");
    assert!(show.stdout.contains("plan (cairn/v1)") && show.stdout.contains("noop"), "show prints the plan: {show:?}");
    let refused = cairn(&["retry", &run_id, "a", "--server", &server]).await;
    assert_eq!(refused.code, Some(2), "a refusal: {refused:?}");
    assert!(refused.stderr.contains("wrong_state"), "{refused:?}");
}

#[tokio::test]
async fn an_interrupted_run_says_it_goes_on_and_how_to_follow_it() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    let token = [("CAIRN_API_TOKEN", orchestrator.api_token().to_owned())];
    let later = dir.path().join("later.json");
    std::fs::write(
        &later,
        json!({"steps": [{"id": "a", "action": "noop", "args": {}, "not_before": "in 1h"}]}).to_string(),
    )
    .unwrap();
    let later = later.to_str().unwrap();
    let db = format!("sqlite:{}", dir.path().join("embedded.db").display());
    for (name, args) in [
        ("served", vec!["run", later, "--server", orchestrator.base_url.as_str()]),
        ("embedded", vec!["run", later, "--db", db.as_str()]),
    ] {
        let mut follower = Proc::spawn(name, dir.path(), &args, &token);
        within(Duration::from_secs(20), "the run is submitted", || {
            let submitted = follower.log().contains("submitted");
            async move { submitted.then_some(()) }
        })
        .await;
        assert_eq!(follower.terminate(Duration::from_secs(20)), Some(130), "{name}: {}", follower.log());
        let said = follower.log();
        assert!(said.contains("cairn watch"), "{name}: {said}");
        let goes_on =
            if name == "served" { "goes on at the server" } else { "resumes when that database is next served" };
        assert!(said.contains(goes_on), "{name}: {said}");
    }
}
