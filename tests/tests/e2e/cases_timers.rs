//! Failure cases about durable timers and cancellation, through the real engine and store on every available
//! backend with a manual clock: C15 (a far timer fires once), C17 (cancel reaches retries in backoff, timers and
//! running work), C20 (timer instants use the target's offset and zone). `run_at` maps to `not_before` (with
//! `context.timezone` for local times), `reminder.create` to `notify.send`, retry fields as in
//! `cases_validation.rs`.
//!
//! Engine-level: the in-process [`TestWorker`] stands in for worker processes. The worker-process parts (a
//! worker aborting its action on `HeartbeatOutcome::Gone`, the stub seeing the connection close) belong to the
//! worker-protocol issue; here the signal itself is asserted.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::clock::{Clock, ManualClock};
use cairn_core::failure::Failure;
use cairn_store::{HeartbeatOutcome, Report};
use cairn_tests::{Backend, Outcome, TestApp, TestWorker, on_both_backends};
use jiff::Timestamp;
use serde_json::{Value, json};

fn ms(at: &str) -> i64 {
    at.parse::<Timestamp>().unwrap().as_millisecond()
}

/// A worker serving `notify.send` that records the clock reading at each call into `fired`.
fn recording_worker(id: &str, clock: &Arc<ManualClock>, fired: &Arc<Mutex<Vec<i64>>>) -> TestWorker {
    let (clock, fired) = (clock.clone(), fired.clone());
    TestWorker::new(id).on("notify.send", move |_| {
        fired.lock().unwrap().push(clock.now().as_millisecond());
        Outcome::Succeed(json!({"deliveries": []}))
    })
}

on_both_backends!(c15_a_far_timer_fires_exactly_once_at_its_time_across_restarts);
/// C15: a non-idempotent reminder due 12 h after submission, driven in 10-minute jumps with 3 workers polling
/// after every jump, one worker replaced and the orchestrator restarted along the way, is sent exactly once, at
/// 2027-03-15T00:00:00Z (08:00 in Shanghai), and never before. The timer lives in the store, so no worker holds
/// it long enough for it to be "stolen".
async fn c15_a_far_timer_fires_exactly_once_at_its_time_across_restarts(backend: Backend) {
    let mut app = TestApp::new(backend, "2027-03-14T12:00:00Z").await;
    let run = app
        .submit(json!({"steps":[{"id":"ping","action":"notify.send","args":{"text":"Take an umbrella"},
              "not_before":"2027-03-15T08:00 Asia/Shanghai","idempotent":false}]}))
        .await;
    let due = ms("2027-03-15T00:00:00Z");
    let end = ms("2027-03-15T00:05:00Z");
    let fired = Arc::<Mutex<Vec<i64>>>::default();
    let clock = app.clock.clone();
    let mut workers: Vec<TestWorker> =
        ["w1", "w2", "w3"].iter().map(|id| recording_worker(id, &clock, &fired)).collect();
    let mut jumps = 0;
    while app.now_ms() < end {
        let jump = (end - app.now_ms()).min(600_000);
        app.advance(Duration::from_millis(u64::try_from(jump).unwrap()));
        jumps += 1;
        if jumps == 36 {
            app = app.restart().await; // 18:00Z
        }
        if jumps == 50 {
            workers[1] = recording_worker("w2", &clock, &fired); // a worker restarts
        }
        for w in &workers {
            w.run_until_idle(&app.engine).await;
        }
        app.reap().await;
        if app.now_ms() < due {
            assert!(fired.lock().unwrap().is_empty(), "{backend:?}: nothing is sent before the due time");
            let ping = app.step(&run, "ping").await;
            assert_eq!((ping.status.as_str(), ping.available_at_ms), ("ready", Some(due)), "waits in the store");
        }
    }
    assert_eq!(*fired.lock().unwrap(), [due], "{backend:?}: exactly one call, at 2027-03-15T00:00:00Z");
    assert_eq!(app.step(&run, "ping").await.attempts, 1);
    assert_eq!(app.run(&run).await.status, "succeeded");
}

fn c17_plan() -> Value {
    json!({"steps":[
      {"id":"fetch","action":"http.request","args":{"method":"GET","url":"http://127.0.0.1:18080/fail_first"},
       "idempotent":true,"retry":{"max_attempts":5,"initial_interval_ms":5000,"backoff_coefficient":2.0,
                                  "max_interval_ms":20000,"jitter":"none"}},
      {"id":"notify","action":"notify.send","args":{"text":"fetched"},"depends_on":["fetch"]},
      {"id":"later","action":"notify.send","args":{"text":"x"},"not_before":"in 2h"},
      {"id":"long","action":"http.request","args":{"method":"POST","url":"http://127.0.0.1:18080/slow?ms=60000"},
       "timeout_ms":120000}
    ]})
}

/// `fetch` fails (retryable) on its first call and succeeds after; `long` never finishes; notifications echo.
fn c17_worker() -> TestWorker {
    TestWorker::new("w1")
        .on("http.request", |c| match c.lease.step_id.as_str() {
            "fetch" if c.lease.attempt == 1 => Outcome::Fail(Failure::new("action_error", "500", true)),
            "fetch" => Outcome::Succeed(json!({"status": 200})),
            _ => Outcome::Hang,
        })
        .echo("notify.send")
}

on_both_backends!(c17_cancel_reaches_retry_backoff_timers_and_running_work);
/// C17: cancelling a run reaches the step waiting in retry backoff, the timer not yet due and the running step:
/// the run and `fetch` are cancelled at once, nothing is dispatched after (past the retry and past +2 h), the
/// running `long` is told to stop (heartbeat answers `Gone`), and its late result is stale.
async fn c17_cancel_reaches_retry_backoff_timers_and_running_work(backend: Backend) {
    let app = TestApp::new(backend, "2027-03-14T12:00:00Z").await;
    let t0 = app.now_ms();
    let run = app.submit(c17_plan()).await;
    let worker = c17_worker();
    assert_eq!(worker.run_until_idle(&app.engine).await, 2, "fetch fails once, long starts");
    assert_eq!(app.step(&run, "fetch").await.available_at_ms, Some(t0 + 5_000), "retry due at +5 s");

    app.set_time_ms(t0 + 1_000);
    assert!(app.engine.cancel_run(&run).await.unwrap());
    assert_eq!(app.run(&run).await.status, "cancelled", "{backend:?}: cancelled at once");
    for step in ["fetch", "notify", "later", "long"] {
        assert_eq!(app.status(&run, step).await, "cancelled", "{backend:?} {step}");
    }
    let long = worker.calls_for("long")[0].lease.clone();
    assert_eq!(
        app.engine.heartbeat(&long, None).await.unwrap(),
        HeartbeatOutcome::Gone,
        "the worker running long is told to stop"
    );
    let late = app.engine.complete(&long, &json!({"status": 200})).await.unwrap();
    assert_eq!(late, Report::Stale, "a late result of cancelled work is ignored");

    for at in [t0 + 5_001, t0 + 31_000, t0 + 2 * 3_600_000 + 1_000] {
        app.set_time_ms(at);
        app.reap().await;
        assert_eq!(worker.run_until_idle(&app.engine).await, 0, "{backend:?}: nothing dispatched at {at}");
    }
    assert_eq!(worker.calls_for("fetch").len(), 1, "calls(fetch) stays 1");
    assert!(worker.calls_for("notify").is_empty() && worker.calls_for("later").is_empty());
    assert_eq!(app.run(&run).await.status, "cancelled");
}

on_both_backends!(c17_race_cancel_at_the_retry_due_time_ignores_the_dispatched_attempt);
/// C17 race variant: the cancel lands exactly when the retry is due, after attempt 2 was claimed. That attempt's
/// result is ignored and `notify` never runs.
async fn c17_race_cancel_at_the_retry_due_time_ignores_the_dispatched_attempt(backend: Backend) {
    let app = TestApp::new(backend, "2027-03-14T12:00:00Z").await;
    let run = app.submit(c17_plan()).await;
    let worker = c17_worker();
    worker.run_until_idle(&app.engine).await;
    app.set_time_ms(app.step(&run, "fetch").await.available_at_ms.unwrap());
    let claimed = app.engine.claim("w1", &["http.request".into()], 8).await.unwrap();
    assert_eq!(claimed.len(), 1, "attempt 2 of fetch is dispatched");
    assert_eq!((claimed[0].lease.step_id.as_str(), claimed[0].lease.attempt), ("fetch", 2));

    assert!(app.engine.cancel_run(&run).await.unwrap());
    let report = worker.handle(&app.engine, claimed.into_iter().next().unwrap()).await;
    assert_eq!(report, Some(Report::Stale), "{backend:?}: the dispatched attempt's result is ignored");
    app.advance(Duration::from_secs(3 * 3600));
    assert_eq!(worker.run_until_idle(&app.engine).await, 0);
    assert!(worker.calls_for("notify").is_empty(), "{backend:?}: notify never runs");
    assert_eq!(app.status(&run, "fetch").await, "cancelled");
    assert_eq!(app.status(&run, "notify").await, "cancelled");
    assert_eq!(app.run(&run).await.status, "cancelled");
}

/// One C20 row: created at, plan zone, `not_before`, expected instant, expected stored local form.
struct TimerRow {
    name: &'static str,
    created: &'static str,
    spec: &'static str,
    at: &'static str,
    local: &'static str,
}

const C20_ROWS: [TimerRow; 4] = [
    // 10:00 EDT the day before fall-back: 08:00 on 11-07 is EST (UTC-5), not today's UTC-4.
    TimerRow {
        name: "T1",
        created: "2027-11-06T14:00:00Z",
        spec: "tomorrow 08:00",
        at: "2027-11-07T13:00:00Z",
        local: "2027-11-07T08:00 America/New_York",
    },
    // 10:00 EST the day before spring-forward: 08:00 on 03-14 is EDT (UTC-4).
    TimerRow {
        name: "T2",
        created: "2027-03-13T15:00:00Z",
        spec: "tomorrow 08:00",
        at: "2027-03-14T12:00:00Z",
        local: "2027-03-14T08:00 America/New_York",
    },
    // 00:30 EDT on fall-back night: two elapsed hours is the second 01:30 (EST); the spec is kept as written.
    TimerRow { name: "T3", created: "2027-11-07T04:30:00Z", spec: "in 2h", at: "2027-11-07T06:30:00Z", local: "in 2h" },
    // The plan zone is New York, but "tomorrow" is judged in Shanghai, where it is already 03-14 10:00.
    TimerRow {
        name: "T4",
        created: "2027-03-14T02:00:00Z",
        spec: "tomorrow 08:00 Asia/Shanghai",
        at: "2027-03-15T00:00:00Z",
        local: "2027-03-15T08:00 Asia/Shanghai",
    },
];

on_both_backends!(c20_timers_use_the_target_offset_and_zone_and_fire_once);
/// C20 (timers): each timer is stored with the instant computed with the offset in force at the target time (in
/// the target's zone) and keeps its local form; it is not claimable 1 ms before, is claimable at the instant,
/// and fires exactly once. The clock runs across the DST transitions with no restart.
async fn c20_timers_use_the_target_offset_and_zone_and_fire_once(backend: Backend) {
    for row in &C20_ROWS {
        let app = TestApp::new(backend, row.created).await;
        let run = app
            .submit(json!({"context":{"timezone":"America/New_York"},"steps":[
                  {"id":"ping","action":"notify.send","args":{"text":"umbrella"},"not_before":row.spec}]}))
            .await;
        let due = ms(row.at);
        let ping = app.step(&run, "ping").await;
        let what = format!("{backend:?} {}", row.name);
        assert_eq!(ping.not_before_at_ms, Some(due), "{what}: stored instant is {}", row.at);
        assert_eq!(ping.not_before_local.as_deref(), Some(row.local), "{what}: local time and zone kept");
        assert_eq!(ping.available_at_ms, Some(due));

        let fired = Arc::<Mutex<Vec<i64>>>::default();
        let worker = recording_worker("w1", &app.clock, &fired);
        app.set_time_ms(due - 1);
        assert_eq!(worker.run_until_idle(&app.engine).await, 0, "{what}: not claimable 1 ms early");
        app.set_time_ms(due);
        assert_eq!(worker.run_until_idle(&app.engine).await, 1, "{what}: claimable at the instant");
        app.advance(Duration::from_secs(2 * 86_400));
        assert_eq!(worker.run_until_idle(&app.engine).await, 0);
        assert_eq!(*fired.lock().unwrap(), [due], "{what}: fires exactly once");
        assert_eq!(app.run(&run).await.status, "succeeded");
    }
}
