//! `dispatch`: dispatch latency while runs keep arriving (issue 8's "10,000 independent single-step runs").
//!
//! [`RUNS`] (or `--runs`) runs of one `noop` step each are submitted through the REST API by [`CLIENTS`]
//! concurrent clients, as fast as the API accepts them or at `--rate` runs per second, while the workers run
//! them, after a tenth as many submitted the same way and reported apart (`warmup_runs`,
//! `warmup_dispatch_latency_ms_p99`).
//! Each step is ready from its submission, so its dispatch latency, `step_started` − `step_ready`, is the time
//! until a worker's claim took it: the figure issue 8's "dispatch latency p99 ≤ 20 ms" asks for, unless the
//! workers fall behind the arrivals (then it also holds the wait for a free slot). `steps_per_sec` = runs / (last
//! `step_succeeded` − first `step_ready`) is bounded by the submission rate, reported as `submit_per_sec`: this
//! scenario measures latency under a steady load, `throughput` measures the most the workers can drain.

use std::time::{Duration, Instant};

use anyhow::bail;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use crate::Size;
use crate::api::{Api, noop};
use crate::timeline::{Timeline, percentile, sorted};

/// Runs submitted and measured unless `--runs` says otherwise.
const RUNS: usize = 10_000;
/// Runs submitted first, the same way, and reported apart, per run measured: the first second after a fresh
/// start measures connections being opened, caches filled and a new database's first pages, not dispatch (on
/// PostgreSQL the first 0.3–0.6 s at 600 runs/s had latencies of 30–90 ms, then 1–5 ms).
const WARMUP_SHARE: usize = 10;
/// Submissions (and, afterwards, history reads) in flight at once.
const CLIENTS: usize = 8;

/// Runs the scenario, submitting `rate` runs per second (0: as fast as the API accepts them); its figures as one
/// JSON object.
pub(super) async fn dispatch(api: &Api, size: Size, rate: u32) -> anyhow::Result<Value> {
    let runs = size.runs_or(RUNS);
    let warmup = wave(api, runs.div_ceil(WARMUP_SHARE), rate).await?;
    let measured = wave(api, runs, rate).await?;
    let runs = measured.latency.len() as f64;
    Ok(json!({
        "scenario": "dispatch",
        "runs": measured.latency.len(),
        "span_ms": measured.span_ms,
        "steps_per_sec": (runs * 1000.0 / measured.span_ms).round(),
        "submit_per_sec": (runs / measured.submit_secs.max(0.001)).round(),
        "dispatch_latency_ms_p50": percentile(&measured.latency, 0.5),
        "dispatch_latency_ms_p99": percentile(&measured.latency, 0.99),
        "dispatch_latency_ms_max": measured.latency.last().copied().unwrap_or(f64::NAN),
        "warmup_runs": warmup.latency.len(),
        "warmup_dispatch_latency_ms_p99": percentile(&warmup.latency, 0.99),
    }))
}

/// What one wave of runs measured.
struct Wave {
    /// Dispatch latencies, ascending, ms.
    latency: Vec<f64>,
    /// Last `step_succeeded` − first `step_ready`, ms (at least 1).
    span_ms: f64,
    /// How long the submissions took, s.
    submit_secs: f64,
}

/// Submits `runs` single-step runs at `rate` per second (0: as fast as accepted), waits until they finished and
/// reads their histories.
#[allow(clippy::cast_precision_loss)]
async fn wave(api: &Api, runs: usize, rate: u32) -> anyhow::Result<Wave> {
    let active_before = api.active_runs().await?;
    let started = Instant::now();
    let every = (rate > 0).then(|| Duration::from_secs_f64(1.0 / f64::from(rate)));
    let ids: Vec<(String, Instant)> = futures::stream::iter(0..runs)
        .map(|i| async move {
            if let Some(every) = every {
                // Run `i` leaves at its slot in the schedule, whatever the answers to earlier ones cost.
                let at = started + every.saturating_mul(u32::try_from(i).unwrap_or(u32::MAX));
                tokio::time::sleep_until(at.into()).await;
            }
            api.submit("bench: dispatch", vec![noop("only", &[])]).await
        })
        .buffer_unordered(CLIENTS)
        .try_collect()
        .await?;
    let submit_secs = started.elapsed().as_secs_f64();
    wait_until_finished(api, active_before).await?;
    let timelines: Vec<Timeline> = futures::stream::iter(&ids)
        .map(|(id, _)| Timeline::of_finished_run(api, id, Duration::from_millis(100)))
        .buffer_unordered(CLIENTS)
        .try_collect()
        .await?;
    let mut first_ready = i64::MAX;
    let mut last_done = i64::MIN;
    let mut latency = Vec::with_capacity(timelines.len());
    for timeline in &timelines {
        let ready = timeline.get("step_ready", "only")?;
        first_ready = first_ready.min(ready);
        last_done = last_done.max(timeline.get("step_succeeded", "only")?);
        latency.push((timeline.get("step_started", "only")? - ready) as f64);
    }
    Ok(Wave { latency: sorted(latency), span_ms: (last_done - first_ready).max(1) as f64, submit_secs })
}

/// Waits until no more runs are active than before the submissions (at most 600 s).
async fn wait_until_finished(api: &Api, active_before: f64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let active = api.active_runs().await?;
        if active <= active_before {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{active} runs still active after 600 s ({active_before} before the submissions)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
