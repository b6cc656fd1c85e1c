//! Telegram: the Bot API's `sendMessage` to the recipient's `chat_id`.
//!
//! `POST {api_url}/bot{token}/sendMessage` with `{"chat_id", "text", "entities"}`; the title is the text's
//! first line, made bold by an entity (no parse mode, so the text needs no escaping). The API answers
//! `{"ok": true, "result": {"message_id": N}}` (N is the provider id) or `{"ok": false, "error_code",
//! "description", "parameters": {"retry_after": s}}`. The token is part of the URL, so no error names the URL.

use std::time::Duration;

use cairn_core::failure::codes;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ChannelError, ErrorKind, Message, Sent};

const WHAT: &str = "telegram";

/// Where the Bot API is and the bot's token.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct TelegramConfig {
    /// API base URL. Default `https://api.telegram.org` (`CAIRN_NOTIFY_TELEGRAM_API_URL`).
    pub api_url: String,
    /// The bot's token (`CAIRN_NOTIFY_TELEGRAM_BOT_TOKEN`); `None` leaves the channel unconfigured.
    pub bot_token: Option<SecretString>,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self { api_url: "https://api.telegram.org".into(), bot_token: None }
    }
}

#[derive(Debug, Deserialize)]
struct Reply {
    ok: bool,
    result: Option<Posted>,
    error_code: Option<u16>,
    description: Option<String>,
    parameters: Option<Parameters>,
}

#[derive(Debug, Deserialize)]
struct Posted {
    message_id: i64,
}

#[derive(Debug, Deserialize)]
struct Parameters {
    retry_after: Option<u64>,
    migrate_to_chat_id: Option<i64>,
}

/// One `sendMessage` to `chat_id`.
pub(crate) async fn send(
    config: &TelegramConfig,
    client: &reqwest::Client,
    chat_id: &str,
    message: &Message<'_>,
    timeout: Duration,
) -> Result<Sent, ChannelError> {
    let Some(token) = &config.bot_token else {
        return Err(ChannelError::unconfigured(
            "telegram: channel not configured (no bot token: CAIRN_NOTIFY_TELEGRAM_BOT_TOKEN)",
        ));
    };
    let url = format!("{}/bot{}/sendMessage", config.api_url.trim_end_matches('/'), token.expose_secret());
    let request = client.post(url).json(&body(chat_id, message)).timeout(timeout);
    let answer = super::exchange(WHAT, request).await?;
    match serde_json::from_str::<Reply>(&answer.body) {
        Ok(reply) if reply.ok && answer.status.is_success() => {
            Ok(Sent { provider_message_id: reply.result.map(|r| r.message_id.to_string()) })
        }
        Ok(reply) if !reply.ok => Err(refused(reply, answer.status.as_u16())),
        // A success without the documented body still means the message was accepted.
        _ if answer.status.is_success() => Ok(Sent::default()),
        _ => Err(answer.rejected(WHAT)),
    }
}

/// The request body: the title as a bold first line, then the text.
fn body(chat_id: &str, message: &Message<'_>) -> Value {
    match message.title {
        // Entity offsets and lengths count UTF-16 code units.
        Some(title) => json!({"chat_id": chat_id, "text": message.plain(),
            "entities": [{"type": "bold", "offset": 0, "length": title.encode_utf16().count()}]}),
        None => json!({"chat_id": chat_id, "text": message.text}),
    }
}

/// Classifies `{"ok": false, …}` by its `error_code` (the HTTP status when it has none).
fn refused(reply: Reply, status: u16) -> ChannelError {
    let code = reply.error_code.unwrap_or(status);
    let description = reply.description.unwrap_or_default();
    let mut message = format!("{WHAT}: {code} {description}");
    let parameters = reply.parameters;
    if let Some(to) = parameters.as_ref().and_then(|p| p.migrate_to_chat_id) {
        message.push_str(&format!(" (the group is now chat {to})"));
    }
    let (kind, failure) = match code {
        429 => {
            let retry_after = parameters.and_then(|p| p.retry_after).map(Duration::from_secs);
            (ErrorKind::RateLimited { retry_after }, codes::RATE_LIMITED)
        }
        // 401: a wrong token; 403: the bot was blocked by the user or removed from the chat.
        401 | 403 => (ErrorKind::Permanent, codes::UNAUTHORIZED),
        404 => (ErrorKind::Permanent, codes::NOT_FOUND),
        // 400 "chat not found", "message is too long", …: the same request fails the same way.
        400..=499 => (ErrorKind::Permanent, codes::ACTION_ERROR),
        _ => (ErrorKind::Transient, codes::ACTION_ERROR),
    };
    ChannelError::answered(kind, failure, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(value: Value) -> Reply {
        serde_json::from_value(value).expect("a reply")
    }

    #[test]
    fn errors_are_classified_by_their_error_code() {
        let limited = refused(
            reply(json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 7",
                "parameters": {"retry_after": 7}})),
            429,
        );
        assert_eq!(limited.kind, ErrorKind::RateLimited { retry_after: Some(Duration::from_secs(7)) });
        let missing =
            refused(reply(json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"})), 400);
        assert_eq!((missing.kind, missing.code.as_str()), (ErrorKind::Permanent, codes::ACTION_ERROR));
        assert_eq!(missing.message, "telegram: 400 Bad Request: chat not found");
        let blocked = refused(
            reply(json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"})),
            403,
        );
        assert_eq!((blocked.kind, blocked.code.as_str()), (ErrorKind::Permanent, codes::UNAUTHORIZED));
        let down = refused(reply(json!({"ok": false, "error_code": 502, "description": "Bad Gateway"})), 502);
        assert_eq!(down.kind, ErrorKind::Transient);
    }

    #[test]
    fn the_title_is_a_bold_first_line_measured_in_utf16() {
        let message = Message {
            text: "take an umbrella",
            title: Some("Rain 🌧"),
            idempotency_key: "r/s",
            recipient_id: "alice",
            payload: Value::Null,
        };
        let body = body("42", &message);
        assert_eq!(body["text"], "Rain 🌧\ntake an umbrella");
        assert_eq!(body["entities"][0], json!({"type": "bold", "offset": 0, "length": 7}));
    }
}
