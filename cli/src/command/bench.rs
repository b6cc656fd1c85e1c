//! `cairn bench`: end-to-end figures with a real orchestrator process and real worker processes over gRPC.
//!
//! Spawns this executable as `cairn serve` (random free 127.0.0.1 ports, generated tokens, a temporary SQLite file
//! unless `--db` is given) and `--workers` times as `cairn worker --actions noop`, waits until the API answers and the
//! workers are connected, runs the scenario over the REST API, computes the figures from the run's event history
//! (`at_ms` timestamps written by the orchestrator, millisecond resolution), prints them and kills the processes
//! (`processes`). With `--orchestrators N` (PostgreSQL) it starts N orchestrators on the database: the REST calls
//! go to the first, the workers poll the others in turn, so every step is submitted or released through one
//! orchestrator and dispatched by another (their wake-ups cross over `LISTEN`/`NOTIFY`).
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
//!   rate over both (what `bench/results/` series A to L report as throughput).
//! - `timers`: a run of 10,000 independent `noop` steps whose `not_before` is the same instant, a few seconds
//!   ahead; `wall_ms` = last `step_started` − that instant (how long until every timer has fired and its step
//!   been handed to a worker).
//! - `dispatch`: 10,000 single-step runs submitted by 8 concurrent clients (at `--rate` runs per second, or as
//!   fast as the API accepts them) while the workers run them, after 1,000 warm-up runs submitted the same way;
//!   dispatch latency (`step_started` − `step_ready`) p50, p99 and max, `steps_per_sec`, `submit_per_sec` of the
//!   measured runs, and `warmup_runs`, `warmup_dispatch_latency_ms_p99` of the warm-up (see [`dispatch`]).
//! - `memory`: 10,000 runs of 10 steps each waiting on a timer a day ahead (100,000 pending timers, 10,000
//!   active runs); `rss_mb` = the orchestrator's resident memory (`VmRSS`) once they are stored.
//! - `all`: chain, fanout, throughput, timers, dispatch, memory, in order, against one set of processes.
//!
//! `--json` prints one JSON object per line per scenario. A PostgreSQL database given with `--db` should be fresh
//! (the orchestrator migrates it; runs accumulate in it).
//!
//! The processes' logs (`serve.err`, `worker-N.err`, honouring `RUST_LOG`) and the temporary SQLite file are
//! removed after a successful run, kept after a failed one, and kept always when `CAIRN_BENCH_KEEP` is set to
//! anything but empty or `0` (to read, for example, `RUST_LOG=sqlx::query=debug` statement timings).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use serde_json::{Value, json};

use crate::client::Client;

mod dispatch;
mod processes;
mod scenarios;
mod timeline;

use processes::Processes;

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
    /// Orchestrator processes on the database (PostgreSQL only): API calls go to the first, workers to the others
    /// in turn, so every step crosses from one orchestrator to another.
    #[arg(long, default_value_t = 1)]
    orchestrators: usize,
    /// `dispatch` only: runs submitted per second (0: as fast as the API accepts them).
    #[arg(long, default_value_t = 0)]
    rate: u32,
    /// Print one JSON object per line per scenario.
    #[arg(long)]
    json: bool,
}

/// Runs `cairn bench`.
///
/// # Errors
/// A process that does not start, an orchestrator that does not become healthy, or a run that does not succeed.
pub async fn run(args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.workers >= 1, "--workers must be at least 1");
    anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(args.orchestrators >= 1, "--orchestrators must be at least 1");
    let dir = std::env::temp_dir().join(format!("cairn-bench-{}", std::process::id()));
    let db = args.db.clone().unwrap_or_else(|| format!("sqlite:{}", dir.join("bench.db").display()));
    let backend = if db.starts_with("postgres") { "postgres" } else { "sqlite" };
    anyhow::ensure!(
        args.orchestrators == 1 || backend == "postgres",
        "--orchestrators above 1 needs a PostgreSQL --db (SQLite serves one orchestrator process)"
    );
    let mut procs = Processes::new(dir)?;
    let mut orchestrators = Vec::with_capacity(args.orchestrators);
    for i in 0..args.orchestrators {
        orchestrators.push(procs.serve(i, &db).await?);
    }
    // With several orchestrators the API calls go to the first and the workers to the others, so every step is
    // submitted or released through one orchestrator and dispatched by another.
    let polled = |i: usize| if args.orchestrators == 1 { 0 } else { 1 + i % (args.orchestrators - 1) };
    for i in 0..args.workers {
        procs.worker(i, &orchestrators[polled(i)], args.concurrency)?;
    }
    for (o, orchestrator) in orchestrators.iter().enumerate() {
        let expected = (0..args.workers).filter(|&i| polled(i) == o).count();
        processes::wait_workers(&orchestrator.client, expected).await?;
    }
    let client = &orchestrators[0].client;

    let config = json!({
        "rate": args.rate,
        "db": backend,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "orchestrators": args.orchestrators,
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
            Scenario::Chain => scenarios::chain(client).await?,
            Scenario::Fanout => scenarios::fanout(client).await?,
            Scenario::Throughput => scenarios::throughput(client).await?,
            Scenario::Timers => scenarios::timers(client).await?,
            Scenario::Dispatch => dispatch::dispatch(client, args.rate).await?,
            Scenario::Memory => scenarios::memory(client, procs.first_serve_pid()).await?,
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
    let orchestrators = match get("orchestrators").as_u64() {
        Some(n) if n > 1 => format!(", {n} orchestrators"),
        _ => String::new(),
    };
    let setup = format!(
        "[{} db{orchestrators}, {} worker(s) x concurrency {}, {} build]",
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
