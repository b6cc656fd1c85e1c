//! `cairn worker`: a worker process serving Cairn's built-in actions to an orchestrator over the worker protocol.
//!
//! The token comes from `--token`, else `CAIRN_WORKER_TOKEN` (or `worker_token` in `cairn.toml`); prefer the
//! environment, since command-line arguments are visible to other users of the host. The built-in actions read
//! their settings from the environment:
//!
//! | variable | action | meaning |
//! |---|---|---|
//! | `CAIRN_WEATHER_GEOCODING_URL` | `weather.forecast` | geocoding API base (default Open-Meteo's) |
//! | `CAIRN_WEATHER_FORECAST_URL` | `weather.forecast` | forecast API base (default Open-Meteo's) |
//! | `CAIRN_NOTIFY_FILE` | `notify.send` | file the `file` channel appends to |
//! | `CAIRN_NOTIFY_WEBHOOK` | `notify.send` | URL the worker's own `webhook` channel posts to (steps without `to`) |
//! | `CAIRN_NOTIFY_TELEGRAM_BOT_TOKEN` | `notify.send` | the Telegram bot's token (unset: no `telegram` channel) |
//! | `CAIRN_NOTIFY_TELEGRAM_API_URL` | `notify.send` | Bot API base (default `https://api.telegram.org`) |
//! | `CAIRN_NOTIFY_SMTP_URL` | `notify.send` | SMTP server, e.g. `smtp://user:pass@host:587?tls=required` (STARTTLS) or `smtps://user:pass@host:465` (unset: no `email` channel) |
//! | `CAIRN_NOTIFY_SMTP_FROM` | `notify.send` | the email's From, e.g. `Cairn <cairn@example.com>` |
//! | `CAIRN_NOTIFY_SMTP_CA_FILE` | `notify.send` | a PEM file of extra roots to trust for the SMTP server's certificate |
//! | `CAIRN_NOTIFY_NTFY_SERVER` | `notify.send` | ntfy server for recipients that name none (default `https://ntfy.sh`) |
//! | `OPENAI_BASE_URL` | `llm.chat` | OpenAI-compatible API base, e.g. `http://127.0.0.1:8080/v1` |
//! | `OPENAI_API_KEY` | `llm.chat` | bearer token of that API |
//! | `CAIRN_LLM_MODEL` | `llm.chat` | model used when a step names none |
//!
//! Which destinations `http.request` may reach are settings (`cairn.toml` or the environment): loopback and
//! private addresses are refused unless `http_allow_loopback` / `CAIRN_HTTP_ALLOW_LOOPBACK`,
//! `http_allow_private` / `CAIRN_HTTP_ALLOW_PRIVATE` or an `http_allow_hosts` / `CAIRN_HTTP_ALLOW_HOSTS` entry
//! (`host[:port]`, comma-separated) allows them; link-local and cloud metadata addresses never are.
//!
//! SIGTERM or ctrl-c stops polling, lets attempts in flight finish for up to `--drain-timeout-secs`, then exits.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use cairn_orchestrator::secret::SecretString;
use cairn_workers::actions::registry;
use cairn_workers::runtime::{self, WorkerConfig};

use crate::embedded::actions_from_env;
use crate::settings::{LocalDefault, Settings};

/// Flags of `cairn worker`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The orchestrator's worker protocol address, e.g. `http://127.0.0.1:7401`.
    #[arg(long)]
    server: String,
    /// Worker token (default: `CAIRN_WORKER_TOKEN`).
    #[arg(long, value_parser = secret)]
    token: Option<SecretString>,
    /// Most attempts run at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Serve only these built-in actions (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    actions: Vec<String>,
    /// Worker id recorded on every attempt (default `<hostname>-<pid>`).
    #[arg(long)]
    id: Option<String>,
    /// On shutdown, how long attempts in flight may still run, in seconds.
    #[arg(long, default_value_t = 30)]
    drain_timeout_secs: u64,
}

/// `--token` is held as a secret from parsing on, so the arguments' `Debug` never shows it.
fn secret(token: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(token.into())
}

/// Runs the worker until SIGTERM or ctrl-c.
///
/// # Errors
/// An unknown action name, an unusable address or token, or the orchestrator refusing the worker.
pub async fn run(args: &Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let stop = crate::signal::Stop::install();
    let mut config = actions_from_env();
    config.http.addresses = settings.address_policy(LocalDefault::Refuse);
    let addresses = &config.http.addresses;
    tracing::info!(
        allow_loopback = addresses.allow_loopback,
        allow_private = addresses.allow_private,
        allow_hosts = %addresses.allow_hosts.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        "http.request destinations (link-local and metadata addresses are always refused)"
    );
    let mut actions = registry(&config);
    if !args.actions.is_empty() {
        let known: Vec<String> = actions.iter().map(|a| a.spec().name).collect();
        if let Some(unknown) = args.actions.iter().find(|name| !known.contains(name)) {
            bail!("no built-in action `{unknown}`; available: {}", known.join(", "));
        }
        actions.retain(|a| args.actions.contains(&a.spec().name));
    }
    let mut config = WorkerConfig::new(&args.server, actions);
    config.token = args.token.clone().or_else(|| settings.worker_token.clone());
    config.concurrency = args.concurrency;
    config.drain_timeout = Duration::from_secs(args.drain_timeout_secs);
    if let Some(id) = &args.id {
        config.worker_id.clone_from(id);
    }
    let names: Vec<String> = config.actions.iter().map(|a| a.spec().name).collect();
    out!(
        "Cairn worker {}: serving {} to {} (concurrency {})",
        config.worker_id,
        names.join(", "),
        config.server,
        config.concurrency
    );
    runtime::run(config, stop.wait()).await.context("worker")?;
    Ok(ExitCode::SUCCESS)
}
