//! [`TelegramStub`]: the Bot API's `sendMessage` for one bot token.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::control::{Control, Fault};

/// One message the stand-in accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct TelegramMessage {
    /// `chat_id` as sent (a number is recorded as its digits).
    pub chat_id: String,
    /// `text`.
    pub text: String,
    /// `entities` as sent (`Null` when none).
    pub entities: Value,
    /// The `message_id` answered: 1, 2, … per chat.
    pub message_id: i64,
}

#[derive(Default)]
struct Chats {
    messages: Vec<TelegramMessage>,
    last_id: HashMap<String, i64>,
}

struct Shared {
    token: String,
    control: Control,
    chats: Mutex<Chats>,
}

/// `POST /bot<token>/sendMessage` with `{"chat_id", "text"}` → `{"ok": true, "result": {"message_id"}}`. A
/// wrong token answers 401 as Telegram does; a request without `chat_id` or `text` answers 400.
pub struct TelegramStub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl TelegramStub {
    /// A Bot API for the bot with `token`.
    pub async fn start(token: &str) -> TelegramStub {
        let shared = Arc::new(Shared { token: token.into(), control: Control::default(), chats: Mutex::default() });
        let app = axum::Router::new().route("/{bot}/sendMessage", post(send_message)).with_state(Arc::clone(&shared));
        let (addr, task) = crate::http::serve_local(app).await;
        TelegramStub { addr, shared, task }
    }

    /// The API base URL (`CAIRN_NOTIFY_TELEGRAM_API_URL`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every accepted message, in arrival order.
    pub fn received(&self) -> Vec<TelegramMessage> {
        self.shared.chats.lock().unwrap().messages.clone()
    }

    /// The accepted messages to one chat.
    pub fn messages_to(&self, chat_id: &str) -> Vec<TelegramMessage> {
        self.received().into_iter().filter(|m| m.chat_id == chat_id).collect()
    }
}

super::stand_in_controls!(TelegramStub);

fn error(status: u16, description: &str, parameters: Option<Value>) -> Response {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(parameters) = parameters {
        body["parameters"] = parameters;
    }
    (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), Json(body)).into_response()
}

fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_s } => error(
            429,
            &format!("Too Many Requests: retry after {retry_after_s}"),
            Some(json!({"retry_after": retry_after_s})),
        ),
        Fault::Telegram { error_code, description } => error(*error_code, description, None),
        other => error(other.status(), "Internal Server Error", None),
    }
}

async fn send_message(State(shared): State<Arc<Shared>>, Path(bot): Path<String>, body: Json<Value>) -> Response {
    if bot != format!("bot{}", shared.token) {
        return error(401, "Unauthorized", None);
    }
    let chat_id = match &body["chat_id"] {
        Value::String(id) => id.clone(),
        Value::Number(id) => id.to_string(),
        _ => return error(400, "Bad Request: chat_id is empty", None),
    };
    let Some(text) = body["text"].as_str().filter(|t| !t.is_empty()) else {
        return error(400, "Bad Request: message text is empty", None);
    };
    if let Some(fault) = shared.control.arrive().await {
        return fault_response(&fault);
    }
    let mut chats = shared.chats.lock().unwrap();
    let id = chats.last_id.entry(chat_id.clone()).or_insert(0);
    *id += 1;
    let message_id = *id;
    let entities = body["entities"].clone();
    chats.messages.push(TelegramMessage { chat_id: chat_id.clone(), text: text.into(), entities, message_id });
    Json(json!({"ok": true, "result": {"message_id": message_id, "chat": {"id": chat_id}, "text": text}}))
        .into_response()
}
