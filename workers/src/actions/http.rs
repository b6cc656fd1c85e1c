//! `http.request`: one HTTP call, carrying the step's idempotency key, with failures classified so the
//! orchestrator knows what a retry can fix.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::catalog::Effect;
use cairn_core::failure::codes;
use cairn_telemetry as telemetry;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use reqwest::{Method, Url};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::address::{self, AddressPolicy};
use super::transport::{self, Client, Exchange};
use crate::action::{Action, ActionError};
use crate::context::ActionContext;

/// Largest response body kept, in bytes (10 MiB); past it the attempt fails with `output_too_large`.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// Names failures in messages.
const WHAT: &str = "http.request";

/// Configuration of `http.request`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct HttpConfig {
    /// Which destinations a step may reach (see [`super::address`]). Link-local and cloud metadata addresses
    /// are always refused; `Default` refuses loopback and private ranges too.
    pub addresses: AddressPolicy,
}

/// HTTP method of `http.request` (upper case in JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
#[allow(missing_docs)]
pub enum HttpMethod {
    #[default]
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Options,
}

impl From<HttpMethod> for Method {
    fn from(method: HttpMethod) -> Self {
        match method {
            HttpMethod::Get => Method::GET,
            HttpMethod::Head => Method::HEAD,
            HttpMethod::Post => Method::POST,
            HttpMethod::Put => Method::PUT,
            HttpMethod::Patch => Method::PATCH,
            HttpMethod::Delete => Method::DELETE,
            HttpMethod::Options => Method::OPTIONS,
        }
    }
}

/// Args of `http.request`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpArgs {
    /// Method; default `GET`.
    #[serde(default)]
    pub method: HttpMethod,
    /// Absolute `http` or `https` URL.
    pub url: String,
    /// Request headers. An `Idempotency-Key` given here replaces the step's key.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Body: a JSON string is sent as text (`text/plain; charset=utf-8`), any other JSON value as JSON
    /// (`application/json`); a `Content-Type` in `headers` wins. Absent or `null`: no body.
    #[serde(default)]
    pub body: Option<Value>,
    /// Limit for this request in milliseconds; the attempt's deadline applies as well (the earlier wins).
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

/// Output of `http.request` (any status below 400).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HttpOutput {
    /// HTTP status code.
    pub status: u16,
    /// Response headers, names lower-cased; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON when the response says it is JSON (and parses), else the text (invalid UTF-8
    /// replaced); `null` when empty.
    pub body: Value,
}

/// `http.request` {method, url, headers, body, timeout_ms} → {status, headers, body}.
///
/// Sends `Idempotency-Key: <ctx.idempotency_key>`. Errors:
/// - status ≥ 400 as in `transport`'s status table: 401/403 `unauthorized`, 404/410 `not_found`, 429
///   `rate_limited` (retryable), other 4xx permanent `action_error`, 5xx retryable; `Retry-After` (seconds or
///   HTTP date) on a retryable status becomes the failure's `retry_after`. A response is a response: a 5xx of a
///   non-idempotent step fails it (it is not `outcome_unknown`);
/// - no answer, as in `transport`'s table: nothing was sent (connection refused, DNS, TLS handshake) →
///   retryable and `did_not_take_effect`; the request may have been received (reset or closed after it was
///   written, a broken body) → retryable `transport_error`, or `timeout` when a timeout fired — both ambiguous,
///   so a non-idempotent step goes to `outcome_unknown`;
/// - a refused destination (see [`super::address`]) or a malformed URL or header: permanent `invalid_args`;
/// - cancellation or the attempt's deadline aborts the request (the connection is closed): `cancelled` /
///   `timeout`, both retryable;
/// - a body over [`MAX_BODY_BYTES`]: permanent `output_too_large`.
#[derive(Debug)]
pub struct HttpRequest {
    addresses: Arc<AddressPolicy>,
    client: Client,
}

impl HttpRequest {
    /// An `http.request` with its own client, the address guard wired into DNS resolution and redirects.
    pub fn new(config: HttpConfig) -> Self {
        let addresses = Arc::new(config.addresses);
        let client = Client::new(transport::builder(Some(Arc::clone(&addresses))).build());
        Self { addresses, client }
    }

    fn build(&self, args: HttpArgs, ctx: &ActionContext) -> Result<(Url, reqwest::RequestBuilder), ActionError> {
        let invalid = |message: String| ActionError::permanent(codes::INVALID_ARGS, message).did_not_take_effect();
        let url = Url::parse(&args.url).map_err(|e| invalid(format!("invalid url `{}`: {e}", args.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!("url `{url}` must be http or https")));
        }
        self.addresses.check_url(&url).map_err(|refused| transport::refused(WHAT, &refused, Exchange::default()))?;
        let has = |name: &str| args.headers.keys().any(|k| k.eq_ignore_ascii_case(name));
        let mut request = self.client.get()?.request(args.method.into(), url.clone());
        if !has("idempotency-key") {
            request = request.header("Idempotency-Key", &ctx.idempotency_key);
        }
        // The called service joins the run's trace (W3C trace context), unless the plan set its own header.
        if !has(telemetry::TRACEPARENT)
            && let Some(traceparent) = telemetry::current_traceparent()
        {
            request = request.header(telemetry::TRACEPARENT, traceparent);
        }
        let text_body = matches!(args.body, Some(Value::String(_)));
        if text_body && !has("content-type") {
            request = request.header(CONTENT_TYPE, "text/plain; charset=utf-8");
        }
        for (name, value) in &args.headers {
            request = request.header(name, value);
        }
        request = match args.body {
            None | Some(Value::Null) => request,
            Some(Value::String(text)) => request.body(text),
            Some(json) => request.json(&json),
        };
        let limit = args.timeout_ms.map_or(Duration::MAX, Duration::from_millis);
        Ok((url, request.timeout(limit.min(ctx.remaining()))))
    }
}

/// Lower-cased names → values, repeated headers joined with `, `.
fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        out.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    out
}

/// The body as documented on [`HttpOutput::body`].
fn body_value(headers: &HeaderMap, bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    let is_json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    if is_json && let Ok(json) = serde_json::from_slice(bytes) {
        return json;
    }
    Value::String(String::from_utf8_lossy(bytes).into_owned())
}

impl Action for HttpRequest {
    type Args = HttpArgs;
    type Output = HttpOutput;
    const NAME: &'static str = "http.request";
    const DESCRIPTION: &'static str = "Make an HTTP request; sends the idempotency key as Idempotency-Key.";
    const EFFECT: Effect = Effect::NonIdempotent;

    async fn run(&self, args: HttpArgs, ctx: &ActionContext) -> Result<HttpOutput, ActionError> {
        let (url, request) = self.build(args, ctx)?;
        let response = address::guarded(&url, transport::send(ctx, WHAT, request)).await?;
        let status = response.status();
        let headers = response.headers().clone();
        if status.as_u16() >= 400 {
            let text = transport::race(ctx, transport::error_text(response)).await?;
            return Err(transport::status_error(WHAT, status, &headers, &text));
        }
        let bytes = transport::race(ctx, transport::read_body(WHAT, response, MAX_BODY_BYTES)).await??;
        Ok(HttpOutput { status: status.as_u16(), headers: header_map(&headers), body: body_value(&headers, &bytes) })
    }
}
