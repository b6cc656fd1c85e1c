//! Client commands over the REST API: `submit`, `show`, `logs`, `cancel`, `approve`, `reject`, `retry`,
//! `skip`, `fail`, `redrive`, `rerun`, `pause`, `resume`, and the printing they share with `run`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use cairn_core::document::{self, Format};
use serde_json::{Value, json};

use crate::client::Client;
use crate::exit;
use crate::settings::Settings;

/// Reads a plan file (JSON or YAML; `-` for stdin) strictly (duplicate keys refused).
pub fn read_plan(path: &Path) -> anyhow::Result<Value> {
    let (name, text) = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading the plan from standard input")?;
        ("<stdin>".to_owned(), text)
    } else {
        (
            path.display().to_string(),
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        )
    };
    let format = Format::detect(Some(&name), &text);
    document::parse(&text, format).map_err(|f| anyhow::anyhow!("{name}: {}", f.message))
}

/// The `POST /v1/runs` body; `labels` as `key=value`.
pub fn submit_body(plan: Value, input: Option<&str>, key: Option<&str>, labels: &[String]) -> anyhow::Result<Value> {
    let mut body = json!({"plan": plan});
    if !labels.is_empty() {
        body["labels"] = label_flags(labels)?;
    }
    if let Some(input) = input {
        body["input"] = serde_json::from_str(input).context("--input is not valid JSON")?;
    }
    if let Some(key) = key {
        body["idempotency_key"] = json!(key);
    }
    Ok(body)
}

/// `--label key=value` flags as the API's `labels` object (each label checked here, with the flag named).
pub fn label_flags(labels: &[String]) -> anyhow::Result<Value> {
    let mut map = serde_json::Map::new();
    for label in labels {
        let (k, v) = cairn_core::labels::parse(label, '=').with_context(|| format!("--label {label}"))?;
        map.insert(k, json!(v));
    }
    Ok(Value::Object(map))
}

/// Exit code for a final run status: 0 succeeded, 1 failed, 3 cancelled.
pub fn exit_code(status: &str) -> ExitCode {
    match status {
        "succeeded" => exit::code(exit::OK),
        "cancelled" => exit::code(exit::RUN_CANCELLED),
        _ => exit::code(exit::RUN_FAILED),
    }
}

/// Prints the diagnostics of a 422 answer.
pub fn print_diagnostics(answer: &Value) {
    eprintln!("the plan is invalid:");
    for d in answer["details"]["diagnostics"].as_array().into_iter().flatten() {
        let step = d["step_id"].as_str().map(|s| format!(" step `{s}`")).unwrap_or_default();
        eprintln!(
            "  {}[{}]{step} at {}",
            d["severity"].as_str().unwrap_or("error"),
            d["code"].as_str().unwrap_or("?"),
            d["pointer"].as_str().unwrap_or("")
        );
        eprintln!("    {}", d["message"].as_str().unwrap_or(""));
        if let Some(hint) = d["hint"].as_str() {
            eprintln!("    hint: {hint}");
        }
    }
}

/// Prints a finished (or current) run: status, root cause, then each step with attempts and failure records.
pub fn print_summary(run: &Value) {
    out!("run {}: {}", run["id"].as_str().unwrap_or("?"), run["status"].as_str().unwrap_or("?"));
    if let Some(goal) = run["goal"].as_str() {
        out!("  goal {goal}");
    }
    if let Some(labels) = run["labels"].as_object().filter(|l| !l.is_empty()) {
        let pairs: Vec<String> =
            labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
        out!("  labels {}", pairs.join(" "));
    }
    if let Some(old) = run["rerun_of"].as_str() {
        out!("  rerun of {old}");
    }
    if run["input"].as_object().is_some_and(|input| !input.is_empty()) {
        out!("  input {}", clipped(&run["input"]));
    }
    if let Some(failure) = run["failure"].as_object() {
        out!(
            "  root cause: step `{}` {}: {} (suggestion: {})",
            failure.get("step_id").and_then(Value::as_str).unwrap_or("?"),
            failure.get("code").and_then(Value::as_str).unwrap_or("?"),
            failure.get("message").and_then(Value::as_str).unwrap_or(""),
            failure.get("suggestion").and_then(Value::as_str).unwrap_or("-"),
        );
    }
    for step in run["steps"].as_array().into_iter().flatten() {
        // The plan's field as written (`in 3s`, `tomorrow 08:00 …`), not a countdown: it reads the same after firing.
        let timer = step["timer"]["local"].as_str().map(|t| format!("  not_before \"{t}\"")).unwrap_or_default();
        let waiting = step["waiting_for"]["action"]
            .as_str()
            .map(|a| format!("  waiting for a worker serving `{a}` (none connected)"))
            .unwrap_or_default();
        let took = match (step["started_at_ms"].as_i64(), step["finished_at_ms"].as_i64()) {
            (Some(start), Some(end)) => format!("  took {}", duration(end - start)),
            _ => String::new(),
        };
        let revised = match step["args_revision"].as_i64() {
            Some(n) if n > 0 => format!(" (repaired, revision {n})"),
            _ => String::new(),
        };
        out!(
            "  {:<16} {:<16} attempts {}{took}{timer}{waiting}",
            step["id"].as_str().unwrap_or("?"),
            step["status"].as_str().unwrap_or("?"),
            step["attempts"]
        );
        if step["args"].as_object().is_some_and(|args| !args.is_empty()) {
            out!("      args{revised} {}", clipped(&step["args"]));
            if !step["resolved_args"].is_null() && step["resolved_args"] != step["args"] {
                out!("      resolved {}", clipped(&step["resolved_args"]));
            }
        }
        for f in step["failures"].as_array().into_iter().flatten() {
            out!(
                "      attempt {}: {} — {} (retryable {}, suggestion {})",
                f["attempt"],
                f["code"].as_str().unwrap_or("?"),
                f["message"].as_str().unwrap_or(""),
                f["retryable"],
                f["suggestion"].as_str().unwrap_or("-")
            );
        }
    }
}

/// Where client commands connect.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// REST API URL (`CAIRN_SERVER`; default http://127.0.0.1:7400).
    #[arg(long)]
    server: Option<String>,
    /// Machine-readable JSON output.
    #[arg(long)]
    pub json: bool,
}

impl Target {
    /// The client for these flags and settings.
    pub fn client(&self, settings: &Settings) -> anyhow::Result<Client> {
        let url = self
            .server
            .clone()
            .or_else(|| settings.server.clone())
            .unwrap_or_else(|| format!("http://{}", settings.http));
        Client::new(&url, settings.api_token.clone())
    }
}

/// Arguments of `cairn submit`.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// Plan file.
    file: PathBuf,
    /// Run input as JSON.
    #[arg(long)]
    input: Option<String>,
    /// Run-level idempotency key.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// A label to find the run by, as `key=value` (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    #[command(flatten)]
    target: Target,
}

/// `cairn submit`: prints the run id (or the run as JSON with `--json`).
pub async fn submit(args: &SubmitArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let client = args.target.client(settings)?;
    let body =
        submit_body(read_plan(&args.file)?, args.input.as_deref(), args.idempotency_key.as_deref(), &args.labels)?;
    let (status, run) = client.call(reqwest::Method::POST, "/v1/runs", Some(&body)).await?;
    if status.as_u16() == 422 {
        print_diagnostics(&run);
        return Ok(exit::code(exit::INVALID_PLAN));
    }
    anyhow::ensure!(status.is_success(), "{status}: {}", run["message"].as_str().unwrap_or("submit failed"));
    if args.target.json {
        out!("{}", serde_json::to_string_pretty(&run)?);
    } else {
        out!("{}", run["id"].as_str().unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}

/// Adds the operator's `reason` to a decision's body, when there is one.
fn with_reason(body: &mut Value, reason: Option<&str>) {
    if let Some(reason) = reason {
        body["reason"] = json!(reason);
    }
}

/// `value` as compact JSON, cut to 160 characters.
fn clipped(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(160) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// `ms` as `1.2s`, `3m04s` or `2h05m`.
pub(super) fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{:.1}s", ms.max(0) as f64 / 1000.0),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// `cairn watch RUN`: follows a run until it finishes, as `cairn run` does after submitting (exit code: the
/// run's).
pub async fn watch(args: &RunArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let client = args.target.client(settings)?;
    let stop = crate::signal::Stop::install();
    tokio::select! {
        followed = crate::command::run::watch(&client, &args.run, args.target.json) => followed,
        () = stop.wait() => {
            eprintln!("interrupted: run {} goes on; follow it again with `cairn watch {}`", args.run, args.run);
            Ok(exit::code(exit::INTERRUPTED))
        }
    }
}

/// Arguments naming one run.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Run id.
    run: String,
    #[command(flatten)]
    target: Target,
}

/// `cairn show RUN`.
pub async fn show(args: &RunArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let client = args.target.client(settings)?;
    let mut run = client.get(&format!("/v1/runs/{}", args.run)).await?;
    let deliveries = client.get(&format!("/v1/runs/{}/deliveries", args.run)).await?;
    if args.target.json {
        run["deliveries"] = deliveries["deliveries"].clone();
        out!("{}", serde_json::to_string_pretty(&run)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_summary(&run);
    print_deliveries(&deliveries["deliveries"]);
    print_plan(&client.get(&format!("/v1/runs/{}/plan", args.run)).await?);
    Ok(ExitCode::SUCCESS)
}

/// The delivery ledger, one line per step, recipient and channel: status, tries, and why the last try failed.
pub fn print_deliveries(deliveries: &Value) {
    let Some(list) = deliveries.as_array().filter(|l| !l.is_empty()) else { return };
    out!("  deliveries");
    for d in list {
        let recipient = d["recipient_id"].as_str().filter(|r| !r.is_empty()).unwrap_or("(worker)");
        let tries = d["attempts"].as_u64().unwrap_or(0);
        let error = d["last_error"].as_str().map(|e| format!("  last error: {e}")).unwrap_or_default();
        let id = d["provider_message_id"].as_str().map(|m| format!("  id {m}")).unwrap_or_default();
        out!(
            "    {:<16} {:<16} {:<9} {:<10} {tries} {}{id}{error}",
            d["step_id"].as_str().unwrap_or("?"),
            recipient,
            d["channel"].as_str().unwrap_or("?"),
            d["status"].as_str().unwrap_or("?"),
            if tries == 1 { "try" } else { "tries" }
        );
    }
}

/// The plan a run follows, one step a line: its action, what it depends on, its condition and approval.
fn print_plan(plan: &Value) {
    out!("  plan ({})", plan["version"].as_str().unwrap_or("cairn/v1"));
    for step in plan["steps"].as_array().into_iter().flatten() {
        let deps: Vec<&str> = step["depends_on"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let after = if deps.is_empty() { String::new() } else { format!("  after {}", deps.join(", ")) };
        let when = step["when"].as_str().map(|w| format!("  when {w}")).unwrap_or_default();
        let approval = if step["approval"]["required"] == true { "  needs approval" } else { "" };
        out!(
            "    {:<16} {}{after}{when}{approval}",
            step["id"].as_str().unwrap_or("?"),
            step["action"].as_str().unwrap_or("?")
        );
    }
}

/// Arguments of `cairn logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// Run id.
    run: String,
    /// Keep printing events as they happen until the run finishes (one JSON event per line with `--json`).
    #[arg(long, short)]
    follow: bool,
    #[command(flatten)]
    target: Target,
}

/// `cairn logs RUN [--follow]`: the event history.
pub async fn logs(args: &LogsArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let client = args.target.client(settings)?;
    if args.follow {
        return follow_logs(&client, args).await;
    }
    let answer = client.get(&format!("/v1/runs/{}/events", args.run)).await?;
    if args.target.json {
        out!("{}", serde_json::to_string_pretty(&answer["events"])?);
        return Ok(ExitCode::SUCCESS);
    }
    for e in answer["events"].as_array().into_iter().flatten() {
        print_event(e);
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints events after the last one seen until the run has finished and nothing is left; the exit code is the
/// run's.
async fn follow_logs(client: &Client, args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let mut after = 0;
    loop {
        // The run's status first: events written before it finished are then all in the read that follows.
        let run = client.get(&format!("/v1/runs/{}?view=summary", args.run)).await?;
        let answer = client.get(&format!("/v1/runs/{}/events?after={after}", args.run)).await?;
        let events = answer["events"].as_array().cloned().unwrap_or_default();
        for e in &events {
            after = after.max(e["id"].as_i64().unwrap_or(after));
            if args.target.json {
                out!("{e}");
            } else {
                print_event(e);
            }
        }
        let status = run["status"].as_str().unwrap_or("");
        if events.is_empty() && matches!(status, "succeeded" | "failed" | "cancelled") {
            return Ok(exit_code(status));
        }
        if events.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
}

/// One event as a line: its time (milliseconds, fixed width), kind, step and data.
fn print_event(e: &Value) {
    let at = e["at_ms"]
        .as_i64()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| format!("{t:.3}"))
        .unwrap_or_default();
    out!("{at}  {:<24} {:<16} {}", e["kind"].as_str().unwrap_or("?"), e["step_id"].as_str().unwrap_or("-"), e["data"]);
}

/// The run a decision answered: as JSON with `--json`, else its id and status.
fn print_decided(target: &Target, run_id: &str, run: &Value) -> anyhow::Result<ExitCode> {
    if target.json {
        out!("{}", serde_json::to_string_pretty(run)?);
    } else {
        out!("run {run_id}: {}", run["status"].as_str().unwrap_or("?"));
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments naming one step.
#[derive(Debug, clap::Args)]
pub struct StepArgs {
    /// Run id.
    run: String,
    /// Step id.
    step: String,
    /// Who decides (recorded in the history).
    #[arg(long, default_value = "cli")]
    by: String,
    #[command(flatten)]
    target: Target,
}

/// `cairn approve|reject RUN STEP`.
pub async fn decide(verb: &str, args: &StepArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    step_verb(verb, args, json!({"by": args.by}), settings).await
}

/// Arguments of `cairn skip` and `cairn fail`.
#[derive(clap::Args, Debug)]
pub struct ParkedArgs {
    #[command(flatten)]
    step: StepArgs,
    /// Why (recorded in the history).
    #[arg(long)]
    reason: Option<String>,
}

/// `cairn skip|fail RUN STEP [--reason …]`: decides a step in `outcome_unknown`.
pub async fn decide_parked(verb: &str, args: &ParkedArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut body = json!({"by": args.step.by});
    with_reason(&mut body, args.reason.as_deref());
    step_verb(verb, &args.step, body, settings).await
}

/// Arguments of `cairn retry`.
#[derive(clap::Args, Debug)]
pub struct RetryArgs {
    #[command(flatten)]
    step: StepArgs,
    /// Repaired args replacing the step's: JSON, or `@FILE` (JSON or YAML). The step then gets a new idempotency
    /// key (`<run>/<step>/<revision>`).
    #[arg(long, value_name = "JSON|@FILE")]
    args: Option<String>,
    /// Why (recorded in the history).
    #[arg(long)]
    reason: Option<String>,
}

/// `cairn retry RUN STEP [--args …] [--reason …]`: a failed step runs again with a fresh attempt budget (its run
/// reopens); an `outcome_unknown` one gets a new attempt.
pub async fn retry(args: &RetryArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut body = json!({"by": args.step.by});
    if let Some(text) = &args.args {
        body["args"] = match text.strip_prefix('@') {
            Some(file) => read_plan(Path::new(file))?,
            None => document::parse(text, Format::Json).map_err(|f| anyhow::anyhow!("--args: {}", f.message))?,
        };
    }
    with_reason(&mut body, args.reason.as_deref());
    step_verb("retry", &args.step, body, settings).await
}

/// Arguments of `cairn cancel`, `cairn redrive`, `cairn pause` and `cairn resume`.
#[derive(clap::Args, Debug)]
pub struct RunDecisionArgs {
    /// Run id.
    run: String,
    /// Who decides (recorded in the history).
    #[arg(long, default_value = "cli")]
    by: String,
    /// Why (recorded in the history).
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    target: Target,
}

/// `cairn cancel|redrive|pause|resume RUN`: a cancel ends the run's open steps; a redrive runs every failed and cancelled step of a failed or cancelled run
/// again; a pause stops new attempts of a run until it is resumed.
pub async fn run_decision(verb: &str, args: &RunDecisionArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut body = json!({"by": args.by});
    with_reason(&mut body, args.reason.as_deref());
    let run = args.target.client(settings)?.post(&format!("/v1/runs/{}:{verb}", args.run), Some(&body)).await?;
    print_decided(&args.target, &args.run, &run)
}

/// Arguments of `cairn rerun`.
#[derive(clap::Args, Debug)]
pub struct RerunArgs {
    /// The finished run.
    run: String,
    /// The step to run again from: it and every step that depends on it run; the others keep their outputs.
    #[arg(long)]
    from: String,
    /// Who decides (recorded in the history).
    #[arg(long, default_value = "cli")]
    by: String,
    /// Why (recorded in the history).
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    target: Target,
}

/// `cairn rerun RUN --from STEP`: prints the new run's id.
pub async fn rerun(args: &RerunArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut body = json!({"from": args.from, "by": args.by});
    with_reason(&mut body, args.reason.as_deref());
    let run = args.target.client(settings)?.post(&format!("/v1/runs/{}:rerun", args.run), Some(&body)).await?;
    if args.target.json {
        out!("{}", serde_json::to_string(&run)?);
    } else {
        out!("{}", run["id"].as_str().unwrap_or("?"));
    }
    Ok(ExitCode::SUCCESS)
}

async fn step_verb(verb: &str, args: &StepArgs, body: Value, settings: &Settings) -> anyhow::Result<ExitCode> {
    let path = format!("/v1/runs/{}/steps/{}:{verb}", args.run, args.step);
    let run = args.target.client(settings)?.post(&path, Some(&body)).await?;
    if args.target.json {
        out!("{}", serde_json::to_string_pretty(&run)?);
        return Ok(ExitCode::SUCCESS);
    }
    let step = run["steps"].as_array().into_iter().flatten().find(|s| s["id"] == args.step.as_str());
    out!("step {}: {}", args.step, step.and_then(|s| s["status"].as_str()).unwrap_or("?"));
    Ok(ExitCode::SUCCESS)
}
