//! `cairn run FILE`: submit a plan and follow it live until it finishes, then print a summary.
//!
//! Exit codes: 0 succeeded, 1 failed (or the plan is invalid), 3 cancelled, 2 usage or I/O error. Against a
//! server given by `--server`/`CAIRN_SERVER`, or on its own: an embedded orchestrator on the SQLite default with
//! an in-process worker.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use super::runs::{exit_code, print_deliveries, print_diagnostics, print_summary, read_plan, submit_body};
use crate::client::Client;
use crate::embedded;
use crate::settings::Settings;

/// Arguments of `cairn run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Plan file (JSON or YAML; `-` reads stdin).
    file: PathBuf,
    /// REST API of a running orchestrator (`CAIRN_SERVER`); without it an embedded one is started.
    #[arg(long)]
    server: Option<String>,
    /// Run input as JSON (default: the plan's `input`).
    #[arg(long)]
    input: Option<String>,
    /// Run-level idempotency key.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// A label to find the run by, as `key=value` (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Print the finished run as JSON instead of the progress display.
    #[arg(long)]
    json: bool,
    /// Embedded mode: database (default `sqlite:cairn.db`).
    #[arg(long)]
    db: Option<cairn_orchestrator::secret::DatabaseUrl>,
    /// Embedded mode: answer `weather.forecast` from a local fixture (offline demo).
    #[arg(long)]
    demo: bool,
}

/// Runs the command.
pub async fn run(args: &Args, mut settings: Settings) -> anyhow::Result<ExitCode> {
    let plan = read_plan(&args.file)?;
    let server = args.server.clone().or_else(|| settings.server.clone());
    let embedded = match &server {
        Some(_) => None,
        None => {
            if let Some(db) = &args.db {
                settings.db.clone_from(db);
            }
            settings.http = ([127, 0, 0, 1], 0).into();
            settings.grpc = ([127, 0, 0, 1], 0).into();
            Some(embedded::start(&settings, args.demo).await?)
        }
    };
    let base = server.clone().unwrap_or_else(|| embedded.as_ref().map(embedded::Embedded::url).unwrap_or_default());
    let client = Client::new(&base, settings.api_token.clone())?;
    let stop = crate::signal::Stop::install();
    if embedded.is_some() && args.demo {
        bind_demo_recipient(&client, args.json).await?;
    }
    let outcome = match submit(&client, args, plan).await {
        Ok(Submitted::Run(id)) => tokio::select! {
            followed = watch(&client, &id, args.json) => followed,
            () = stop.wait() => {
                interrupted(&id, server.is_some(), &settings.db);
                Ok(crate::exit::code(crate::exit::INTERRUPTED))
            }
        },
        Ok(Submitted::Refused(code)) => Ok(code),
        Err(e) => Err(e),
    };
    if let Some(app) = embedded {
        app.shutdown().await;
    }
    outcome
}

/// The recipient the demo plan sends to, bound to the development channels: a line on standard output and a JSON
/// line in the worker's notification file (`CAIRN_NOTIFY_FILE`). Its own id, so the demo never rebinds a
/// recipient of the user's (`me` of the real reminder) in the same database.
const DEMO_RECIPIENT: &str = "demo";

async fn bind_demo_recipient(client: &Client, json: bool) -> anyhow::Result<()> {
    let body = json!({"channels": {"stdout": {}, "file": {}}, "timezone": "Asia/Shanghai"});
    let (status, answer) =
        client.call(reqwest::Method::PUT, &format!("/v1/recipients/{DEMO_RECIPIENT}"), Some(&body)).await?;
    crate::client::ok(status, answer)?;
    if !json {
        out!("recipient {DEMO_RECIPIENT} bound to stdout and file (demo)");
    }
    Ok(())
}

/// A submission's outcome: the run to follow, or the exit code of a refusal already reported.
enum Submitted {
    Run(String),
    Refused(ExitCode),
}

/// Says what happens to a run whose follower stopped: it goes on.
fn interrupted(id: &str, served: bool, db: &cairn_orchestrator::secret::DatabaseUrl) {
    if served {
        eprintln!("interrupted: run {id} goes on at the server; follow it with `cairn watch {id}`");
    } else {
        eprintln!(
            "interrupted: run {id} is stored in {} and resumes when that database is next served (`cairn dev`, or \
             `cairn serve --db …`); then follow it with `cairn watch {id}`",
            db.redacted()
        );
    }
}

async fn submit(client: &Client, args: &Args, plan: Value) -> anyhow::Result<Submitted> {
    let body = submit_body(plan, args.input.as_deref(), args.idempotency_key.as_deref(), &args.labels)?;
    let (status, run) = client.call(reqwest::Method::POST, "/v1/runs", Some(&body)).await?;
    if status.as_u16() == 422 {
        print_diagnostics(&run);
        return Ok(Submitted::Refused(crate::exit::code(crate::exit::INVALID_PLAN)));
    }
    if !status.is_success() {
        anyhow::bail!("{status}: {}", run.get("message").and_then(Value::as_str).unwrap_or("submit failed"));
    }
    let id = run["id"].as_str().unwrap_or_default().to_owned();
    if !args.json {
        out!("run {id} submitted ({} steps)", run["steps"].as_array().map_or(0, Vec::len));
    }
    Ok(Submitted::Run(id))
}

/// Follows run `id` until it finishes: a line per step status change, then the summary (or the run as JSON
/// with `json`). The exit code is the run's ([`exit_code`]).
pub async fn watch(client: &Client, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut run_status = String::new();
    loop {
        let run = client.get(&format!("/v1/runs/{id}")).await?;
        let status = run["status"].as_str().unwrap_or("").to_owned();
        if !json {
            // A pause (and the resume) is the one run-level change a follower sees before the end.
            if !run_status.is_empty()
                && run_status != status
                && !matches!(status.as_str(), "succeeded" | "failed" | "cancelled")
            {
                out!("  run {status}");
            }
            progress(&run, &mut seen);
        }
        run_status.clone_from(&status);
        if matches!(status.as_str(), "succeeded" | "failed" | "cancelled") {
            let deliveries = client.get(&format!("/v1/runs/{id}/deliveries")).await?;
            if json {
                let mut run = run;
                run["deliveries"] = deliveries["deliveries"].clone();
                out!("{}", serde_json::to_string_pretty(&run)?);
            } else {
                print_summary(&run);
                print_deliveries(&deliveries["deliveries"]);
            }
            return Ok(exit_code(&status));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Prints one line per step status change.
fn progress(run: &Value, seen: &mut HashMap<String, String>) {
    for step in run["steps"].as_array().into_iter().flatten() {
        let id = step["id"].as_str().unwrap_or("?").to_owned();
        let status = step["status"].as_str().unwrap_or("?").to_owned();
        if seen.get(&id) == Some(&status) {
            continue;
        }
        let detail = match status.as_str() {
            "ready" => step["timer"]["local"].as_str().map(|t| format!(" (timer: {t})")).unwrap_or_default(),
            "failed" | "outcome_unknown" => {
                format!(
                    " ({}: {})",
                    step["error"]["code"].as_str().unwrap_or("?"),
                    step["error"]["message"].as_str().unwrap_or("")
                )
            }
            "succeeded" => format!(" ({} attempt(s))", step["attempts"]),
            _ => String::new(),
        };
        out!("  {:<16} {status}{detail}", id);
        seen.insert(id, status);
    }
    let _ = json!(null);
}
