//! Built-in actions: what a plan can call without writing a worker of its own.
//!
//! Module map (one file per action, plus the plumbing they share):
//! - [`noop`]: `noop` — echoes its args.
//! - [`sleep`]: `sleep` — waits, checkpointing progress so a later attempt resumes.
//! - [`condition`]: `condition.eval` — CEL over its `vars` → `{"matched": bool}`.
//! - [`http`]: `http.request` — one HTTP call with the idempotency key, failure classification and an address
//!   guard ([`address`] decides which destinations are refused).
//! - [`weather`]: `weather.forecast` — Open-Meteo geocoding + daily forecast.
//! - [`notify`]: `notify.send` — a message to recipients over their channels (Telegram, email, Slack, Feishu,
//!   signed webhooks, ntfy; stdout and file for development), retried per channel, one record per recipient
//!   and channel, never sent twice to a pair the orchestrator's delivery ledger has as delivered.
//! - [`llm`]: `llm.chat` — a chat completion against an OpenAI-compatible endpoint.
//! - `transport`: the HTTP client, status classification (what is retryable), `Retry-After`, and racing a call
//!   against cancellation and the deadline.
//!
//! [`registry`] builds the set a worker serves from one [`ActionsConfig`].

// `Action::run` fixes the error type to `ActionError`; helpers return it unboxed so `?` needs no conversions,
// and errors are rare enough that their size does not matter.
#![allow(clippy::result_large_err)]

pub mod address;
pub mod condition;
pub mod http;
pub mod llm;
pub mod noop;
pub mod notify;
pub mod sleep;
mod transport;
pub mod weather;

use std::sync::Arc;

use cairn_core::failure::codes;
use serde::Deserialize;

pub use condition::ConditionEval;
pub use http::{HttpConfig, HttpRequest};
pub use llm::{LlmChat, LlmConfig};
pub use noop::Noop;
pub use notify::{NotifyConfig, NotifySend};
pub use sleep::Sleep;
pub use weather::{WeatherConfig, WeatherForecast};

use crate::action::{ActionError, DynAction};

/// Configuration of every built-in action. `Default` works offline except for the actions that must reach a
/// remote service (`weather.forecast` and `llm.chat` point at the public endpoints by default).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ActionsConfig {
    /// `http.request`.
    pub http: HttpConfig,
    /// `weather.forecast`.
    pub weather: WeatherConfig,
    /// `notify.send`.
    pub notify: NotifyConfig,
    /// `llm.chat`.
    pub llm: LlmConfig,
}

/// The actions' HTTP clients need the crypto provider the planner's does; one definition, in `cairn-llm`.
pub use cairn_llm::install_crypto_provider;

/// Every built-in action, configured from `config`, ready to register with the worker runtime.
///
/// Installs the crypto provider ([`install_crypto_provider`]) first, since several actions build HTTP clients.
pub fn registry(config: &ActionsConfig) -> Vec<Arc<dyn DynAction>> {
    install_crypto_provider();
    vec![
        Arc::new(Noop),
        Arc::new(Sleep::default()),
        Arc::new(ConditionEval),
        Arc::new(HttpRequest::new(config.http.clone())),
        Arc::new(WeatherForecast::new(config.weather.clone())),
        Arc::new(NotifySend::with_addresses(config.notify.clone(), config.http.addresses.clone())),
        Arc::new(LlmChat::new(config.llm.clone())),
    ]
}

/// The attempt was cancelled (timeout, run cancellation, worker shutdown, or a heartbeat refused). Retryable:
/// whether another attempt happens is the orchestrator's decision (a cancelled run schedules none).
pub(crate) fn cancelled() -> ActionError {
    ActionError::retryable(codes::CANCELLED, "the attempt was cancelled")
}
