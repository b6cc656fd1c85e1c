//! The channels `notify.send` delivers over, one file each, behind one call: [`Channels::send`] makes one try
//! of one message on one route and says whether the provider accepted it ([`Sent`]) or why not
//! ([`ChannelError`]). Retrying, cancellation and the ledger are the caller's (`super::tries`).

pub mod email;
pub mod feishu;
pub mod local;
pub mod ntfy;
pub mod slack;
pub mod telegram;
pub mod webhook;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::failure::codes;
use cairn_core::machine::is_ambiguous;
use cairn_core::recipient::{ChannelSettings, ChannelType};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use super::NotifyConfig;
use crate::action::ActionError;
use crate::actions::address::AddressPolicy;
use crate::actions::transport::{self, Client, Exchange};

/// The provider accepted the message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// The provider's id of the message (Telegram's `message_id`, the email's `Message-ID`, ntfy's `id`).
    pub provider_message_id: Option<String>,
}

/// How a failed try bears on the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The provider asked to slow down: the next try waits at least `retry_after` when it said how long.
    RateLimited {
        /// The provider's wait (`Retry-After`, Telegram's `parameters.retry_after`).
        retry_after: Option<Duration>,
    },
    /// Retrying will not help (bad settings, an unknown chat, a blocked bot, an unconfigured channel).
    Permanent,
    /// Another try may succeed (5xx, connection errors, timeouts, SMTP 4xx).
    Transient,
}

/// Why one try did not deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelError {
    /// Whether and when to try again.
    pub kind: ErrorKind,
    /// The failure code the step's failure takes from it (`action_error`, `unauthorized`, `timeout`, …).
    pub code: String,
    /// What happened, naming the channel; never a credential or a credential-bearing URL.
    pub message: String,
    /// The provider may have the message though nothing said so (a reset or a timeout after the request was
    /// written): a non-idempotent step's outcome is then unknown.
    pub ambiguous: bool,
    /// Certainly nothing reached the provider (unconfigured, connection refused, a negative SMTP reply).
    pub nothing_sent: bool,
}

impl ChannelError {
    /// A channel the worker cannot use: permanent, nothing sent.
    pub fn unconfigured(message: impl Into<String>) -> Self {
        Self::answered(ErrorKind::Permanent, codes::ACTION_ERROR, message).nothing_sent()
    }

    /// A provider's negative answer.
    pub fn answered(kind: ErrorKind, code: &str, message: impl Into<String>) -> Self {
        Self { kind, code: code.into(), message: message.into(), ambiguous: false, nothing_sent: false }
    }

    /// Marks that nothing reached the provider.
    #[must_use]
    pub fn nothing_sent(mut self) -> Self {
        self.nothing_sent = true;
        self
    }

    /// Marks that the provider may have the message.
    #[must_use]
    pub fn ambiguous(mut self) -> Self {
        self.ambiguous = true;
        self
    }

    /// The shared HTTP classification ([`transport::send_error`], [`transport::status_error`]) as a try's error.
    pub(crate) fn from_action(error: ActionError) -> Self {
        let kind = if error.code == codes::RATE_LIMITED {
            ErrorKind::RateLimited { retry_after: error.retry_after }
        } else if error.retryable {
            ErrorKind::Transient
        } else {
            ErrorKind::Permanent
        };
        let ambiguous = !error.did_not_take_effect && is_ambiguous(&error.code);
        Self { kind, code: error.code, message: error.message, ambiguous, nothing_sent: error.did_not_take_effect }
    }

    /// The channel's failure as the step's failure sees it.
    pub(crate) fn into_action_error(self) -> ActionError {
        let error = match self.kind {
            ErrorKind::Permanent => ActionError::permanent(&self.code, self.message),
            ErrorKind::Transient => ActionError::retryable(&self.code, self.message),
            ErrorKind::RateLimited { retry_after } => {
                let error = ActionError::retryable(&self.code, self.message);
                match retry_after {
                    Some(after) => error.retry_after(after),
                    None => error,
                }
            }
        };
        if self.nothing_sent { error.did_not_take_effect() } else { error }
    }
}

/// One message, as every channel of one target sees it.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    /// Message text.
    pub text: &'a str,
    /// Optional title.
    pub title: Option<&'a str>,
    /// The step's idempotency key.
    pub idempotency_key: &'a str,
    /// The recipient (`""` for the worker's own channels).
    pub recipient_id: &'a str,
    /// The JSON body of the `webhook` and `file` channels: the step's extra fields, text, title, to,
    /// recipient, channel and idempotency key.
    pub payload: Value,
}

impl Message<'_> {
    /// What a receiver de-duplicates on: `<step key>/<recipient>`, or the step key for the worker's own
    /// channels; the same for every attempt of the step.
    pub fn dedupe_key(&self) -> String {
        if self.recipient_id.is_empty() {
            self.idempotency_key.to_owned()
        } else {
            format!("{}/{}", self.idempotency_key, self.recipient_id)
        }
    }

    /// The title (when any) and the text as one plain text.
    pub fn plain(&self) -> String {
        match self.title {
            Some(title) => format!("{title}\n{}", self.text),
            None => self.text.to_owned(),
        }
    }
}

/// Where one target's message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// A recipient's bound channel, with its settings.
    Bound(ChannelSettings),
    /// The worker's own development channel of that type (a step without `to`).
    Worker(ChannelType),
}

/// Every channel, configured once per action.
#[derive(Debug)]
pub(crate) struct Channels {
    /// For the endpoints the worker's operator configured (Telegram's API, the development webhook, ntfy's
    /// server).
    http: Client,
    /// For the URLs a recipient brings (webhook, Slack, Feishu, an ntfy server of its own): set through the API,
    /// so held to `http.request`'s address policy like any URL from a plan.
    guarded: Client,
    addresses: Arc<AddressPolicy>,
    telegram: telegram::TelegramConfig,
    email: email::Email,
    ntfy: ntfy::NtfyConfig,
    file: PathBuf,
    dev_webhook: Option<SecretString>,
    try_timeout: Duration,
}

impl Channels {
    pub(crate) fn new(config: &NotifyConfig, addresses: AddressPolicy) -> Self {
        let try_timeout = Duration::from_millis(config.try_timeout_ms);
        let addresses = Arc::new(addresses);
        Self {
            http: Client::standard(),
            guarded: Client::new(transport::builder(Some(Arc::clone(&addresses))).build()),
            addresses,
            telegram: config.telegram.clone(),
            email: email::Email::new(&config.smtp, try_timeout),
            ntfy: config.ntfy.clone(),
            file: config.file_path.clone(),
            dev_webhook: config.webhook_url.clone(),
            try_timeout,
        }
    }

    /// How long one try may take at most (the attempt's deadline may cut it shorter).
    pub(crate) fn try_timeout(&self) -> Duration {
        self.try_timeout
    }

    /// One try of `message` on `route`, taking at most `timeout`.
    pub(crate) async fn send(
        &self,
        route: &Route,
        message: &Message<'_>,
        timeout: Duration,
    ) -> Result<Sent, ChannelError> {
        match route {
            Route::Bound(settings) => self.send_bound(settings, message, timeout).await,
            Route::Worker(ChannelType::Stdout) => Ok(local::print(message)),
            Route::Worker(ChannelType::File) => local::append(&self.file, message).await,
            Route::Worker(ChannelType::Webhook) => match &self.dev_webhook {
                Some(url) => webhook::send(self.http()?, url.expose_secret(), None, message, timeout).await,
                None => Err(ChannelError::unconfigured("webhook: channel not configured (CAIRN_NOTIFY_WEBHOOK)")),
            },
            Route::Worker(other) => Err(ChannelError::unconfigured(format!(
                "{}: channel not configured (it delivers to recipients: give `to`)",
                other.as_str()
            ))),
        }
    }

    async fn send_bound(
        &self,
        settings: &ChannelSettings,
        message: &Message<'_>,
        timeout: Duration,
    ) -> Result<Sent, ChannelError> {
        match settings {
            ChannelSettings::Telegram { chat_id } => {
                telegram::send(&self.telegram, self.http()?, chat_id, message, timeout).await
            }
            ChannelSettings::Email { address } => self.email.send(address, message, timeout).await,
            ChannelSettings::Slack { webhook_url } => {
                slack::send(self.recipient_http("slack", webhook_url)?, webhook_url, message, timeout).await
            }
            ChannelSettings::Feishu { webhook_url, secret } => {
                let http = self.recipient_http("feishu", webhook_url)?;
                feishu::send(http, webhook_url, secret.as_deref(), message, timeout).await
            }
            ChannelSettings::Webhook { url, secret } => {
                webhook::send(self.recipient_http("webhook", url)?, url, secret.as_deref(), message, timeout).await
            }
            ChannelSettings::Ntfy { topic, server: Some(server) } => {
                ntfy::send(self.recipient_http("ntfy", server)?, server, topic, message, timeout).await
            }
            ChannelSettings::Ntfy { topic, server: None } => {
                ntfy::send(self.http()?, &self.ntfy.server, topic, message, timeout).await
            }
            ChannelSettings::Stdout => Ok(local::print(message)),
            ChannelSettings::File => local::append(&self.file, message).await,
        }
    }

    fn http(&self) -> Result<&reqwest::Client, ChannelError> {
        self.http.get().map_err(ChannelError::from_action)
    }

    /// The guarded client, once `url`'s host passes the address policy (names are checked again as they
    /// resolve, and redirects too). A refusal is permanent and sent nothing.
    fn recipient_http(&self, what: &str, url: &str) -> Result<&reqwest::Client, ChannelError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            let error = ActionError::permanent(codes::INVALID_ARGS, format!("{what}: the URL does not parse: {e}"));
            ChannelError::from_action(error.did_not_take_effect())
        })?;
        self.addresses
            .check_url(&parsed)
            .map_err(|refused| ChannelError::from_action(transport::refused(what, &refused, Exchange::default())))?;
        self.guarded.get().map_err(ChannelError::from_action)
    }
}

/// A provider's HTTP answer, whatever its status.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// Up to 64 KiB of the body, as text.
    pub body: String,
}

impl Answer {
    /// The failure a non-success status means ([`transport::status_error`]).
    pub(crate) fn rejected(&self, what: &str) -> ChannelError {
        ChannelError::from_action(transport::status_error(what, self.status, &self.headers, &self.body))
    }
}

/// Sends `request` and reads the answer. A request without an answer is classified by
/// [`transport::send_error`], with the URL left out: chat webhooks and the Telegram API carry their credential
/// in it.
pub(crate) async fn exchange(what: &str, request: reqwest::RequestBuilder) -> Result<Answer, ChannelError> {
    let (sent, exchange) = transport::exchange(request.send()).await;
    let response =
        sent.map_err(|e| ChannelError::from_action(transport::send_error(what, &e.without_url(), exchange)))?;
    let (status, headers) = (response.status(), response.headers().clone());
    let body = transport::error_text(response).await;
    Ok(Answer { status, headers, body })
}

/// HMAC-SHA256 of `message` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    use hmac::{KeyInit, Mac};
    // HMAC takes keys of any length, so `new_from_slice` cannot fail.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else { return Vec::new() };
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// Seconds since the Unix epoch, for signed timestamps.
pub(crate) fn unix_seconds() -> i64 {
    jiff::Timestamp::now().as_second()
}
