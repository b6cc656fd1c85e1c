//! Finding runs and acting on many: `cairn runs` (the filters of `GET /v1/runs`), `cairn attention` (runs with a
//! step waiting for an operator) and `cairn bulk cancel|redrive|retry-failed` (the bulk operations, `--dry-run`
//! first).

use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Map, Value, json};

use super::runs::{Target, duration};
use crate::settings::Settings;

/// The run filters, as flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FilterArgs {
    /// Only runs with this status (repeatable: any of them).
    #[arg(long)]
    status: Vec<String>,
    /// Only runs with this label, as `key=value` (repeatable: all of them).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Only runs whose goal contains this text (ignoring case).
    #[arg(long, value_name = "TEXT")]
    goal: Option<String>,
    /// Only runs with a step of this action.
    #[arg(long)]
    action: Option<String>,
    /// Only runs created at or after this instant: RFC 3339, milliseconds since the epoch, or an age such as
    /// `30m`, `2h`, `7d` (that long ago).
    #[arg(long, value_name = "INSTANT|AGE")]
    since: Option<String>,
    /// Only runs created before this instant (as `--since`).
    #[arg(long, value_name = "INSTANT|AGE")]
    until: Option<String>,
    /// Only the run with this idempotency key.
    #[arg(long)]
    idempotency_key: Option<String>,
}

impl FilterArgs {
    /// `(name, value)` pairs of the query string.
    fn query(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let mut pairs = Vec::new();
        pairs.extend(self.status.iter().map(|s| ("status", s.clone())));
        for label in &self.labels {
            let (key, value) = cairn_core::labels::parse(label, '=').with_context(|| format!("--label {label}"))?;
            pairs.push(("label", format!("{key}:{value}")));
        }
        let single = [("q", &self.goal), ("action", &self.action), ("idempotency_key", &self.idempotency_key)];
        pairs.extend(single.into_iter().filter_map(|(name, v)| v.clone().map(|v| (name, v))));
        for (name, flag, value) in
            [("created_after", "--since", &self.since), ("created_before", "--until", &self.until)]
        {
            if let Some(value) = value {
                pairs.push((name, instant_ms(value).with_context(|| format!("{flag} {value}"))?.to_string()));
            }
        }
        Ok(pairs)
    }

    /// The `filter` object of a bulk operation.
    fn body(&self) -> anyhow::Result<Value> {
        let mut filter = Map::new();
        let (mut labels, mut statuses) = (Map::new(), Vec::new());
        for (name, value) in self.query()? {
            match name {
                "status" => statuses.push(json!(value)),
                "label" => {
                    let (key, value) = value.split_once(':').unwrap_or((&value, ""));
                    labels.insert(key.to_owned(), json!(value));
                }
                "created_after" | "created_before" => {
                    filter.insert(name.to_owned(), json!(value.parse::<i64>()?));
                }
                _ => {
                    filter.insert(name.to_owned(), json!(value));
                }
            }
        }
        if !labels.is_empty() {
            filter.insert("labels".into(), Value::Object(labels));
        }
        if !statuses.is_empty() {
            filter.insert("status".into(), Value::Array(statuses));
        }
        Ok(Value::Object(filter))
    }
}

/// An instant as milliseconds: RFC 3339, milliseconds, or an age (`90s`, `30m`, `2h`, `7d`) before now.
fn instant_ms(text: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let unit_ms = match text.chars().last() {
        Some('s') => Some(1_000),
        Some('m') => Some(60_000),
        Some('h') => Some(3_600_000),
        Some('d') => Some(86_400_000),
        _ => None,
    };
    if let Some(unit_ms) = unit_ms
        && let Ok(n) = text[..text.len() - 1].parse::<i64>()
    {
        return Ok(jiff::Timestamp::now().as_millisecond() - n.saturating_mul(unit_ms));
    }
    let at: jiff::Timestamp = text
        .parse()
        .with_context(|| format!("`{text}` is neither an RFC 3339 instant, milliseconds nor an age like 30m"))?;
    Ok(at.as_millisecond())
}

/// `GET /v1/runs?…` with the pairs, percent-encoded.
fn path(pairs: &[(&str, String)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        query.append_pair(name, value);
    }
    format!("/v1/runs?{}", query.finish())
}

/// Arguments of `cairn runs`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    filter: FilterArgs,
    /// Most runs to list (1–500).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// Continue after the previous page (the `next page:` line it printed).
    #[arg(long)]
    cursor: Option<String>,
    #[command(flatten)]
    target: Target,
}

/// `cairn runs`: newest first, one line each (id, status, age, duration, goal, labels).
pub async fn list(args: &ListArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut pairs = args.filter.query()?;
    pairs.push(("limit", args.limit.to_string()));
    if let Some(cursor) = &args.cursor {
        pairs.push(("cursor", cursor.clone()));
    }
    let answer = args.target.client(settings)?.get(&path(&pairs)).await?;
    if args.target.json {
        out!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(ExitCode::SUCCESS);
    }
    let now = jiff::Timestamp::now().as_millisecond();
    for run in answer["runs"].as_array().into_iter().flatten() {
        out!("{}", run_line(run, now));
    }
    if let Some(cursor) = answer["next_cursor"].as_str() {
        out!("next page: --cursor {cursor}");
    }
    Ok(ExitCode::SUCCESS)
}

/// One run as a line: id, status, created, duration, goal, labels.
fn run_line(run: &Value, now: i64) -> String {
    let created = run["created_at_ms"].as_i64();
    let at = created.and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok()).map(|t| t.to_string());
    // Until now for a run still open.
    let took = created.map(|c| run["finished_at_ms"].as_i64().unwrap_or(now) - c).map(duration);
    let labels: Vec<String> = run["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    let labels = if labels.is_empty() { String::new() } else { format!("  [{}]", labels.join(" ")) };
    format!(
        "{}  {:<10} created {}  took {:>7}  {}{labels}",
        run["id"].as_str().unwrap_or("?"),
        run["status"].as_str().unwrap_or("?"),
        at.unwrap_or_else(|| "?".into()),
        took.unwrap_or_else(|| "?".into()),
        run["goal"].as_str().unwrap_or("-")
    )
}

/// Arguments of `cairn attention`.
#[derive(Debug, clap::Args)]
pub struct AttentionArgs {
    #[command(flatten)]
    filter: FilterArgs,
    /// Most runs to list (1–500).
    #[arg(long, default_value_t = 50)]
    limit: u32,
    #[command(flatten)]
    target: Target,
}

/// `cairn attention`: runs with a step that waits for an operator (`outcome_unknown`, an approval, a retry in
/// backoff, no worker for a minute), each step with why and what to do.
pub async fn attention(args: &AttentionArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut pairs = args.filter.query()?;
    pairs.push(("attention", "true".into()));
    pairs.push(("limit", args.limit.to_string()));
    let answer = args.target.client(settings)?.get(&path(&pairs)).await?;
    if args.target.json {
        out!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(ExitCode::SUCCESS);
    }
    let runs = answer["runs"].as_array().map(Vec::as_slice).unwrap_or_default();
    if runs.is_empty() {
        out!("no run needs attention");
    }
    let now = jiff::Timestamp::now().as_millisecond();
    for run in runs {
        out!("{}", run_line(run, now));
        let id = run["id"].as_str().unwrap_or("?");
        for step in run["attention"].as_array().into_iter().flatten() {
            let step_id = step["step_id"].as_str().unwrap_or("?");
            let (why, todo) = match step["reason"].as_str().unwrap_or("?") {
                "outcome_unknown" => {
                    ("ended ambiguously (it may have run)", format!("cairn retry|skip|fail {id} {step_id} --reason …"))
                }
                "waiting_approval" => ("waits for approval", format!("cairn approve|reject {id} {step_id}")),
                "retrying" => ("failed and waits for its next attempt", format!("cairn show {id}")),
                _ => ("is due and no worker took it", "cairn actions, or start a worker serving its action".into()),
            };
            out!("    step {step_id} {why}: {todo}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A bulk operation.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum BulkOp {
    /// Cancel the matching open runs.
    Cancel,
    /// Redrive the matching failed or cancelled runs.
    Redrive,
    /// Retry every failed step of the matching runs.
    RetryFailed,
}

/// Arguments of `cairn bulk`.
#[derive(Debug, clap::Args)]
pub struct BulkArgs {
    /// What to do with the matching runs.
    #[arg(value_enum)]
    op: BulkOp,
    #[command(flatten)]
    filter: FilterArgs,
    /// Only count the matching runs.
    #[arg(long)]
    dry_run: bool,
    /// Why (recorded in each run's history).
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    target: Target,
}

/// `cairn bulk cancel|redrive|retry-failed [filters] [--dry-run]`.
pub async fn bulk(args: &BulkArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let verb = match args.op {
        BulkOp::Cancel => "cancel",
        BulkOp::Redrive => "redrive",
        BulkOp::RetryFailed => "retry-failed",
    };
    let mut body = json!({"filter": args.filter.body()?, "dry_run": args.dry_run, "by": "cli"});
    if let Some(reason) = &args.reason {
        body["reason"] = json!(reason);
    }
    let answer = args.target.client(settings)?.post(&format!("/v1/runs:{verb}"), Some(&body)).await?;
    if args.target.json {
        out!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(ExitCode::SUCCESS);
    }
    if args.dry_run {
        out!("{} run(s) match; nothing was changed", answer["matched"]);
        return Ok(ExitCode::SUCCESS);
    }
    for run in answer["runs"].as_array().into_iter().flatten() {
        let message = run["message"].as_str().map(|m| format!(": {m}")).unwrap_or_default();
        out!("{}  {}{message}", run["id"].as_str().unwrap_or("?"), run["outcome"].as_str().unwrap_or("?"));
    }
    out!("{} of {} matching run(s) changed", answer["changed"], answer["matched"]);
    if answer["more"] == true {
        out!("more runs match: run the command again to go on");
    }
    Ok(ExitCode::SUCCESS)
}
