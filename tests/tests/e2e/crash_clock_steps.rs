//! A step of the orchestrator host's clock by an hour either way (NTP, a VM resumed, `date -s`) neither times out
//! nor reclaims a healthy attempt, and no record ends before it began (issue "Hardening", "Wall-clock jumps";
//! contract §10, "Leases, timers, time").
//!
//! The engine runs on the orchestrator's clock (`SteadyClock`, as `cairn serve` and `cairn dev` do) over a host
//! clock the test steps. On the host clock itself, the forward step would expire the lease at once and the reaper
//! reclaim the attempt, and the backward step would stamp the attempt's end an hour before its start.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::catalog::StaticCatalog;
use cairn_core::clock::{Clock, ManualClock};
use cairn_orchestrator::clock::SteadyClock;
use cairn_orchestrator::{Engine, EngineConfig, SubmitRequest};
use cairn_store::{HeartbeatOutcome, Report, Store};
use cairn_tests::{Backend, on_both_backends};
use serde_json::json;

const START: &str = "2027-03-14T12:00:00Z";

/// An engine over a fresh database, with the guard that drops the database when the test ends.
async fn engine_over(backend: Backend, host: Arc<ManualClock>) -> (Engine, cairn_tests::Dropped) {
    let url = cairn_tests::http::database_url(backend).await;
    let database = cairn_tests::Dropped(url.clone());
    let store = Store::connect(&url).await.unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SteadyClock::new(host));
    let config =
        EngineConfig { lease_ttl: Duration::from_secs(2), startup_grace: Duration::ZERO, ..EngineConfig::default() };
    (Engine::start(store, clock, Arc::new(StaticCatalog::builtin()), config).await.unwrap(), database)
}

on_both_backends!(an_hour_step_of_the_host_clock_either_way_leaves_a_healthy_attempt_alone);
async fn an_hour_step_of_the_host_clock_either_way_leaves_a_healthy_attempt_alone(backend: Backend) {
    for step_hours in [1, -1] {
        let host = Arc::new(ManualClock::new(START.parse().unwrap()));
        let (engine, _database) = engine_over(backend, host.clone()).await;
        let plan = json!({"steps": [{"id": "a", "action": "noop", "args": {}, "timeout_ms": 60_000}]});
        let run = engine
            .submit(&SubmitRequest { plan, input: None, idempotency_key: None, labels: Default::default() })
            .await
            .unwrap();
        let lease = engine.claim("w1", &["noop".to_owned()], 1).await.unwrap().remove(0).lease;

        host.set(host.now() + jiff::SignedDuration::from_hours(step_hours));
        // Past one lease TTL (1 s) of heartbeats after the step.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let beat = engine.heartbeat(&lease, None).await.unwrap();
            assert!(matches!(beat, HeartbeatOutcome::Extended { .. }), "{backend:?} {step_hours:+}h: alive");
            assert_eq!(engine.reap().await.unwrap(), 0, "{backend:?} {step_hours:+}h: nothing reclaimed");
        }
        let report = engine.complete(&lease, &json!({"ok": true})).await.unwrap();

        assert_eq!(report, Report::Succeeded, "{backend:?} {step_hours:+}h: the attempt's own report counts");
        let attempts = engine.store().attempts(&run.run_id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{backend:?} {step_hours:+}h: one attempt");
        let (started, ended) = (attempts[0].started_at_ms, attempts[0].ended_at_ms.unwrap());
        assert!(ended >= started, "{backend:?} {step_hours:+}h: ended {ended} before it started {started}");
        assert!(ended - started < 5_000, "{backend:?} {step_hours:+}h: it took about 1.2 s, not an hour");
    }
}
