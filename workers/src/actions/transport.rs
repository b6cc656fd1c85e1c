//! HTTP plumbing shared by the actions that call out (`http.request`, `weather.forecast`, `notify.send`'s
//! webhook): building the client, classifying failures into retryable or permanent, reading `Retry-After`, and
//! racing a call against the attempt's cancellation and deadline.

use std::future::Future;
use std::time::Duration;

use cairn_core::failure::codes;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Response, StatusCode};
use serde_json::json;

use super::cancelled;
use crate::action::ActionError;
use crate::context::ActionContext;

/// Longest error body kept in failure details, in bytes.
const DETAIL_BODY_LIMIT: usize = 2048;

/// A reqwest client built once per action. Building can fail (no TLS roots, resolver set-up); the failure is
/// kept and reported by each attempt rather than panicking at start-up.
#[derive(Debug)]
pub(crate) struct Client(Result<reqwest::Client, String>);

impl Client {
    /// Wraps the result of `ClientBuilder::build`.
    pub(crate) fn new(built: reqwest::Result<reqwest::Client>) -> Self {
        Self(built.map_err(|e| e.to_string()))
    }

    /// A client with Cairn's defaults (no automatic retries; reqwest has none).
    pub(crate) fn standard() -> Self {
        super::install_crypto_provider();
        Self::new(reqwest::Client::builder().user_agent(USER_AGENT).build())
    }

    /// The client, or a permanent `action_error` when it could not be built.
    pub(crate) fn get(&self) -> Result<&reqwest::Client, ActionError> {
        self.0.as_ref().map_err(|e| {
            ActionError::permanent(codes::ACTION_ERROR, format!("HTTP client unavailable: {e}")).did_not_take_effect()
        })
    }
}

/// `User-Agent` of every outgoing request.
pub(crate) const USER_AGENT: &str = concat!("cairn-worker/", env!("CARGO_PKG_VERSION"));

/// Runs `call` until it finishes, the attempt is cancelled, or the deadline passes. Dropping `call` aborts the
/// request (reqwest closes the connection), so nothing keeps running after this returns.
///
/// # Errors
/// `cancelled` (retryable) on cancellation; `timeout` (retryable) when the deadline passes first.
pub(crate) async fn race<T>(ctx: &ActionContext, call: impl Future<Output = T>) -> Result<T, ActionError> {
    tokio::select! {
        biased;
        () = ctx.cancelled() => Err(cancelled()),
        () = tokio::time::sleep_until(ctx.deadline) => {
            Err(ActionError::retryable(codes::TIMEOUT, "the attempt's deadline passed during the request"))
        }
        out = call => Ok(out),
    }
}

/// Classifies a request that got no response.
///
/// - connect failures (refused, DNS, TLS handshake): retryable and `did_not_take_effect` (nothing was sent);
/// - timeouts: retryable `timeout` (the request may have been received);
/// - invalid requests (bad URL or header): permanent `invalid_args`;
/// - anything else (connection reset mid-request, …): retryable `action_error`.
pub(crate) fn send_error(what: &str, error: &reqwest::Error) -> ActionError {
    let message = format!("{what}: {}", error_chain(error));
    if error.is_builder() {
        ActionError::permanent(codes::INVALID_ARGS, message).did_not_take_effect()
    } else if error.is_connect() {
        ActionError::retryable(codes::ACTION_ERROR, message).did_not_take_effect()
    } else if error.is_timeout() {
        ActionError::retryable(codes::TIMEOUT, message)
    } else {
        ActionError::retryable(codes::ACTION_ERROR, message)
    }
}

/// Classifies a non-success HTTP status. `body` is the response text (truncated into `details.body`).
///
/// | status | code | retryable |
/// |---|---|---|
/// | 401, 403 | `unauthorized` | no |
/// | 404, 410 | `not_found` | no |
/// | 408 | `timeout` | yes |
/// | 429 | `rate_limited` | yes, after `Retry-After` |
/// | other 4xx | `action_error` | no |
/// | 5xx | `action_error` | yes (503 and others honour `Retry-After`) |
pub(crate) fn status_error(what: &str, status: StatusCode, headers: &HeaderMap, body: &str) -> ActionError {
    let message = format!("{what}: HTTP {status}");
    let error = match status.as_u16() {
        401 | 403 => ActionError::permanent(codes::UNAUTHORIZED, message),
        404 | 410 => ActionError::permanent(codes::NOT_FOUND, message),
        408 => ActionError::retryable(codes::TIMEOUT, message),
        429 => ActionError::retryable(codes::RATE_LIMITED, message),
        500..=599 => ActionError::retryable(codes::ACTION_ERROR, message),
        _ => ActionError::permanent(codes::ACTION_ERROR, message),
    };
    let error = match retry_after(headers) {
        Some(after) if error.retryable => error.retry_after(after),
        _ => error,
    };
    error.details(json!({"status": status.as_u16(), "body": truncate(body, DETAIL_BODY_LIMIT)}))
}

/// Reads up to 64 KiB of a response's body as text for an error report, never failing (a broken body reads
/// as what arrived before it broke).
pub(crate) async fn error_text(mut response: Response) -> String {
    const LIMIT: usize = 64 * 1024;
    let mut body = Vec::new();
    while body.len() < LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// `Retry-After` as a wait: delay-seconds (`120`) or an HTTP date (`Wed, 21 Oct 2015 07:28:00 GMT`, measured
/// from the system clock; a date in the past is zero). `None` when absent or unparseable.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = at.duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

/// Reads at most `limit` bytes of body.
///
/// # Errors
/// Permanent `output_too_large` past `limit`; a transport failure mid-body as [`send_error`].
pub(crate) async fn read_body(what: &str, mut response: Response, limit: usize) -> Result<Vec<u8>, ActionError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| send_error(what, &e))? {
        if body.len() + chunk.len() > limit {
            return Err(ActionError::permanent(
                codes::OUTPUT_TOO_LARGE,
                format!("{what}: response body exceeds {limit} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The error and its sources, joined with `: ` (reqwest's own message hides the cause).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// At most `limit` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
