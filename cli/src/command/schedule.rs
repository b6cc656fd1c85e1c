//! `cairn schedule create|list|show|pause|resume|trigger|delete|next`: cron schedules over the REST API, and
//! `cairn approvals`: steps waiting for a person across runs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Value, json};

use super::runs::{Target, read_plan};
use crate::settings::Settings;

/// `cairn schedule` subcommands.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Create a schedule that starts a run of a plan on a cron expression in a time zone.
    Create(CreateArgs),
    /// List schedules with their next fire time.
    List(Only),
    /// Show a schedule and its recent ticks.
    Show(One),
    /// Pause a schedule (no tick fires until it is resumed).
    Pause(One),
    /// Resume a schedule from now (ticks that fell in the pause do not fire).
    Resume(One),
    /// Start a run now, under the schedule's overlap policy as a tick would (also while it is paused).
    Trigger(One),
    /// Delete a schedule (its runs stay).
    Delete(One),
    /// Preview the next fire times, UTC and local.
    Next(NextArgs),
}

/// Flags of `cairn schedule create`.
#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// Plan file (JSON or YAML; `-` reads stdin).
    plan: PathBuf,
    /// Cron expression, e.g. "0 9 * * *" (5 fields, or 6 with leading seconds; `L` for the last day).
    #[arg(long)]
    cron: String,
    /// IANA time zone the cron is read in (default UTC).
    #[arg(long, alias = "timezone")]
    tz: Option<String>,
    /// Schedule id (generated when absent).
    #[arg(long)]
    id: Option<String>,
    /// Run input as JSON.
    #[arg(long)]
    input: Option<String>,
    /// When the previous run is still open: skip, allow or cancel_previous.
    #[arg(long)]
    overlap: Option<String>,
    /// Ticks missed while Cairn was down: fire_once, skip or catch_up.
    #[arg(long)]
    misfire: Option<String>,
    /// Most runs for missed ticks with `--misfire catch_up` (1-100).
    #[arg(long)]
    catch_up_max: Option<u32>,
    /// Create it paused.
    #[arg(long)]
    paused: bool,
    /// A label put on every run the schedule starts, as `key=value` (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    #[command(flatten)]
    target: Target,
}

/// Flags naming nothing but the server.
#[derive(Debug, clap::Args)]
struct Only {
    #[command(flatten)]
    target: Target,
}

/// Flags naming one schedule.
#[derive(Debug, clap::Args)]
struct One {
    /// Schedule id.
    id: String,
    #[command(flatten)]
    target: Target,
}

/// Flags of `cairn schedule next`.
#[derive(Debug, clap::Args)]
struct NextArgs {
    /// Schedule id.
    id: String,
    /// How many fire times.
    #[arg(long, default_value_t = 5)]
    count: u32,
    #[command(flatten)]
    target: Target,
}

/// Runs a `cairn schedule` subcommand.
pub async fn run(args: &Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    match &args.command {
        Command::Create(a) => create(a, settings).await,
        Command::List(a) => {
            let answer = a.target.client(settings)?.get("/v1/schedules").await?;
            if a.target.json {
                out!("{}", serde_json::to_string_pretty(&answer["schedules"])?);
            } else {
                for s in answer["schedules"].as_array().into_iter().flatten() {
                    print_line(s);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show(a) => {
            let s = a.target.client(settings)?.get(&format!("/v1/schedules/{}", a.id)).await?;
            print_one(&s, a.target.json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Pause(a) | Command::Resume(a) => {
            let verb = if matches!(args.command, Command::Pause(_)) { "pause" } else { "resume" };
            let s = a.target.client(settings)?.post(&format!("/v1/schedules/{}:{verb}", a.id), None).await?;
            print_one(&s, a.target.json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Trigger(a) => {
            let started = a.target.client(settings)?.post(&format!("/v1/schedules/{}:trigger", a.id), None).await?;
            if a.target.json {
                out!("{}", serde_json::to_string_pretty(&started)?);
                return Ok(ExitCode::SUCCESS);
            }
            out!("run {} started", started["run_id"].as_str().unwrap_or("?"));
            // overlap: cancel_previous cancels the schedule's open runs first.
            for cancelled in started["cancelled"].as_array().into_iter().flatten() {
                out!("run {} cancelled (overlap: cancel_previous)", cancelled.as_str().unwrap_or("?"));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Delete(a) => {
            let client = a.target.client(settings)?;
            let (status, body) = client.call(reqwest::Method::DELETE, &format!("/v1/schedules/{}", a.id), None).await?;
            anyhow::ensure!(status.is_success(), "{status}: {}", body["message"].as_str().unwrap_or("delete failed"));
            out!("schedule {} deleted", a.id);
            Ok(ExitCode::SUCCESS)
        }
        Command::Next(a) => {
            let path = format!("/v1/schedules/{}/next?count={}", a.id, a.count);
            let answer = a.target.client(settings)?.get(&path).await?;
            if a.target.json {
                out!("{}", serde_json::to_string_pretty(&answer)?);
            } else {
                for fire in answer["next"].as_array().into_iter().flatten() {
                    out!("{}  {}", fire["at"].as_str().unwrap_or("?"), fire["local"].as_str().unwrap_or(""));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn create(a: &CreateArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut body = json!({"cron": a.cron, "plan": read_plan(&a.plan)?, "paused": a.paused});
    let optional = [("id", &a.id), ("timezone", &a.tz), ("overlap", &a.overlap), ("misfire", &a.misfire)];
    for (field, value) in optional {
        if let Some(value) = value {
            body[field] = json!(value);
        }
    }
    if let Some(input) = &a.input {
        body["input"] = serde_json::from_str(input).context("--input is not valid JSON")?;
    }
    if let Some(max) = a.catch_up_max {
        body["catch_up_max"] = json!(max);
    }
    if !a.labels.is_empty() {
        body["labels"] = super::runs::label_flags(&a.labels)?;
    }
    let (status, answer) = a.target.client(settings)?.call(reqwest::Method::POST, "/v1/schedules", Some(&body)).await?;
    if status.as_u16() == 422 && answer["code"] == "invalid_plan" {
        super::runs::print_diagnostics(&answer);
        return Ok(crate::exit::code(crate::exit::INVALID_PLAN));
    }
    if !status.is_success() {
        eprintln!("error: {status}: {}", answer["message"].as_str().unwrap_or("create failed"));
        return Ok(crate::exit::code(crate::exit::ERROR));
    }
    print_one(&answer, a.target.json)?;
    Ok(ExitCode::SUCCESS)
}

fn print_line(s: &Value) {
    let state = if s["paused"] == true { "paused" } else { "active" };
    out!(
        "{:<24} {:<16} {:<20} {:<7} next {}",
        s["id"].as_str().unwrap_or("?"),
        s["cron"].as_str().unwrap_or("?"),
        s["timezone"].as_str().unwrap_or("?"),
        state,
        s["next_fire_local"].as_str().unwrap_or("-")
    );
}

fn print_one(s: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        out!("{}", serde_json::to_string_pretty(s)?);
        return Ok(());
    }
    print_line(s);
    out!(
        "  overlap {}  misfire {} (catch_up_max {})  last run {}",
        s["overlap"].as_str().unwrap_or("?"),
        s["misfire"].as_str().unwrap_or("?"),
        s["catch_up_max"],
        s["last_run_id"].as_str().unwrap_or("-")
    );
    for t in s["ticks"].as_array().into_iter().flatten() {
        out!(
            "  tick {}  {:<16} {}",
            t["fire_at"].as_str().unwrap_or("?"),
            t["outcome"].as_str().unwrap_or("?"),
            t["run_id"].as_str().unwrap_or("-")
        );
    }
    Ok(())
}

/// Flags of `cairn approvals`.
#[derive(Debug, clap::Args)]
pub struct ApprovalsArgs {
    /// Most approvals to list.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[command(flatten)]
    target: Target,
}

/// `cairn approvals`: steps waiting for approval across runs, oldest first, with their deadline.
pub async fn approvals(args: &ApprovalsArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let answer = args.target.client(settings)?.get(&format!("/v1/approvals?limit={}", args.limit)).await?;
    if args.target.json {
        out!("{}", serde_json::to_string_pretty(&answer["approvals"])?);
        return Ok(ExitCode::SUCCESS);
    }
    let time = |v: &Value| {
        v.as_i64().and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok()).map_or("-".to_owned(), |t| t.to_string())
    };
    for a in answer["approvals"].as_array().into_iter().flatten() {
        out!(
            "{}  {:<16} {:<16} since {}  deadline {} ({})",
            a["run_id"].as_str().unwrap_or("?"),
            a["step_id"].as_str().unwrap_or("?"),
            a["action"].as_str().unwrap_or("?"),
            time(&a["waiting_since_ms"]),
            time(&a["deadline_ms"]),
            a["on_timeout"].as_str().unwrap_or("none")
        );
    }
    Ok(ExitCode::SUCCESS)
}
