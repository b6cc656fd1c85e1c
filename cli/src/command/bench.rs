//! `cairn bench`: end-to-end figures with a real orchestrator process and real worker processes over gRPC.
//!
//! Spawns this executable as `cairn serve` (random free 127.0.0.1 ports, generated tokens, a temporary SQLite file
//! unless `--db` is given) and `--workers` times as `cairn worker --actions noop`, waits until the API answers and the
//! workers are connected, runs the scenario over the REST API, computes the figures from the run's event history
//! (`at_ms` timestamps written by the orchestrator, millisecond resolution), prints them and kills the processes.
//!
//! Each scenario waits for its runs to end by reading their summaries (`GET /v1/runs/{id}?view=summary`), and
//! reads their event histories only afterwards: on SQLite every read of events takes the one connection the
//! steps' transactions need.
//!
//! Scenarios:
//! - `chain`: a run of 20 sequential `noop` steps, 20 times. A step's cycle is `step_started(dependent)` −
//!   `step_started(dependency)`: the dependency's execution, its report and commit, and the dependent's dispatch,
//!   so it is an upper bound on the overhead and comparable with peers' "time per step in a chain".
//!   `per_step_ms_median` is the median over runs of each run's mean cycle ((last start − first start) / 19,
//!   which resolves below the events' 1 ms resolution); `per_step_ms_p99` is the p99 of single cycles (1 ms
//!   resolution). `handoff_gap_ms_*` is the orchestrator's share alone: `step_succeeded(dependency)` →
//!   `step_started(dependent)`.
//! - `fanout`: a run of 200 parallel `noop` steps and a join; `wall_ms` = run finished − run created.
//! - `throughput`: a run of 10,000 independent `noop` steps, all queued at once: how fast the workers drain them.
//!   The drain starts when the steps could first be claimed, `claimable` = the earlier of the submission's
//!   acknowledgement (this host's clock) and the first `step_started`; `steps_per_sec` = steps / (last
//!   `step_succeeded` − `claimable`) = steps / `span_ms`; dispatch latency = `step_started` − the later of
//!   `step_ready` and `claimable`, per step, p50 and p99. `submit_ms` = `claimable` − first `step_ready` is the
//!   submission's own transaction (`step_ready` is stamped when it begins), and `steps_per_sec_from_ready` the
//!   rate over both (the `steps_per_sec` of windows A to L in `docs/performance.md`).
//! - `timers`: a run of 10,000 independent `noop` steps whose `not_before` is the same instant, a few seconds
//!   ahead; `wall_ms` = last `step_started` − that instant (how long until every timer has fired and its step
//!   been handed to a worker).
//! - `dispatch`: 10,000 single-step runs submitted by 8 concurrent clients (at `--rate` runs per second, or as
//!   fast as the API accepts them) while the workers run them, after 1,000 warm-up runs submitted the same way;
//!   dispatch latency (`step_started` − `step_ready`) p50, p99 and max, `steps_per_sec`, `submit_per_sec` of the
//!   measured runs, and `warmup_runs`, `warmup_dispatch_latency_ms_p99` of the warm-up (see [`dispatch`]).
//! - `memory`: 10,000 runs of 10 steps each waiting on a timer a day ahead (100,000 pending timers, 10,000
//!   active runs); `rss_mb` = the orchestrator's resident memory (`VmRSS`) once they are stored.
//! - `all`: chain, fanout, throughput, timers, dispatch, memory, in order, against one orchestrator.
//!
//! `--json` prints one JSON object per line per scenario. A PostgreSQL database given with `--db` should be fresh
//! (the orchestrator migrates it; runs accumulate in it).
//!
//! The processes' logs (`serve.err`, `worker-N.err`, honouring `RUST_LOG`) and the temporary SQLite file are
//! removed after a successful run, kept after a failed one, and kept always when `CAIRN_BENCH_KEEP` is set to
//! anything but empty or `0` (to read, for example, `RUST_LOG=sqlx::query=debug` statement timings).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::client::Client;

mod dispatch;
mod scenarios;
mod timeline;

/// The scenarios `cairn bench` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// 20 runs of 20 sequential steps: time per step (median, p99) and the orchestrator's hand-off gap.
    Chain,
    /// 200 parallel steps and a join: wall time.
    Fanout,
    /// One run of 10,000 independent steps: steps/s and dispatch latency.
    Throughput,
    /// 10,000 timers due at the same instant: time until all have fired.
    Timers,
    /// 10,000 single-step runs arriving while workers run them: dispatch latency under a steady load.
    Dispatch,
    /// 100,000 pending timers in 10,000 runs: the orchestrator's resident memory.
    Memory,
    /// chain, fanout, throughput, timers, dispatch, memory.
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
    /// `dispatch` only: runs submitted per second (0: as fast as the API accepts them).
    #[arg(long, default_value_t = 0)]
    rate: u32,
    /// Print one JSON object per line per scenario.
    #[arg(long)]
    json: bool,
}

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
        "rate": args.rate,
        "db": backend,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
    });
    let scenarios = match args.scenario {
        Scenario::All => {
            vec![
                Scenario::Chain,
                Scenario::Fanout,
                Scenario::Throughput,
                Scenario::Timers,
                Scenario::Dispatch,
                Scenario::Memory,
            ]
        }
        one => vec![one],
    };
    for scenario in scenarios {
        let mut figures = match scenario {
            Scenario::Chain => scenarios::chain(&client).await?,
            Scenario::Fanout => scenarios::fanout(&client).await?,
            Scenario::Throughput => scenarios::throughput(&client).await?,
            Scenario::Timers => scenarios::timers(&client).await?,
            Scenario::Dispatch => dispatch::dispatch(&client, args.rate).await?,
            Scenario::Memory => scenarios::memory(&client, procs.children[0].id()).await?,
            Scenario::All => unreachable!("expanded above"),
        };
        if let (Some(obj), Some(cfg)) = (figures.as_object_mut(), config.as_object()) {
            obj.extend(cfg.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        print_figures(&figures, args.json);
    }
    // Kept on request, e.g. to read statement timings (`RUST_LOG=sqlx::query=debug`).
    procs.keep_dir = std::env::var("CAIRN_BENCH_KEEP").is_ok_and(|v| !v.is_empty() && v != "0");
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
            "chain      {setup}: per step median {} ms, p99 {} ms ({} runs of {} steps; orchestrator hand-off gap \
             median {} ms, p99 {} ms)",
            get("per_step_ms_median"),
            get("per_step_ms_p99"),
            get("runs"),
            get("steps"),
            get("handoff_gap_ms_median"),
            get("handoff_gap_ms_p99")
        ),
        "fanout" => out!(
            "fanout     {setup}: {} parallel steps + join finished in {} ms (client-observed {} ms)",
            get("width"),
            get("wall_ms"),
            get("client_wall_ms")
        ),
        "throughput" => out!(
            "throughput {setup}: {} steps, {} steps/s, dispatch latency p50 {} ms, p99 {} ms (after a {} ms \
             submission; {} steps/s counting it)",
            get("steps"),
            get("steps_per_sec"),
            get("dispatch_latency_ms_p50"),
            get("dispatch_latency_ms_p99"),
            get("submit_ms"),
            get("steps_per_sec_from_ready")
        ),
        "dispatch" => out!(
            "dispatch   {setup}: {} single-step runs arriving at {}/s: dispatch latency p50 {} ms, p99 {} ms, max {} \
             ms; {} steps/s",
            get("runs"),
            get("submit_per_sec"),
            get("dispatch_latency_ms_p50"),
            get("dispatch_latency_ms_p99"),
            get("dispatch_latency_ms_max"),
            get("steps_per_sec")
        ),
        "timers" => out!(
            "timers     {setup}: {} timers due at one instant all fired within {} ms (first after {} ms)",
            get("timers"),
            get("wall_ms"),
            get("first_ms")
        ),
        _ => out!(
            "memory     {setup}: {} pending timers in {} active runs: orchestrator RSS {} MB (before them: {} MB)",
            get("pending_timers"),
            get("active_runs"),
            get("rss_mb"),
            get("rss_mb_before")
        ),
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

/// Runs pending or running, as the orchestrator's `/metrics` reports them (0 when it lists none; NaN when
/// `/metrics` does not answer text).
async fn active_runs(client: &Client) -> anyhow::Result<f64> {
    Ok(match client.get("/metrics").await? {
        Value::String(text) => text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("cairn_runs{status=\"pending\"} ")
                    .or_else(|| l.strip_prefix("cairn_runs{status=\"running\"} "))
            })
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum::<f64>(),
        _ => f64::NAN,
    })
}
