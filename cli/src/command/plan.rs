//! `cairn plan "TEXT"`: draft a plan from a request in natural language, show how it was reached, and
//! optionally submit it.
//!
//! Without `--server` (or `CAIRN_SERVER`) the planner runs here against the built-in actions, configured like
//! `llm.chat` (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `CAIRN_LLM_MODEL`); with it, the server drafts against its
//! live catalog (`POST /v1/plans:draft`). `--submit` submits the valid plan (to the server, or to an embedded
//! orchestrator that is then followed like `cairn run`), asking first on stdin when a step has side effects
//! (action effect `non_idempotent` or `idempotent_write`) unless `--yes` is given. An invalid draft is never
//! submitted. Exit codes: 0 drafted (and submitted run succeeded), 1 no valid plan, refused, or the run failed.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use cairn_core::catalog::{ActionSpec, Effect, StaticCatalog, builtin_specs};
use cairn_orchestrator::planner::{DraftRequest, Planner};
use cairn_workers::actions::LlmConfig;
use serde_json::{Value, json};

use super::run::watch;
use super::runs::{print_diagnostics, submit_body};
use crate::client::Client;
use crate::embedded;
use crate::settings::Settings;

/// Arguments of `cairn plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What the plan should do, in your words (grounded args such as a city must appear here).
    text: String,
    /// IANA time zone for local times such as `tomorrow 08:00` (default: this machine's zone).
    #[arg(long)]
    timezone: Option<String>,
    /// Most model calls (draft plus repairs), 1 to 10 (default 3).
    #[arg(long)]
    max_rounds: Option<usize>,
    /// Write the plan (pretty JSON) to FILE instead of printing it.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Submit the plan once it is valid (asks first when a step has side effects).
    #[arg(long)]
    submit: bool,
    /// With --submit: do not ask, even when steps have side effects.
    #[arg(long)]
    yes: bool,
    /// REST API of a running orchestrator (`CAIRN_SERVER`): draft and submit there.
    #[arg(long)]
    server: Option<String>,
}

/// A draft from either planner, in the API's JSON shapes.
struct Outcome {
    plan: Option<Value>,
    rounds: Vec<Value>,
    error: Option<String>,
}

/// The model endpoint `llm.chat` uses, when one is configured: `OPENAI_API_KEY` (a hosted provider) or
/// `OPENAI_BASE_URL` (a local server needs no key) must be set.
pub fn llm_config() -> Option<LlmConfig> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
    (set("OPENAI_API_KEY") || set("OPENAI_BASE_URL")).then(|| embedded::actions_from_env().llm)
}

/// The planner an orchestrator serves at `POST /v1/plans:draft`, when a model endpoint is configured.
pub fn server_planner(settings: &Settings) -> Option<Arc<Planner>> {
    let config = llm_config()?;
    match Planner::new(&config, settings.engine().limits) {
        Ok(planner) => {
            tracing::info!(model = planner.model(), base_url = %config.base_url, "planner configured");
            Some(Arc::new(planner))
        }
        Err(e) => {
            tracing::warn!(error = %e, "planner unavailable");
            None
        }
    }
}

/// Runs the command.
pub async fn run(args: &Args, mut settings: Settings) -> anyhow::Result<ExitCode> {
    let timezone = args.timezone.clone().unwrap_or_else(local_timezone);
    let server = args.server.clone().or_else(|| settings.server.clone());
    let remote = server.as_deref().map(|url| Client::new(url, settings.api_token.clone())).transpose()?;
    let outcome = match &remote {
        Some(client) => remote_draft(client, args, &timezone).await?,
        None => local_draft(args, &timezone, &settings).await?,
    };
    print_rounds(&outcome.rounds);
    let Some(plan) = outcome.plan else {
        eprintln!("error: {}", outcome.error.as_deref().unwrap_or("no valid plan"));
        if let Some(last) = outcome.rounds.last() {
            eprintln!("last draft:\n{}", serde_json::to_string_pretty(&last["draft"])?);
        }
        return Ok(ExitCode::from(1));
    };
    let pretty = serde_json::to_string_pretty(&plan)?;
    match &args.out {
        Some(path) => {
            std::fs::write(path, format!("{pretty}\n")).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("plan written to {}", path.display());
        }
        None => out!("{pretty}"),
    }
    if !args.submit {
        return Ok(ExitCode::SUCCESS);
    }
    let specs = match &remote {
        Some(client) => remote_specs(client).await?,
        None => builtin_specs(),
    };
    if !args.yes && !confirm(&plan, &specs).await? {
        eprintln!("not submitted");
        return Ok(ExitCode::from(1));
    }
    match &remote {
        Some(client) => submit(client, plan, false).await,
        None => {
            settings.http = ([127, 0, 0, 1], 0).into();
            settings.grpc = ([127, 0, 0, 1], 0).into();
            let app = embedded::start(&settings, false).await?;
            let outcome = match Client::new(&app.url(), None) {
                Ok(client) => submit(&client, plan, true).await,
                Err(e) => Err(e),
            };
            app.shutdown().await;
            outcome
        }
    }
}

/// This machine's IANA zone, or `UTC` when it has no name.
fn local_timezone() -> String {
    jiff::tz::TimeZone::system().iana_name().unwrap_or("UTC").to_owned()
}

async fn local_draft(args: &Args, timezone: &str, settings: &Settings) -> anyhow::Result<Outcome> {
    let Some(config) = llm_config() else {
        bail!(
            "the planner needs a model endpoint: set OPENAI_API_KEY (OpenAI), or OPENAI_BASE_URL for a local \
             OpenAI-compatible server, and CAIRN_LLM_MODEL for the model"
        );
    };
    let planner = Planner::new(&config, settings.engine().limits)?;
    let request = DraftRequest { text: &args.text, timezone, max_rounds: args.max_rounds };
    let catalog = StaticCatalog::builtin();
    let drafted = planner.draft(&request, &catalog, &builtin_specs()).await?;
    let rounds = drafted.rounds.iter().map(serde_json::to_value).collect::<Result<_, _>>()?;
    Ok(Outcome { plan: drafted.plan, rounds, error: drafted.error })
}

async fn remote_draft(client: &Client, args: &Args, timezone: &str) -> anyhow::Result<Outcome> {
    let mut body = json!({"text": args.text, "timezone": timezone});
    if let Some(rounds) = args.max_rounds {
        body["max_rounds"] = json!(rounds);
    }
    let (status, answer) = client.call(reqwest::Method::POST, "/v1/plans:draft", Some(&body)).await?;
    let rounds = |v: &Value| v.as_array().cloned().unwrap_or_default();
    if status.is_success() {
        return Ok(Outcome { plan: Some(answer["plan"].clone()), rounds: rounds(&answer["rounds"]), error: None });
    }
    if answer["code"] == "draft_failed" {
        let error = answer["message"].as_str().map(str::to_owned);
        return Ok(Outcome { plan: None, rounds: rounds(&answer["details"]["rounds"]), error });
    }
    let code = answer["code"].as_str().unwrap_or("error");
    bail!("{status}: {code}: {}", answer["message"].as_str().unwrap_or("drafting failed"))
}

async fn remote_specs(client: &Client) -> anyhow::Result<Vec<ActionSpec>> {
    let answer = client.get("/v1/actions").await?;
    serde_json::from_value(answer["actions"].clone()).context("reading the server's actions")
}

/// One line per round, then its error diagnostics (stderr, so stdout carries only the plan).
fn print_rounds(rounds: &[Value]) {
    for (i, round) in rounds.iter().enumerate() {
        let diagnostics = round["diagnostics"].as_array().map(Vec::as_slice).unwrap_or_default();
        let errors: Vec<&Value> = diagnostics.iter().filter(|d| d["severity"] == "error").collect();
        let warnings = diagnostics.len() - errors.len();
        let verdict = if errors.is_empty() { "valid".to_owned() } else { format!("{} error(s)", errors.len()) };
        let warned = if warnings > 0 { format!(", {warnings} warning(s)") } else { String::new() };
        eprintln!("round {}: {verdict}{warned}", i + 1);
        for d in errors {
            let at = d["pointer"].as_str().filter(|p| !p.is_empty()).unwrap_or("/");
            eprintln!("  {} at {at}: {}", d["code"].as_str().unwrap_or("?"), d["message"].as_str().unwrap_or(""));
        }
    }
}

/// Steps whose action has side effects, as `(step id, action, effect)`.
fn side_effects(plan: &Value, specs: &[ActionSpec]) -> Vec<(String, String, Effect)> {
    let effects: BTreeMap<&str, Effect> = specs.iter().map(|s| (s.name.as_str(), s.effect)).collect();
    let steps = plan["steps"].as_array().map(Vec::as_slice).unwrap_or_default();
    steps
        .iter()
        .filter_map(|step| {
            let action = step["action"].as_str()?;
            let effect = *effects.get(action)?;
            let id = step["id"].as_str().or_else(|| step["step_id"].as_str()).unwrap_or("?");
            (effect != Effect::Read).then(|| (id.to_owned(), action.to_owned(), effect))
        })
        .collect()
}

/// True when nothing needs confirming, or the user answers `y` on stdin.
async fn confirm(plan: &Value, specs: &[ActionSpec]) -> anyhow::Result<bool> {
    let risky = side_effects(plan, specs);
    if risky.is_empty() {
        return Ok(true);
    }
    eprintln!("steps with side effects:");
    for (id, action, effect) in &risky {
        let effect = serde_json::to_value(effect)?;
        eprintln!("  {id:<16} {action} ({})", effect.as_str().unwrap_or("?"));
    }
    eprint!("submit this plan? [y/N] ");
    std::io::stderr().flush()?;
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await?
    .context("reading the answer from stdin")?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

/// Submits `plan`; with `follow`, watches the run to the end like `cairn run` (the embedded orchestrator
/// stops when this command does).
async fn submit(client: &Client, plan: Value, follow: bool) -> anyhow::Result<ExitCode> {
    let body = submit_body(plan, None, None, &[])?;
    let (status, run) = client.call(reqwest::Method::POST, "/v1/runs", Some(&body)).await?;
    if status.as_u16() == 422 {
        print_diagnostics(&run);
        return Ok(ExitCode::from(1));
    }
    anyhow::ensure!(status.is_success(), "{status}: {}", run["message"].as_str().unwrap_or("submit failed"));
    let id = run["id"].as_str().unwrap_or_default().to_owned();
    out!("run {id} submitted ({} steps)", run["steps"].as_array().map_or(0, Vec::len));
    if follow { watch(client, &id, false).await } else { Ok(ExitCode::SUCCESS) }
}
