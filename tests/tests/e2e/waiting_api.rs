//! Durable waiting over the REST API and the `cairn` CLI, against the real orchestrator process on port 0 with a
//! manual clock: schedule CRUD, pause/resume, the fire-time preview (C18's instants), "never fires" (C21), the
//! pending-approvals listing, an approval after its timeout refused with a clear error, and event delivery.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{HttpApp, TempDir, cairn};
use cairn_tests::{Backend, on_both_backends};
use jiff::Timestamp;
use serde_json::json;

fn clock(at: &str) -> Arc<ManualClock> {
    Arc::new(ManualClock::new(at.parse::<Timestamp>().unwrap()))
}

fn plan() -> serde_json::Value {
    json!({"steps": [{"id": "n", "action": "notify.send", "args": {"text": "umbrella"}}]})
}

on_both_backends!(schedules_are_managed_and_previewed_over_the_api_and_the_cli);
async fn schedules_are_managed_and_previewed_over_the_api_and_the_cli(backend: Backend) {
    let app = HttpApp::start(backend, clock("2027-11-05T12:00:00Z"), None).await;
    let body = json!({"schedule_id": "daily-umbrella", "cron": "0 9 * * *", "tz": "America/New_York", "plan": plan()});
    let (status, created) = app.post("/v1/schedules", &body).await;
    assert_eq!(status, 201, "{backend:?}: {created:#}");
    assert_eq!(created["next_fire_at"], "2027-11-05T13:00:00Z", "{backend:?}");
    assert!(created["next_fire_local"].as_str().unwrap().starts_with("2027-11-05T09:00:00-04:00"), "{created:#}");
    let (status, _) = app.post("/v1/schedules", &body).await;
    assert_eq!(status, 409, "{backend:?}: the id is taken");
    let never = json!({"cron": "0 9 30 2 *", "tz": "Asia/Shanghai", "plan": plan()});
    let (status, refused) = app.post("/v1/schedules", &never).await;
    assert_eq!((status, refused["code"].as_str()), (422, Some("never_fires")), "{backend:?}: {refused:#}");
    assert!(refused["message"].as_str().unwrap().contains("never fires"), "{refused:#}");
    let bad_plan = json!({"cron": "0 9 * * *", "plan": {"steps": [{"id": "n", "action": "nope", "args": {}}]}});
    let (status, refused) = app.post("/v1/schedules", &bad_plan).await;
    assert_eq!((status, refused["code"].as_str()), (422, Some("invalid_plan")), "{backend:?}");

    let (status, next) = app.get("/v1/schedules/daily-umbrella/next?count=4").await;
    assert_eq!(status, 200, "{backend:?}");
    let at: Vec<&str> = next["next"].as_array().unwrap().iter().map(|n| n["at"].as_str().unwrap()).collect();
    assert_eq!(at, ["2027-11-05T13:00:00Z", "2027-11-06T13:00:00Z", "2027-11-07T14:00:00Z", "2027-11-08T14:00:00Z"]);

    let dir = TempDir::new();
    let out =
        cairn(dir.path(), &["schedule", "next", "daily-umbrella", "--count", "3", "--server", &app.base_url]).await;
    assert_eq!(out.code, Some(0), "{backend:?}: {}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[2].starts_with("2027-11-07T14:00:00Z  2027-11-07T09:00:00-05:00"), "{}", out.stdout);
    let out = cairn(dir.path(), &["schedule", "pause", "daily-umbrella", "--server", &app.base_url]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = cairn(dir.path(), &["schedule", "list", "--server", &app.base_url]).await;
    assert!(out.stdout.contains("daily-umbrella") && out.stdout.contains("paused"), "{}", out.stdout);
    let (_, resumed) = app.post("/v1/schedules/daily-umbrella:resume", &json!({})).await;
    assert_eq!(resumed["paused"], false, "{backend:?}");

    let patch = app.request(reqwest::Method::PATCH, "/v1/schedules/daily-umbrella").json(&json!({"cron": "0 8 * * *"}));
    let (status, patched) = HttpApp::send(patch).await;
    assert_eq!((status, patched["next_fire_at"].as_str()), (200, Some("2027-11-06T12:00:00Z")), "{patched:#}");

    let (status, shown) = app.get("/v1/schedules/daily-umbrella").await;
    assert_eq!((status, shown["cron"].as_str()), (200, Some("0 8 * * *")), "{backend:?}");
    let out = cairn(dir.path(), &["schedule", "delete", "daily-umbrella", "--server", &app.base_url]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let (status, _) = app.get("/v1/schedules/daily-umbrella").await;
    assert_eq!(status, 404, "{backend:?}: deleted");
}

on_both_backends!(approvals_are_listed_and_a_late_decision_is_refused_over_the_api);
async fn approvals_are_listed_and_a_late_decision_is_refused_over_the_api(backend: Backend) {
    let app = HttpApp::start(backend, clock("2027-06-01T09:00:00Z"), None).await;
    let run = app
        .submit(json!({"steps": [{"id": "gate", "action": "notify.send", "args": {"text": "go"},
                "approval": {"required": true, "timeout_ms": 60000, "on_timeout": "fail"}}]}))
        .await;
    let (status, listed) = app.get("/v1/approvals").await;
    assert_eq!(status, 200, "{backend:?}");
    assert_eq!(listed["approvals"][0]["run_id"], run.as_str(), "{listed:#}");
    assert_eq!(listed["approvals"][0]["on_timeout"], "fail", "{listed:#}");
    let dir = TempDir::new();
    let out = cairn(dir.path(), &["approvals", "--server", &app.base_url]).await;
    assert!(out.stdout.contains(&run) && out.stdout.contains("gate"), "{backend:?}: {}", out.stdout);
    app.set_time("2027-06-01T09:01:00Z");
    let (status, refused) = app.post(&format!("/v1/runs/{run}/steps/gate:approve"), &json!({"by": "eve"})).await;
    assert_eq!((status, refused["code"].as_str()), (409, Some("approval_timed_out")), "{refused:#}");
    assert!(refused["message"].as_str().unwrap().contains("timed out"), "{refused:#}");
    let (_, listed) = app.get("/v1/approvals").await;
    assert!(listed["approvals"].as_array().unwrap().is_empty(), "{backend:?}: {listed:#}");
}

on_both_backends!(an_event_posted_to_the_api_completes_a_waiting_step);
async fn an_event_posted_to_the_api_completes_a_waiting_step(backend: Backend) {
    let app = HttpApp::start(backend, clock("2027-06-01T09:00:00Z"), None).await;
    let run = app
        .submit(json!({"steps": [{"id": "wait", "action": "event.wait",
                "args": {"name": "parcel.delivered", "key": "p-9"}}]}))
        .await;
    // No explicit start: the submission starts a root `event.wait` before answering (while the server's
    // waiting loop may be starting it too), so an event posted right after is matched by this delivery.
    let (status, answer) = app
        .post(
            "/v1/events",
            &json!({"name": "parcel.delivered", "key": "p-9",
            "payload": {"where": "porch"}}),
        )
        .await;
    assert_eq!(status, 202, "{backend:?}: {answer:#}");
    assert_eq!(answer["matched"][0]["step_id"], "wait", "{answer:#}");
    let view = app.run(&run).await;
    assert_eq!(view["status"], "succeeded", "{view:#}");
    assert_eq!(view["steps"][0]["output"], json!({"where": "porch"}), "{backend:?}");
    let (status, _) = app.post("/v1/events", &json!({"key": "x"})).await;
    assert_eq!(status, 422, "{backend:?}: a name is required");
}
