//! Feishu (Lark): a custom bot's webhook, `POST webhook_url` with `{"msg_type": "text", "content": {"text"}}`,
//! signed when the bot has a `secret`: `timestamp` (unix seconds, as a string) and
//! `sign = base64(HMAC-SHA256(key = "<timestamp>\n<secret>", message = ""))`, as Feishu specifies.
//!
//! Feishu answers HTTP 200 whether or not it took the message; the body's `code` (or the older `StatusCode`)
//! says: 0 is delivered; 9499 and 11232 (frequency limits) are rate limits; anything else, e.g. 19021 (bad
//! signature or stale timestamp) or 19024 (a required keyword missing), is permanent.

use std::time::Duration;

use base64::Engine;
use cairn_core::failure::codes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ChannelError, ErrorKind, Message, Sent};

const WHAT: &str = "feishu";

/// The `sign` field for `timestamp`.
pub fn sign(secret: &str, timestamp: i64) -> String {
    let key = format!("{timestamp}\n{secret}");
    base64::engine::general_purpose::STANDARD.encode(super::hmac_sha256(key.as_bytes(), b""))
}

#[derive(Debug, Deserialize)]
struct Reply {
    code: Option<i64>,
    msg: Option<String>,
    #[serde(rename = "StatusCode")]
    status_code: Option<i64>,
    #[serde(rename = "StatusMessage")]
    status_message: Option<String>,
}

/// One message to the bot at `url`.
pub(crate) async fn send(
    client: &reqwest::Client,
    url: &str,
    secret: Option<&str>,
    message: &Message<'_>,
    timeout: Duration,
) -> Result<Sent, ChannelError> {
    let request = client.post(url).json(&body(secret, super::unix_seconds(), message)).timeout(timeout);
    let answer = super::exchange(WHAT, request).await?;
    if !answer.status.is_success() {
        return Err(answer.rejected(WHAT));
    }
    match serde_json::from_str::<Reply>(&answer.body) {
        Ok(reply) => read(reply),
        // A 200 without Feishu's body: a proxy or a look-alike took it; nothing says it failed.
        Err(_) => Ok(Sent::default()),
    }
}

fn body(secret: Option<&str>, timestamp: i64, message: &Message<'_>) -> Value {
    let mut body = json!({"msg_type": "text", "content": {"text": message.plain()}});
    if let Some(secret) = secret {
        body["timestamp"] = Value::String(timestamp.to_string());
        body["sign"] = Value::String(sign(secret, timestamp));
    }
    body
}

fn read(reply: Reply) -> Result<Sent, ChannelError> {
    let code = reply.code.or(reply.status_code).unwrap_or(0);
    if code == 0 {
        return Ok(Sent::default());
    }
    let text = reply.msg.or(reply.status_message).unwrap_or_default();
    let message = format!("{WHAT}: code {code} {text}");
    Err(match code {
        9499 | 11232 => {
            ChannelError::answered(ErrorKind::RateLimited { retry_after: None }, codes::RATE_LIMITED, message)
        }
        _ => ChannelError::answered(ErrorKind::Permanent, codes::ACTION_ERROR, message),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sign_is_keyed_by_timestamp_and_secret_over_an_empty_message() {
        // Computed independently with Python's hmac: key b"1700000000\nsec", message b"".
        assert_eq!(sign("sec", 1_700_000_000), "ttGYnPblC3CcNExnS7y5igm57JhpqZJtHpJ+TURiUeg=");
    }

    #[test]
    fn a_non_zero_code_is_an_error_and_frequency_limits_are_rate_limits() {
        let reply = |v: Value| serde_json::from_value::<Reply>(v).expect("a reply");
        assert!(read(reply(json!({"code": 0, "msg": "success", "data": {}}))).is_ok());
        assert!(read(reply(json!({"StatusCode": 0, "StatusMessage": "success"}))).is_ok());
        let limited = read(reply(json!({"code": 11232, "msg": "frequency limited"}))).expect_err("limited");
        assert_eq!(limited.kind, ErrorKind::RateLimited { retry_after: None });
        let signed = read(reply(
            json!({"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"}),
        ));
        assert_eq!(signed.expect_err("bad sign").kind, ErrorKind::Permanent);
    }
}
