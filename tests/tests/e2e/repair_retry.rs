//! Repairing a failed run without starting over (issue "Operators"): real processes (`cairn serve`, a real
//! `cairn worker`, the `cairn` CLI) and a local service whose counts show what ran. A failed step is retried
//! after its endpoint recovers; retried with repaired args; a retry with invalid args changes nothing; a failed
//! run is redriven; a failed run is rerun from a step in a new run; a paused run starts nothing until it is
//! resumed. In every case the step that had succeeded never runs again. Case D16 variant d: a failed step's retry gets its own
//! timeouts, not an instant one.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cairn_tests::http::{TempDir, cairn_with, holds_for, step, within};
use cairn_tests::process::{Endpoint, Orchestrator};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

fn ended(run: &Value) -> bool {
    run["status"] != "running" && run["status"] != "pending"
}

/// `first` (GET /first) → `call` (GET `call_path`, one attempt) → `after` (noop).
fn plan(endpoint: &Endpoint, call_path: &str) -> Value {
    json!({"goal": "repair", "steps": [
        {"id": "first", "action": "http.request", "args": {"method": "GET", "url": format!("{}/first", endpoint.url())}},
        {"id": "call", "action": "http.request", "depends_on": ["first"], "idempotent": true,
         "retry": {"max_attempts": 1},
         "args": {"method": "GET", "url": format!("{}{call_path}", endpoint.url())}},
        {"id": "after", "action": "noop", "depends_on": ["call"], "args": {}}]})
}

on_both_backends!(a_failed_step_retried_after_its_endpoint_recovers_finishes_the_run_and_nothing_else_runs_again);
async fn a_failed_step_retried_after_its_endpoint_recovers_finishes_the_run_and_nothing_else_runs_again(
    backend: Backend,
) {
    let dir = TempDir::new();
    let healthy = Arc::new(AtomicBool::new(false));
    let up = healthy.clone();
    let endpoint = Endpoint::start(move |call| match call.path.as_str() {
        "/flaky" if !up.load(Ordering::SeqCst) => (500, json!({"error": "down"})),
        _ => (200, json!({"ok": true})),
    })
    .await;
    let orchestrator = Orchestrator::start(backend, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let run_id = orchestrator.submit(plan(&endpoint, "/flaky")).await;
    let failed = orchestrator.wait_run(&run_id, "the run fails", LIMIT, ended).await;
    assert_eq!(failed["status"], "failed", "{backend:?}: {failed:#}");
    assert_eq!(step(&failed, "after")["status"], "skipped");

    healthy.store(true, Ordering::SeqCst);
    let token = [("CAIRN_API_TOKEN", orchestrator.api_token().to_owned())];
    let args =
        ["retry", &run_id, "call", "--by", "ops", "--reason", "endpoint back", "--server", &orchestrator.base_url];
    let out = cairn_with(dir.path(), &args, &token).await;
    assert_eq!(out.code, Some(0), "{backend:?}: cairn retry: {}{}", out.stdout, out.stderr);

    let done = orchestrator.wait_run(&run_id, "the retried run ends", LIMIT, ended).await;
    assert_eq!(done["status"], "succeeded", "{backend:?}: {done:#}");
    assert_eq!(done["open_steps"], 0);
    assert_eq!(endpoint.calls_to("/first").len(), 1, "{backend:?}: the succeeded step never ran again");
    assert_eq!(endpoint.calls_to("/flaky").len(), 2, "{backend:?}: the failed call and the retry");
    assert_eq!(step(&done, "call")["attempts"], 2);
    let (_, history) = orchestrator.get(&format!("/v1/runs/{run_id}/events")).await;
    let retry = history["events"].as_array().unwrap().iter().find(|e| e["kind"] == "operator_retry").unwrap();
    assert_eq!((retry["data"]["by"].clone(), retry["data"]["reason"].clone()), (json!("ops"), json!("endpoint back")));
    assert!(history["events"].as_array().unwrap().iter().any(|e| e["kind"] == "run_reopened"));
}

on_both_backends!(a_failed_step_retried_with_repaired_args_calls_what_they_say_and_invalid_args_change_nothing);
async fn a_failed_step_retried_with_repaired_args_calls_what_they_say_and_invalid_args_change_nothing(
    backend: Backend,
) {
    let dir = TempDir::new();
    let endpoint = Endpoint::start(|call| match call.path.as_str() {
        "/typo" => (404, json!({"error": "no such page"})),
        _ => (200, json!({"ok": true})),
    })
    .await;
    let orchestrator = Orchestrator::start(backend, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let run_id = orchestrator.submit(plan(&endpoint, "/typo")).await;
    let failed = orchestrator.wait_run(&run_id, "the run fails", LIMIT, ended).await;
    assert_eq!(failed["status"], "failed", "{backend:?}: {failed:#}");

    let path = format!("/v1/runs/{run_id}/steps/call:retry");
    let (code, refused) = orchestrator.post(&path, &json!({"args": {"method": "GET"}, "by": "ops"})).await;
    assert_eq!((code, refused["code"].clone()), (422, json!("invalid_args")), "{backend:?}: {refused:#}");
    assert!(refused["details"]["diagnostics"].as_array().is_some_and(|d| !d.is_empty()), "{refused:#}");
    assert_eq!(orchestrator.run(&run_id).await["status"], "failed", "{backend:?}: a refused retry changes nothing");
    let (code, _) = orchestrator.post(&format!("/v1/runs/{run_id}/steps/first:retry"), &json!({})).await;
    assert_eq!(code, 409, "{backend:?}: a succeeded step cannot be retried");

    let repaired = json!({"method": "GET", "url": format!("{}/fixed", endpoint.url())});
    let (code, body) = orchestrator.post(&path, &json!({"args": repaired, "by": "ops"})).await;
    assert_eq!(code, 200, "{backend:?}: {body:#}");
    let done = orchestrator.wait_run(&run_id, "the repaired run ends", LIMIT, ended).await;
    assert_eq!(done["status"], "succeeded", "{backend:?}: {done:#}");
    assert_eq!(endpoint.calls_to("/first").len(), 1, "{backend:?}: the succeeded step never ran again");
    assert_eq!(endpoint.calls_to("/typo").len(), 1, "{backend:?}: the plan's args were not used again");
    let fixed = endpoint.calls_to("/fixed");
    assert_eq!(fixed.len(), 1, "{backend:?}: the repaired args were");
    let key = fixed[0].headers.get("idempotency-key").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(key, Some(format!("{run_id}/call/1")), "{backend:?}: repaired args, a new idempotency key");
    let token = [("CAIRN_API_TOKEN", orchestrator.api_token().to_owned())];
    let out = cairn_with(dir.path(), &["show", &run_id, "--server", &orchestrator.base_url], &token).await;
    assert_eq!(out.code, Some(0), "{backend:?}: {}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("args (repaired, revision 1)") && out.stdout.contains("/fixed"), "{}", out.stdout);
    let out = cairn_with(dir.path(), &["runs", "--server", &orchestrator.base_url], &token).await;
    let line = out.stdout.lines().find(|l| l.starts_with(&run_id)).unwrap_or_default().to_owned();
    assert!(line.contains("succeeded") && line.contains("created 20") && line.contains("took "), "{}", out.stdout);
}

on_both_backends!(a_redriven_run_runs_its_failed_steps_again_and_nothing_that_succeeded);
async fn a_redriven_run_runs_its_failed_steps_again_and_nothing_that_succeeded(backend: Backend) {
    let dir = TempDir::new();
    let healthy = Arc::new(AtomicBool::new(false));
    let up = healthy.clone();
    let endpoint = Endpoint::start(move |call| match call.path.as_str() {
        "/flaky" | "/other" if !up.load(Ordering::SeqCst) => (500, json!({"error": "down"})),
        _ => (200, json!({"ok": true})),
    })
    .await;
    let orchestrator = Orchestrator::start(backend, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let mut plan = plan(&endpoint, "/flaky");
    plan["steps"].as_array_mut().unwrap().push(json!({"id": "other", "action": "http.request",
        "idempotent": true, "retry": {"max_attempts": 1},
        "args": {"method": "GET", "url": format!("{}/other", endpoint.url())}}));
    let run_id = orchestrator.submit(plan).await;
    let failed = orchestrator.wait_run(&run_id, "the run fails", LIMIT, ended).await;
    assert_eq!(failed["status"], "failed", "{backend:?}: {failed:#}");
    assert_eq!(step(&failed, "other")["status"], "failed");

    healthy.store(true, Ordering::SeqCst);
    let token = [("CAIRN_API_TOKEN", orchestrator.api_token().to_owned())];
    let args = ["redrive", &run_id, "--reason", "upstream fixed", "--server", &orchestrator.base_url];
    let out = cairn_with(dir.path(), &args, &token).await;
    assert_eq!(out.code, Some(0), "{backend:?}: cairn redrive: {}{}", out.stdout, out.stderr);

    let done = orchestrator.wait_run(&run_id, "the redriven run ends", LIMIT, ended).await;
    assert_eq!(done["status"], "succeeded", "{backend:?}: {done:#}");
    assert_eq!(endpoint.calls_to("/first").len(), 1, "{backend:?}: the succeeded step never ran again");
    assert_eq!(endpoint.calls_to("/flaky").len(), 2, "{backend:?}");
    assert_eq!(endpoint.calls_to("/other").len(), 2, "{backend:?}");
    let (code, refused) = orchestrator.post(&format!("/v1/runs/{run_id}:redrive"), &json!({})).await;
    assert_eq!((code, refused["code"].clone()), (409, json!("wrong_state")), "{backend:?}: a succeeded run");
}

on_both_backends!(a_rerun_from_a_step_reuses_the_outputs_before_it_and_runs_it_and_what_follows);
async fn a_rerun_from_a_step_reuses_the_outputs_before_it_and_runs_it_and_what_follows(backend: Backend) {
    let dir = TempDir::new();
    let healthy = Arc::new(AtomicBool::new(false));
    let up = healthy.clone();
    let endpoint = Endpoint::start(move |call| match call.path.as_str() {
        "/flaky" if !up.load(Ordering::SeqCst) => (500, json!({"error": "down"})),
        _ => (200, json!({"ok": true})),
    })
    .await;
    let orchestrator = Orchestrator::start(backend, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let old = orchestrator.submit(plan(&endpoint, "/flaky")).await;
    let failed = orchestrator.wait_run(&old, "the run fails", LIMIT, ended).await;
    assert_eq!(failed["status"], "failed", "{backend:?}: {failed:#}");

    healthy.store(true, Ordering::SeqCst);
    let token = [("CAIRN_API_TOKEN", orchestrator.api_token().to_owned())];
    let args = ["rerun", &old, "--from", "call", "--server", &orchestrator.base_url];
    let out = cairn_with(dir.path(), &args, &token).await;
    assert_eq!(out.code, Some(0), "{backend:?}: cairn rerun: {}{}", out.stdout, out.stderr);
    let new = out.stdout.trim().to_owned();

    let done = orchestrator.wait_run(&new, "the new run ends", LIMIT, ended).await;
    assert_eq!(done["status"], "succeeded", "{backend:?}: {done:#}");
    assert_eq!(done["rerun_of"], old.as_str(), "{backend:?}: linked to the old run");
    assert_eq!(step(&done, "first")["status"], "succeeded", "{backend:?}: reused");
    assert_eq!(endpoint.calls_to("/first").len(), 1, "{backend:?}: the reused step did not run again");
    assert_eq!(endpoint.calls_to("/flaky").len(), 2, "{backend:?}: the old run's call and the new run's");
    assert_eq!(orchestrator.run(&old).await["status"], "failed", "{backend:?}: the old run is unchanged");
}

on_both_backends!(a_paused_run_lets_its_running_step_finish_and_starts_the_next_only_when_resumed);
async fn a_paused_run_lets_its_running_step_finish_and_starts_the_next_only_when_resumed(backend: Backend) {
    let dir = TempDir::new();
    let endpoint = Endpoint::start(|_| (200, json!({"ok": true}))).await;
    let orchestrator = Orchestrator::start(backend, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let plan = json!({"steps": [
        {"id": "first", "action": "http.request", "args": {"method": "GET", "url": format!("{}/slow?ms=held", endpoint.url())}},
        {"id": "second", "action": "http.request", "depends_on": ["first"],
         "args": {"method": "GET", "url": format!("{}/second", endpoint.url())}}]});
    let run_id = orchestrator.submit(plan).await;
    within(LIMIT, "the first step calls the endpoint", || async {
        (!endpoint.calls_to("/slow").is_empty()).then_some(())
    })
    .await;
    let token = [("CAIRN_API_TOKEN", orchestrator.api_token().to_owned())];
    let pause = ["pause", &run_id, "--reason", "maintenance", "--server", &orchestrator.base_url];
    let out = cairn_with(dir.path(), &pause, &token).await;
    assert_eq!(out.code, Some(0), "{backend:?}: cairn pause: {}{}", out.stdout, out.stderr);

    endpoint.release();
    let paused = orchestrator
        .wait_run(&run_id, "the running step finishes", LIMIT, |r| step(r, "first")["status"] == "succeeded")
        .await;
    assert_eq!(paused["status"], "paused", "{backend:?}: {paused:#}");
    holds_for(Duration::from_secs(2), "no call to /second while paused", || async {
        endpoint.calls_to("/second").is_empty()
    })
    .await;

    let resume = ["resume", &run_id, "--server", &orchestrator.base_url];
    let out = cairn_with(dir.path(), &resume, &token).await;
    assert_eq!(out.code, Some(0), "{backend:?}: cairn resume: {}{}", out.stdout, out.stderr);
    let watch = ["watch", &run_id, "--server", &orchestrator.base_url];
    let out = cairn_with(dir.path(), &watch, &token).await;
    assert_eq!(
        out.code,
        Some(0),
        "{backend:?}: cairn watch follows the run to its success: {}{}",
        out.stdout,
        out.stderr
    );
    let done = orchestrator.wait_run(&run_id, "the resumed run ends", LIMIT, ended).await;
    assert_eq!(done["status"], "succeeded", "{backend:?}: {done:#}");
    assert_eq!((endpoint.calls_to("/slow").len(), endpoint.calls_to("/second").len()), (1, 1), "{backend:?}");
}

on_both_backends!(d16_d_a_retried_step_gets_its_full_timeout_on_every_new_attempt);
async fn d16_d_a_retried_step_gets_its_full_timeout_on_every_new_attempt(backend: Backend) {
    let dir = TempDir::new();
    let endpoint = Endpoint::start(|_| (200, json!({}))).await;
    let orchestrator = Orchestrator::start(backend, dir.path(), 2_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let plan = json!({"steps": [{"id": "call", "action": "http.request", "timeout_ms": 2000, "idempotent": true,
            "args": {"method": "GET", "url": format!("{}/slow?ms=600000", endpoint.url())},
            "retry": {"max_attempts": 2, "initial_interval_ms": 500, "jitter": "none"}}]});
    let run_id = orchestrator.submit(plan).await;
    let failed = orchestrator.wait_run(&run_id, "the run fails", LIMIT, ended).await;
    assert_eq!(failed["status"], "failed", "{backend:?}: {failed:#}");
    // The retry comes long after the first attempt started (two 2 s timeouts and a backoff).
    let (code, body) = orchestrator.post(&format!("/v1/runs/{run_id}/steps/call:retry"), &json!({})).await;
    assert_eq!(code, 200, "{backend:?}: {body:#}");
    let again = orchestrator.wait_run(&run_id, "the retried run ends", LIMIT, ended).await;

    assert_eq!(again["status"], "failed", "{backend:?}: {again:#}");
    let call = step(&again, "call");
    assert_eq!(call["attempts"], 4, "{backend:?}: a fresh budget of 2 attempts after the first 2");
    let failures = call["failures"].as_array().unwrap().clone();
    assert_eq!(failures.len(), 4, "{backend:?}: {failures:#?}");
    for (i, f) in failures.iter().enumerate() {
        assert_eq!((f["attempt"].clone(), f["code"].clone()), (json!(i + 1), json!("timeout")), "{f:#}");
        let took = f["ended_at_ms"].as_i64().unwrap() - f["started_at_ms"].as_i64().unwrap();
        assert!((1_500..=3_500).contains(&took), "{backend:?}: attempt {} took about 2 s, not {took} ms", i + 1);
    }
    assert_eq!(endpoint.calls_to("/slow").len(), 4, "{backend:?}: one call per attempt");
}
