//! The orchestrator's metrics, served at `GET /metrics` in the Prometheus text format.
//!
//! Two sources:
//! - **The database**, read at each scrape ([`cairn_store::Store::stats`]): runs and steps by status, attempts and
//!   failures by action and failure code, the ready queue, active leases, due timers. These are the same from
//!   every orchestrator sharing the database and survive restarts; the attempt and failure "counters" are
//!   counts over the retained history.
//! - **This process**, observed as it works: the dispatch latency (claim time minus the time the step became
//!   claimable) and the attempt duration (claim to report) histograms, the delivery outcomes workers reported
//!   (`cairn_deliveries_total`), and the workers heard from (poll, heartbeat, report) within one lease TTL.
//!   With several orchestrators, sum these across them.
//!
//! Times come from the engine's clock, like every decision the engine makes. Failed logins on either API are
//! counted here by [`crate::auth::login_failed`].

use std::collections::HashMap;
use std::sync::Mutex;

use crate::auth::Api;
use cairn_core::state::{RunStatus, StepStatus};
use cairn_store::stats::StoreStats;
use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Latency buckets in seconds: 5 ms to ~1 h, roughly ×3 apart (dispatch waits and attempts span that range).
const BUCKETS: [f64; 14] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 120.0, 600.0, 3600.0];

const RUN_STATUSES: [RunStatus; 6] = RunStatus::ALL;

/// What the engine itself shows in a scrape ([`Metrics::render`]).
#[derive(Debug, Clone, Default)]
pub struct EngineGauges {
    /// Long polls waiting for work ([`crate::Engine::waiting_polls`]).
    pub waiting_polls: usize,
    /// Whether another orchestrator was heard lately ([`crate::Engine::hears_other_orchestrators`]).
    pub other_orchestrators_heard: bool,
    /// Ready steps due whose action no connected worker serves, by action.
    pub waiting_for_worker: Vec<(String, i64)>,
}

/// In-process observations, and the rendering of one scrape.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    dispatch_latency: HistogramVec,
    step_duration: HistogramVec,
    one_call: IntCounterVec,
    completions: IntCounterVec,
    auth_failures: IntCounterVec,
    deliveries: IntCounterVec,
    /// Worker id → when it was last heard from (epoch ms).
    workers: Mutex<HashMap<String, i64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn seconds(ms: i64) -> f64 {
    // Millisecond counts are far below 2^52, so the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let ms = ms.max(0) as f64;
    ms / 1000.0
}

fn histogram(name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    HistogramVec::new(HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()), labels)
        .expect("constant metric names and labels are valid")
}

impl Metrics {
    /// Empty histograms, no workers seen.
    pub fn new() -> Self {
        let dispatch_latency = histogram(
            "cairn_dispatch_latency_seconds",
            "Time from a step becoming claimable (ready, timer due, backoff over) to a worker claiming it.",
            &["action"],
        );
        let step_duration = histogram(
            "cairn_step_duration_seconds",
            "Time from claiming a step attempt to its report, by how the report ended the attempt.",
            &["action", "outcome"],
        );
        let one_call = IntCounterVec::new(
            Opts::new(
                "cairn_one_call_completions_total",
                "PostgreSQL: batches this orchestrator tried to write in one call, by path (`chain`: a completion and \
                 its dependent's claim; `leaves`: completions of steps nothing depends on and the claims riding on \
                 them) and outcome (`committed`; `fell_back` to the general transaction, which then wrote them; \
                 `unknown`: the connection was lost and what committed could not be read back).",
            ),
            &["path", "outcome"],
        )
        .expect("constant metric names and labels are valid");
        let completions = IntCounterVec::new(
            Opts::new(
                "cairn_worker_completions_total",
                "Completions received from workers, by the call that carried them (`complete`: one per call; \
                 `complete_batch`: several completions that queued up in a worker while its calls were in flight).",
            ),
            &["call"],
        )
        .expect("constant metric names and labels are valid");
        let auth_failures = IntCounterVec::new(
            Opts::new(
                "cairn_auth_failures_total",
                "Requests refused for a missing or wrong token, by API (`rest`: the bearer token of `/v1`; `grpc`: the \
                 worker token).",
            ),
            &["api"],
        )
        .expect("constant metric names and labels are valid");
        let deliveries = IntCounterVec::new(
            Opts::new(
                "cairn_deliveries_total",
                "Channel outcomes recorded in the delivery ledger, by channel type and outcome (`delivered`: a \
                 (run, step, recipient, channel) delivered for the first time; `failed`: an attempt's tries on a \
                 channel failed). Channels skipped as already delivered are in the step's output, not here.",
            ),
            &["channel", "outcome"],
        )
        .expect("constant metric names and labels are valid");
        let registry = Registry::new();
        for collector in [&dispatch_latency, &step_duration] {
            registry.register(Box::new(collector.clone())).expect("each metric is registered once");
        }
        for collector in [&one_call, &completions, &auth_failures, &deliveries] {
            registry.register(Box::new(collector.clone())).expect("each metric is registered once");
        }
        for call in ["complete", "complete_batch"] {
            completions.with_label_values(&[call]);
        }
        for api in [Api::Rest, Api::Grpc] {
            auth_failures.with_label_values(&[api.as_str()]);
        }
        // Every outcome is exported from the start (0 until it happens); `one_call` then only adds.
        for path in ["chain", "leaves"] {
            for outcome in ["committed", "fell_back", "unknown"] {
                one_call.with_label_values(&[path, outcome]);
            }
        }
        Self {
            registry,
            dispatch_latency,
            step_duration,
            one_call,
            completions,
            auth_failures,
            deliveries,
            workers: Mutex::default(),
        }
    }

    /// The counter of failed logins on `api` (`cairn_auth_failures_total{api}`), for
    /// [`crate::auth::login_failed`].
    pub fn auth_failures(&self, api: Api) -> IntCounter {
        self.auth_failures.with_label_values(&[api.as_str()])
    }

    /// A channel's outcome was recorded: `delivered` or `failed`.
    pub fn delivery(&self, channel: &str, outcome: &str) {
        self.deliveries.with_label_values(&[channel, outcome]).inc();
    }

    /// `count` completions arrived in one `call` (`complete` or `complete_batch`).
    pub fn completions_received(&self, call: &str, count: usize) {
        self.completions.with_label_values(&[call]).inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }

    /// The batch writer's one-call batches of `path` (`chain` or `leaves`) since its last report, by outcome.
    pub fn one_call(&self, path: &str, tried: cairn_store::OneCallCounts) {
        // Called after every batch; most batches (and every one on SQLite) tried nothing.
        for (outcome, count) in
            [("committed", tried.committed), ("fell_back", tried.fell_back), ("unknown", tried.unknown)]
        {
            if count > 0 {
                self.one_call.with_label_values(&[path, outcome]).inc_by(count);
            }
        }
    }

    /// A step of `action` was claimed `latency_ms` after it became claimable.
    pub fn dispatched(&self, action: &str, latency_ms: i64) {
        self.dispatch_latency.with_label_values(&[action]).observe(seconds(latency_ms));
    }

    /// An attempt of `action` ended with `outcome` (`succeeded`, `retry_scheduled`, `failed`,
    /// `outcome_unknown`) `duration_ms` after its claim.
    pub fn finished(&self, action: &str, outcome: &str, duration_ms: i64) {
        self.step_duration.with_label_values(&[action, outcome]).observe(seconds(duration_ms));
    }

    /// Worker `worker_id` talked to this orchestrator at `now_ms`.
    pub fn worker_seen(&self, worker_id: &str, now_ms: i64) {
        let mut workers = self.workers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match workers.get_mut(worker_id) {
            Some(seen) => *seen = (*seen).max(now_ms),
            None => {
                workers.insert(worker_id.to_owned(), now_ms);
            }
        }
    }

    /// Workers heard from within `window_ms` before `now_ms`; forgets older ones.
    fn connected_workers(&self, now_ms: i64, window_ms: i64) -> usize {
        let mut workers = self.workers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        workers.retain(|_, seen| *seen >= now_ms.saturating_sub(window_ms));
        workers.len()
    }

    /// One scrape in the Prometheus text format: the process's histograms and workers, the engine's `gauges`,
    /// and `stats` read from the database at `now_ms` (`None` when the read failed: `cairn_store_up` is then 0
    /// and the database figures are left out). Workers count as connected for `lease_ttl_ms`.
    pub fn render(&self, stats: Option<&StoreStats>, gauges: EngineGauges, now_ms: i64, lease_ttl_ms: i64) -> String {
        let scrape = Registry::new();
        gauge(
            &scrape,
            "cairn_waiting_polls",
            "Workers' long polls waiting on this orchestrator for work.",
            i64::try_from(gauges.waiting_polls).unwrap_or(i64::MAX),
        );
        gauge(
            &scrape,
            "cairn_other_orchestrators_heard",
            "1 when another orchestrator on the database was heard on the peer channel within 30 s (PostgreSQL \
             LISTEN/NOTIFY), else 0: with several orchestrators, 0 means their wake-ups do not cross.",
            i64::from(gauges.other_orchestrators_heard),
        );
        let store_up = IntGauge::new("cairn_store_up", "1 when this scrape could read the database, else 0.")
            .expect("a valid metric");
        store_up.set(i64::from(stats.is_some()));
        let workers = IntGauge::new(
            "cairn_connected_workers",
            "Workers this orchestrator heard from (poll, heartbeat, report) within one lease TTL.",
        )
        .expect("a valid metric");
        workers.set(i64::try_from(self.connected_workers(now_ms, lease_ttl_ms)).unwrap_or(i64::MAX));
        register(&scrape, &store_up);
        register(&scrape, &workers);
        let waiting = gauge_vec(
            &scrape,
            "cairn_steps_waiting_for_worker",
            "Ready steps due whose action no connected worker serves (through any orchestrator), by action.",
            &["action"],
        );
        for (action, count) in &gauges.waiting_for_worker {
            waiting.with_label_values(&[action.as_str()]).set(*count);
        }
        if let Some(stats) = stats {
            database_metrics(&scrape, stats, now_ms);
        }
        let mut families = self.registry.gather();
        families.extend(scrape.gather());
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut text = Vec::new();
        // Encoding into memory only fails on metrics the registries would not have accepted.
        if let Err(e) = prometheus::TextEncoder::new().encode(&families, &mut text) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        String::from_utf8(text).unwrap_or_default()
    }
}

fn register<C: prometheus::core::Collector + Clone + 'static>(registry: &Registry, collector: &C) {
    registry.register(Box::new(collector.clone())).expect("each metric is registered once per scrape");
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let gauge = IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid metric");
    register(registry, &gauge);
    gauge
}

fn gauge(registry: &Registry, name: &str, help: &str, value: i64) {
    let gauge = IntGauge::new(name, help).expect("a valid metric");
    gauge.set(value);
    register(registry, &gauge);
}

/// The database's figures, as gauges (and, for attempts and failures, counters over the retained history).
fn database_metrics(registry: &Registry, stats: &StoreStats, now_ms: i64) {
    let runs = gauge_vec(registry, "cairn_runs", "Runs by status.", &["status"]);
    for status in RUN_STATUSES {
        runs.with_label_values(&[status.as_str()]).set(0);
    }
    for row in &stats.runs {
        runs.with_label_values(&[row.status.as_str()]).set(row.count);
    }
    let steps = gauge_vec(registry, "cairn_steps", "Steps by status.", &["status"]);
    for status in StepStatus::ALL {
        steps.with_label_values(&[status.as_str()]).set(0);
    }
    for row in &stats.steps {
        steps.with_label_values(&[row.status.as_str()]).set(row.count);
    }
    let attempts = IntCounterVec::new(
        Opts::new("cairn_attempts_total", "Step attempts started, by action and attempt status."),
        &["action", "status"],
    )
    .expect("a valid metric");
    register(registry, &attempts);
    for row in &stats.attempts {
        attempts.with_label_values(&[row.action.as_str(), row.status.as_str()]).inc_by(count(row.count));
    }
    let failures = IntCounterVec::new(
        Opts::new("cairn_attempt_failures_total", "Failed step attempts, by action and failure code."),
        &["action", "code"],
    )
    .expect("a valid metric");
    register(registry, &failures);
    for row in &stats.failures {
        failures.with_label_values(&[row.action.as_str(), row.code.as_str()]).inc_by(count(row.count));
    }
    gauge(registry, "cairn_queue_depth", "Ready steps due now, waiting for a worker.", stats.queue_depth);
    let oldest = Gauge::new(
        "cairn_oldest_ready_step_age_seconds",
        "How long the longest-waiting due ready step has been claimable (0 when the queue is empty).",
    )
    .expect("a valid metric");
    oldest.set(stats.oldest_ready_due_ms.map_or(0.0, |due| seconds(now_ms - due)));
    register(registry, &oldest);
    gauge(registry, "cairn_active_leases", "Running step attempts with a live lease.", stats.active_leases);
    gauge(
        registry,
        "cairn_timers_due_unfired",
        "Steps whose not_before timer is due but that no worker has claimed yet.",
        stats.timers_due,
    );
}

fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use cairn_store::stats::{AttemptCount, StatusCount};

    use cairn_core::state::{AttemptStatus, RunStatus};

    use super::*;
    use crate::auth::{Api, login_failed};

    #[test]
    fn a_scrape_has_every_family_with_zeroes_for_absent_statuses() {
        let metrics = Metrics::new();
        metrics.dispatched("noop", 40);
        metrics.worker_seen("w1", 1_000);
        let stats = StoreStats {
            runs: vec![StatusCount { status: RunStatus::Succeeded, count: 2 }],
            attempts: vec![AttemptCount { action: "noop".into(), status: AttemptStatus::Succeeded, count: 3 }],
            oldest_ready_due_ms: Some(500),
            queue_depth: 1,
            ..StoreStats::default()
        };
        let text = metrics.render(
            Some(&stats),
            EngineGauges {
                waiting_polls: 2,
                other_orchestrators_heard: true,
                waiting_for_worker: vec![("crm.lookup".into(), 3)],
            },
            2_000,
            10_000,
        );
        for line in [
            "cairn_store_up 1",
            "cairn_connected_workers 1",
            "cairn_waiting_polls 2",
            "cairn_other_orchestrators_heard 1",
            "cairn_runs{status=\"succeeded\"} 2",
            "cairn_runs{status=\"failed\"} 0",
            "cairn_steps{status=\"waiting_approval\"} 0",
            "cairn_attempts_total{action=\"noop\",status=\"succeeded\"} 3",
            "cairn_queue_depth 1",
            "cairn_steps_waiting_for_worker{action=\"crm.lookup\"} 3",
            "cairn_oldest_ready_step_age_seconds 1.5",
            "cairn_dispatch_latency_seconds_count{action=\"noop\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "the scrape has `{line}`:\n{text}");
        }
    }

    #[test]
    fn one_call_batches_are_counted_by_path_and_outcome() {
        let metrics = Metrics::new();
        metrics.one_call("chain", cairn_store::OneCallCounts { committed: 2, fell_back: 0, unknown: 0 });
        metrics.one_call("chain", cairn_store::OneCallCounts { committed: 1, fell_back: 1, unknown: 0 });
        metrics.one_call("leaves", cairn_store::OneCallCounts { committed: 5, fell_back: 0, unknown: 1 });

        let text = metrics.render(None, EngineGauges::default(), 0, 10_000);

        for line in [
            "cairn_one_call_completions_total{outcome=\"committed\",path=\"chain\"} 3",
            "cairn_one_call_completions_total{outcome=\"fell_back\",path=\"chain\"} 1",
            "cairn_one_call_completions_total{outcome=\"unknown\",path=\"chain\"} 0",
            "cairn_one_call_completions_total{outcome=\"committed\",path=\"leaves\"} 5",
            "cairn_one_call_completions_total{outcome=\"fell_back\",path=\"leaves\"} 0",
            "cairn_one_call_completions_total{outcome=\"unknown\",path=\"leaves\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "the scrape has `{line}`:\n{text}");
        }
    }

    #[test]
    fn failed_logins_are_counted_by_api_from_zero() {
        let metrics = Metrics::new();
        login_failed(Api::Grpc, &metrics.auth_failures(Api::Grpc), None, "/cairn.v1.WorkerService/Poll");

        let text = metrics.render(None, EngineGauges::default(), 0, 10_000);

        for line in ["cairn_auth_failures_total{api=\"rest\"} 0", "cairn_auth_failures_total{api=\"grpc\"} 1"] {
            assert!(text.lines().any(|l| l == line), "the scrape has `{line}`:\n{text}");
        }
    }

    #[test]
    fn a_failed_database_read_still_serves_the_process_metrics() {
        let text = Metrics::new().render(None, EngineGauges::default(), 0, 10_000);
        assert!(text.contains("cairn_store_up 0"), "the scrape says the database was unreadable:\n{text}");
        assert!(!text.contains("cairn_runs"), "no stale database figures:\n{text}");
    }

    #[test]
    fn workers_not_heard_from_within_the_ttl_are_not_connected() {
        let metrics = Metrics::new();
        metrics.worker_seen("old", 0);
        metrics.worker_seen("new", 9_000);
        assert_eq!(metrics.connected_workers(15_000, 10_000), 1, "only the worker seen in the last TTL counts");
    }
}
