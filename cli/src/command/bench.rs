//! `cairn bench`: the flags, and the call to `cairn-bench`, which starts this executable as orchestrator and
//! workers, runs the scenario and hands back its figures (the crate docs define every figure).

use std::process::ExitCode;

use anyhow::Context;
use cairn_bench::{Options, Scenario, Size};
use cairn_orchestrator::secret::DatabaseUrl;

/// Flags of `cairn bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Database: `sqlite:PATH` or `postgres://…` (default: a temporary SQLite file).
    #[arg(long)]
    db: Option<DatabaseUrl>,
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
    /// Steps per run instead of the scenario's default: chain length (20, at least 2), fanout width (200),
    /// throughput and timers steps (10,000), memory steps per run (10), validate width (5,000).
    #[arg(long)]
    steps: Option<usize>,
    /// Runs instead of the scenario's default: chain runs (20), dispatch runs (10,000), memory runs (10,000),
    /// validate attempts (5), search runs (100,000).
    #[arg(long)]
    runs: Option<usize>,
    /// Print one JSON object per line per scenario.
    #[arg(long)]
    json: bool,
}

/// Runs `cairn bench`.
///
/// # Errors
/// Flags that cannot work, a process that does not start, an orchestrator that does not become healthy, or a run
/// that does not succeed.
pub async fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let options = Options {
        scenario: args.scenario,
        cairn: std::env::current_exe().context("locating the cairn executable")?,
        db: args.db.clone(),
        workers: args.workers,
        concurrency: args.concurrency,
        orchestrators: args.orchestrators,
        rate: args.rate,
        size: Size { steps: args.steps, runs: args.runs },
    };
    cairn_bench::run(&options, |figures| {
        if args.json {
            out!("{figures}");
        } else {
            out!("{}", cairn_bench::summary(figures));
        }
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}
