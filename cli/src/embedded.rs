//! An orchestrator with an in-process worker in this process: what `cairn dev` and `cairn run` (without
//! `--server`) use. The worker talks to the orchestrator over the real worker protocol on 127.0.0.1, exactly
//! as a separate worker process would.

use cairn_orchestrator::server::Server;
use cairn_workers::actions::{ActionsConfig, NotifyConfig, registry};
use cairn_workers::runtime::{self, WorkerConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::command::serve::server_config;
use crate::settings::{LocalDefault, Settings};

/// A running embedded orchestrator and worker.
pub struct Embedded {
    server: Server,
    stop_worker: Option<oneshot::Sender<()>>,
    worker: JoinHandle<()>,
}

impl Embedded {
    /// The REST API base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.server.http_addr)
    }

    /// The worker protocol URL (for workers of other processes joining this orchestrator).
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.server.grpc_addr)
    }

    /// Stops the in-process worker (its attempts in flight may finish and report), then the orchestrator
    /// gracefully ([`Server::shutdown`]).
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop_worker.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), &mut self.worker).await;
        self.server.shutdown().await;
    }
}

/// Starts the orchestrator (no auth: local only) and a worker serving the built-in actions. With `demo`, the
/// weather action is pointed at a local fixture so nothing leaves the machine. `http.request` may reach loopback
/// and private addresses unless the settings say otherwise (a developer's machine, see [`LocalDefault`]).
///
/// # Errors
/// Database or listener failures.
pub async fn start(settings: &Settings, demo: bool) -> anyhow::Result<Embedded> {
    let server = Server::start_steady(server_config(settings, false)).await?;
    let mut actions = actions_from_env();
    actions.http.addresses = settings.address_policy(LocalDefault::Allow);
    if demo {
        let base = crate::demo::start().await?;
        actions.weather.geocoding_base_url.clone_from(&base);
        actions.weather.forecast_base_url = base;
    }
    let mut config = WorkerConfig::new(format!("http://{}", server.grpc_addr), registry(&actions));
    config.concurrency = 16;
    config.drain_timeout = std::time::Duration::from_secs(2);
    let (stop_worker, stopped) = oneshot::channel::<()>();
    let worker = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = runtime::run(config, shutdown).await {
            tracing::error!(error = %e, "in-process worker stopped");
        }
    });
    Ok(Embedded { server, stop_worker: Some(stop_worker), worker })
}

/// Built-in action settings from the environment (see the README's configuration section). `http.request`'s
/// address policy comes from [`Settings::address_policy`] instead; this leaves it at its default (refusing).
pub fn actions_from_env() -> ActionsConfig {
    let mut config = ActionsConfig::default();
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let Some(url) = var("CAIRN_WEATHER_GEOCODING_URL") {
        config.weather.geocoding_base_url = url;
    }
    if let Some(url) = var("CAIRN_WEATHER_FORECAST_URL") {
        config.weather.forecast_base_url = url;
    }
    if let Some(path) = var("CAIRN_NOTIFY_FILE") {
        config.notify.file_path = path.into();
    }
    if let Some(url) = var("CAIRN_NOTIFY_WEBHOOK") {
        config.notify.webhook_url = Some(url.into());
    }
    notify_channels_from_env(&mut config.notify, var);
    if let Some(url) = var("OPENAI_BASE_URL") {
        config.llm.base_url = url;
    }
    if let Some(key) = var("OPENAI_API_KEY") {
        config.llm.api_key = Some(key.into());
    }
    if let Some(model) = var("CAIRN_LLM_MODEL") {
        config.llm.model = model;
    }
    config
}

/// The settings of `notify.send`'s provider channels (Telegram, SMTP, ntfy); tokens and the SMTP URL, which
/// holds the password, are kept as secrets.
fn notify_channels_from_env(notify: &mut NotifyConfig, var: impl Fn(&str) -> Option<String>) {
    if let Some(token) = var("CAIRN_NOTIFY_TELEGRAM_BOT_TOKEN") {
        notify.telegram.bot_token = Some(token.into());
    }
    if let Some(url) = var("CAIRN_NOTIFY_TELEGRAM_API_URL") {
        notify.telegram.api_url = url;
    }
    if let Some(url) = var("CAIRN_NOTIFY_SMTP_URL") {
        notify.smtp.url = Some(url.into());
    }
    if let Some(from) = var("CAIRN_NOTIFY_SMTP_FROM") {
        notify.smtp.from = Some(from);
    }
    if let Some(path) = var("CAIRN_NOTIFY_SMTP_CA_FILE") {
        notify.smtp.ca_file = Some(path.into());
    }
    if let Some(server) = var("CAIRN_NOTIFY_NTFY_SERVER") {
        notify.ntfy.server = server;
    }
}
