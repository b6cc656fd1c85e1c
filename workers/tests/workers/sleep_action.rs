//! `sleep`: checkpoints after every slice, resumes from the last checkpoint, and stops on cancellation. Uses
//! paused tokio time, so nothing actually waits.

use crate::support;

use std::time::Duration;

use cairn_workers::action::Action;
use cairn_workers::actions::Sleep;
use cairn_workers::actions::sleep::SleepArgs;
use cairn_workers::context::ActionContext;
use serde_json::json;
use tokio::time::Instant;

fn args(ms: u64) -> SleepArgs {
    serde_json::from_value(json!({ "duration_ms": ms })).expect("args fit the schema")
}

#[tokio::test(start_paused = true)]
async fn sleeps_in_slices_and_checkpoints_each_one() {
    let recorder = support::Recorder::new(true);
    let ctx = ActionContext::new("r", "nap", 1, Duration::from_secs(60), None, recorder.clone());
    let started = Instant::now();
    let out = Sleep::with_slice(Duration::from_secs(1)).run(args(2500), &ctx).await.expect("sleeps");
    assert_eq!(started.elapsed(), Duration::from_millis(2500));
    assert_eq!((out.slept_ms, out.resumed_from_ms), (2500, 0));
    let expected = [json!({"elapsed_ms": 1000}), json!({"elapsed_ms": 2000}), json!({"elapsed_ms": 2500})];
    assert_eq!(recorder.checkpoints(), expected, "one checkpoint per slice, the last one partial");
}

#[tokio::test(start_paused = true)]
async fn a_later_attempt_resumes_from_the_last_checkpoint() {
    let last = Some(json!({"elapsed_ms": 3000}));
    let ctx = ActionContext::new("r", "nap", 2, Duration::from_secs(60), last, support::Recorder::new(true));
    let started = Instant::now();
    let out = Sleep::default().run(args(5000), &ctx).await.expect("sleeps");
    assert_eq!(started.elapsed(), Duration::from_secs(2), "only the remaining 2 s are slept");
    assert_eq!((out.slept_ms, out.resumed_from_ms), (5000, 3000));
}

#[tokio::test(start_paused = true)]
async fn cancellation_stops_the_sleep_with_a_cancelled_error() {
    let recorder = support::Recorder::new(true);
    let ctx = ActionContext::new("r", "nap", 1, Duration::from_secs(60), None, recorder.clone());
    let canceller = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        canceller.cancellation().cancel();
    });
    let err = Sleep::default().run(args(10_000), &ctx).await.expect_err("cancelled");
    assert_eq!(err.code, "cancelled");
    assert_eq!(recorder.checkpoints(), [json!({"elapsed_ms": 1000})], "progress up to the last full slice is kept");
    assert_eq!(ctx.last_checkpoint(), Some(json!({"elapsed_ms": 1000})));
}

#[tokio::test(start_paused = true)]
async fn a_refused_heartbeat_stops_the_sleep() {
    let ctx = ActionContext::new("r", "nap", 1, Duration::from_secs(60), None, support::Recorder::new(false));
    let err = Sleep::default().run(args(10_000), &ctx).await.expect_err("the orchestrator said stop");
    assert_eq!(err.code, "cancelled");
    assert!(ctx.cancellation().is_cancelled());
}
