//! Case D18 (`cases2.md`): catch-up after downtime creates the wrong number of runs. Schedule `sweep`,
//! `*/5 * * * *` in UTC, one `sleep` step of 1 s, through the real engine and store on every available backend
//! with a manual clock. The orchestrator runs from 09:58, fires the 10:00 tick, stops at 10:02 and is restarted
//! at 16:03 ([`TestApp::restart`] with the clock moved: no waiting pass runs in between), so the 72 ticks
//! 10:05 … 16:00 were missed. After the restart the clock moves in 5 s passes to 16:06, each pass ticking the
//! schedules (the waiting loop's `tick_schedules`) and then letting a worker hold each `sleep` attempt for its
//! second of clock time.
//!
//! What the contract says (`docs/architecture.md` §10, "Waiting"), and these tests assert:
//! - A tick's identity, its logical time, is its nominal instant, the key of its `schedule_ticks` row, written in
//!   the transaction that creates its run: never two runs with one logical time. Missed ticks that get no run are
//!   not recorded (only counted), so every tick row here is a tick that was handled.
//! - `skip`: no run for the missed ticks; the next run is the 16:05 tick's. `fire_once`: one run, logical time
//!   16:00, created at 16:03; then 16:05. `catch_up` with `catch_up_max` 10: the 10 most recent missed ticks
//!   (15:15 … 16:00), created in one pass at 16:03, oldest first (the case's "most recent ten" is Cairn's rule
//!   too; "oldest first" is the order they are created in), then 16:05.
//! - Variant b: pausing is not downtime. Resume continues from now; ticks inside the pause never fire, whatever
//!   the misfire policy (the case's assumed rule is the contract's): the next run after a resume at 16:03 is
//!   16:05's.
//! - Variant c: two orchestrators passing at the same instant after the downtime start the runs of one pass
//!   between them (the pass is fenced on the schedule's `next_fire_at`), on PostgreSQL (SQLite serves one
//!   orchestrator).
//! - Variant d: `catch_up` max 10 with `overlap: "skip"`: the overlap rule sees the runs started earlier in the
//!   same pass, so the pass starts the oldest kept tick (15:15) and records the nine others `skipped_overlap`
//!   with the open run as the reason; the 16:05 tick runs once that run finished. At most one run of the
//!   schedule is open at any pass.
//!
//! Every test ends with the invariant sweep ([`cairn_tests::invariants`]).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::catalog::StaticCatalog;
use cairn_orchestrator::Engine;
use cairn_orchestrator::scheduler::{ScheduleSpec, TickSummary};
use cairn_store::{Claimed, Report, ScheduleTick, Store};
use cairn_tests::{Backend, TestApp, invariants, on_both_backends};
use jiff::Timestamp;
use serde_json::{Value, json};

/// The case's day; any day works.
const DAY: &str = "2027-03-01";
const MINUTE: i64 = 60_000;
/// The passes after the restart: every 5 s of clock time, as the waiting loop's passes would find the ticks.
const PASS: i64 = 5_000;

fn at(time: &str) -> i64 {
    format!("{DAY}T{time}Z").parse::<Timestamp>().unwrap().as_millisecond()
}

fn hhmm(ms: i64) -> String {
    Timestamp::from_millisecond(ms).unwrap().to_string()[11..16].to_owned()
}

/// `sweep` with `policy` (misfire, catch-up and overlap fields) merged into the case's schedule.
fn schedule(id: &str, policy: Value) -> ScheduleSpec {
    let mut spec = json!({"id": id, "cron": "*/5 * * * *", "timezone": "UTC", "overlap": "allow",
        "plan": {"steps": [{"id": "nap", "action": "sleep", "args": {"duration_ms": 1000}}]}});
    for (k, v) in policy.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(spec).unwrap()
}

/// A worker for `sleep` that holds each attempt for its `duration_ms` of clock time, as a worker sleeping would:
/// claimed in one pass, completed in the first pass at or after its end.
#[derive(Default)]
struct Sleeper {
    held: Vec<(Claimed, i64)>,
}

impl Sleeper {
    async fn work(&mut self, engine: &Engine) {
        let now = engine.now_ms();
        let (done, held): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.held).into_iter().partition(|(_, end)| *end <= now);
        self.held = held;
        for (c, _) in done {
            let report = engine.complete(&c.lease, &json!({"slept": true})).await.unwrap();
            assert_eq!(report, Report::Succeeded, "a sleep ends under its lease");
        }
        for c in engine.claim("sleeper", &["sleep".to_owned()], 64).await.unwrap() {
            let end = now + c.args["duration_ms"].as_i64().unwrap();
            self.held.push((c, end));
        }
    }
}

/// The handled ticks of schedule `id`, oldest first.
async fn ticks(store: &Store, id: &str) -> Vec<ScheduleTick> {
    let mut ticks = store.schedule_ticks(id, 10_000).await.unwrap();
    ticks.sort_by_key(|t| t.fire_at_ms);
    ticks
}

/// Logical times (HH:MM) of the ticks of `id` that started a run, oldest first.
async fn started(store: &Store, id: &str) -> Vec<String> {
    ticks(store, id).await.iter().filter(|t| t.outcome == "started").map(|t| hhmm(t.fire_at_ms)).collect()
}

/// Runs of schedule `id` still open (pending or running).
async fn open_runs(store: &Store, id: &str) -> usize {
    let mut open = 0;
    for t in ticks(store, id).await {
        if let Some(run) = t.run_id {
            let status = store.run(&run).await.unwrap().unwrap().status;
            open += usize::from(status == "pending" || status == "running");
        }
    }
    open
}

/// "Never two runs with the same logical time": the started ticks of every schedule have distinct instants and
/// distinct runs, and every run in the store is the run of exactly one tick.
async fn assert_one_run_per_logical_time(store: &Store, ids: &[&str], context: &str) {
    let mut runs = Vec::new();
    for id in ids {
        let instants: Vec<i64> = ticks(store, id).await.iter().map(|t| t.fire_at_ms).collect();
        let mut distinct = instants.clone();
        distinct.dedup();
        assert_eq!(instants, distinct, "{context}: {id}: one tick row per logical time");
        runs.extend(ticks(store, id).await.into_iter().filter_map(|t| t.run_id));
    }
    let mut stored: Vec<String> = store.runs(None, 10_000, 0).await.unwrap().into_iter().map(|r| r.id).collect();
    stored.sort();
    runs.sort();
    assert_eq!(stored, runs, "{context}: every run is the run of exactly one tick");
}

/// Sets the clock to each `PASS` up to `until`: one tick pass, then the worker. Returns the most runs of `id`
/// open right after a pass.
async fn drive(app: &TestApp, sleeper: &mut Sleeper, until: i64, id: &str) -> usize {
    let mut most_open = 0;
    while app.now_ms() < until {
        app.set_time_ms((app.now_ms() + PASS).min(until));
        app.engine.tick_schedules().await.unwrap();
        most_open = most_open.max(open_runs(app.store(), id).await);
        sleeper.work(&app.engine).await;
    }
    most_open
}

/// The case up to the first pass after the restart: `sweep` with `policy`, created at 09:58; the 10:00 tick
/// fires and its run finishes; everything stops at 10:02; one orchestrator starts at 16:03 and makes its first
/// pass. Returns the app, the worker, what the first pass did, and the most runs open at once before it.
async fn down_from_10_02_to_16_03(backend: Backend, policy: Value) -> (TestApp, Sleeper, TickSummary, usize) {
    let app = TestApp::new(backend, &format!("{DAY}T09:58:00Z")).await;
    let created = app.engine.create_schedule(&schedule("sweep", policy)).await.unwrap();
    assert_eq!(created.next_fire_at_ms, Some(at("10:00:00")), "{backend:?}: the first tick is 10:00");
    let mut sleeper = Sleeper::default();
    let most_open = drive(&app, &mut sleeper, at("10:02:00"), "sweep").await;
    assert_eq!(started(app.store(), "sweep").await, ["10:00"], "{backend:?}: 10:00 ran on time");
    assert!(sleeper.held.is_empty(), "{backend:?}: and finished before the stop");
    app.set_time("2027-03-01T16:03:00Z");
    let app = app.restart().await;
    let first = app.engine.tick_schedules().await.unwrap();
    (app, sleeper, first, most_open)
}

/// The runs the first pass after the restart started, as (logical time HH:MM, created at).
async fn first_pass_runs(app: &TestApp, first: &TickSummary) -> Vec<(String, i64)> {
    let mut runs = Vec::new();
    for (_, fire_at, run) in &first.started {
        runs.push((hhmm(*fire_at), app.run(run).await.created_at_ms));
    }
    runs
}

/// The run of the 16:05 tick was created on time, at 16:05:00 (±500 ms).
async fn assert_16_05_ran_on_time(app: &TestApp, id: &str, context: &str) {
    let tick = ticks(app.store(), id).await.into_iter().find(|t| t.fire_at_ms == at("16:05:00"));
    let run = tick.and_then(|t| t.run_id).unwrap_or_else(|| panic!("{context}: the 16:05 tick started a run"));
    let created = app.run(&run).await.created_at_ms;
    assert!((created - at("16:05:00")).abs() <= 500, "{context}: the 16:05 run starts on time, not at {created}");
}

/// Every scheduled run ran its one step to the end.
async fn assert_all_succeeded(store: &Store, context: &str) {
    for run in store.runs(None, 10_000, 0).await.unwrap() {
        assert_eq!(run.status, "succeeded", "{context}: run {} finished", run.id);
    }
}

on_both_backends!(d18_skip_starts_no_run_for_missed_ticks_and_next_runs_the_16_05_tick);
/// `skip`: no run for any of the 72 missed ticks; the next run is the 16:05 tick's.
async fn d18_skip_starts_no_run_for_missed_ticks_and_next_runs_the_16_05_tick(backend: Backend) {
    let (app, mut sleeper, first, _) = down_from_10_02_to_16_03(backend, json!({"misfire": "skip"})).await;
    assert!(first.started.is_empty(), "{backend:?}: skip starts nothing for missed ticks: {first:?}");
    assert_eq!(first.missed, 72, "{backend:?}: the 72 ticks 10:05 … 16:00 are counted as missed");
    let next = app.store().schedule("sweep").await.unwrap().unwrap().next_fire_at_ms;
    assert_eq!(next, Some(at("16:05:00")), "{backend:?}: the schedule continues with 16:05");

    drive(&app, &mut sleeper, at("16:06:00"), "sweep").await;

    assert_eq!(started(app.store(), "sweep").await, ["10:00", "16:05"], "{backend:?}: no missed tick ran");
    assert_16_05_ran_on_time(&app, "sweep", &format!("{backend:?}")).await;
    assert_one_run_per_logical_time(app.store(), &["sweep"], &format!("{backend:?}")).await;
    assert_all_succeeded(app.store(), &format!("{backend:?}")).await;
    invariants::assert_hold(app.store(), &format!("{backend:?}: d18 skip")).await;
}

on_both_backends!(d18_fire_once_starts_one_run_for_16_00_at_16_03_then_the_16_05_tick);
/// `fire_once`: exactly one run for the missed ticks, logical time 16:00 (the latest missed tick), created at
/// 16:03; then the 16:05 tick.
async fn d18_fire_once_starts_one_run_for_16_00_at_16_03_then_the_16_05_tick(backend: Backend) {
    let (app, mut sleeper, first, _) = down_from_10_02_to_16_03(backend, json!({"misfire": "fire_once"})).await;
    let runs = first_pass_runs(&app, &first).await;
    assert_eq!(runs, [("16:00".to_owned(), at("16:03:00"))], "{backend:?}: one run, for 16:00, at 16:03");
    assert_eq!(first.missed, 71, "{backend:?}: the other 71 missed ticks are dropped and counted");

    drive(&app, &mut sleeper, at("16:06:00"), "sweep").await;

    assert_eq!(started(app.store(), "sweep").await, ["10:00", "16:00", "16:05"], "{backend:?}: then 16:05");
    assert_16_05_ran_on_time(&app, "sweep", &format!("{backend:?}")).await;
    assert_eq!(app.store().runs(None, 100, 0).await.unwrap().len(), 3, "{backend:?}: never more runs");
    assert_one_run_per_logical_time(app.store(), &["sweep"], &format!("{backend:?}")).await;
    assert_all_succeeded(app.store(), &format!("{backend:?}")).await;
    invariants::assert_hold(app.store(), &format!("{backend:?}: d18 fire_once")).await;
}

on_both_backends!(d18_catch_up_starts_the_ten_most_recent_missed_ticks_each_once_then_the_16_05_tick);
/// `catch_up` max 10: exactly ten runs, for the ten most recent missed ticks 15:15 … 16:00, each with its own
/// logical time, created at 16:03 oldest first; then the 16:05 tick. With `overlap: allow` they run together.
async fn d18_catch_up_starts_the_ten_most_recent_missed_ticks_each_once_then_the_16_05_tick(backend: Backend) {
    let policy = json!({"misfire": "catch_up", "catch_up_max": 10});
    let (app, mut sleeper, first, _) = down_from_10_02_to_16_03(backend, policy).await;
    let runs = first_pass_runs(&app, &first).await;
    let latest_ten: Vec<(String, i64)> =
        (0..10).map(|i| (hhmm(at("15:15:00") + i * 5 * MINUTE), at("16:03:00"))).collect();
    assert_eq!(runs, latest_ten, "{backend:?}: 15:15 … 16:00, oldest first, all created at 16:03");
    assert_eq!(first.missed, 62, "{backend:?}: the 62 older missed ticks are dropped and counted");
    let mut created = Vec::new();
    for (_, _, run) in &first.started {
        let events = app.store().events(run, 0, 100).await.unwrap();
        created.push(events.iter().find(|e| e.kind == "run_created").unwrap().id);
    }
    assert!(created.is_sorted(), "{backend:?}: created oldest tick first: {created:?}");

    let most_open = drive(&app, &mut sleeper, at("16:06:00"), "sweep").await;

    let mut expected = vec!["10:00".to_owned()];
    expected.extend(latest_ten.into_iter().map(|(t, _)| t));
    expected.push("16:05".to_owned());
    assert_eq!(started(app.store(), "sweep").await, expected, "{backend:?}: never more runs than the ten");
    assert_eq!(most_open, 10, "{backend:?}: overlap allow lets the ten run together");
    assert_16_05_ran_on_time(&app, "sweep", &format!("{backend:?}")).await;
    assert_eq!(app.store().runs(None, 100, 0).await.unwrap().len(), 12, "{backend:?}: 1 + 10 + 1 runs");
    assert_one_run_per_logical_time(app.store(), &["sweep"], &format!("{backend:?}")).await;
    assert_all_succeeded(app.store(), &format!("{backend:?}")).await;
    invariants::assert_hold(app.store(), &format!("{backend:?}: d18 catch_up")).await;
}

on_both_backends!(d18_b_a_pause_is_not_downtime_resume_catches_nothing_up_and_runs_the_16_05_tick);
/// Variant b: the schedule (one per misfire policy) is paused at 10:02 while the orchestrator keeps passing
/// every minute, and resumed at 16:03: no policy catches up (ticks inside a pause never fire), and the next run
/// of each is the 16:05 tick's.
async fn d18_b_a_pause_is_not_downtime_resume_catches_nothing_up_and_runs_the_16_05_tick(backend: Backend) {
    let policies = [
        ("sweep-skip", json!({"misfire": "skip"})),
        ("sweep-once", json!({"misfire": "fire_once"})),
        ("sweep-catch", json!({"misfire": "catch_up", "catch_up_max": 10})),
    ];
    let ids = policies.clone().map(|(id, _)| id);
    let app = TestApp::new(backend, &format!("{DAY}T09:58:00Z")).await;
    for (id, policy) in &policies {
        app.engine.create_schedule(&schedule(id, policy.clone())).await.unwrap();
    }
    let mut sleeper = Sleeper::default();
    drive(&app, &mut sleeper, at("10:02:00"), ids[0]).await;
    for id in ids {
        app.engine.pause_schedule(id).await.unwrap();
    }
    while app.now_ms() < at("16:03:00") {
        app.set_time_ms(app.now_ms() + MINUTE);
        let pass = app.engine.tick_schedules().await.unwrap();
        assert!(pass.started.is_empty(), "{backend:?}: nothing fires while paused: {pass:?}");
    }
    for id in ids {
        let resumed = app.engine.resume_schedule(id).await.unwrap();
        assert_eq!(resumed.next_fire_at_ms, Some(at("16:05:00")), "{backend:?}: {id} resumes from now");
    }
    let first = app.engine.tick_schedules().await.unwrap();
    assert!(first.started.is_empty(), "{backend:?}: no catch-up after a resume: {first:?}");
    assert_eq!(first.missed, 0, "{backend:?}: ticks inside the pause are not even missed");

    drive(&app, &mut sleeper, at("16:06:00"), ids[0]).await;

    for id in ids {
        assert_eq!(started(app.store(), id).await, ["10:00", "16:05"], "{backend:?}: {id}: nothing in between");
        assert_16_05_ran_on_time(&app, id, &format!("{backend:?}: {id}")).await;
    }
    assert_one_run_per_logical_time(app.store(), &ids, &format!("{backend:?}")).await;
    assert_all_succeeded(app.store(), &format!("{backend:?}")).await;
    invariants::assert_hold(app.store(), &format!("{backend:?}: d18 b")).await;
}

/// Variant c: two orchestrators over one PostgreSQL database, both stopped over the downtime, start at 16:03 and
/// pass at the same instant (twice: the missed ticks at 16:03, the on-time tick at 16:05), for one schedule per
/// misfire policy. Between them they start exactly the runs one orchestrator would, none twice.
#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: several orchestrators need PostgreSQL")]
async fn d18_c_two_orchestrators_passing_at_once_after_the_downtime_start_no_logical_time_twice() {
    let policies = [
        ("sweep-skip", json!({"misfire": "skip"}), 0),
        ("sweep-once", json!({"misfire": "fire_once"}), 1),
        ("sweep-catch", json!({"misfire": "catch_up", "catch_up_max": 10}), 10),
    ];
    let ids = policies.clone().map(|(id, _, _)| id);
    let app = TestApp::new(Backend::Postgres, &format!("{DAY}T09:58:00Z")).await;
    for (id, policy, _) in &policies {
        app.engine.create_schedule(&schedule(id, policy.clone())).await.unwrap();
    }
    let mut sleeper = Sleeper::default();
    drive(&app, &mut sleeper, at("10:02:00"), ids[0]).await;
    app.set_time("2027-03-01T16:03:00Z");
    let app = app.restart().await;
    let store = Store::connect(&app.url).await.unwrap();
    let other = Engine::start(store, app.clock.clone(), Arc::new(StaticCatalog::builtin()), app.config.clone());
    let other = other.await.unwrap();

    let (a, b) = tokio::join!(app.engine.tick_schedules(), other.tick_schedules());
    let (a, b) = (a.unwrap(), b.unwrap());
    for (id, _, runs) in &policies {
        let of = |s: &TickSummary| s.started.iter().filter(|r| r.0 == *id).count();
        assert_eq!(of(&a) + of(&b), *runs, "{id}: the policy's runs, started once between the two: {a:?} {b:?}");
    }
    sleeper.work(&app.engine).await;
    app.set_time("2027-03-01T16:05:00Z");
    let (a, b) = tokio::join!(app.engine.tick_schedules(), other.tick_schedules());
    assert_eq!(a.unwrap().started.len() + b.unwrap().started.len(), 3, "one 16:05 run per schedule");
    drive(&app, &mut sleeper, at("16:06:00"), ids[0]).await;

    assert_eq!(started(app.store(), "sweep-skip").await, ["10:00", "16:05"]);
    assert_eq!(started(app.store(), "sweep-once").await, ["10:00", "16:00", "16:05"]);
    assert_eq!(started(app.store(), "sweep-catch").await.len(), 12, "10:00, 15:15 … 16:00, 16:05");
    assert_one_run_per_logical_time(app.store(), &ids, "two orchestrators").await;
    assert_all_succeeded(app.store(), "two orchestrators").await;
    invariants::assert_hold(app.store(), "d18 c").await;
}

on_both_backends!(d18_d_catch_up_with_overlap_skip_runs_one_at_a_time_and_records_the_skipped_ticks);
/// Variant d: `catch_up` max 10 with `overlap: "skip"`. The pass at 16:03 starts 15:15's run and records 15:20 …
/// 16:00 as `skipped_overlap`, naming that open run; once it finished, 16:05 runs. At most one run of the schedule
/// is open after any pass, before the downtime or after it.
async fn d18_d_catch_up_with_overlap_skip_runs_one_at_a_time_and_records_the_skipped_ticks(backend: Backend) {
    let policy = json!({"misfire": "catch_up", "catch_up_max": 10, "overlap": "skip"});
    let (app, mut sleeper, first, before) = down_from_10_02_to_16_03(backend, policy).await;
    let runs = first_pass_runs(&app, &first).await;
    assert_eq!(runs, [("15:15".to_owned(), at("16:03:00"))], "{backend:?}: the oldest kept tick runs");
    assert_eq!((first.skipped_overlap, first.missed), (9, 62), "{backend:?}: nine skipped, 62 dropped");
    let open_run = &first.started[0].2;
    let skipped: Vec<ScheduleTick> =
        ticks(app.store(), "sweep").await.into_iter().filter(|t| t.outcome == "skipped_overlap").collect();
    let skipped_at: Vec<String> = skipped.iter().map(|t| hhmm(t.fire_at_ms)).collect();
    let nine: Vec<String> = (1..10).map(|i| hhmm(at("15:15:00") + i * 5 * MINUTE)).collect();
    assert_eq!(skipped_at, nine, "{backend:?}: 15:20 … 16:00 recorded as skipped");
    for t in &skipped {
        assert!(t.run_id.is_none(), "{backend:?}: a skipped tick has no run");
        assert_eq!(t.detail, Some(json!({"open_runs": [open_run]})), "{backend:?}: the reason is the open run");
    }

    let after = drive(&app, &mut sleeper, at("16:06:00"), "sweep").await;

    assert_eq!(before.max(after), 1, "{backend:?}: at most one run of the schedule open at any pass");
    assert_eq!(started(app.store(), "sweep").await, ["10:00", "15:15", "16:05"], "{backend:?}");
    assert_16_05_ran_on_time(&app, "sweep", &format!("{backend:?}")).await;
    assert_one_run_per_logical_time(app.store(), &["sweep"], &format!("{backend:?}")).await;
    assert_all_succeeded(app.store(), &format!("{backend:?}")).await;
    invariants::assert_hold(app.store(), &format!("{backend:?}: d18 d")).await;
}
