//! `cairn bench`: end-to-end figures with a real orchestrator process and real worker processes over gRPC.
//!
//! Spawns this executable as `cairn serve` (random free 127.0.0.1 ports, generated tokens, a temporary SQLite file
//! unless `--db` is given) and `--workers` times as `cairn worker --actions noop`, waits until the API answers and the
//! workers are connected, runs the scenario over the REST API, computes the figures from the run's event history
//! (`at_ms` timestamps written by the orchestrator, millisecond resolution), prints them and kills the processes.
//!
//! Scenarios:
//! - `chain`: a run of 20 sequential `noop` steps, 5 times; per-step overhead = `step_started(dependent)` −
//!   `step_succeeded(dependency)`, median and p99 over all dependents.
//! - `fanout`: a run of 200 parallel `noop` steps and a join; `wall_ms` = run finished − run created.
//! - `throughput`: a run of 2,000 independent `noop` steps; `steps_per_sec` = steps / (last `step_succeeded` − first
//!   `step_ready`); dispatch latency = `step_started` − `step_ready` per step, p50 and p99.
//! - `timers`: not implemented yet (reported as skipped).
//! - `all`: the above in order against one orchestrator.
//!
//! `--json` prints one JSON object per line per scenario. A PostgreSQL database given with `--db` should be fresh
//! (the orchestrator migrates it; runs accumulate in it).

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::client::Client;

/// The scenarios `cairn bench` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// 20 sequential steps, 5 runs: per-step overhead.
    Chain,
    /// 200 parallel steps and a join: wall time.
    Fanout,
    /// 2,000 independent steps: steps/s and dispatch latency.
    Throughput,
    /// 10,000 timers due at once (not implemented yet; reported as skipped).
    Timers,
    /// chain, fanout, throughput, timers.
    All,
}

/// Flags of `cairn bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Database: `sqlite:PATH` or `postgres://…` (default: a temporary SQLite file).
    #[arg(long)]
    db: Option<String>,
    /// Worker processes to start.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Concurrency of each worker process.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Print one JSON object per line per scenario.
    #[arg(long)]
    json: bool,
}

const CHAIN_LEN: usize = 20;
const CHAIN_RUNS: usize = 5;
const FANOUT_WIDTH: usize = 200;
const THROUGHPUT_STEPS: usize = 2_000;

/// Kills the spawned processes when dropped (also on error paths).
struct Processes {
    children: Vec<Child>,
    dir: PathBuf,
    keep_dir: bool,
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if self.keep_dir {
            eprintln!("cairn bench: process logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs `cairn bench`.
///
/// # Errors
/// A process that does not start, an orchestrator that does not become healthy, or a run that does not succeed.
pub async fn run(args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.workers >= 1, "--workers must be at least 1");
    anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    let exe = std::env::current_exe().context("locating the cairn executable")?;
    let dir = std::env::temp_dir().join(format!("cairn-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut procs = Processes { children: Vec::new(), dir: dir.clone(), keep_dir: true };

    let db = args.db.clone().unwrap_or_else(|| format!("sqlite:{}", dir.join("bench.db").display()));
    let backend = if db.starts_with("postgres") { "postgres" } else { "sqlite" };
    let http = free_port()?;
    let grpc = free_port()?;
    let api_token = token("api");
    let worker_token = token("worker");

    let log = |name: &str| -> anyhow::Result<Stdio> {
        let file = std::fs::File::create(dir.join(name)).with_context(|| format!("creating log {name}"))?;
        Ok(Stdio::from(file))
    };
    let serve = Command::new(&exe)
        .args(["serve", "--db", &db, "--http", &format!("127.0.0.1:{http}"), "--grpc", &format!("127.0.0.1:{grpc}")])
        .env("CAIRN_API_TOKEN", &api_token)
        .env("CAIRN_WORKER_TOKEN", &worker_token)
        .env("CAIRN_MAX_STEPS", "10000")
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .stdin(Stdio::null())
        .stdout(log("serve.log")?)
        .stderr(log("serve.err")?)
        .spawn()
        .context("starting `cairn serve`")?;
    procs.children.push(serve);

    let client = Client::new(&format!("http://127.0.0.1:{http}"), Some(api_token))?;
    wait_healthy(&client, &mut procs.children[0]).await?;

    for i in 0..args.workers {
        let worker = Command::new(&exe)
            .args(["worker", "--server", &format!("http://127.0.0.1:{grpc}")])
            .args(["--concurrency", &args.concurrency.to_string(), "--actions", "noop"])
            .args(["--id", &format!("bench-worker-{i}")])
            .env("CAIRN_WORKER_TOKEN", &worker_token)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(log(&format!("worker-{i}.log"))?)
            .stderr(log(&format!("worker-{i}.err"))?)
            .spawn()
            .context("starting `cairn worker`")?;
        procs.children.push(worker);
    }
    wait_workers(&client, args.workers).await?;

    let config = json!({
        "db": backend,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
    });
    let scenarios = match args.scenario {
        Scenario::All => vec![Scenario::Chain, Scenario::Fanout, Scenario::Throughput, Scenario::Timers],
        one => vec![one],
    };
    for scenario in scenarios {
        let mut figures = match scenario {
            Scenario::Chain => chain(&client).await?,
            Scenario::Fanout => fanout(&client).await?,
            Scenario::Throughput => throughput(&client).await?,
            Scenario::Timers => json!({"scenario": "timers", "skipped": true,
                "reason": "the timers scenario is not implemented yet"}),
            Scenario::All => unreachable!("expanded above"),
        };
        if let (Some(obj), Some(cfg)) = (figures.as_object_mut(), config.as_object()) {
            obj.extend(cfg.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        print_figures(&figures, args.json);
    }
    procs.keep_dir = false;
    Ok(ExitCode::SUCCESS)
}

fn print_figures(figures: &Value, as_json: bool) {
    if as_json {
        out!("{figures}");
        return;
    }
    let get = |k: &str| figures.get(k).cloned().unwrap_or(Value::Null);
    let setup = format!(
        "[{} db, {} worker(s) x concurrency {}, {} build]",
        get("db").as_str().unwrap_or("?"),
        get("workers"),
        get("concurrency"),
        get("build").as_str().unwrap_or("?")
    );
    match get("scenario").as_str().unwrap_or("?") {
        "chain" => out!(
            "chain      {setup}: per-step overhead median {} ms, p99 {} ms ({} dependents over {} runs of {} steps)",
            get("per_step_ms_median"),
            get("per_step_ms_p99"),
            get("samples"),
            get("runs"),
            get("steps")
        ),
        "fanout" => out!(
            "fanout     {setup}: {} parallel steps + join finished in {} ms (client-observed {} ms)",
            get("width"),
            get("wall_ms"),
            get("client_wall_ms")
        ),
        "throughput" => out!(
            "throughput {setup}: {} steps, {} steps/s, dispatch latency p50 {} ms, p99 {} ms",
            get("steps"),
            get("steps_per_sec"),
            get("dispatch_latency_ms_p50"),
            get("dispatch_latency_ms_p99")
        ),
        _ => out!("timers     {setup}: skipped ({})", get("reason").as_str().unwrap_or("")),
    }
}

/// A free TCP port on 127.0.0.1 (bound then released; the orchestrator binds it right after).
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// A throwaway token, unique enough for one local benchmark.
fn token(kind: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("bench-{kind}-{}-{nanos:x}", std::process::id())
}

async fn wait_healthy(client: &Client, serve: &mut Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if client.get("/healthz").await.is_ok() {
            return Ok(());
        }
        if let Some(status) = serve.try_wait()? {
            bail!("`cairn serve` exited with {status} before becoming healthy (see its logs)");
        }
        if Instant::now() > deadline {
            bail!("`cairn serve` did not answer /healthz within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `noop` is registered and the orchestrator counts `workers` connected workers (at most 30 s).
async fn wait_workers(client: &Client, workers: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let actions = client.get("/v1/actions").await?;
        let has_noop = actions["actions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s.get("name").and_then(Value::as_str) == Some("noop")));
        let connected = match client.get("/metrics").await? {
            Value::String(text) => text
                .lines()
                .find_map(|l| l.strip_prefix("cairn_connected_workers "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0),
            _ => 0.0,
        };
        #[allow(clippy::cast_precision_loss)]
        if has_noop && connected >= workers as f64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            if has_noop {
                eprintln!("cairn bench: only {connected} of {workers} workers seen after 30 s; going on");
                return Ok(());
            }
            bail!("no worker registered `noop` within 30 s (see the worker logs)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn noop(id: &str, deps: &[String]) -> Value {
    json!({"id": id, "action": "noop", "args": {}, "depends_on": deps})
}

/// Submits a plan and returns its run id and the client-side submit instant.
async fn submit(client: &Client, goal: &str, steps: Vec<Value>) -> anyhow::Result<(String, Instant)> {
    let plan = json!({"version": "cairn/v1", "goal": goal, "steps": steps});
    let started = Instant::now();
    let view = client.post("/v1/runs", Some(&json!({"plan": plan}))).await.context("submitting the plan")?;
    let id = view["id"].as_str().context("submit answered without a run id")?.to_owned();
    Ok((id, started))
}

/// Polls the run until it finished; returns its view. Fails unless it succeeded.
async fn wait_finished(client: &Client, run_id: &str, every: Duration) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let view = client.get(&format!("/v1/runs/{run_id}")).await?;
        if !view["finished_at_ms"].is_null() {
            let status = view["status"].as_str().unwrap_or("?");
            anyhow::ensure!(status == "succeeded", "run {run_id} finished as {status}: {}", view["failure"]);
            return Ok(view);
        }
        if Instant::now() > deadline {
            bail!("run {run_id} did not finish within 600 s");
        }
        tokio::time::sleep(every).await;
    }
}

/// First `at_ms` of each (kind, step) in the run's history.
struct Timeline {
    at: HashMap<(String, String), i64>,
}

impl Timeline {
    async fn load(client: &Client, run_id: &str) -> anyhow::Result<Self> {
        let mut at = HashMap::new();
        let mut after = 0_i64;
        loop {
            let page = client.get(&format!("/v1/runs/{run_id}/events?after={after}&limit=10000")).await?;
            let events = page["events"].as_array().context("events answered without `events`")?;
            if events.is_empty() {
                break;
            }
            for e in events {
                after = after.max(e["id"].as_i64().unwrap_or(after));
                let (Some(kind), Some(step), Some(ms)) =
                    (e["kind"].as_str(), e["step_id"].as_str(), e["at_ms"].as_i64())
                else {
                    continue;
                };
                at.entry((kind.to_owned(), step.to_owned())).or_insert(ms);
            }
        }
        Ok(Self { at })
    }

    fn get(&self, kind: &str, step: &str) -> anyhow::Result<i64> {
        self.at.get(&(kind.to_owned(), step.to_owned())).copied().with_context(|| format!("no {kind} event for {step}"))
    }
}

/// Nearest-rank percentile of sorted values (`p` in 0..=1).
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

async fn chain(client: &Client) -> anyhow::Result<Value> {
    let ids: Vec<String> = (0..CHAIN_LEN).map(|i| format!("s{i:02}")).collect();
    let mut samples = Vec::new();
    let mut run_ms = Vec::new();
    for _ in 0..CHAIN_RUNS {
        let steps = ids.iter().enumerate().map(|(i, id)| noop(id, &ids[i.saturating_sub(1)..i])).collect::<Vec<_>>();
        let (run_id, _) = submit(client, "bench: chain", steps).await?;
        let view = wait_finished(client, &run_id, Duration::from_millis(10)).await?;
        run_ms.push(view["finished_at_ms"].as_i64().unwrap_or(0) - view["created_at_ms"].as_i64().unwrap_or(0));
        let timeline = Timeline::load(client, &run_id).await?;
        for pair in ids.windows(2) {
            let gap = timeline.get("step_started", &pair[1])? - timeline.get("step_succeeded", &pair[0])?;
            #[allow(clippy::cast_precision_loss)]
            samples.push(gap as f64);
        }
    }
    let samples = sorted(samples);
    Ok(json!({
        "scenario": "chain",
        "per_step_ms_median": percentile(&samples, 0.5),
        "per_step_ms_p99": percentile(&samples, 0.99),
        "samples": samples.len(),
        "runs": CHAIN_RUNS,
        "steps": CHAIN_LEN,
        "run_wall_ms": run_ms,
    }))
}

async fn fanout(client: &Client) -> anyhow::Result<Value> {
    let ids: Vec<String> = (0..FANOUT_WIDTH).map(|i| format!("p{i:03}")).collect();
    let mut steps: Vec<Value> = ids.iter().map(|id| noop(id, &[])).collect();
    steps.push(noop("join", &ids));
    let (run_id, started) = submit(client, "bench: fanout", steps).await?;
    let view = wait_finished(client, &run_id, Duration::from_millis(10)).await?;
    let client_wall_ms = started.elapsed().as_millis();
    let wall_ms = view["finished_at_ms"].as_i64().unwrap_or(0) - view["created_at_ms"].as_i64().unwrap_or(0);
    Ok(json!({"scenario": "fanout", "wall_ms": wall_ms, "client_wall_ms": client_wall_ms, "width": FANOUT_WIDTH}))
}

async fn throughput(client: &Client) -> anyhow::Result<Value> {
    let ids: Vec<String> = (0..THROUGHPUT_STEPS).map(|i| format!("t{i:05}")).collect();
    let steps: Vec<Value> = ids.iter().map(|id| noop(id, &[])).collect();
    let (run_id, _) = submit(client, "bench: throughput", steps).await?;
    wait_finished(client, &run_id, Duration::from_millis(100)).await?;
    let timeline = Timeline::load(client, &run_id).await?;
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
