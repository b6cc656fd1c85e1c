//! A run's history as the benchmark reads it, and the order statistics of its figures.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::client::Client;

/// Most events read per request.
const PAGE: usize = 10_000;

/// First `at_ms` of each (kind, step) in a run's history (`""` as the step of run events).
pub(super) struct Timeline {
    at: HashMap<(String, String), i64>,
}

impl Timeline {
    /// Follows the run's events until it finished, reading each event once and pausing `every` after each page
    /// that was not full (so following a run costs the orchestrator little: the reads share SQLite's one
    /// connection with the steps being measured); fails unless the run succeeded.
    pub(super) async fn follow(client: &Client, run_id: &str, every: Duration) -> anyhow::Result<Self> {
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut at = HashMap::new();
        let mut after = 0_i64;
        loop {
            let page = client.get(&format!("/v1/runs/{run_id}/events?after={after}&limit={PAGE}")).await?;
            let events = page["events"].as_array().context("events answered without `events`")?;
            for e in events {
                after = after.max(e["id"].as_i64().unwrap_or(after));
                let (Some(kind), Some(ms)) = (e["kind"].as_str(), e["at_ms"].as_i64()) else { continue };
                let step = e["step_id"].as_str().unwrap_or_default();
                at.entry((kind.to_owned(), step.to_owned())).or_insert(ms);
                match kind {
                    "run_succeeded" => return Ok(Self { at }),
                    "run_failed" | "run_cancelled" => bail!("run {run_id} ended with {kind}: {}", e["data"]),
                    _ => {}
                }
            }
            if Instant::now() > deadline {
                bail!("run {run_id} did not finish within 600 s");
            }
            if events.len() < PAGE {
                tokio::time::sleep(every).await;
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
