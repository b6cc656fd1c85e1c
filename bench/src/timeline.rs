//! A run's history as the benchmark reads it, and the order statistics of its figures.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::api::Api;

/// Most events read per request.
const PAGE: usize = 10_000;

/// First `at_ms` of each (kind, step) in a run's history (`""` as the step of run events).
pub(super) struct Timeline {
    at: HashMap<(String, String), i64>,
}

impl Timeline {
    /// Waits until the run finished, reading its summary (`GET /v1/runs/{id}?view=summary`, one key lookup) every
    /// `every`, then reads its history once; fails unless the run succeeded. The history is read only after the
    /// end because reading it costs the orchestrator work that the figures would include: on SQLite every read
    /// takes the one connection the steps' transactions need (following a 10,000-step run's events while it ran
    /// took 22 reads of about 6 ms each, some 5 % of its span).
    pub(super) async fn of_finished_run(api: &Api, run_id: &str, every: Duration) -> anyhow::Result<Self> {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let run = api.get(&format!("/v1/runs/{run_id}?view=summary")).await?;
            match run["status"].as_str().context("a run summary without `status`")? {
                "succeeded" => break,
                status @ ("failed" | "cancelled") => bail!("run {run_id} ended {status}: {}", run["failure"]),
                _ => {}
            }
            if Instant::now() > deadline {
                bail!("run {run_id} did not finish within 600 s");
            }
            tokio::time::sleep(every).await;
        }
        let mut at = HashMap::new();
        let mut after = 0_i64;
        loop {
            let page = api.get(&format!("/v1/runs/{run_id}/events?after={after}&limit={PAGE}")).await?;
            let events = page["events"].as_array().context("events answered without `events`")?;
            for e in events {
                after = after.max(e["id"].as_i64().unwrap_or(after));
                let (Some(kind), Some(ms)) = (e["kind"].as_str(), e["at_ms"].as_i64()) else { continue };
                let step = e["step_id"].as_str().unwrap_or_default();
                at.entry((kind.to_owned(), step.to_owned())).or_insert(ms);
            }
            if events.len() < PAGE {
                return Ok(Self { at });
            }
        }
    }

    pub(super) fn get(&self, kind: &str, step: &str) -> anyhow::Result<i64> {
        self.at.get(&(kind.to_owned(), step.to_owned())).copied().with_context(|| format!("no {kind} event for {step}"))
    }
}

/// Nearest-rank percentile of sorted values (`p` in 0..=1).
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(super) fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}
