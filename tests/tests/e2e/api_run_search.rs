//! Finding runs and acting on many through the REST API of a real server: labels set at submission and by a
//! schedule, every `GET /v1/runs` filter, cursor pages, the attention listing with its reasons, bad filters
//! named, and the bulk operations (`dry_run` first) recorded in each run's history.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_core::failure::Failure;
use cairn_tests::http::HttpApp;

use cairn_tests::{Backend, Outcome, TestWorker, on_both_backends};
use serde_json::{Value, json};

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new("2027-05-01T08:00:00Z".parse().unwrap()))
}

async fn submit(app: &HttpApp, goal: &str, action: &str, labels: Value) -> String {
    let plan = json!({"goal": goal, "steps": [{"id": "a", "action": action, "args": {"text": goal}}]});
    let (status, view) = app.post("/v1/runs", &json!({"plan": plan, "labels": labels})).await;
    assert_eq!(status, 201, "{view:#}");
    view["id"].as_str().unwrap().to_owned()
}

async fn listed(app: &HttpApp, query: &str) -> Vec<String> {
    let (status, page) = app.get(&format!("/v1/runs?{query}")).await;
    assert_eq!(status, 200, "{query}: {page:#}");
    page["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
}

on_both_backends!(runs_are_found_by_labels_goal_action_status_and_time_page_by_page);
async fn runs_are_found_by_labels_goal_action_status_and_time_page_by_page(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let rain =
        submit(&app, "Remind me to take an Umbrella", "notify.send", json!({"env": "prod", "team": "ops"})).await;
    app.set_time("2027-05-01T08:00:01Z");
    let sun = submit(&app, "sunscreen", "noop", json!({"env": "prod"})).await;
    app.set_time("2027-05-01T08:00:02Z");
    let dev = submit(&app, "umbrella for dev", "noop", json!({"env": "dev", "team": "ops"})).await;

    let (_, view) = app.get(&format!("/v1/runs/{rain}")).await;
    assert_eq!(view["goal"], "Remind me to take an Umbrella", "{backend:?}: the run view has the goal");
    assert_eq!(view["labels"], json!({"env": "prod", "team": "ops"}), "{backend:?}: and the labels");
    assert_eq!(listed(&app, "label=env:prod").await, [sun.clone(), rain.clone()], "{backend:?}: newest first");
    assert_eq!(
        listed(&app, "label=env:prod&label=team:ops").await,
        vec![rain.clone()],
        "{backend:?}: every label matches"
    );
    assert_eq!(listed(&app, "q=UMBRELLA").await, [dev.clone(), rain.clone()], "{backend:?}: q ignores case");
    assert_eq!(listed(&app, "action=notify.send").await, vec![rain.clone()], "{backend:?}");
    assert_eq!(listed(&app, "created_after=2027-05-01T08:00:01Z").await, [dev.clone(), sun.clone()], "{backend:?}");
    assert_eq!(listed(&app, "status=pending&label=team:ops").await, [dev.clone(), rain.clone()], "{backend:?}");

    let (_, first) = app.get("/v1/runs?limit=2").await;
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let (_, second) = app.get(&format!("/v1/runs?limit=2&cursor={cursor}")).await;
    assert_eq!(second["runs"][0]["id"], json!(rain), "{backend:?}: the cursor continues after the first page");
    assert_eq!(second["next_cursor"], Value::Null, "{backend:?}: the last page says so");
    let (_, offset) = app.get("/v1/runs?limit=2&offset=2").await;
    assert_eq!(offset["runs"], second["runs"], "{backend:?}: offset still pages");
}

on_both_backends!(bad_labels_and_filters_are_refused_naming_what_is_wrong);
async fn bad_labels_and_filters_are_refused_naming_what_is_wrong(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let plan = json!({"steps": [{"id": "a", "action": "noop", "args": {}}]});
    let many: serde_json::Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (labels, says) in [
        (json!({"Env": "prod"}), "Env"),
        (Value::Object(many), "at most 16"),
        (json!({"k": "v".repeat(257)}), "257 characters"),
        (json!({"k": "a\u{0}b"}), "U+0000"),
    ] {
        let (status, body) = app.post("/v1/runs", &json!({"plan": plan, "labels": labels})).await;
        assert_eq!((status, body["code"].clone()), (422, json!("invalid_labels")), "{backend:?}: {body:#}");
        assert!(body["message"].as_str().unwrap().contains(says), "{backend:?}: {body:#}");
    }
    assert!(app.runs().await.is_empty(), "{backend:?}: nothing was stored");
    for (query, names) in [
        ("label=env", "label"),
        ("status=done", "done"),
        ("sort=newest", "sort"),
        ("cursor=zzz", "cursor"),
        ("created_before=tomorrow", "created_before"),
    ] {
        let (status, body) = app.get(&format!("/v1/runs?{query}")).await;
        assert_eq!(status, 400, "{backend:?}: {query}: {body:#}");
        assert!(body["message"].as_str().unwrap().contains(names), "{backend:?}: {query}: {body:#}");
    }
}

on_both_backends!(runs_needing_attention_say_which_step_and_why);
async fn runs_needing_attention_say_which_step_and_why(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let gate = json!({"steps": [{"id": "gate", "action": "noop", "args": {}, "approval": {"required": true}}]});
    let (_, waiting) = app.post("/v1/runs", &json!({"plan": gate})).await;
    let fine = submit(&app, "fine", "noop", json!({})).await;
    TestWorker::new("w").echo("noop").run_until_idle(app.engine()).await;
    let (_, page) = app.get("/v1/runs?attention=true").await;
    let runs = page["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{backend:?}: {page:#}");
    assert_eq!(runs[0]["id"], waiting["id"], "{backend:?}: {fine} needs nothing");
    assert_eq!(runs[0]["attention"][0]["step_id"], "gate", "{backend:?}: {page:#}");
    assert_eq!(runs[0]["attention"][0]["reason"], "waiting_approval", "{backend:?}: {page:#}");
}

on_both_backends!(bulk_operations_count_first_then_act_on_each_matching_run_and_record_it);
async fn bulk_operations_count_first_then_act_on_each_matching_run_and_record_it(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let a = submit(&app, "one", "notify.send", json!({"batch": "b1"})).await;
    let b = submit(&app, "two", "notify.send", json!({"batch": "b1"})).await;
    let other = submit(&app, "three", "notify.send", json!({"batch": "b2"})).await;

    let filter = json!({"filter": {"labels": {"batch": "b1"}}, "dry_run": true});
    let (status, counted) = app.post("/v1/runs:cancel", &filter).await;
    assert_eq!((status, counted), (200, json!({"matched": 2, "dry_run": true})), "{backend:?}");
    assert_eq!(app.run(&a).await["status"], "pending", "{backend:?}: a dry run changes nothing");

    let body = json!({"filter": {"labels": {"batch": "b1"}}, "by": "ops", "reason": "bad batch"});
    let (status, done) = app.post("/v1/runs:cancel", &body).await;
    assert_eq!((status, &done["matched"], &done["changed"], &done["more"]), (200, &json!(2), &json!(2), &json!(false)));
    for id in [&a, &b] {
        assert_eq!(app.run(id).await["status"], "cancelled", "{backend:?}: {done:#}");
        let (_, events) = app.get(&format!("/v1/runs/{id}/events")).await;
        let cancelled = events["events"].as_array().unwrap().iter().find(|e| e["kind"] == "run_cancelled").cloned();
        assert_eq!(
            cancelled.map(|e| e["data"].clone()),
            Some(json!({"by": "ops", "reason": "bad batch"})),
            "{backend:?}"
        );
    }
    assert_eq!(app.run(&other).await["status"], "pending", "{backend:?}: a run the filter does not match is untouched");

    let redrive = json!({"filter": {"status": "cancelled"}, "by": "ops", "reason": "batch fixed"});
    let (status, done) = app.post("/v1/runs:redrive", &redrive).await;
    assert_eq!((status, &done["changed"]), (200, &json!(2)), "{backend:?}: {done:#}");
    let (_, events) = app.get(&format!("/v1/runs/{a}/events")).await;
    let reopened = events["events"].as_array().unwrap().iter().find(|e| e["kind"] == "run_reopened").cloned();
    assert_eq!(
        reopened.map(|e| (e["data"]["by"].clone(), e["data"]["reason"].clone())),
        Some((json!("ops"), json!("batch fixed")))
    );
    let (status, refused) = app.post("/v1/runs:cancel", &json!({"filter": {}})).await;
    assert_eq!(status, 400, "{backend:?}: an empty filter selects nothing rather than everything: {refused:#}");
}

on_both_backends!(retry_failed_retries_every_failed_step_of_the_matching_runs);
async fn retry_failed_retries_every_failed_step_of_the_matching_runs(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let runs = [
        submit(&app, "x", "noop", json!({"job": "sync"})).await,
        submit(&app, "y", "noop", json!({"job": "sync"})).await,
    ];
    let down = TestWorker::new("w").on("noop", |_| Outcome::Fail(Failure::new("action_error", "down", false)));
    down.run_until_idle(app.engine()).await;
    for id in &runs {
        assert_eq!(app.run(id).await["status"], "failed", "{backend:?}");
    }
    let body =
        json!({"filter": {"status": "failed", "labels": {"job": "sync"}}, "by": "ops", "reason": "endpoint back"});
    let (status, done) = app.post("/v1/runs:retry-failed", &body).await;
    assert_eq!((status, &done["changed"]), (200, &json!(2)), "{backend:?}: {done:#}");
    assert_eq!(done["runs"][0]["steps"], json!(["a"]), "{backend:?}: {done:#}");
    let up = TestWorker::new("w2").echo("noop");
    up.run_until_idle(app.engine()).await;
    for id in &runs {
        let run = app.wait_run(id, "succeeded", Duration::from_secs(10), |r| r["status"] == "succeeded").await;
        assert_eq!(run["status"], "succeeded", "{backend:?}");
    }
    assert_eq!(up.calls().len(), 2, "{backend:?}: each failed step ran once more");
}

on_both_backends!(a_schedule_puts_its_labels_on_the_runs_it_starts);
async fn a_schedule_puts_its_labels_on_the_runs_it_starts(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let schedule = json!({"id": "daily", "cron": "0 9 * * *", "labels": {"source": "schedule", "env": "prod"},
        "plan": {"goal": "daily report", "steps": [{"id": "a", "action": "noop", "args": {}}]}});
    let (status, created) = app.post("/v1/schedules", &schedule).await;
    assert_eq!(status, 201, "{backend:?}: {created:#}");
    assert_eq!(created["labels"]["source"], "schedule", "{backend:?}: {created:#}");
    let (status, started) = app.post("/v1/schedules/daily:trigger", &json!({})).await;
    assert_eq!(status, 201, "{backend:?}: {started:#}");
    let found = listed(&app, "label=source:schedule").await;
    assert_eq!(found.len(), 1, "{backend:?}: the run carries the schedule's labels");
    assert_eq!(app.run(&found[0]).await["labels"], json!({"env": "prod", "source": "schedule"}), "{backend:?}");
    let bad = json!({"cron": "0 9 * * *", "labels": {"BAD": "x"}, "plan": schedule["plan"]});
    let (status, refused) = app.post("/v1/schedules", &bad).await;
    assert_eq!(status, 422, "{backend:?}: {refused:#}");
}

on_both_backends!(the_run_view_shows_each_steps_args_resolved_once_their_producers_succeeded);
async fn the_run_view_shows_each_steps_args_resolved_once_their_producers_succeeded(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let plan = json!({"steps": [
        {"id": "a", "action": "noop", "args": {"x": 7}},
        {"id": "b", "action": "noop", "args": {"y": "$a.output.x", "text": "got ${a.output.x}"}, "depends_on": ["a"]}]});
    let run = app.submit(plan).await;
    let before = app.run(&run).await;
    assert_eq!(before["steps"][0]["resolved_args"], json!({"x": 7}), "{backend:?}: no placeholder, its own args");
    assert_eq!(before["steps"][1]["resolved_args"], Value::Null, "{backend:?}: a has not succeeded yet");
    TestWorker::new("w").echo("noop").run_until_idle(app.engine()).await;
    let after = app.run(&run).await;
    assert_eq!(after["steps"][1]["args"], json!({"y": "$a.output.x", "text": "got ${a.output.x}"}), "{backend:?}");
    assert_eq!(after["steps"][1]["resolved_args"], json!({"y": 7, "text": "got 7"}), "{backend:?}: {after:#}");
}
