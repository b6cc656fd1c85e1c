//! `cairn-bench`: the library behind `cairn bench`, end-to-end figures with a real orchestrator process and real
//! worker processes over gRPC. The CLI parses the flags and calls [`run`]; this crate does the rest.
//!
//! Spawns the `cairn` executable ([`Options::cairn`]) as `cairn serve` (random free 127.0.0.1 ports, generated
//! tokens, a temporary SQLite file unless `--db` is given) and `--workers` times as `cairn worker --actions noop`,
//! waits until the API answers and the workers are connected, runs the scenario over the REST API, computes the
//! figures from the run's event history (`at_ms` timestamps written by the orchestrator, millisecond resolution),
//! hands them to the caller and kills the processes (`processes`). With `--orchestrators N` (PostgreSQL) it starts
//! N orchestrators on the database: the REST calls go to the first, the workers poll the others in turn, so every
//! step is submitted or released through one orchestrator and dispatched by another (their wake-ups cross over
//! `LISTEN`/`NOTIFY`).
//!
//! Each scenario waits for its runs to end by reading their summaries (`GET /v1/runs/{id}?view=summary`), and
//! reads their event histories only afterwards: on SQLite every read of events takes the one connection the
//! steps' transactions need.
//!
//! Scenarios, at their default sizes:
//! - `chain`: a run of 20 sequential `noop` steps, 20 times. A step's cycle is `step_started(dependent)` −
//!   `step_started(dependency)`: the dependency's execution, its report and commit, and the dependent's dispatch,
//!   so it is an upper bound on the overhead and comparable with peers' "time per step in a chain".
//!   `per_step_ms_median` is the median over runs of each run's mean cycle ((last start − first start) / (steps −
//!   1), which resolves below the events' 1 ms resolution); `per_step_ms_p99` is the p99 of single cycles (1 ms
//!   resolution). `handoff_gap_ms_*` is the orchestrator's share alone: `step_succeeded(dependency)` →
//!   `step_started(dependent)`.
//! - `fanout`: a run of 200 parallel `noop` steps and a join; `wall_ms` = run finished − run created.
//! - `throughput`: a run of 10,000 independent `noop` steps, all queued at once: how fast the workers drain them.
//!   The drain starts when the steps could first be claimed, `claimable` = the earlier of the submission's
//!   acknowledgement (this host's clock) and the first `step_started`; `steps_per_sec` = steps / (last
//!   `step_succeeded` − `claimable`) = steps / `span_ms`; dispatch latency = `step_started` − the later of
//!   `step_ready` and `claimable`, per step, p50 and p99. `submit_ms` = `claimable` − first `step_ready` is the
//!   submission's own transaction (`step_ready` is stamped when it begins), and `steps_per_sec_from_ready` the
//!   rate over both.
//! - `timers`: a run of 10,000 independent `noop` steps whose `not_before` is the same instant, a few seconds
//!   ahead; `wall_ms` = last `step_started` − that instant (how long until every timer has fired and its step
//!   been handed to a worker).
//! - `dispatch`: 10,000 single-step runs submitted by 8 concurrent clients (at `--rate` runs per second, or as
//!   fast as the API accepts them) while the workers run them, after a tenth as many warm-up runs submitted the
//!   same way; dispatch latency (`step_started` − `step_ready`) p50, p99 and max, `steps_per_sec`,
//!   `submit_per_sec` of the measured runs, and `warmup_runs`, `warmup_dispatch_latency_ms_p99` of the warm-up
//!   (see [`dispatch`]).
//! - `memory`: 10,000 runs of 10 steps each waiting on a timer a day ahead (100,000 pending timers, 10,000
//!   active runs); `rss_mb` = the orchestrator's resident memory (`VmRSS`) once they are stored.
//! - `validate`: a plan of one step, a 5,000-wide fan-out of steps with placeholders on it and a join (case C24)
//!   sent to `POST /v1/plans:validate`, 5 times (`--runs`); `validate_ms_median` and `validate_ms_max` are the
//!   times to the answer (a valid plan) on this host's clock, to 0.01 ms.
//! - `all`: chain, fanout, throughput, timers, dispatch, memory, validate, in order, against one set of
//!   processes.
//! - `search` (not part of `all`): 100,000 runs (`--runs`) with labels, goals and a mix of statuses, then
//!   `GET /v1/runs` with each filter, 30 times each; per query the median, p99 and max time to the answer on
//!   this host's clock, to 0.01 ms ([`search`]).
//!
//! The default sizes are the ones published figures use. [`Size`] (`--steps N`, `--runs N`) replaces them in
//! every scenario that has one (with `all`, in each), so a test or a quick look runs small; the figures report
//! the size they measured (`steps`, `runs`, `width`, `timers`, `pending_timers`).
//!
//! Each scenario's figures are one JSON object, handed to the caller as the scenario ends ([`run`]); `cairn
//! bench` prints it as a line of JSON (`--json`) or as the sentence [`summary`] makes. A PostgreSQL database
//! given with `--db` should be fresh (the orchestrator migrates it; runs accumulate in it).
//!
//! The processes' logs (`serve.err`, `worker-N.err`, honouring `RUST_LOG`) and the temporary SQLite file are
//! removed after a successful run, kept after a failed one, and kept always when `CAIRN_BENCH_KEEP` is set to
//! anything but empty or `0` (to read, for example, `RUST_LOG=sqlx::query=debug` statement timings).

mod api;
mod dispatch;
mod processes;
mod report;
mod scenarios;
mod search;
mod timeline;

use std::path::PathBuf;

use cairn_orchestrator::secret::DatabaseUrl;
use serde_json::{Value, json};

use processes::Processes;
pub use report::summary;

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
    /// A 5,000-wide fan-out validated over the API (case C24): time to the answer.
    Validate,
    /// `GET /v1/runs` with each filter over 100,000 runs: time to the answer (not part of `all`).
    Search,
    /// chain, fanout, throughput, timers, dispatch, memory, validate.
    All,
}

impl Scenario {
    /// The scenarios this one runs, in order.
    fn expand(self) -> Vec<Scenario> {
        use Scenario::{All, Chain, Dispatch, Fanout, Memory, Throughput, Timers, Validate};
        match self {
            All => vec![Chain, Fanout, Throughput, Timers, Dispatch, Memory, Validate],
            one => vec![one],
        }
    }
}

/// How big each scenario is; `None` keeps the scenario's default (see the crate docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size {
    /// Steps per run: `chain`'s length, `fanout`'s width, `throughput`'s and `timers`' steps, `memory`'s steps
    /// per run.
    pub steps: Option<usize>,
    /// Runs: `chain`'s runs, `dispatch`'s measured runs, `memory`'s runs, `validate`'s attempts.
    pub runs: Option<usize>,
}

impl Size {
    fn steps_or(self, default: usize) -> usize {
        self.steps.unwrap_or(default)
    }

    fn runs_or(self, default: usize) -> usize {
        self.runs.unwrap_or(default)
    }
}

/// What to run, and where.
#[derive(Debug, Clone)]
pub struct Options {
    /// The scenario.
    pub scenario: Scenario,
    /// The `cairn` executable started as orchestrator and workers.
    pub cairn: PathBuf,
    /// The database; `None` makes a temporary SQLite file.
    pub db: Option<DatabaseUrl>,
    /// Worker processes to start.
    pub workers: usize,
    /// Concurrency of each worker process.
    pub concurrency: usize,
    /// Orchestrator processes on the database (PostgreSQL only).
    pub orchestrators: usize,
    /// `dispatch` only: runs submitted per second (0: as fast as the API accepts them).
    pub rate: u32,
    /// Steps and runs per scenario.
    pub size: Size,
}

/// Runs `options.scenario` (each scenario of `all` in turn), handing each scenario's figures to `report` as it
/// ends; the figures include the set-up (`db`, `workers`, `concurrency`, `orchestrators`, `rate`, `build`).
///
/// # Errors
/// Options that cannot work, a process that does not start, an orchestrator that does not become healthy, or a
/// run that does not succeed.
pub async fn run(options: &Options, mut report: impl FnMut(&Value)) -> anyhow::Result<()> {
    check(options)?;
    let dir = std::env::temp_dir().join(format!("cairn-bench-{}", std::process::id()));
    let db = options.db.clone().unwrap_or_else(|| format!("sqlite:{}", dir.join("bench.db").display()).into());
    let backend = if db.is_postgres() { "postgres" } else { "sqlite" };
    anyhow::ensure!(
        options.orchestrators == 1 || db.is_postgres(),
        "--orchestrators above 1 needs a PostgreSQL --db (SQLite serves one orchestrator process)"
    );
    let mut procs = Processes::new(options.cairn.clone(), dir, max_plan_steps(options.size))?;
    let mut orchestrators = Vec::with_capacity(options.orchestrators);
    for i in 0..options.orchestrators {
        orchestrators.push(procs.serve(i, &db).await?);
    }
    // With several orchestrators the API calls go to the first and the workers to the others, so every step is
    // submitted or released through one orchestrator and dispatched by another.
    let polled = |i: usize| if options.orchestrators == 1 { 0 } else { 1 + i % (options.orchestrators - 1) };
    for i in 0..options.workers {
        procs.worker(i, &orchestrators[polled(i)], options.concurrency)?;
    }
    for (o, orchestrator) in orchestrators.iter().enumerate() {
        let expected = (0..options.workers).filter(|&i| polled(i) == o).count();
        processes::wait_workers(&orchestrator.api, expected).await?;
    }
    let api = &orchestrators[0].api;

    let config = json!({
        "rate": options.rate,
        "db": backend,
        "workers": options.workers,
        "concurrency": options.concurrency,
        "orchestrators": options.orchestrators,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
    });
    let size = options.size;
    for scenario in options.scenario.expand() {
        let mut figures = match scenario {
            Scenario::Chain => scenarios::chain(api, size).await?,
            Scenario::Fanout => scenarios::fanout(api, size).await?,
            Scenario::Throughput => scenarios::throughput(api, size).await?,
            Scenario::Timers => scenarios::timers(api, size).await?,
            Scenario::Dispatch => dispatch::dispatch(api, size, options.rate).await?,
            Scenario::Memory => scenarios::memory(api, size, procs.first_serve_pid()).await?,
            Scenario::Validate => scenarios::validate(api, size).await?,
            Scenario::Search => search::search(api, size).await?,
            Scenario::All => unreachable!("expanded above"),
        };
        if let (Some(obj), Some(cfg)) = (figures.as_object_mut(), config.as_object()) {
            obj.extend(cfg.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        report(&figures);
    }
    // Kept on request, e.g. to read statement timings (`RUST_LOG=sqlx::query=debug`).
    procs.keep_dir = std::env::var("CAIRN_BENCH_KEEP").is_ok_and(|v| !v.is_empty() && v != "0");
    Ok(())
}

/// Refuses options that would measure nothing (before any process is started).
fn check(options: &Options) -> anyhow::Result<()> {
    anyhow::ensure!(options.workers >= 1, "--workers must be at least 1");
    anyhow::ensure!(options.concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(options.orchestrators >= 1, "--orchestrators must be at least 1");
    anyhow::ensure!(options.size.runs != Some(0), "--runs must be at least 1");
    anyhow::ensure!(options.size.steps != Some(0), "--steps must be at least 1");
    let chain = matches!(options.scenario, Scenario::Chain | Scenario::All);
    anyhow::ensure!(
        !chain || options.size.steps != Some(1),
        "--steps must be at least 2 for `chain`: a step's cycle is measured from the one before it"
    );
    Ok(())
}

/// The orchestrators' plan size limit (`CAIRN_MAX_STEPS`): the default scenarios' largest plan, 10,000 steps, or
/// a larger `--steps` (plus `fanout`'s join, or `validate`'s source and join).
fn max_plan_steps(size: Size) -> usize {
    size.steps_or(0).saturating_add(2).max(10_000)
}
