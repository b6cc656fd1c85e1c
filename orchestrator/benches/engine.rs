//! Engine throughput and dispatch latency through claim → complete, on SQLite and PostgreSQL.
//!
//! Not a test and not criterion: a plain program that prints figures. Run it with
//! `cargo bench -p cairn-orchestrator --bench engine` (release profile).
//!
//! Setup per backend: one [`Engine`] over a fresh database (a temporary SQLite file; a new PostgreSQL database
//! `cairn_bench_<pid>` on `DATABASE_URL`, or on `postgres://postgres@127.0.0.1:5432/postgres` when that connects,
//! dropped at the end), the system clock, the built-in catalog, and 16 in-process workers: tokio tasks looping
//! `claim_wait(worker, ["noop"], 16, 50 ms)` → `complete(lease, args)`. `noop` steps do no work, so every
//! figure is orchestration overhead (store transactions, wake-ups, scheduling).
//!
//! Scenarios:
//! 1. `chain`: a 20-step chain (step `i` depends on step `i-1`), 5 measured runs after one warm-up run. Wall time
//!    is from just before `submit` to the return of the last step's `complete`. Reports steps/s and per-step
//!    overhead (wall / 20), median and worst over the runs.
//! 2. `fanout`: one root, 1,000 parallel steps depending on it, one join depending on all 1,000 (1,002 steps;
//!    `max_steps` is raised to fit). 3 measured runs; reports wall time and steps/s, median and worst.
//! 3. `dispatch latency`: over the chain runs, for each step after the first, the time from the return of its
//!    parent's `complete` to the moment a worker's `claim_wait` returned it. p50/p99 (and max). A dependent
//!    claimed by another worker before the parent's `complete` call had even returned to its caller counts as 0.

#![allow(missing_docs, clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_core::catalog::StaticCatalog;
use cairn_orchestrator::clock::SystemClock;
use cairn_orchestrator::{Engine, EngineConfig, SubmitRequest};
use cairn_store::{Report, Store};
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::sync::oneshot;

const WORKERS: usize = 16;
const CLAIM_LIMIT: u32 = 16;
const CLAIM_WAIT: Duration = Duration::from_millis(50);
const CHAIN_STEPS: usize = 20;
const CHAIN_RUNS: usize = 5;
const FANOUT_WIDTH: usize = 1000;
const FANOUT_RUNS: usize = 3;
const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// What the workers record: when each step was claimed and when its `complete` returned, and who is waiting for
/// which final step of a run.
#[derive(Default)]
struct Shared {
    claimed: Mutex<HashMap<(String, String), Instant>>,
    completed: Mutex<HashMap<(String, String), Instant>>,
    finish: Mutex<Finish>,
    stop: AtomicBool,
}

/// Both maps behind one lock, so a completion and a waiter registering at the same time cannot miss each other.
#[derive(Default)]
struct Finish {
    /// (run id, final step id) → signalled when that step's `complete` returned.
    waiters: HashMap<(String, String), oneshot::Sender<Instant>>,
    /// Completions that arrived before anyone waited for them (kept until asked for, or forever for non-final
    /// steps, which is a few thousand entries).
    done: HashMap<(String, String), Instant>,
}

impl Shared {
    /// Registers interest in `step` of `run` finishing; the receiver gets the instant its `complete` returned.
    fn wait_for(&self, run: &str, step: &str) -> oneshot::Receiver<Instant> {
        let (tx, rx) = oneshot::channel();
        let key = (run.to_owned(), step.to_owned());
        let mut finish = self.finish.lock().unwrap();
        match finish.done.remove(&key) {
            Some(at) => {
                let _ = tx.send(at);
            }
            None => {
                finish.waiters.insert(key, tx);
            }
        }
        rx
    }
}

async fn worker(engine: Engine, id: String, shared: Arc<Shared>) {
    let actions = vec!["noop".to_owned()];
    while !shared.stop.load(Ordering::Relaxed) {
        let batch = match engine.claim_wait(&id, &actions, CLAIM_LIMIT, CLAIM_WAIT).await {
            Ok(batch) => batch,
            Err(e) => {
                eprintln!("{id}: claim failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let claimed_at = Instant::now();
        if batch.is_empty() {
            continue;
        }
        {
            let mut claimed = shared.claimed.lock().unwrap();
            for c in &batch {
                claimed.insert((c.lease.run_id.clone(), c.lease.step_id.clone()), claimed_at);
            }
        }
        for c in batch {
            let report = loop {
                match engine.complete(&c.lease, &c.args).await {
                    Ok(r) => break r,
                    Err(e) => {
                        eprintln!("{id}: complete failed (retrying): {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            };
            let done_at = Instant::now();
            assert_eq!(report, Report::Succeeded, "noop step {} did not succeed", c.lease.step_id);
            let key = (c.lease.run_id.clone(), c.lease.step_id.clone());
            shared.completed.lock().unwrap().insert(key.clone(), done_at);
            let mut finish = shared.finish.lock().unwrap();
            match finish.waiters.remove(&key) {
                Some(tx) => {
                    let _ = tx.send(done_at);
                }
                None => {
                    finish.done.insert(key, done_at);
                }
            }
        }
    }
}

fn chain_plan(n: usize) -> Value {
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            if i == 0 {
                json!({"id": "s0", "action": "noop", "args": {"i": 0}})
            } else {
                json!({"id": format!("s{i}"), "action": "noop", "args": {"i": i},
                       "depends_on": [format!("s{}", i - 1)]})
            }
        })
        .collect();
    json!({"goal": "benchmark chain", "steps": steps})
}

fn fanout_plan(width: usize) -> Value {
    let mut steps = vec![json!({"id": "root", "action": "noop", "args": {}})];
    steps.extend(
        (0..width).map(|i| json!({"id": format!("f{i}"), "action": "noop", "args": {"i": i}, "depends_on": ["root"]})),
    );
    let all: Vec<String> = (0..width).map(|i| format!("f{i}")).collect();
    steps.push(json!({"id": "join", "action": "noop", "args": {}, "depends_on": all}));
    json!({"goal": "benchmark fan-out", "steps": steps})
}

/// Submits `plan`, waits until `last` has completed, checks the run succeeded, returns (run id, wall time).
async fn run_once(engine: &Engine, shared: &Shared, plan: &Value, last: &str) -> (String, Duration) {
    let t0 = Instant::now();
    let req = SubmitRequest { plan: plan.clone(), input: None, idempotency_key: None, labels: Default::default() };
    let run_id = match engine.submit(&req).await {
        Ok(s) => s.run_id,
        Err(e) => panic!("submit failed: {e}: {e:?}"),
    };
    let rx = shared.wait_for(&run_id, last);
    let done = tokio::time::timeout(Duration::from_secs(120), rx)
        .await
        .expect("run did not finish within 120 s")
        .expect("worker dropped");
    let wall = done.saturating_duration_since(t0);
    let run = engine.store().run(&run_id).await.unwrap().expect("run exists");
    assert_eq!(run.status, "succeeded", "run {run_id} ended {}", run.status);
    (run_id, wall)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted `v` (`p` in 0..=100).
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

struct Figures {
    backend: &'static str,
    settings: String,
    rows: Vec<(String, String)>,
}

async fn bench_backend(backend: &'static str, url: &str) -> Figures {
    let store = Store::connect(url).await.expect("connect");
    let settings = describe(&store).await;
    let mut config = EngineConfig::default();
    config.limits.max_steps = config.limits.max_steps.max(FANOUT_WIDTH + 2);
    let engine = Engine::start(store, Arc::new(SystemClock), Arc::new(StaticCatalog::builtin()), config)
        .await
        .expect("engine start");
    let shared = Arc::new(Shared::default());
    let handles: Vec<_> =
        (0..WORKERS).map(|w| tokio::spawn(worker(engine.clone(), format!("bench-w{w}"), shared.clone()))).collect();

    let mut rows = Vec::new();

    // Chain: one warm-up run, then the measured runs.
    let chain = chain_plan(CHAIN_STEPS);
    let last = format!("s{}", CHAIN_STEPS - 1);
    run_once(&engine, &shared, &chain, &last).await;
    let mut per_step = Vec::new();
    let mut latencies = Vec::new();
    let mut early = 0usize;
    for _ in 0..CHAIN_RUNS {
        let (run_id, wall) = run_once(&engine, &shared, &chain, &last).await;
        per_step.push(ms(wall) / CHAIN_STEPS as f64);
        let claimed = shared.claimed.lock().unwrap();
        let completed = shared.completed.lock().unwrap();
        for i in 1..CHAIN_STEPS {
            let parent = completed[&(run_id.clone(), format!("s{}", i - 1))];
            let child = claimed[&(run_id.clone(), format!("s{i}"))];
            match child.checked_duration_since(parent) {
                Some(d) => latencies.push(ms(d)),
                None => {
                    early += 1;
                    latencies.push(0.0);
                }
            }
        }
    }
    let per_step = sorted(per_step);
    let median = pct(&per_step, 50.0);
    rows.push((
        format!("chain ({CHAIN_STEPS} steps, {CHAIN_RUNS} runs)"),
        format!(
            "{:.0} steps/s; per-step overhead {:.2} ms median, {:.2} ms worst run",
            1000.0 / median,
            median,
            per_step[per_step.len() - 1]
        ),
    ));
    let latencies = sorted(latencies);
    rows.push((
        format!("completion → dependent claimed ({} samples)", latencies.len()),
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({early} claimed before complete() returned, counted as 0)",
            pct(&latencies, 50.0),
            pct(&latencies, 99.0),
            latencies[latencies.len() - 1]
        ),
    ));

    // Fan-out + join.
    let fanout = fanout_plan(FANOUT_WIDTH);
    let total = FANOUT_WIDTH + 2;
    let mut walls = Vec::new();
    for _ in 0..FANOUT_RUNS {
        let (_, wall) = run_once(&engine, &shared, &fanout, "join").await;
        walls.push(ms(wall));
    }
    let walls = sorted(walls);
    let median = pct(&walls, 50.0);
    rows.push((
        format!("fan-out {FANOUT_WIDTH} + join ({total} steps, {FANOUT_RUNS} runs)"),
        format!(
            "wall {:.0} ms median ({:.0} ms worst); {:.0} steps/s",
            median,
            walls[walls.len() - 1],
            total as f64 * 1000.0 / median
        ),
    ));

    shared.stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.unwrap();
    }
    match engine.store() {
        Store::Sqlite(pool) => pool.close().await,
        Store::Postgres(pool) => pool.close().await,
    }
    Figures { backend, settings, rows }
}

/// The durability settings actually in force, read from the database.
async fn describe(store: &Store) -> String {
    match store {
        Store::Sqlite(pool) => {
            let journal: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(pool).await.unwrap();
            let sync: i64 = sqlx::query_scalar("PRAGMA synchronous").fetch_one(pool).await.unwrap();
            let sync = match sync {
                0 => "OFF",
                1 => "NORMAL",
                2 => "FULL",
                3 => "EXTRA",
                _ => "?",
            };
            format!("journal_mode={journal}, synchronous={sync}, pool 4 connections")
        }
        Store::Postgres(pool) => {
            let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(pool).await.unwrap();
            let fsync: String = sqlx::query_scalar("SHOW fsync").fetch_one(pool).await.unwrap();
            let commit: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(pool).await.unwrap();
            format!("PostgreSQL {version}, fsync={fsync}, synchronous_commit={commit}, pool 16 connections")
        }
    }
}

/// A fresh PostgreSQL database on the server of `base`, or `None` when the server does not answer.
// The name is generated here from the pid, never taken from input, so formatting it into DDL is safe.
async fn create_pg_database(base: &str) -> Option<(sqlx::PgConnection, String, String)> {
    let mut admin = match tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(base)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            eprintln!("PostgreSQL at {base} unavailable: {e}");
            return None;
        }
        Err(_) => {
            eprintln!("PostgreSQL at {base} unavailable: connect timed out");
            return None;
        }
    };
    let name = format!("cairn_bench_{}", std::process::id());
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut admin).await.unwrap();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    let url = format!("{prefix}/{name}");
    Some((admin, name, url))
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; no other arguments are understood.
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get);
    println!(
        "Cairn engine benchmark: {WORKERS} in-process workers, claim_wait(limit {CLAIM_LIMIT}, {CLAIM_WAIT:?}) → complete, noop steps"
    );
    println!("machine: {cores} cores; system clock; release build");
    let started = Instant::now();
    let mut all = Vec::new();

    // SQLite, temporary file.
    let path = std::env::temp_dir().join(format!("cairn_bench_{}.db", std::process::id()));
    let url = format!("sqlite:{}", path.display());
    all.push(bench_backend("sqlite", &url).await);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }

    // PostgreSQL, a fresh database.
    let base = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_PG_URL.to_owned());
    match create_pg_database(&base).await {
        Some((mut admin, name, url)) => {
            all.push(bench_backend("postgres", &url).await);
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
                .execute(&mut admin)
                .await
                .unwrap();
        }
        None => all.push(Figures {
            backend: "postgres",
            settings: "skipped: no PostgreSQL (set DATABASE_URL)".into(),
            rows: Vec::new(),
        }),
    }

    println!();
    for f in &all {
        println!("{:<9} | settings: {}", f.backend, f.settings);
        if f.rows.is_empty() {
            println!("{:<9} | skipped", f.backend);
        }
        for (scenario, figures) in &f.rows {
            println!("{:<9} | {:<46} | {figures}", f.backend, scenario);
        }
        println!();
    }
    println!("total benchmark time {:.1} s", started.elapsed().as_secs_f64());
}
