//! The chat bots' webhooks: [`SlackStub`] (an incoming webhook) and [`FeishuStub`] (a custom bot that checks
//! Feishu's `sign`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};

use super::control::{Control, Fault};

/// One Slack message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackMessage {
    /// `text`.
    pub text: String,
}

struct SlackShared {
    control: Control,
    messages: Mutex<Vec<SlackMessage>>,
}

/// An incoming webhook on any path: `{"text"}` → 200 `ok`; no `text` → 400 `no_text`.
pub struct SlackStub {
    addr: SocketAddr,
    shared: Arc<SlackShared>,
    task: tokio::task::JoinHandle<()>,
}

impl SlackStub {
    /// Starts the stand-in.
    pub async fn start() -> SlackStub {
        let shared = Arc::new(SlackShared { control: Control::default(), messages: Mutex::default() });
        let app = axum::Router::new().fallback(slack).with_state(Arc::clone(&shared));
        let (addr, task) = crate::http::serve_local(app).await;
        SlackStub { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT/services/T000/B000/XXXX` (any path is accepted).
    pub fn url(&self) -> String {
        format!("http://{}/services/T000/B000/XXXX", self.addr)
    }

    /// Every accepted message, in arrival order.
    pub fn received(&self) -> Vec<SlackMessage> {
        self.shared.messages.lock().unwrap().clone()
    }
}

super::stand_in_controls!(SlackStub);

async fn slack(State(shared): State<Arc<SlackShared>>, body: Json<Value>) -> Response {
    let Some(text) = body["text"].as_str() else { return (StatusCode::BAD_REQUEST, "no_text").into_response() };
    if let Some(fault) = shared.control.arrive().await {
        return fault.plain_response();
    }
    shared.messages.lock().unwrap().push(SlackMessage { text: text.into() });
    "ok".into_response()
}

/// One Feishu message whose signature (when the bot has a secret) verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeishuMessage {
    /// `msg_type`.
    pub msg_type: String,
    /// `content.text`.
    pub text: String,
    /// `timestamp`, when signed.
    pub timestamp: Option<String>,
}

struct FeishuShared {
    secret: Option<String>,
    control: Control,
    messages: Mutex<Vec<FeishuMessage>>,
    rejected: Mutex<usize>,
}

/// A custom bot's webhook on any path, answering HTTP 200 with `{"code": 0, "msg": "success"}`. With a secret,
/// a missing or wrong `sign`, or a `timestamp` more than an hour off, answers `{"code": 19021}` as Feishu does
/// and counts in [`FeishuStub::rejected`].
pub struct FeishuStub {
    addr: SocketAddr,
    shared: Arc<FeishuShared>,
    task: tokio::task::JoinHandle<()>,
}

impl FeishuStub {
    /// A bot that requires signatures with `secret` (none when `None`).
    pub async fn start(secret: Option<&str>) -> FeishuStub {
        let shared = Arc::new(FeishuShared {
            secret: secret.map(str::to_owned),
            control: Control::default(),
            messages: Mutex::default(),
            rejected: Mutex::default(),
        });
        let app = axum::Router::new().fallback(feishu).with_state(Arc::clone(&shared));
        let (addr, task) = crate::http::serve_local(app).await;
        FeishuStub { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT/open-apis/bot/v2/hook/TOKEN` (any path is accepted).
    pub fn url(&self) -> String {
        format!("http://{}/open-apis/bot/v2/hook/0000-test", self.addr)
    }

    /// Every accepted message, in arrival order.
    pub fn received(&self) -> Vec<FeishuMessage> {
        self.shared.messages.lock().unwrap().clone()
    }

    /// Requests refused for their signature.
    pub fn rejected(&self) -> usize {
        *self.shared.rejected.lock().unwrap()
    }
}

super::stand_in_controls!(FeishuStub);

/// Feishu's check: `sign == base64(HMAC-SHA256(key = "<timestamp>\n<secret>", message = ""))`, and a
/// timestamp within an hour.
fn signed(secret: &str, body: &Value) -> bool {
    let (Some(timestamp), Some(sign)) = (body["timestamp"].as_str(), body["sign"].as_str()) else { return false };
    let Ok(seconds) = timestamp.parse::<i64>() else { return false };
    if (jiff::Timestamp::now().as_second() - seconds).abs() > 3600 {
        return false;
    }
    let Ok(given) = base64::engine::general_purpose::STANDARD.decode(sign) else { return false };
    let Ok(mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(format!("{timestamp}\n{secret}").as_bytes()) else {
        return false;
    };
    mac.verify_slice(&given).is_ok()
}

fn code(code: i64, msg: &str) -> Response {
    Json(json!({"code": code, "msg": msg, "data": {}})).into_response()
}

async fn feishu(State(shared): State<Arc<FeishuShared>>, body: Json<Value>) -> Response {
    if let Some(secret) = &shared.secret
        && !signed(secret, &body)
    {
        *shared.rejected.lock().unwrap() += 1;
        return code(19021, "sign match fail or timestamp is not within one hour from current time");
    }
    let Some(text) = body["content"]["text"].as_str() else { return code(9499, "Bad Request") };
    match shared.control.arrive().await {
        Some(Fault::FeishuCode { code: c, msg }) => return code(c, msg),
        Some(Fault::RateLimited { .. }) => return code(11232, "frequency limited"),
        Some(other) => return other.plain_response(),
        None => {}
    }
    let message = FeishuMessage {
        msg_type: body["msg_type"].as_str().unwrap_or_default().into(),
        text: text.into(),
        timestamp: body["timestamp"].as_str().map(str::to_owned),
    };
    shared.messages.lock().unwrap().push(message);
    code(0, "success")
}
