//! Case D19 of `../shared/cases/cases2.md` (Airflow #9975, #19344): a manual start must not bypass the
//! schedule's overlap rule. `POST /v1/schedules/{id}:trigger` ("run now") follows the overlap policy exactly as a
//! tick does. Over the REST API with a manual clock; no worker runs until the test lets one, so a run stays open
//! (waiting to be claimed, which counts as open for overlap: variant b's assumed rule).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::clock::ManualClock;
use cairn_tests::http::HttpApp;
use cairn_tests::{Backend, TestWorker, on_both_backends};
use jiff::Timestamp;
use serde_json::{Value, json};

fn clock(at: &str) -> Arc<ManualClock> {
    Arc::new(ManualClock::new(at.parse::<Timestamp>().unwrap()))
}

fn schedule(overlap: &str) -> Value {
    json!({"id": "etl", "cron": "0 * * * *", "timezone": "UTC", "overlap": overlap,
           "plan": {"steps": [{"id": "load", "action": "notify.send", "args": {"text": "etl"}}]}})
}

/// Runs not yet finished, across the database.
async fn open_runs(app: &HttpApp) -> Vec<String> {
    let runs = app.runs().await;
    runs.iter()
        .filter(|r| r["status"] == "pending" || r["status"] == "running")
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn at(app: &HttpApp, when: &str) {
    app.set_time(when);
    app.engine().tick_schedules().await.unwrap();
}

on_both_backends!(d19_run_now_follows_overlap_skip_like_a_tick_and_nothing_stays_queued);
async fn d19_run_now_follows_overlap_skip_like_a_tick_and_nothing_stays_queued(backend: Backend) {
    let app = HttpApp::start(backend, clock("2027-01-01T09:59:00Z"), None).await;
    let (status, created) = app.post("/v1/schedules", &schedule("skip")).await;
    assert_eq!(status, 201, "{created:#}");
    at(&app, "2027-01-01T10:00:00Z").await;
    assert_eq!(open_runs(&app).await.len(), 1, "{backend:?}: the 10:00 run holds");

    at(&app, "2027-01-01T10:30:00Z").await;
    let (status, refused) = app.post("/v1/schedules/etl:trigger", &json!({})).await;
    assert_eq!((status, refused["code"].clone()), (409, json!("overlap_skipped")), "{backend:?}: {refused:#}");
    at(&app, "2027-01-01T11:00:00Z").await;
    assert_eq!(open_runs(&app).await.len(), 1, "{backend:?}: max_inflight(etl) ≤ 1");
    let ticks = app.engine().store().schedule_ticks("etl", 10).await.unwrap();
    let outcomes: Vec<(&str, i64)> = ticks.iter().map(|t| (t.outcome.as_str(), t.fire_at_ms)).collect();
    let ms = |s: &str| s.parse::<Timestamp>().unwrap().as_millisecond();
    let expected = [
        ("skipped_overlap", ms("2027-01-01T11:00:00Z")),
        ("skipped_overlap", ms("2027-01-01T10:30:00Z")),
        ("started", ms("2027-01-01T10:00:00Z")),
    ];
    assert_eq!(outcomes, expected, "{backend:?}: the run now and the 11:00 tick are recorded as skipped");

    // Variant d: the 10:00 run is released at 11:10; a run now then starts, and so does the 12:00 tick.
    app.set_time("2027-01-01T11:10:00Z");
    let worker = TestWorker::new("w").echo("notify.send");
    worker.run_until_idle(app.engine()).await;
    assert!(open_runs(&app).await.is_empty(), "{backend:?}");
    let (status, started) = app.post("/v1/schedules/etl:trigger", &json!({})).await;
    assert_eq!(status, 201, "{backend:?}: {started:#}");
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    assert_eq!(open_runs(&app).await, [run_id], "{backend:?}");
    worker.run_until_idle(app.engine()).await;
    at(&app, "2027-01-01T12:00:00Z").await;
    assert_eq!(open_runs(&app).await.len(), 1, "{backend:?}: the 12:00 tick ran normally");
    worker.run_until_idle(app.engine()).await;
    assert!(open_runs(&app).await.is_empty(), "{backend:?}: nothing left queued and silent");
}

on_both_backends!(d19_c_run_now_with_cancel_previous_cancels_the_open_run_first);
async fn d19_c_run_now_with_cancel_previous_cancels_the_open_run_first(backend: Backend) {
    let app = HttpApp::start(backend, clock("2027-01-01T09:59:00Z"), None).await;
    let (status, created) = app.post("/v1/schedules", &schedule("cancel_previous")).await;
    assert_eq!(status, 201, "{created:#}");
    at(&app, "2027-01-01T10:00:00Z").await;
    let first = open_runs(&app).await;
    assert_eq!(first.len(), 1);

    at(&app, "2027-01-01T10:30:00Z").await;
    let (status, started) = app.post("/v1/schedules/etl:trigger", &json!({})).await;

    assert_eq!(status, 201, "{backend:?}: {started:#}");
    assert_eq!(started["cancelled"], json!(first), "{backend:?}: the open run was cancelled first");
    assert_eq!(app.run(&first[0]).await["status"], "cancelled");
    assert_eq!(open_runs(&app).await, [started["run_id"].as_str().unwrap()], "{backend:?}: never two at once");
    let (status, _) = app.post("/v1/schedules/nope:trigger", &json!({})).await;
    assert_eq!(status, 404);
}
