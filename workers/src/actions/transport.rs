//! HTTP plumbing shared by the actions that call out (`http.request`, `weather.forecast`, `notify.send`'s
//! webhook, `llm.chat`): building the client, classifying failures, reading `Retry-After`, and racing a call
//! against the attempt's cancellation and deadline.
//!
//! A request that got no answer is classified by [`send_error`], the one place that decides whether it can have
//! reached the remote service (contract §6, "Transport failures"):
//!
//! | what failed | code | retryable | `did_not_take_effect` |
//! |---|---|---|---|
//! | building the request (bad header, URL) | `invalid_args` | no | yes |
//! | the address guard refused the destination | `invalid_args` | no | yes, unless a redirect was answered first |
//! | the connector: DNS, TCP connect (refused, unreachable), TLS handshake, proxy tunnel | `action_error` | yes | yes |
//! | a timeout once the connector may have finished | `timeout` | yes | no |
//! | anything else: reset or closed after the request was written, a broken body | `transport_error` | yes | no |
//!
//! Why exactly these are "nothing was sent" (read in reqwest 0.13 and hyper-util 0.1): reqwest's
//! `Error::is_connect` is true only when hyper-util's legacy client failed in `connect_to`, i.e. in the
//! connector, which resolves the name, opens the socket and completes any TLS handshake and proxy `CONNECT`
//! before hyper is handed the connection, and hyper writes the request only to a handed-over connection.
//! `is_builder` errors are returned before any I/O. Every other error (hyper-util's `SendRequest`, `Canceled`
//! and `ChannelClosed`, reqwest's total timeout, body and decode errors) can happen after request bytes were
//! written, and is treated as "maybe sent": safe for a non-idempotent step, which goes to `outcome_unknown`. Some
//! of those are in fact unsent (hyper-util's `Canceled` returns an unstarted request), but reqwest does not
//! expose them, and guessing wrong the other way would repeat an action.
//!
//! One exception: once a redirect was followed, a request was certainly sent and answered (with the 3xx), so a
//! connect error of a later hop is no longer "nothing was sent". Every client built by [`builder`] records that
//! through its redirect policy in a task-local that [`exchange`] reads; the policy runs inside the request's own
//! future, where the scope is set.

use std::cell::Cell;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::failure::codes;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Response, StatusCode, redirect};
use serde_json::json;

use super::address::{AddressPolicy, GuardedResolver, Refused, find_refused};
use super::cancelled;
use crate::action::ActionError;
use crate::context::ActionContext;

/// Longest error body kept in failure details, in bytes.
const DETAIL_BODY_LIMIT: usize = 2048;

/// Redirects followed before giving up (reqwest's default).
const MAX_REDIRECTS: usize = 10;

tokio::task_local! {
    /// Set by the redirect policy of clients from [`builder`] when a response was a redirect: from then on the
    /// request has certainly been sent and answered at least once.
    static REDIRECTED: Cell<bool>;
}

/// A reqwest client built once per action. Building can fail (no TLS roots, resolver set-up); the failure is
/// kept and reported by each attempt rather than panicking at start-up.
#[derive(Debug)]
pub(crate) struct Client(Result<reqwest::Client, String>);

impl Client {
    /// Wraps the result of `ClientBuilder::build`.
    pub(crate) fn new(built: reqwest::Result<reqwest::Client>) -> Self {
        Self(built.map_err(|e| e.to_string()))
    }

    /// A client with Cairn's defaults and no address guard (for endpoints the operator configured).
    pub(crate) fn standard() -> Self {
        Self::new(builder(None).build())
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

/// A client builder with Cairn's defaults: the user agent, and a redirect policy that follows at most 10
/// redirects and records each one for [`send_error`]. With `guard`, every redirect target and every address a
/// name resolves to is checked against it as well (see [`super::address`]). reqwest retries on its own only
/// what the server refused unprocessed (HTTP/2 `REFUSED_STREAM`, a graceful `GOAWAY`).
pub(crate) fn builder(guard: Option<Arc<AddressPolicy>>) -> reqwest::ClientBuilder {
    super::install_crypto_provider();
    let mut builder = reqwest::Client::builder().user_agent(USER_AGENT);
    if let Some(policy) = &guard {
        builder = builder.dns_resolver(GuardedResolver::new(Arc::clone(policy)));
    }
    let limit = redirect::Policy::limited(MAX_REDIRECTS);
    builder.redirect(redirect::Policy::custom(move |attempt| {
        // Outside `exchange` (a client used elsewhere) there is nothing to record.
        let _ = REDIRECTED.try_with(|redirected| redirected.set(true));
        if let Some(policy) = &guard {
            match policy.check_url(attempt.url()) {
                Err(refused) => return attempt.error(refused),
                Ok(()) => super::address::note_destination(attempt.url()),
            }
        }
        limit.redirect(attempt)
    }))
}

/// What is known about a request's exchange once it ended: whether a redirect was answered on the way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Exchange {
    redirected: bool,
}

impl Exchange {
    /// A response (at least its head) arrived: whatever fails next happened after the request was sent.
    pub(crate) const ANSWERED: Exchange = Exchange { redirected: true };
}

/// Runs `call` (a request on a client from [`builder`]) and reports, with its output, what [`send_error`] needs
/// to know about the exchange.
pub(crate) async fn exchange<F: Future>(call: F) -> (F::Output, Exchange) {
    REDIRECTED
        .scope(Cell::new(false), async move {
            let output = call.await;
            (output, Exchange { redirected: REDIRECTED.with(Cell::get) })
        })
        .await
}

/// Sends `request` under [`race`] and [`exchange`], classifying a failure without an answer by [`send_error`].
///
/// # Errors
/// `cancelled` or `timeout` from [`race`]; a failure as in the module's table.
pub(crate) async fn send(
    ctx: &ActionContext,
    what: &str,
    request: reqwest::RequestBuilder,
) -> Result<Response, ActionError> {
    let (sent, exchange) = race(ctx, exchange(request.send())).await?;
    sent.map_err(|e| send_error(what, &e, exchange))
}

/// Runs `call` until it finishes, the attempt is cancelled, or the deadline passes. Dropping `call` aborts the
/// request (reqwest closes the connection), so nothing keeps running after this returns.
///
/// # Errors
/// `cancelled` (retryable) on cancellation; `timeout` (retryable, ambiguous: the request may have been
/// received) when the deadline passes first.
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

/// How far a request that got no answer had got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// It failed before any byte of it was written: safe to repeat even when not idempotent.
    NotSent,
    /// It may have been written, so the remote service may have acted on it.
    MaybeSent,
}

impl Reach {
    fn of(error: &reqwest::Error, exchange: Exchange) -> Reach {
        if !exchange.redirected && (error.is_builder() || error.is_connect()) {
            Reach::NotSent
        } else {
            Reach::MaybeSent
        }
    }

    fn detail(self) -> &'static str {
        match self {
            Reach::NotSent => "not_sent",
            Reach::MaybeSent => "maybe_sent",
        }
    }
}

/// Classifies a request that got no (complete) answer, as in the module's table. `details.request` says
/// `not_sent` or `maybe_sent`; a refusal by the address guard carries its `details.destination` and
/// `details.refused` (`loopback`, `private` or `never`).
pub(crate) fn send_error(what: &str, error: &reqwest::Error, exchange: Exchange) -> ActionError {
    if let Some(refused) = find_refused(error) {
        return self::refused(what, refused, exchange);
    }
    let reach = Reach::of(error, exchange);
    let cause = error_chain(error);
    let details = json!({ "request": reach.detail() });
    match reach {
        Reach::NotSent if error.is_builder() => ActionError::permanent(codes::INVALID_ARGS, format!("{what}: {cause}"))
            .did_not_take_effect()
            .details(details),
        Reach::NotSent => {
            let message = format!("{what}: {cause} (nothing was sent)");
            ActionError::retryable(codes::ACTION_ERROR, message).did_not_take_effect().details(details)
        }
        Reach::MaybeSent => {
            let message = format!("{what}: {cause} (the request may have been received)");
            let code = if error.is_timeout() { codes::TIMEOUT } else { codes::TRANSPORT_ERROR };
            ActionError::retryable(code, message).details(details)
        }
    }
}

/// The failure for a destination the address guard refused: permanent `invalid_args`, `did_not_take_effect`
/// unless a redirect was answered first (the refused hop is then not the first request).
pub(crate) fn refused(what: &str, refused: &Refused, exchange: Exchange) -> ActionError {
    let reach = if exchange.redirected { Reach::MaybeSent } else { Reach::NotSent };
    let error = ActionError::permanent(codes::INVALID_ARGS, format!("{what}: {refused}")).details(json!({
        "request": reach.detail(), "destination": refused.destination, "refused": refused.range.name()
    }));
    if exchange.redirected { error } else { error.did_not_take_effect() }
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
/// Permanent `output_too_large` past `limit`; a transport failure mid-body as [`send_error`] (always "maybe
/// sent": the response had begun).
pub(crate) async fn read_body(what: &str, mut response: Response, limit: usize) -> Result<Vec<u8>, ActionError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| send_error(what, &e, Exchange::ANSWERED))? {
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
