//! `cairn`: the command line of the Cairn workflow orchestrator.
//!
//! Thin by design: parse arguments, load settings once, call the library crates, map outcomes to exit codes.
//! Exit codes: 0 success, 1 the subject is invalid or the run failed, 2 usage or I/O error, 3 run cancelled.

/// `println!` that treats a closed stdout (`cairn schema plan | head`) as the end of the output instead of a
/// panic: the reader has what it wanted, so the command stops quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            crate::stdout_failed(&e);
        }
    }};
}

mod client;
mod command;
mod demo;
mod embedded;
mod exit;
mod settings;
mod signal;

use std::path::PathBuf;
use std::process::ExitCode;

use cairn_telemetry as telemetry;
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
    /// Draft a plan from a request in natural language with an LLM (validated, repaired); optionally submit it.
    Plan(command::plan::Args),
    /// Submit a plan and print the run id.
    Submit(command::runs::SubmitArgs),
    /// List runs, newest first, by status, label, goal, action, creation time or idempotency key.
    Runs(command::find::ListArgs),
    /// List runs with a step waiting for an operator: outcome unknown, an approval, a retry, no worker.
    Attention(command::find::AttentionArgs),
    /// Cancel, redrive or retry the failed steps of every run a filter matches (`--dry-run` counts them).
    Bulk(command::find::BulkArgs),
    /// Show a run: goal, labels, input, steps with args, attempts, failure records, times and timers, and its plan.
    Show(command::runs::RunArgs),
    /// Print a run's event history (`--follow`: as it happens, until the run finishes).
    Logs(command::runs::LogsArgs),
    /// Follow a run until it finishes, as `cairn run` does (exit code: 0 succeeded, 1 failed, 3 cancelled).
    Watch(command::runs::RunArgs),
    /// Cancel a run (open steps, pending retries and timers).
    Cancel(command::runs::RunDecisionArgs),
    /// Approve a step waiting for approval.
    Approve(command::runs::StepArgs),
    /// Reject a step waiting for approval.
    Reject(command::runs::StepArgs),
    /// Run a failed step again with a fresh attempt budget (its run reopens), or an `outcome_unknown` one;
    /// optionally with repaired args.
    Retry(command::runs::RetryArgs),
    /// Skip a step in `outcome_unknown`.
    Skip(command::runs::ParkedArgs),
    /// Fail a step in `outcome_unknown`.
    Fail(command::runs::ParkedArgs),
    /// Run every failed and cancelled step of a failed or cancelled run again (succeeded steps keep their outputs).
    Redrive(command::runs::RunDecisionArgs),
    /// Pause a run: no new attempt starts (running ones finish) until it is resumed.
    Pause(command::runs::RunDecisionArgs),
    /// Resume a paused run: timers, retries and deadlines that came due meanwhile happen now.
    Resume(command::runs::RunDecisionArgs),
    /// Start a new run of a finished run from one step: it and its descendants run again, the others keep their
    /// outputs (prints the new run's id).
    Rerun(command::runs::RerunArgs),
    /// Cron schedules: create, list, show, pause, resume, trigger, delete, and preview fire times (`next`).
    Schedule(command::schedule::Args),
    /// Recipients of reminders and their bound channels: set, show, list, delete.
    Recipient(command::recipient::Args),
    /// List steps waiting for approval across runs.
    Approvals(command::schedule::ApprovalsArgs),
    /// Run a worker process serving the built-in actions to an orchestrator (until SIGTERM or ctrl-c).
    Worker(command::worker::Args),
    /// Benchmark: real orchestrator and worker processes over gRPC (`chain`, `fanout`, `throughput`, `timers`,
    /// `dispatch`, `memory`, `validate`, `all`; `search`: the run filters over 100,000 runs).
    Bench(command::bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Held to the end of `main`: dropping it flushes the spans still buffered.
    let _telemetry = match init_logging(cli.log_json, service_name(&cli.command)) {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("error: {err:#}");
            return exit::code(exit::ERROR);
        }
    };
    let outcome = match &cli.command {
        Command::Validate(args) => command::validate::run(args),
        Command::Schema(args) => command::schema::run(args),
        _ => run_async(&cli),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit::code(exit::ERROR)
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
            Command::Plan(args) => command::plan::run(args, settings).await,
            Command::Submit(args) => command::runs::submit(args, &settings).await,
            Command::Runs(args) => command::find::list(args, &settings).await,
            Command::Attention(args) => command::find::attention(args, &settings).await,
            Command::Bulk(args) => command::find::bulk(args, &settings).await,
            Command::Show(args) => command::runs::show(args, &settings).await,
            Command::Logs(args) => command::runs::logs(args, &settings).await,
            Command::Watch(args) => command::runs::watch(args, &settings).await,
            Command::Cancel(args) => command::runs::run_decision("cancel", args, &settings).await,
            Command::Approve(args) => command::runs::decide("approve", args, &settings).await,
            Command::Reject(args) => command::runs::decide("reject", args, &settings).await,
            Command::Retry(args) => command::runs::retry(args, &settings).await,
            Command::Skip(args) => command::runs::decide_parked("skip", args, &settings).await,
            Command::Fail(args) => command::runs::decide_parked("fail", args, &settings).await,
            Command::Redrive(args) => command::runs::run_decision("redrive", args, &settings).await,
            Command::Pause(args) => command::runs::run_decision("pause", args, &settings).await,
            Command::Resume(args) => command::runs::run_decision("resume", args, &settings).await,
            Command::Rerun(args) => command::runs::rerun(args, &settings).await,
            Command::Worker(args) => command::worker::run(args, &settings).await,
            Command::Bench(args) => command::bench::run(args).await,
            Command::Schedule(args) => command::schedule::run(args, &settings).await,
            Command::Approvals(args) => command::schedule::approvals(args, &settings).await,
            Command::Recipient(args) => command::recipient::run(args, &settings).await,
            Command::Validate(_) | Command::Schema(_) => unreachable!("handled synchronously"),
        }
    })
}

/// Human-readable logs by default (warnings and up unless RUST_LOG says otherwise), JSON lines with --log-json;
/// spans exported over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (see `cairn_telemetry`).
fn init_logging(json: bool, service_name: &str) -> anyhow::Result<telemetry::TelemetryGuard> {
    let config = telemetry::TelemetryConfig::from_env(json, service_name)?;
    Ok(telemetry::init(config)?)
}

/// `service.name` of the exported spans: which role this process plays.
fn service_name(command: &Command) -> &'static str {
    match command {
        Command::Serve(_) | Command::Dev(_) => "cairn-orchestrator",
        Command::Worker(_) => "cairn-worker",
        _ => "cairn",
    }
}

/// Exits quietly when the reader of stdout went away; otherwise reports the error (exit code 2).
pub(crate) fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: writing to standard output: {e}");
    std::process::exit(2);
}
