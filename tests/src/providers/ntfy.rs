//! [`NtfyStub`]: an ntfy server's publish endpoint, `POST /<topic>`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use serde_json::json;

use super::control::Control;

/// One published message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NtfyMessage {
    /// Topic (the path).
    pub topic: String,
    /// `Title`, decoded when RFC 2047 base64 encoded.
    pub title: Option<String>,
    /// The body.
    pub message: String,
    /// The `id` answered: `msg1`, `msg2`, …
    pub id: String,
}

struct Shared {
    control: Control,
    messages: Mutex<Vec<NtfyMessage>>,
}

/// `POST /<topic>` with the text as body and an optional `Title` header → ntfy's message JSON with its `id`.
pub struct NtfyStub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl NtfyStub {
    /// Starts the stand-in.
    pub async fn start() -> NtfyStub {
        let shared = Arc::new(Shared { control: Control::default(), messages: Mutex::default() });
        let app = axum::Router::new().route("/{topic}", post(publish)).with_state(Arc::clone(&shared));
        let (addr, task) = crate::http::serve_local(app).await;
        NtfyStub { addr, shared, task }
    }

    /// The server's base URL (`CAIRN_NOTIFY_NTFY_SERVER`, or a recipient's `server`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every published message, in arrival order.
    pub fn received(&self) -> Vec<NtfyMessage> {
        self.shared.messages.lock().unwrap().clone()
    }
}

super::stand_in_controls!(NtfyStub);

/// A header value, decoding an RFC 2047 `=?UTF-8?B?…?=` word as ntfy does.
fn decoded(value: &str) -> String {
    let encoded = value.strip_prefix("=?UTF-8?B?").and_then(|v| v.strip_suffix("?="));
    let bytes = encoded.and_then(|e| base64::engine::general_purpose::STANDARD.decode(e).ok());
    bytes.and_then(|b| String::from_utf8(b).ok()).unwrap_or_else(|| value.to_owned())
}

async fn publish(
    State(shared): State<Arc<Shared>>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(message) = String::from_utf8(body.to_vec()) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"code": 40000, "http": 400, "error": "not UTF-8"})))
            .into_response();
    };
    if let Some(fault) = shared.control.arrive().await {
        return fault.plain_response();
    }
    let title = headers.get("title").and_then(|v| v.to_str().ok()).map(decoded);
    let mut messages = shared.messages.lock().unwrap();
    let id = format!("msg{}", messages.len() + 1);
    let answer = json!({"id": id, "time": jiff::Timestamp::now().as_second(), "event": "message",
        "topic": topic, "title": title, "message": message});
    messages.push(NtfyMessage { topic, title, message, id });
    Json(answer).into_response()
}
