//! The scenarios `chain`, `fanout`, `throughput`, `timers` and `memory` (see the parent module for what each
//! measures); `dispatch` has its own module.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use super::timeline::{Timeline, percentile, sorted};
use super::{active_runs, noop, submit};
use crate::client::Client;

const CHAIN_LEN: usize = 20;
const CHAIN_RUNS: usize = 20;
const FANOUT_WIDTH: usize = 200;
const THROUGHPUT_STEPS: usize = 10_000;
const TIMER_STEPS: usize = 10_000;
const MEMORY_RUNS: usize = 10_000;
const MEMORY_STEPS_PER_RUN: usize = 10;

#[allow(clippy::cast_precision_loss)]
pub(super) async fn chain(client: &Client) -> anyhow::Result<Value> {
    let ids: Vec<String> = (0..CHAIN_LEN).map(|i| format!("s{i:02}")).collect();
    let (mut run_means, mut cycles, mut gaps) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..CHAIN_RUNS {
        let steps = ids.iter().enumerate().map(|(i, id)| noop(id, &ids[i.saturating_sub(1)..i])).collect::<Vec<_>>();
        let (run_id, _) = submit(client, "bench: chain", steps).await?;
        let timeline = Timeline::of_finished_run(client, &run_id, Duration::from_millis(25)).await?;
        let first = timeline.get("step_started", &ids[0])?;
        let last = timeline.get("step_started", &ids[CHAIN_LEN - 1])?;
        run_means.push((last - first) as f64 / (CHAIN_LEN - 1) as f64);
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
        "runs": CHAIN_RUNS,
        "steps": CHAIN_LEN,
    }))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

pub(super) async fn fanout(client: &Client) -> anyhow::Result<Value> {
    let ids: Vec<String> = (0..FANOUT_WIDTH).map(|i| format!("p{i:03}")).collect();
    let mut steps: Vec<Value> = ids.iter().map(|id| noop(id, &[])).collect();
    steps.push(noop("join", &ids));
    let (run_id, started) = submit(client, "bench: fanout", steps).await?;
    let timeline = Timeline::of_finished_run(client, &run_id, Duration::from_millis(5)).await?;
    let client_wall_ms = started.elapsed().as_millis();
    let wall_ms = timeline.get("run_succeeded", "")? - timeline.get("run_created", "")?;
    Ok(json!({"scenario": "fanout", "wall_ms": wall_ms, "client_wall_ms": client_wall_ms, "width": FANOUT_WIDTH}))
}

pub(super) async fn throughput(client: &Client) -> anyhow::Result<Value> {
    let ids: Vec<String> = (0..THROUGHPUT_STEPS).map(|i| format!("t{i:05}")).collect();
    let steps: Vec<Value> = ids.iter().map(|id| noop(id, &[])).collect();
    let (run_id, _) = submit(client, "bench: throughput", steps).await?;
    let timeline = Timeline::of_finished_run(client, &run_id, Duration::from_millis(100)).await?;
    let mut first_ready = i64::MAX;
    let mut last_done = i64::MIN;
    let mut latency = Vec::with_capacity(ids.len());
    for id in &ids {
        let ready = timeline.get("step_ready", id)?;
        first_ready = first_ready.min(ready);
        last_done = last_done.max(timeline.get("step_succeeded", id)?);
        #[allow(clippy::cast_precision_loss)]
        latency.push((timeline.get("step_started", id)? - ready) as f64);
    }
    let latency = sorted(latency);
    #[allow(clippy::cast_precision_loss)]
    let span_ms = (last_done - first_ready).max(1) as f64;
    #[allow(clippy::cast_precision_loss)]
    let steps_per_sec = (ids.len() as f64 * 1000.0 / span_ms).round();
    Ok(json!({
        "scenario": "throughput",
        "steps": ids.len(),
        "span_ms": span_ms,
        "steps_per_sec": steps_per_sec,
        "dispatch_latency_ms_p50": percentile(&latency, 0.5),
        "dispatch_latency_ms_p99": percentile(&latency, 0.99),
    }))
}

/// 10,000 steps due at the same instant, a few seconds ahead (so the submission is stored before it).
pub(super) async fn timers(client: &Client) -> anyhow::Result<Value> {
    let due = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(5);
    let due_ms = due.as_millisecond();
    let ids: Vec<String> = (0..TIMER_STEPS).map(|i| format!("t{i:05}")).collect();
    let steps: Vec<Value> =
        ids.iter().map(|id| json!({"id": id, "action": "noop", "args": {}, "not_before": due.to_string()})).collect();
    let (run_id, _) = submit(client, "bench: timers", steps).await?;
    anyhow::ensure!(jiff::Timestamp::now() < due, "submitting the timers took longer than their 5 s lead");
    let timeline = Timeline::of_finished_run(client, &run_id, Duration::from_millis(100)).await?;
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
pub(super) async fn memory(client: &Client, orchestrator_pid: u32) -> anyhow::Result<Value> {
    let before = rss_mb(orchestrator_pid)?;
    let due = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24)).to_string();
    let steps: Vec<Value> = (0..MEMORY_STEPS_PER_RUN)
        .map(|i| json!({"id": format!("m{i}"), "action": "noop", "args": {}, "not_before": due}))
        .collect();
    let submissions = futures::stream::iter(0..MEMORY_RUNS)
        .map(|_| submit(client, "bench: memory", steps.clone()))
        .buffer_unordered(8);
    let ids: Vec<(String, Instant)> = submissions.try_collect().await?;
    let active = active_runs(client).await?;
    let after = rss_mb(orchestrator_pid)?;
    Ok(json!({
        "scenario": "memory",
        "active_runs": ids.len(),
        "active_runs_reported": active,
        "pending_timers": ids.len() * MEMORY_STEPS_PER_RUN,
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
