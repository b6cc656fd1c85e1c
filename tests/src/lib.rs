//! Shared harness for Cairn's end-to-end and failure-case tests (`tests/tests/*.rs`).
//!
//! - [`TestApp`]: a real [`Engine`] over a fresh database (a SQLite file, or a new PostgreSQL database when
//!   `DATABASE_URL` is set) with a [`ManualClock`], so timers and backoff are driven by setting the time.
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

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod http;
pub mod invariants;
pub mod process;
pub mod raw;
pub mod silent_proxy;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;

use cairn_core::catalog::StaticCatalog;
use cairn_core::clock::{Clock, ManualClock};
use cairn_orchestrator::{Engine, EngineConfig, SubmitRequest};
use cairn_store::{RunSummary, StepSummary, Store};
use jiff::Timestamp;
use serde_json::Value;

pub use worker::{Outcome, TestWorker};

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A fresh SQLite file.
    Sqlite,
    /// A fresh PostgreSQL database (requires `DATABASE_URL`).
    Postgres,
}

/// The backends available here: SQLite always, PostgreSQL when `DATABASE_URL` is set. A test looping over
/// this prints which backends it skipped, so a missing PostgreSQL is visible, not silently green.
pub fn backends() -> Vec<Backend> {
    if std::env::var("DATABASE_URL").is_ok() {
        vec![Backend::Sqlite, Backend::Postgres]
    } else {
        eprintln!("SKIPPED on PostgreSQL: DATABASE_URL is not set");
        vec![Backend::Sqlite]
    }
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
        TestApp { engine, clock, url, config }
    }

    /// Drops this engine and starts a new one over the same database and clock (an orchestrator restart).
    pub async fn restart(self) -> TestApp {
        let TestApp { engine, clock, url, config } = self;
        drop(engine);
        let engine = start_engine(&url, clock.clone(), config.clone()).await;
        TestApp { engine, clock, url, config }
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
        let req = SubmitRequest { plan, input: None, idempotency_key: None };
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

/// A fresh SQLite database URL: a new file in this test process's directory under the system temp dir
/// (`cairn-tests/<pid>/`), so that orchestrator processes a test restarts find it again. The directories of test
/// processes that are gone are removed first, as [`postgres_url`] drops their databases.
pub fn sqlite_url() -> String {
    let root: PathBuf = std::env::temp_dir().join("cairn-tests");
    remove_directories_of_gone_processes(&root);
    let dir = root.join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.db", uuid::Uuid::new_v4()));
    format!("sqlite:{}", path.display())
}

/// Removes the subdirectories of `root` named by the id of a process that no longer runs (other names, such as
/// the [`http::TempDir`]s, are left alone: those remove themselves).
fn remove_directories_of_gone_processes(root: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let pid = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok());
        if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Creates a fresh database named `cairn_t_<pid>_<uuid>` on the `DATABASE_URL` server, dropping ones left by
/// test processes that are gone.
// Database names are generated here (pid + uuid), never taken from input, so formatting them into DDL is safe.
pub async fn postgres_url() -> String {
    use sqlx::Connection;
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap();
    let stale: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'cairn_t_%'")
        .fetch_all(&mut admin)
        .await
        .unwrap();
    for name in stale {
        let pid = name.split('_').nth(2).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
                .execute(&mut admin)
                .await;
        }
    }
    let name = format!("cairn_t_{}_{}", std::process::id(), uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut admin).await.unwrap();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    format!("{prefix}/{name}")
}
