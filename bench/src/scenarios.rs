//! The scenarios `chain`, `fanout`, `throughput`, `timers` and `memory` (see the crate docs for what each
//! measures), at the sizes below unless [`Size`] says otherwise; `dispatch` has its own module.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use crate::Size;
use crate::api::{Api, noop};
use crate::timeline::{Timeline, percentile, sorted};

const CHAIN_LEN: usize = 20;
const CHAIN_RUNS: usize = 20;
const FANOUT_WIDTH: usize = 200;
const THROUGHPUT_STEPS: usize = 10_000;
const TIMER_STEPS: usize = 10_000;
const MEMORY_RUNS: usize = 10_000;
const MEMORY_STEPS_PER_RUN: usize = 10;

#[allow(clippy::cast_precision_loss)]
pub(super) async fn chain(api: &Api, size: Size) -> anyhow::Result<Value> {
    let (len, runs) = (size.steps_or(CHAIN_LEN), size.runs_or(CHAIN_RUNS));
    let ids: Vec<String> = (0..len).map(|i| format!("s{i:02}")).collect();
    let (mut run_means, mut cycles, mut gaps) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let steps = ids.iter().enumerate().map(|(i, id)| noop(id, &ids[i.saturating_sub(1)..i])).collect::<Vec<_>>();
        let (run_id, _) = api.submit("bench: chain", steps).await?;
        let timeline = Timeline::of_finished_run(api, &run_id, Duration::from_millis(25)).await?;
        let first = timeline.get("step_started", &ids[0])?;
        let last = timeline.get("step_started", &ids[len - 1])?;
        run_means.push((last - first) as f64 / (len - 1) as f64);
        for pair in ids.windows(2) {
            let started = timeline.get("step_started", &pair[1])?;
            cycles.push((started - timeline.get("step_started", &pair[0])?) as f64);
            gaps.push((started - timeline.get("step_succeeded", &pair[0])?) as f64);
        }
    }
    let (run_means, cycles, gaps) = (sorted(run_means), sorted(cycles), sorted(gaps));
    Ok(json!({
        "scenario": "chain",
        "per_step_ms_median": round2(percentile(&run_means, 0.5)),
        "per_step_ms_p99": percentile(&cycles, 0.99),
        "per_step_ms_run_means": run_means.iter().map(|v| round2(*v)).collect::<Vec<_>>(),
        "handoff_gap_ms_median": percentile(&gaps, 0.5),
        "handoff_gap_ms_p99": percentile(&gaps, 0.99),
        "runs": runs,
        "steps": len,
    }))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

pub(super) async fn fanout(api: &Api, size: Size) -> anyhow::Result<Value> {
    let width = size.steps_or(FANOUT_WIDTH);
    let ids: Vec<String> = (0..width).map(|i| format!("p{i:03}")).collect();
    let mut steps: Vec<Value> = ids.iter().map(|id| noop(id, &[])).collect();
    steps.push(noop("join", &ids));
    let (run_id, started) = api.submit("bench: fanout", steps).await?;
    let timeline = Timeline::of_finished_run(api, &run_id, Duration::from_millis(5)).await?;
    let client_wall_ms = started.elapsed().as_millis();
    let wall_ms = timeline.get("run_succeeded", "")? - timeline.get("run_created", "")?;
    Ok(json!({"scenario": "fanout", "wall_ms": wall_ms, "client_wall_ms": client_wall_ms, "width": width}))
}

/// `throughput`: the drain of 10,000 queued steps. Its span starts when the steps could first be claimed: the
/// earlier of the submission's acknowledgement (read on this host's clock, as the orchestrator's timestamps are)
/// and the first `step_started`. The submission's own transaction (storing the plan, its steps and their
/// `step_ready` events, whose timestamps are taken when it begins) is reported apart, as `submit_ms`, because
/// it is a large share of the span (on PostgreSQL about 450 ms of 1.5 s for 10,000 steps);
/// `steps_per_sec_from_ready` is the rate counting it.
pub(super) async fn throughput(api: &Api, size: Size) -> anyhow::Result<Value> {
    let ids: Vec<String> = (0..size.steps_or(THROUGHPUT_STEPS)).map(|i| format!("t{i:05}")).collect();
    let steps: Vec<Value> = ids.iter().map(|id| noop(id, &[])).collect();
    let (run_id, _) = api.submit("bench: throughput", steps).await?;
    let acknowledged = epoch_ms()?;
    let timeline = Timeline::of_finished_run(api, &run_id, Duration::from_millis(100)).await?;
    let mut times = Vec::with_capacity(ids.len());
    for id in &ids {
        let at = |kind: &str| timeline.get(kind, id);
        times.push(StepTimes { ready: at("step_ready")?, started: at("step_started")?, done: at("step_succeeded")? });
    }
    Ok(drain_figures(acknowledged, &times))
}

/// One step's `step_ready`, `step_started` and `step_succeeded` times, ms since the epoch.
#[derive(Debug, Clone, Copy)]
struct StepTimes {
    ready: i64,
    started: i64,
    done: i64,
}

/// `throughput`'s figures for steps submitted in one run whose submission was acknowledged at `acknowledged`
/// (ms, this host's clock; see [`throughput`]).
#[allow(clippy::cast_precision_loss)]
fn drain_figures(acknowledged: i64, steps: &[StepTimes]) -> Value {
    let first_ready = steps.iter().map(|s| s.ready).min().unwrap_or(0);
    let first_started = steps.iter().map(|s| s.started).min().unwrap_or(0);
    let last_done = steps.iter().map(|s| s.done).max().unwrap_or(0);
    let claimable = acknowledged.min(first_started).max(first_ready);
    let latency = sorted(steps.iter().map(|s| (s.started - s.ready.max(claimable)) as f64).collect());
    let per_sec = |from: i64| (steps.len() as f64 * 1000.0 / (last_done - from).max(1) as f64).round();
    json!({
        "scenario": "throughput",
        "steps": steps.len(),
        "span_ms": (last_done - claimable).max(1),
        "steps_per_sec": per_sec(claimable),
        "dispatch_latency_ms_p50": percentile(&latency, 0.5),
        "dispatch_latency_ms_p99": percentile(&latency, 0.99),
        "submit_ms": claimable - first_ready,
        "steps_per_sec_from_ready": per_sec(first_ready),
    })
}

/// This host's clock, in milliseconds since the Unix epoch (the unit of the events' `at_ms`).
fn epoch_ms() -> anyhow::Result<i64> {
    let since =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).context("the clock is before 1970")?;
    i64::try_from(since.as_millis()).context("the clock is past the year 292 million")
}

/// 10,000 steps due at the same instant, a few seconds ahead (so the submission is stored before it).
pub(super) async fn timers(api: &Api, size: Size) -> anyhow::Result<Value> {
    let due = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(5);
    let due_ms = due.as_millisecond();
    let ids: Vec<String> = (0..size.steps_or(TIMER_STEPS)).map(|i| format!("t{i:05}")).collect();
    let steps: Vec<Value> =
        ids.iter().map(|id| json!({"id": id, "action": "noop", "args": {}, "not_before": due.to_string()})).collect();
    let (run_id, _) = api.submit("bench: timers", steps).await?;
    anyhow::ensure!(jiff::Timestamp::now() < due, "submitting the timers took longer than their 5 s lead");
    let timeline = Timeline::of_finished_run(api, &run_id, Duration::from_millis(100)).await?;
    let mut started = Vec::with_capacity(ids.len());
    for id in &ids {
        started.push(timeline.get("step_started", id)?);
    }
    let first = started.iter().min().copied().unwrap_or(due_ms);
    let last = started.iter().max().copied().unwrap_or(due_ms);
    anyhow::ensure!(first >= due_ms, "a timer fired before its instant ({first} < {due_ms})");
    Ok(json!({"scenario": "timers", "timers": ids.len(), "wall_ms": last - due_ms, "first_ms": first - due_ms}))
}

/// 10,000 runs of 10 steps each, every step waiting on a timer a day ahead; then the orchestrator's RSS.
pub(super) async fn memory(api: &Api, size: Size, orchestrator_pid: u32) -> anyhow::Result<Value> {
    let before = rss_mb(orchestrator_pid)?;
    let due = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24)).to_string();
    let steps_per_run = size.steps_or(MEMORY_STEPS_PER_RUN);
    let steps: Vec<Value> = (0..steps_per_run)
        .map(|i| json!({"id": format!("m{i}"), "action": "noop", "args": {}, "not_before": due}))
        .collect();
    let submissions = futures::stream::iter(0..size.runs_or(MEMORY_RUNS))
        .map(|_| api.submit("bench: memory", steps.clone()))
        .buffer_unordered(8);
    let ids: Vec<(String, Instant)> = submissions.try_collect().await?;
    let active = api.active_runs().await?;
    let after = rss_mb(orchestrator_pid)?;
    Ok(json!({
        "scenario": "memory",
        "active_runs": ids.len(),
        "active_runs_reported": active,
        "pending_timers": ids.len() * steps_per_run,
        "rss_mb": after,
        "rss_mb_before": before,
    }))
}

/// Resident memory of a process, in MB (Linux `/proc/PID/status`).
#[allow(clippy::cast_precision_loss)]
fn rss_mb(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (resident memory is measured on Linux only)"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS in /proc status")?;
    Ok(round2(kb as f64 / 1024.0))
}

/// The width of `validate`'s fan-out (case C24).
const VALIDATE_WIDTH: usize = 5_000;

/// How many times `validate` sends the plan.
const VALIDATE_ATTEMPTS: usize = 5;

/// `validate`: a wide fan-out with a placeholder in every child validated over the API, five times by default.
pub(super) async fn validate(api: &Api, size: Size) -> anyhow::Result<Value> {
    let width = size.steps_or(VALIDATE_WIDTH);
    let ids: Vec<String> = (0..width).map(|i| format!("n{i:04}")).collect();
    let source = ["source".to_owned()];
    let mut steps = vec![noop("source", &[])];
    for id in &ids {
        let mut step = noop(id, &source);
        step["args"] = json!({"value": "$source.output", "pad": "x".repeat(200)});
        steps.push(step);
    }
    steps.push(noop("join", &ids));
    let plan = json!({"goal": "bench: validate", "steps": steps});
    let attempts = size.runs_or(VALIDATE_ATTEMPTS);
    let mut times = Vec::with_capacity(attempts);
    for _ in 0..attempts {
        let started = std::time::Instant::now();
        let answer = api.post("/v1/plans:validate", &plan).await?;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
        anyhow::ensure!(answer["valid"] == json!(true), "the plan validates: {answer}");
    }
    times.sort_by(f64::total_cmp);
    let round = |ms: f64| (ms * 100.0).round() / 100.0;
    let (median, max) = (round(times[times.len() / 2]), round(times[times.len() - 1]));
    Ok(json!({"scenario": "validate", "validate_ms_median": median, "validate_ms_max": max, "width": width,
              "runs": attempts}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four steps stamped ready at 1,000 by a submission acknowledged at 1,400, started 1,410–1,440 and done by
    /// 1,500.
    fn four_steps() -> Vec<StepTimes> {
        (0..4).map(|i| StepTimes { ready: 1_000, started: 1_410 + 10 * i, done: 1_420 + 10 * i + 50 }).collect()
    }

    #[test]
    fn the_drain_starts_at_the_acknowledgement_and_the_submission_is_reported_apart() {
        let figures = drain_figures(1_400, &four_steps());

        assert_eq!(figures["submit_ms"], 400);
        assert_eq!(figures["span_ms"], 100, "1,500 − 1,400");
        assert_eq!(figures["steps_per_sec"], 40.0, "4 steps in 100 ms");
        assert_eq!(figures["steps_per_sec_from_ready"], 8.0, "4 steps in 500 ms, counting the submission");
        assert_eq!(figures["dispatch_latency_ms_p50"], 20.0, "started 10, 20, 30, 40 ms after 1,400");
        assert_eq!(figures["dispatch_latency_ms_p99"], 40.0);
    }

    #[test]
    fn a_step_started_before_the_acknowledgement_arrived_starts_the_drain() {
        let figures = drain_figures(1_430, &four_steps());

        assert_eq!(figures["submit_ms"], 410, "the first start, 1,410, is the earlier");
        assert_eq!(figures["span_ms"], 90);
        assert_eq!(figures["dispatch_latency_ms_p50"], 10.0, "no latency is negative: 0, 10, 20, 30");
    }

    #[test]
    fn a_step_ready_after_the_drain_began_waits_from_its_own_ready_time() {
        let mut steps = four_steps();
        steps[3] = StepTimes { ready: 1_460, started: 1_465, done: 1_480 };

        let figures = drain_figures(1_400, &steps);

        assert_eq!(
            figures["dispatch_latency_ms_p99"], 30.0,
            "5 ms for the late step (not 65); 10, 20, 30 for the others"
        );
        assert_eq!(figures["dispatch_latency_ms_p50"], 10.0);
    }
}
