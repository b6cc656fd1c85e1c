//! Cron schedules through the real engine and store on every available backend, driven by a manual clock (no
//! sleeping): C18 (fall-back never duplicates a tick, across a restart), C20's cron part (`30 2 * * *` in New
//! York across both 2027 DST changes), C21 (Feb 29 and Feb 30), day 31 and `L` over a year, two orchestrators on
//! one database, and an orchestrator down for three ticks under each misfire policy.
//!
//! `weather.lookup` from the cases maps to `weather.forecast`; `tz` and `schedule_id` are accepted as written.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::catalog::StaticCatalog;
use cairn_orchestrator::Engine;
use cairn_orchestrator::scheduler::{ScheduleOpError, ScheduleSpec};
use cairn_store::{ScheduleRecord, Store};
use cairn_tests::{Backend, Outcome, TestApp, TestWorker, on_both_backends};
use jiff::Timestamp;
use serde_json::{Value, json};

const MINUTE: i64 = 60_000;
const DAY: i64 = 24 * 60 * MINUTE;

fn ms(at: &str) -> i64 {
    at.parse::<Timestamp>().unwrap().as_millisecond()
}

fn iso(ms: i64) -> String {
    Timestamp::from_millisecond(ms).unwrap().to_string()
}

fn notify_plan() -> Value {
    json!({"steps": [{"id": "n", "action": "notify.send", "args": {"text": "tick"}, "depends_on": []}]})
}

async fn create(app: &TestApp, spec: Value) -> ScheduleRecord {
    let spec: ScheduleSpec = serde_json::from_value(spec).unwrap();
    app.engine.create_schedule(&spec).await.unwrap()
}

/// Nominal instants of the ticks that started a run, oldest first, as RFC 3339.
async fn fired(store: &Store, id: &str) -> Vec<String> {
    let mut ticks = store.schedule_ticks(id, 10_000).await.unwrap();
    ticks.retain(|t| t.outcome == "started");
    ticks.reverse();
    ticks.into_iter().map(|t| iso(t.fire_at_ms)).collect()
}

async fn run_count(store: &Store) -> usize {
    store.runs(None, 10_000, 0).await.unwrap().len()
}

fn worker() -> TestWorker {
    TestWorker::new("w")
        .on("weather.forecast", |_| Outcome::Succeed(json!({"precipitation_probability": 80})))
        .echo("notify.send")
}

/// Moves the clock from now to `until` in `step` ms increments, ticking and working after each.
async fn drive(app: &TestApp, until: i64, step: i64, w: &TestWorker) {
    while app.now_ms() < until {
        app.set_time_ms((app.now_ms() + step).min(until));
        app.engine.tick_schedules().await.unwrap();
        w.run_until_idle(&app.engine).await;
    }
}

on_both_backends!(c18_fall_back_never_duplicates_a_daily_tick_across_a_restart);
/// C18: a daily 09:00 New York schedule across the 2027-11-07 fall-back, with a restart after it, runs exactly
/// four times, at 09:00 local each day; never at 13:00Z on 11-07 or 11-08.
async fn c18_fall_back_never_duplicates_a_daily_tick_across_a_restart(backend: Backend) {
    let mut app = TestApp::new(backend, "2027-11-05T12:00:00Z").await;
    let s = create(
            &app,
            json!({"schedule_id": "daily-umbrella", "cron": "0 9 * * *", "tz": "America/New_York",
                "plan": {"steps": [
                    {"id": "weather", "action": "weather.forecast", "args": {"city": "New York"}, "depends_on": []},
                    {"id": "notify", "action": "notify.send",
                     "args": {"text": "rain ${weather.output.precipitation_probability}"}, "depends_on": ["weather"]}]}}),
        )
        .await;
    assert_eq!(s.next_fire_at_ms, Some(ms("2027-11-05T13:00:00Z")));
    let w = worker();
    drive(&app, ms("2027-11-07T07:00:00Z"), 5 * MINUTE, &w).await;
    app = app.restart().await; // forces any recompute
    drive(&app, ms("2027-11-09T00:00:00Z"), 5 * MINUTE, &w).await;
    let got = fired(app.store(), "daily-umbrella").await;
    assert_eq!(
        got,
        ["2027-11-05T13:00:00Z", "2027-11-06T13:00:00Z", "2027-11-07T14:00:00Z", "2027-11-08T14:00:00Z"],
        "{backend:?}: exactly four runs, 09:00 New York each day"
    );
    assert_eq!(run_count(app.store()).await, 4, "{backend:?}: four runs in the store");
    for run in app.store().runs(None, 10, 0).await.unwrap() {
        assert_eq!(run.status, "succeeded", "{backend:?}: every scheduled run ran to completion");
    }
}

on_both_backends!(c18_a_repeated_local_time_fires_once_at_its_first_occurrence);
/// C18 variant: `30 1 * * *` fires once on 2027-11-07, at the first 01:30 (05:30Z, EDT), never at 06:30Z too.
async fn c18_a_repeated_local_time_fires_once_at_its_first_occurrence(backend: Backend) {
    let mut app = TestApp::new(backend, "2027-11-06T12:00:00Z").await;
    create(&app, json!({"id": "folded", "cron": "30 1 * * *", "timezone": "America/New_York", "plan": notify_plan()}))
        .await;
    let w = worker();
    drive(&app, ms("2027-11-07T06:00:00Z"), 5 * MINUTE, &w).await;
    app = app.restart().await; // between the two 01:30s
    drive(&app, ms("2027-11-08T00:00:00Z"), 5 * MINUTE, &w).await;
    assert_eq!(fired(app.store(), "folded").await, ["2027-11-07T05:30:00Z"], "{backend:?}: once, at 05:30Z");
}

on_both_backends!(c20_a_local_time_in_the_spring_gap_fires_once_at_the_first_valid_instant);
/// C20 (cron part): `30 2 * * *` in New York fires once a day across both 2027 DST changes: at 03:00 EDT (07:00Z)
/// on 2027-03-14, when 02:30 does not exist, and once on 2027-11-07.
async fn c20_a_local_time_in_the_spring_gap_fires_once_at_the_first_valid_instant(backend: Backend) {
    let app = TestApp::new(backend, "2027-03-12T12:00:00Z").await;
    create(&app, json!({"id": "nightly", "cron": "30 2 * * *", "tz": "America/New_York", "plan": notify_plan()})).await;
    let w = worker();
    drive(&app, ms("2027-03-16T00:00:00Z"), 5 * MINUTE, &w).await;
    let spring = ["2027-03-13T07:30:00Z", "2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"];
    assert_eq!(fired(app.store(), "nightly").await, spring, "{backend:?}: spring forward");
    app.set_time("2027-11-05T12:00:00Z");
    app.engine.tick_schedules().await.unwrap(); // the ticks between March and November are missed: one run
    let before = fired(app.store(), "nightly").await.len();
    drive(&app, ms("2027-11-09T00:00:00Z"), 5 * MINUTE, &w).await;
    let autumn: Vec<String> = fired(app.store(), "nightly").await.split_off(before);
    assert_eq!(
        autumn,
        ["2027-11-06T06:30:00Z", "2027-11-07T07:30:00Z", "2027-11-08T07:30:00Z"],
        "{backend:?}: fall back: once a day"
    );
}

on_both_backends!(c21_a_leap_day_schedule_fires_only_on_leap_days);
/// C21: `0 9 29 2 *` in Shanghai: next at creation is 2028-02-29T01:00Z; it fires on 2028-02-29 and 2032-02-29
/// only; the next fire after the first is 2032-02-29T01:00Z, found quickly.
async fn c21_a_leap_day_schedule_fires_only_on_leap_days(backend: Backend) {
    let app = TestApp::new(backend, "2027-03-01T00:00:00Z").await;
    let s = create(
        &app,
        json!({"schedule_id": "leap", "cron": "0 9 29 2 *", "tz": "Asia/Shanghai",
            "plan": {"steps": [{"id": "n", "action": "notify.send", "args": {"text": "leap day"}, "depends_on": []}]}}),
    )
    .await;
    assert_eq!(s.next_fire_at_ms, Some(ms("2028-02-29T01:00:00Z")), "{backend:?}: next at creation");
    let w = worker();
    // One step a day, 30 s after 01:00Z (09:00 Shanghai), for five years.
    app.set_time("2027-03-01T01:00:30Z");
    drive(&app, ms("2028-03-01T01:00:30Z"), DAY, &w).await;
    let next = app.engine.schedule_upcoming("leap", 1).await.unwrap();
    assert_eq!(next, [ms("2032-02-29T01:00:00Z")].map(|m| Timestamp::from_millisecond(m).unwrap()));
    drive(&app, ms("2032-03-01T01:00:30Z"), DAY, &w).await;
    assert_eq!(
        fired(app.store(), "leap").await,
        ["2028-02-29T01:00:00Z", "2032-02-29T01:00:00Z"],
        "{backend:?}: nothing on Feb 28 or Mar 1 in 2029-2031"
    );
}

on_both_backends!(c21_a_schedule_that_never_fires_is_rejected);
/// C21 variant: a date that never exists is refused at creation with "never fires" (it returns: the search is
/// bounded, not a hang).
async fn c21_a_schedule_that_never_fires_is_rejected(backend: Backend) {
    let app = TestApp::new(backend, "2027-03-01T00:00:00Z").await;
    let spec: ScheduleSpec = serde_json::from_value(
        json!({"id": "never", "cron": "0 9 30 2 *", "tz": "Asia/Shanghai", "plan": notify_plan()}),
    )
    .unwrap();
    let err = app.engine.create_schedule(&spec).await.unwrap_err();
    assert!(matches!(err, ScheduleOpError::Invalid(_)), "{backend:?}: {err:?}");
    assert!(err.to_string().contains("never fires"), "{backend:?}: {err}");
    assert!(app.store().schedule("never").await.unwrap().is_none(), "{backend:?}: nothing stored");
}

on_both_backends!(day_31_and_last_day_schedules_follow_the_calendar_over_a_year);
/// `0 9 31 * *` fires only in the seven months with 31 days; `0 9 L * *` on each month's last day, Feb 29 in 2028.
async fn day_31_and_last_day_schedules_follow_the_calendar_over_a_year(backend: Backend) {
    let app = TestApp::new(backend, "2027-01-01T00:00:00Z").await;
    let plan = notify_plan();
    create(&app, json!({"id": "d31", "cron": "0 9 31 * *", "tz": "Europe/Paris", "plan": plan, "overlap": "allow"}))
        .await;
    app.set_time("2027-01-01T08:00:30Z"); // 09:00 Paris in winter
    let w = TestWorker::new("idle");
    drive(&app, ms("2028-01-01T08:00:30Z"), DAY / 2, &w).await;
    let months: Vec<String> = fired(app.store(), "d31").await.iter().map(|t| t[..10].to_owned()).collect();
    assert_eq!(
        months,
        ["2027-01-31", "2027-03-31", "2027-05-31", "2027-07-31", "2027-08-31", "2027-10-31", "2027-12-31"],
        "{backend:?}"
    );
    create(&app, json!({"id": "last", "cron": "0 9 L * *", "tz": "UTC", "plan": notify_plan(), "overlap": "allow"}))
        .await;
    drive(&app, ms("2029-01-01T00:00:00Z"), DAY / 2, &w).await;
    let last: Vec<String> = fired(app.store(), "last").await.iter().map(|t| t[..10].to_owned()).collect();
    assert_eq!(last.len(), 12, "{backend:?}: {last:?}");
    assert_eq!(last[1], "2028-02-29", "{backend:?}: the leap day is February's last");
    assert_eq!(last[3], "2028-04-30", "{backend:?}");
}

on_both_backends!(two_orchestrators_start_one_run_per_tick);
/// Two orchestrators over one database ticking the same schedule at the same moments start one run per tick.
async fn two_orchestrators_start_one_run_per_tick(backend: Backend) {
    let app = TestApp::new(backend, "2027-01-01T10:00:00Z").await;
    let store = Store::connect(&app.url).await.unwrap();
    let catalog = Arc::new(StaticCatalog::builtin());
    let other = Engine::start(store, app.clock.clone(), catalog, app.config.clone()).await.unwrap();
    create(&app, json!({"id": "every-10", "cron": "*/10 * * * *", "plan": notify_plan(), "overlap": "allow"})).await;
    let mut started = 0;
    for _ in 0..12 {
        app.set_time_ms(app.now_ms() + 10 * MINUTE);
        let (a, b) = tokio::join!(app.engine.tick_schedules(), other.tick_schedules());
        started += a.unwrap().started.len() + b.unwrap().started.len();
    }
    assert_eq!(started, 12, "{backend:?}: one run per tick between the two");
    assert_eq!(fired(app.store(), "every-10").await.len(), 12, "{backend:?}: twelve ticks");
    assert_eq!(run_count(app.store()).await, 12, "{backend:?}: twelve runs");
}

on_both_backends!(three_missed_ticks_follow_each_misfire_policy);
/// An orchestrator down for three hourly ticks: `fire_once` starts one run (the latest tick), `skip` none,
/// `catch_up` with max 2 the latest two; all continue with the next tick.
async fn three_missed_ticks_follow_each_misfire_policy(backend: Backend) {
    let mut app = TestApp::new(backend, "2027-01-01T10:30:00Z").await;
    for (id, misfire) in [("once", "fire_once"), ("skip", "skip"), ("catch", "catch_up")] {
        create(
            &app,
            json!({"id": id, "cron": "0 * * * *", "plan": notify_plan(), "misfire": misfire,
                "catch_up_max": 2, "overlap": "allow"}),
        )
        .await;
    }
    app.set_time("2027-01-01T13:30:00Z"); // down over 11:00, 12:00 and 13:00
    app = app.restart().await;
    let summary = app.engine.tick_schedules().await.unwrap();
    assert_eq!(fired(app.store(), "once").await, ["2027-01-01T13:00:00Z"], "{backend:?}: fire_once");
    assert!(fired(app.store(), "skip").await.is_empty(), "{backend:?}: skip");
    assert_eq!(
        fired(app.store(), "catch").await,
        ["2027-01-01T12:00:00Z", "2027-01-01T13:00:00Z"],
        "{backend:?}: catch_up max 2"
    );
    assert_eq!(summary.missed, 2 + 3 + 1, "{backend:?}: missed ticks are counted");
    for id in ["once", "skip", "catch"] {
        let s = app.store().schedule(id).await.unwrap().unwrap();
        assert_eq!(s.next_fire_at_ms, Some(ms("2027-01-01T14:00:00Z")), "{backend:?}: {id} continues");
    }
    app.set_time("2027-01-01T14:00:05Z");
    assert_eq!(app.engine.tick_schedules().await.unwrap().started.len(), 3, "{backend:?}: on time again");
}

on_both_backends!(overlap_policies_apply_to_an_open_previous_run);
/// Overlap: `skip` records the tick without a run while the previous run is open; `cancel_previous` cancels it
/// and starts the new one.
async fn overlap_policies_apply_to_an_open_previous_run(backend: Backend) {
    let app = TestApp::new(backend, "2027-01-01T10:30:00Z").await;
    create(&app, json!({"id": "skip", "cron": "0 * * * *", "plan": notify_plan()})).await;
    create(&app, json!({"id": "cancel", "cron": "0 * * * *", "plan": notify_plan(), "overlap": "cancel_previous"}))
        .await;
    for at in ["2027-01-01T11:00:00Z", "2027-01-01T12:00:00Z"] {
        app.set_time(at);
        app.engine.tick_schedules().await.unwrap(); // no worker: runs stay open
    }
    assert_eq!(fired(app.store(), "skip").await, ["2027-01-01T11:00:00Z"], "{backend:?}: second tick skipped");
    let ticks = app.store().schedule_ticks("skip", 10).await.unwrap();
    assert_eq!(ticks[0].outcome, "skipped_overlap", "{backend:?}: the skip is recorded");
    let cancel = app.store().schedule("cancel").await.unwrap().unwrap();
    let first = &app.store().schedule_ticks("cancel", 10).await.unwrap()[1];
    assert_eq!(app.run(first.run_id.as_deref().unwrap()).await.status, "cancelled", "{backend:?}");
    let last = cancel.last_run_id.unwrap();
    assert_eq!(app.run(&last).await.status, "pending", "{backend:?}: the new run is open");
}

on_both_backends!(pause_resume_preview_and_delete);
/// Pause stops ticks; resume continues from now (ticks inside the pause do not fire); the preview lists the
/// coming fire times; delete removes the schedule but not its runs.
async fn pause_resume_preview_and_delete(backend: Backend) {
    let app = TestApp::new(backend, "2027-01-01T10:30:00Z").await;
    create(&app, json!({"id": "h", "cron": "0 * * * *", "tz": "UTC", "plan": notify_plan(), "overlap": "allow"})).await;
    let next = app.engine.schedule_upcoming("h", 3).await.unwrap();
    let next: Vec<String> = next.iter().map(ToString::to_string).collect();
    assert_eq!(next, ["2027-01-01T11:00:00Z", "2027-01-01T12:00:00Z", "2027-01-01T13:00:00Z"]);
    app.engine.pause_schedule("h").await.unwrap();
    app.set_time("2027-01-01T11:00:10Z");
    assert!(app.engine.tick_schedules().await.unwrap().started.is_empty(), "{backend:?}: paused");
    app.set_time("2027-01-01T12:30:00Z");
    let s = app.engine.resume_schedule("h").await.unwrap();
    assert_eq!(s.next_fire_at_ms, Some(ms("2027-01-01T13:00:00Z")), "{backend:?}: resumes from now");
    app.set_time("2027-01-01T13:00:01Z");
    app.engine.tick_schedules().await.unwrap();
    assert_eq!(fired(app.store(), "h").await, ["2027-01-01T13:00:00Z"], "{backend:?}");
    assert!(app.engine.delete_schedule("h").await.unwrap());
    assert!(app.store().schedule("h").await.unwrap().is_none());
    assert_eq!(run_count(app.store()).await, 1, "{backend:?}: runs stay");
}
