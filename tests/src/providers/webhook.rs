//! [`WebhookReceiver`]: a receiver of Cairn's signed webhooks that checks each signature as a real receiver
//! should (docs/architecture.md §10, "Verifying webhook signatures"), written from the documented scheme rather
//! than the worker's code, so the two checking each other is a test of the scheme.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hmac::{KeyInit, Mac};
use serde_json::Value;

use super::control::Control;

/// How far `Cairn-Timestamp` may be from this receiver's clock, in seconds.
const TOLERANCE_S: i64 = 300;

/// One request whose signature verified (or that needed none).
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookCall {
    /// Request path.
    pub path: String,
    /// `Idempotency-Key`.
    pub idempotency_key: Option<String>,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
    /// The body's bytes as received.
    pub raw: Bytes,
    /// Whether it carried a valid `Cairn-Signature`.
    pub signed: bool,
}

struct Shared {
    secret: Option<String>,
    control: Control,
    calls: Mutex<Vec<WebhookCall>>,
    rejected: Mutex<Vec<String>>,
}

/// Accepts `POST`s on any path. With a secret, a request whose `Cairn-Signature` is missing, wrong, or over a
/// `Cairn-Timestamp` more than 5 minutes off is answered 401 and counted in [`WebhookReceiver::rejected`]
/// instead of recorded; everything else is answered 200 `{"ok": true}`.
pub struct WebhookReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl WebhookReceiver {
    /// A receiver that requires signatures with `secret` (none when `None`).
    pub async fn start(secret: Option<&str>) -> WebhookReceiver {
        let shared = Arc::new(Shared {
            secret: secret.map(str::to_owned),
            control: Control::default(),
            calls: Mutex::default(),
            rejected: Mutex::default(),
        });
        let app = axum::Router::new().fallback(receive).with_state(Arc::clone(&shared));
        let (addr, task) = crate::http::serve_local(app).await;
        WebhookReceiver { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT/hook` (any path is accepted).
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Every verified request, in arrival order.
    pub fn received(&self) -> Vec<WebhookCall> {
        self.shared.calls.lock().unwrap().clone()
    }

    /// Why each refused request was refused, in arrival order.
    pub fn rejected(&self) -> Vec<String> {
        self.shared.rejected.lock().unwrap().clone()
    }
}

super::stand_in_controls!(WebhookReceiver);

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Checks `Cairn-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>` and the timestamp's age.
fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), String> {
    let timestamp = header(headers, "cairn-timestamp").ok_or("no Cairn-Timestamp")?;
    let seconds: i64 = timestamp.parse().map_err(|_| format!("Cairn-Timestamp `{timestamp}` is not a number"))?;
    if (jiff::Timestamp::now().as_second() - seconds).abs() > TOLERANCE_S {
        return Err(format!("Cairn-Timestamp {seconds} is more than {TOLERANCE_S} s off"));
    }
    let signature = header(headers, "cairn-signature").ok_or("no Cairn-Signature")?;
    let hex = signature.strip_prefix("v1=").ok_or("Cairn-Signature is not v1=")?;
    let given = decode_hex(hex).ok_or("Cairn-Signature is not hex")?;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).map_err(|e| e.to_string())?;
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    // Constant-time, as the docs tell receivers to compare.
    mac.verify_slice(&given).map_err(|_| "Cairn-Signature does not match".to_owned())
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

async fn receive(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(secret) = &shared.secret
        && let Err(why) = verify(secret, &headers, &body)
    {
        shared.rejected.lock().unwrap().push(why.clone());
        return (StatusCode::UNAUTHORIZED, why).into_response();
    }
    if let Some(fault) = shared.control.arrive().await {
        return fault.plain_response();
    }
    let call = WebhookCall {
        path: uri.path().to_owned(),
        idempotency_key: header(&headers, "idempotency-key").map(str::to_owned),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        raw: body,
        signed: shared.secret.is_some(),
    };
    shared.calls.lock().unwrap().push(call);
    axum::Json(serde_json::json!({"ok": true})).into_response()
}
