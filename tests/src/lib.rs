//! Shared harness for Cairn's end-to-end and failure-case tests (`tests/tests/e2e/`, one test binary).
//!
//! - [`TestApp`]: a real [`Engine`] over a fresh database (a SQLite file, or a new PostgreSQL database cloned
//!   from a migrated template, [`postgres_url`], when `DATABASE_URL` is set) with a [`ManualClock`], so timers
//!   and backoff are driven by setting the time.
//!   [`TestApp::restart`] drops the engine and starts a new one over the same database, as a crashed and
//!   restarted orchestrator would.
//! - [`TestWorker`]: an in-process worker loop that claims steps and runs handlers, recording every call, so
//!   tests can count side effects (`calls`) the way the cases' recording stub does. It stands in for real
//!   worker processes until the worker protocol lands.
//! - [`raw`]: raw SQL on the engine's pool, for fault injection and measuring persisted row sizes.
//! - [`invariants`]: the cases' invariant sweep over the store (every open step has exactly one reason to
//!   progress; final steps hold no lease or wait), run at the end of a case.
//! - [`http`]: [`http::HttpApp`], the real orchestrator ([`cairn_orchestrator::server::Server`]: REST API,
//!   worker gRPC, reaper) in the test process on port 0 with a fresh database and a manual clock, a REST client, real `cairn`
//!   worker processes ([`http::CairnProcess`]) and bounded condition waits ([`http::within`]).
//! - [`process`]: crash tests' real processes: `cairn serve` ([`process::Orchestrator`]) that can be killed and
//!   restarted over its database, `cairn worker` processes to kill, freeze and thaw, and a recording endpoint.
//! - [`silent_proxy`]: a TCP proxy that stops forwarding for a while, to make the database silent.
//! - [`providers`]: stand-ins for `notify.send`'s providers (Telegram, webhook receivers that verify signatures,
//!   Slack, Feishu, ntfy, an SMTP server with STARTTLS) that record what they accept, fail on request and hold
//!   sends unanswered.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

mod databases;
pub mod endpoint;
pub mod http;
pub mod invariants;
pub mod process;
pub mod providers;
pub mod raw;
pub mod silent_proxy;
mod worker;

use std::sync::Arc;

use cairn_core::catalog::StaticCatalog;
use cairn_core::clock::{Clock, ManualClock};
use cairn_orchestrator::{Engine, EngineConfig, SubmitRequest};
use cairn_store::{RunSummary, StepSummary, Store};
use jiff::Timestamp;
use serde_json::Value;

pub use databases::{Dropped, postgres_url, sqlite_url, template_name};
pub use worker::{Outcome, TestWorker};

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A fresh SQLite file.
    Sqlite,
    /// A fresh PostgreSQL database (requires `DATABASE_URL`).
    Postgres,
}

/// Declares the two tests of a behaviour written once as `async fn name(backend: Backend)`: `name::sqlite` and
/// `name::postgres`. The PostgreSQL one is reported as ignored, with the reason, when `DATABASE_URL` was not set
/// at build time (the `cairn_pg` cfg of `build.rs`), so a missing database shows in the summary instead of a
/// test passing without having run. Arguments after the name go to `#[tokio::test(..)]`:
///
/// ```text
/// on_both_backends!(a_run_survives_a_restart, flavor = "multi_thread", worker_threads = 2);
/// /// What the test shows.
/// async fn a_run_survives_a_restart(backend: Backend) { /* … */ }
/// ```
#[macro_export]
macro_rules! on_both_backends {
    ($name:ident $(, $($runtime:tt)+)?) => {
        mod $name {
            #[::tokio::test $(($($runtime)+))?]
            async fn sqlite() {
                super::$name($crate::Backend::Sqlite).await;
            }

            #[::tokio::test $(($($runtime)+))?]
            #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: the PostgreSQL half of this test is skipped")]
            async fn postgres() {
                super::$name($crate::Backend::Postgres).await;
            }
        }
    };
}

/// A running engine over a fresh database with a manual clock.
pub struct TestApp {
    /// The engine.
    pub engine: Engine,
    /// The clock the engine reads.
    pub clock: Arc<ManualClock>,
    /// The database URL (to restart over it).
    pub url: String,
    /// Engine settings used (kept across restarts).
    pub config: EngineConfig,
    /// Drops the database when the app ends.
    pub database: Arc<Dropped>,
}

impl TestApp {
    /// A new app on `backend`, clock at `start`.
    pub async fn new(backend: Backend, start: &str) -> TestApp {
        Self::with_config(backend, start, EngineConfig::default()).await
    }

    /// A new app with custom settings.
    pub async fn with_config(backend: Backend, start: &str, config: EngineConfig) -> TestApp {
        let url = match backend {
            Backend::Sqlite => sqlite_url(),
            Backend::Postgres => postgres_url().await,
        };
        let clock = Arc::new(ManualClock::new(start.parse::<Timestamp>().unwrap()));
        let engine = start_engine(&url, clock.clone(), config.clone()).await;
        let database = Arc::new(Dropped(url.clone()));
        TestApp { engine, clock, url, config, database }
    }

    /// Drops this engine and starts a new one over the same database and clock (an orchestrator restart).
    pub async fn restart(self) -> TestApp {
        let TestApp { engine, clock, url, config, database } = self;
        drop(engine);
        let engine = start_engine(&url, clock.clone(), config.clone()).await;
        TestApp { engine, clock, url, config, database }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        self.engine.store()
    }

    /// Sets the clock to an RFC 3339 instant.
    pub fn set_time(&self, at: &str) {
        self.clock.set(at.parse::<Timestamp>().unwrap());
        self.engine.wake();
    }

    /// Sets the clock to an instant in epoch milliseconds.
    pub fn set_time_ms(&self, ms: i64) {
        self.clock.set(Timestamp::from_millisecond(ms).unwrap());
        self.engine.wake();
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        self.clock.advance(by);
        self.engine.wake();
    }

    /// Current clock time in epoch ms.
    pub fn now_ms(&self) -> i64 {
        self.clock.now().as_millisecond()
    }

    /// Submits a plan (JSON) and returns the run id; panics with the diagnostics when invalid.
    pub async fn submit(&self, plan: Value) -> String {
        let req = SubmitRequest { plan, input: None, idempotency_key: None, labels: Default::default() };
        match self.engine.submit(&req).await {
            Ok(s) => s.run_id,
            Err(e) => panic!("submit failed: {e}: {e:?}"),
        }
    }

    /// The run.
    pub async fn run(&self, run_id: &str) -> RunSummary {
        self.store().run(run_id).await.unwrap().expect("run exists")
    }

    /// One step of a run.
    pub async fn step(&self, run_id: &str, step_id: &str) -> StepSummary {
        let steps = self.store().steps(run_id).await.unwrap();
        steps.into_iter().find(|s| s.id == step_id).unwrap_or_else(|| panic!("step {step_id} exists"))
    }

    /// The status of one step.
    pub async fn status(&self, run_id: &str, step_id: &str) -> String {
        self.step(run_id, step_id).await.status.to_string()
    }

    /// One reaper pass.
    pub async fn reap(&self) -> usize {
        self.engine.reap().await.unwrap()
    }
}

async fn start_engine(url: &str, clock: Arc<ManualClock>, config: EngineConfig) -> Engine {
    let store = Store::connect(url).await.unwrap();
    Engine::start(store, clock, Arc::new(StaticCatalog::builtin()), config).await.unwrap()
}
