//! The `search` scenario: `GET /v1/runs` with each filter over 100,000 runs (`--runs`), timed on this host's
//! clock from request to parsed answer, to 0.01 ms.
//!
//! The runs are single-step plans submitted by 8 concurrent clients, a mix an operator would search: 97 in 100
//! run `noop` and succeed; 1 waits on a timer a day ahead with `notify.send` (pending), 1 the same and is then
//! cancelled; 1 in 1,000 waits for an approval (it needs attention). Labels: `env` `prod` (70 %), `dev` (20 %) or
//! `staging` (10 %) and `tenant` one of 1,000 (100 runs each); 1 in 1,000 goals holds the word `umbrella`; 1 in
//! 100 runs has an idempotency key. Each query is asked 3 times to warm up, then [`REPEATS`] times.

use std::time::Instant;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use crate::Size;
use crate::api::Api;
use crate::timeline::{percentile, sorted};

const SEARCH_RUNS: usize = 100_000;
const REPEATS: usize = 30;

/// The plan and labels of the `i`th run.
fn run_body(i: usize, due: &str) -> Value {
    let env = match i % 10 {
        0..=6 => "prod",
        7 | 8 => "dev",
        _ => "staging",
    };
    let tenant = format!("t{}", i % 1000);
    let mut goal = format!("bench search {i}: remind tenant {tenant}");
    if i % 1000 == 7 {
        goal.push_str(" to take an umbrella");
    }
    let step = match i % 100 {
        0 | 1 => json!({"id": "a", "action": "notify.send", "args": {"text": "later"}, "not_before": due}),
        2 if i % 1000 == 2 => json!({"id": "a", "action": "noop", "args": {}, "approval": {"required": true}}),
        _ => json!({"id": "a", "action": "noop", "args": {}}),
    };
    let mut body = json!({
        "plan": {"version": "cairn/v1", "goal": goal, "steps": [step]},
        "labels": {"env": env, "tenant": tenant},
    });
    if i % 100 == 3 {
        body["idempotency_key"] = json!(format!("bench-key-{i}"));
    }
    body
}

/// Submits the runs, cancels the ones meant to be cancelled, and waits until the others are as meant.
async fn populate(api: &Api, runs: usize) -> anyhow::Result<()> {
    let due = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24)).to_string();
    let submissions = futures::stream::iter(0..runs)
        .map(|i| {
            let body = run_body(i, &due);
            async move {
                let view = api.post("/v1/runs", &body).await.context("submitting a run")?;
                let id = view["id"].as_str().context("submit answered without a run id")?.to_owned();
                anyhow::Ok((i, id))
            }
        })
        .buffer_unordered(8);
    let ids: Vec<(usize, String)> = submissions.try_collect().await?;
    for (_, id) in ids.iter().filter(|(i, _)| i % 100 == 1) {
        api.post(&format!("/v1/runs/{id}:cancel"), &json!({})).await?;
    }
    let open = runs.div_ceil(100) + runs.div_ceil(1000);
    for _ in 0..3000 {
        let active = api.active_runs().await?;
        #[allow(clippy::cast_precision_loss)]
        if active <= open as f64 {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    anyhow::bail!("the runs did not settle: more than {open} still open after 5 minutes")
}

/// Times `GET /v1/runs?query`: (median, p99, max) in ms and the number of runs on the page.
#[allow(clippy::cast_precision_loss)]
async fn time(api: &Api, query: &str) -> anyhow::Result<(f64, f64, f64, usize)> {
    let path = format!("/v1/runs?{query}");
    let mut listed = 0;
    for _ in 0..3 {
        listed = api.get(&path).await?["runs"].as_array().map_or(0, Vec::len);
    }
    let mut ms = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        let started = Instant::now();
        let page = api.get(&path).await?;
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(page["runs"].is_array(), "GET {path} answered no runs");
    }
    let ms = sorted(ms);
    let round = |v: f64| (v * 100.0).round() / 100.0;
    Ok((round(percentile(&ms, 0.5)), round(percentile(&ms, 0.99)), round(ms[ms.len() - 1]), listed))
}

/// The queries timed, by name: each filter alone, two combinations, and the cursor of a deep page.
async fn queries(api: &Api) -> anyhow::Result<Vec<(&'static str, String)>> {
    let keyed = api.get("/v1/runs?idempotency_key=bench-key-50003").await?;
    let middle = &keyed["runs"][0];
    let at = middle["created_at_ms"].as_i64().context("the keyed run has no creation time")?;
    let id = middle["id"].as_str().context("the keyed run has no id")?;
    Ok(vec![
        ("none", String::new()),
        ("status_common", "status=succeeded".into()),
        ("status_rare", "status=cancelled".into()),
        ("label_common", "label=env:prod".into()),
        ("label_rare", "label=tenant:t42".into()),
        ("two_labels", "label=env:prod&label=tenant:t42".into()),
        ("q_rare", "q=umbrella".into()),
        ("q_common", "q=remind".into()),
        ("q_no_match", "q=no-such-goal".into()),
        ("action_rare", "action=notify.send".into()),
        ("action_common", "action=noop".into()),
        ("created_window", format!("created_after={}&created_before={}", at - 50, at + 50)),
        ("idempotency_key", "idempotency_key=bench-key-50003".into()),
        ("attention", "attention=true".into()),
        ("status_and_label", "status=pending&label=env:dev".into()),
        ("deep_cursor", format!("cursor={at}.{id}")),
    ])
}

pub(super) async fn search(api: &Api, size: Size) -> anyhow::Result<Value> {
    let runs = size.runs_or(SEARCH_RUNS);
    let started = Instant::now();
    populate(api, runs).await?;
    let populate_s = started.elapsed().as_secs();
    let mut timed = Vec::new();
    let mut worst: f64 = 0.0;
    for (name, query) in queries(api).await? {
        let (median, p99, max, listed) = time(api, &query).await?;
        worst = worst.max(median);
        timed.push(json!({"name": name, "query": query, "ms_median": median, "ms_p99": p99, "ms_max": max,
            "listed": listed}));
    }
    Ok(json!({
        "scenario": "search",
        "runs": runs,
        "repeats": REPEATS,
        "populate_s": populate_s,
        "worst_ms_median": worst,
        "queries": timed,
    }))
}
