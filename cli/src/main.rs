//! `cairn`: the command line of the Cairn workflow orchestrator.
//!
//! Thin by design: parse arguments, load settings once, call the library crates, map outcomes to exit codes.
//! Exit codes: 0 success, 1 the subject is invalid or the run failed, 2 usage or I/O error, 3 run cancelled.

mod client;
mod command;
mod demo;
mod embedded;
mod settings;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use settings::Settings;

/// Cairn: a durable workflow orchestrator for plans written by agents, people and programs.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, about)]
struct Cli {
    /// Configuration file (TOML); default `./cairn.toml` when present.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Log as JSON lines instead of human-readable text (filter with RUST_LOG).
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate plan files (JSON or YAML; `-` reads stdin) and print every diagnostic.
    Validate(command::validate::Args),
    /// Print a JSON Schema (`plan`: the plan format; `actions`: the built-in actions' specs).
    Schema(command::schema::Args),
    /// Run an orchestrator (REST API + worker protocol); needs CAIRN_API_TOKEN and CAIRN_WORKER_TOKEN.
    Serve(command::serve::Args),
    /// Run an orchestrator with an in-process worker on ./cairn.db, without auth, for local use.
    Dev(command::serve::Args),
    /// Submit a plan and follow it until it finishes (embedded orchestrator unless --server is given).
    Run(command::run::Args),
    /// Submit a plan and print the run id.
    Submit(command::runs::SubmitArgs),
    /// List runs.
    Runs(command::runs::ListArgs),
    /// Show a run: steps, attempts, failure records, timers.
    Show(command::runs::RunArgs),
    /// Print a run's event history.
    Logs(command::runs::RunArgs),
    /// Cancel a run (open steps, pending retries and timers).
    Cancel(command::runs::RunArgs),
    /// Approve a step waiting for approval.
    Approve(command::runs::StepArgs),
    /// Reject a step waiting for approval.
    Reject(command::runs::StepArgs),
    /// Run a step in `outcome_unknown` again.
    Retry(command::runs::StepArgs),
    /// Skip a step in `outcome_unknown`.
    Skip(command::runs::StepArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_json);
    let outcome = match &cli.command {
        Command::Validate(args) => command::validate::run(args),
        Command::Schema(args) => command::schema::run(args),
        _ => run_async(&cli),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn run_async(cli: &Cli) -> anyhow::Result<ExitCode> {
    let settings = Settings::load(cli.config.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match &cli.command {
            Command::Serve(args) => command::serve::serve(args, settings).await,
            Command::Dev(args) => command::serve::dev(args, settings).await,
            Command::Run(args) => command::run::run(args, settings).await,
            Command::Submit(args) => command::runs::submit(args, &settings).await,
            Command::Runs(args) => command::runs::list(args, &settings).await,
            Command::Show(args) => command::runs::show(args, &settings).await,
            Command::Logs(args) => command::runs::logs(args, &settings).await,
            Command::Cancel(args) => command::runs::cancel(args, &settings).await,
            Command::Approve(args) => command::runs::decide("approve", args, &settings).await,
            Command::Reject(args) => command::runs::decide("reject", args, &settings).await,
            Command::Retry(args) => command::runs::decide("retry", args, &settings).await,
            Command::Skip(args) => command::runs::decide("skip", args, &settings).await,
            Command::Validate(_) | Command::Schema(_) => unreachable!("handled synchronously"),
        }
    })
}

/// Human-readable logs by default (warnings and up unless RUST_LOG says otherwise), JSON lines with --log-json.
fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
